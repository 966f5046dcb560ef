package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/config"
	"github.com/idempotent-claim/idempotent-claim/sidecar/ha"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// syncSources is a sources file with an ingest source (orders, forwarded
// nowhere reachable: dispatch is off in these tests) and a trigger source
// (tg, no forward).
func syncSources(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sources.yaml")
	require.NoError(t, os.WriteFile(path, []byte(reloadSources("http://127.0.0.1:9", true, false)+`  tg:
    tenant: t1
    provider: token
    secrets: ["`+ordersToken+`"]
    options:
      header: X-Forms-Token
      key: {id_pointers: ["/id"]}
`), 0o600))
	return path
}

// triggerBody is a POST /v1/trigger/tg request carrying the delivery {"id":id}.
func triggerBody(id string) string {
	body := base64.StdEncoding.EncodeToString([]byte(`{"id":"` + id + `"}`))
	return `{"method":"POST","headers":[["Content-Type","application/json"],["X-Forms-Token","` + ordersToken + `"]],` +
		`"body":"` + body + `","request_id":"` + id + `"}`
}

// ingest posts {"id":id} to /ingest/orders and returns the status.
func ingestOrder(t *testing.T, base, id string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/ingest/orders", strings.NewReader(`{"id":"`+id+`"}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Forms-Token", ordersToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

// CLAIMD_REQUIRE_SYNC_REPLICATION refuses writes, not only readiness. On
// a real asynchronous pair (a standby streaming, synchronous_standby_names
// empty) every write route of a claimd with the setting answers 503 with
// Retry-After and a reason naming the setting, and nothing is stored; reads
// are served. A claimd without the setting on the same pair answers as
// before (won). Once the standby is made synchronous, the same claimd
// acknowledges writes.
func TestRequireSyncReplicationRefusesWrites(t *testing.T) {
	t.Parallel()
	primary := pgtest.NewPrimary(t, pgtest.ClusterOptions{})
	primary.NewStandby("standby1", pgtest.Async)
	const key = "t1-syncrep-key-0123456789"
	sources := syncSources(t)
	env := map[string]string{"DATABASE_URL": primary.URL(""), "CLAIMD_API_KEYS": "t1:" + key, "CLAIMD_DISPATCH": "false",
		"CLAIMD_SOURCES_FILE": sources, "CLAIMD_RELOAD_INTERVAL_SECONDS": "0"}
	off := startInProcess(t, env)
	env["CLAIMD_REQUIRE_SYNC_REPLICATION"] = "true"
	on := startInProcess(t, env)
	o, s := newAPI(t, off.url, key), newAPI(t, on.url, key)

	// The setting off: behaviour unchanged on the asynchronous pair.
	won := o.must(http.StatusOK, "POST", "/v1/claims", `{"source":"s","event_id":"off-1"}`)
	require.Equal(t, "won", won["outcome"])
	held := o.must(http.StatusOK, "POST", "/v1/claims", `{"source":"s","event_id":"off-2"}`)
	id, token := str(held, "claim_id"), str(held, "claim_token")
	claimsBefore := allClaims(t, primary)
	var inboxBefore int
	require.NoError(t, primary.QueryRowDB(pgtest.ClusterDB, `SELECT count(*) FROM inbox_events`).Scan(&inboxBefore))

	refused := func(what, path, body string) {
		t.Helper()
		status, retryAfter, answer := rawPost(t, on.url+path, key, body)
		require.Equal(t, http.StatusServiceUnavailable, status, "%s: %s", what, answer)
		require.Equal(t, "1", retryAfter, what)
		require.Contains(t, answer, "CLAIMD_REQUIRE_SYNC_REPLICATION is on and a commit now would not wait for a synchronous standby", what)
		require.Contains(t, answer, "nothing was kept", what)
	}
	refused("claim", "/v1/claims", `{"source":"s","event_id":"on-1","request_id":"on-1"}`)
	refused("claim batch", "/v1/claims/batch", `{"claims":[{"source":"s","event_id":"on-2"},{"source":"s","event_id":"on-3"}]}`)
	refused("complete", "/v1/claims/"+id+"/complete", `{"claim_token":"`+token+`","result_ref":"r"}`)
	refused("fail", "/v1/claims/"+id+"/fail", `{"claim_token":"`+token+`","error":"e","retry":"retryable"}`)
	refused("extend", "/v1/claims/"+id+"/extend", `{"claim_token":"`+token+`","lease_seconds":60}`)
	refused("complete batch", "/v1/claims/complete/batch", `{"claims":[{"claim_id":"`+id+`","claim_token":"`+token+`"}]}`)
	refused("resolve", "/v1/claims/"+id+"/resolve", `{"outcome":"completed","result_ref":"r","note":"n"}`)
	refused("release", "/v1/claims/"+id+"/release", `{"note":"n"}`)
	refused("trigger", "/v1/trigger/tg", triggerBody("tg-1"))
	status, retryAfter := ingestOrder(t, on.url, "in-1")
	require.Equal(t, http.StatusServiceUnavailable, status, "ingest")
	require.Equal(t, "1", retryAfter, "ingest")

	// Reads are served; nothing was stored; the held claim is as it was.
	rec := s.must(http.StatusOK, "GET", "/v1/claims/"+id, "")
	require.Equal(t, "processing", rec["state"])
	require.Equal(t, claimsBefore, allClaims(t, primary), "no claim stored")
	var inboxAfter int
	require.NoError(t, primary.QueryRowDB(pgtest.ClusterDB, `SELECT count(*) FROM inbox_events`).Scan(&inboxAfter))
	require.Equal(t, inboxBefore, inboxAfter, "no delivery stored")

	// A synchronous pair: the same claimd acknowledges writes.
	primary.SetSynchronousStandbys("standby1")
	primary.WaitStreaming("standby1", true)
	won = s.must(http.StatusOK, "POST", "/v1/claims", `{"source":"s","event_id":"on-1","request_id":"on-1"}`)
	require.Equal(t, "won", won["outcome"])
	done := s.must(http.StatusOK, "POST", "/v1/claims/"+id+"/complete", `{"claim_token":"`+token+`","result_ref":"r"}`)
	require.Equal(t, "completed", done["state"])
	trig := s.must(http.StatusOK, "POST", "/v1/trigger/tg", triggerBody("tg-1"))
	require.NotEmpty(t, trig)
	status, _ = ingestOrder(t, on.url, "in-1")
	require.Less(t, status, 300, "ingest")
	require.NoError(t, primary.QueryRowDB(pgtest.ClusterDB, `SELECT count(*) FROM inbox_events`).Scan(&inboxAfter))
	require.Equal(t, inboxBefore+1, inboxAfter, "the ingested delivery stored")
	var n int
	require.NoError(t, primary.QueryRowDB(pgtest.ClusterDB, `SELECT count(*) FROM claims WHERE event_id IN ('on-1', 'tg-1')`).Scan(&n))
	require.Equal(t, 2, n, "the claim and the trigger's claim stored")
	waitReady(t, s, 30*time.Second)
}

// After a failover the replication report describes the promoted primary
// as soon as claimd has seen the failover (the fence admitted the new
// timeline), not the old primary's synchronous standby until the cached
// reading ages out: the cache is kept for an hour here, so only the event
// can refresh it.
func TestReplicationReportFollowsFailover(t *testing.T) {
	t.Parallel()
	primary := pgtest.NewPrimary(t, pgtest.ClusterOptions{})
	standby := primary.NewStandby("standby1", pgtest.Sync)
	const key = "t1-report-key-0123456789"
	d := startInProcessWith(t, map[string]string{"DATABASE_URL": pgtest.MultiHostURL(primary, standby),
		"CLAIMD_API_KEYS": "t1:" + key, "CLAIMD_DISPATCH": "false"}, func(m *Main) { m.replicationMaxAge = time.Hour })
	c := newAPI(t, d.url, key)
	ready := c.must(http.StatusOK, "GET", "/readyz", "")
	rep := ready["database"].(map[string]any)["replication"].(map[string]any)
	require.Equal(t, true, rep["synchronous"])
	require.EqualValues(t, 1, rep["sync_standbys"])
	v, _ := metricValue(t, d.url, `claimd_db_standbys{sync_state="sync"}`)
	require.EqualValues(t, 1, v)
	v, _ = metricValue(t, d.url, "claimd_db_synchronous_replication")
	require.EqualValues(t, 1, v)

	primary.StopImmediate()
	standby.Promote()
	for i := 0; ; i++ {
		status, _, body := rawPost(t, d.url+"/v1/claims", key, fmt.Sprintf(`{"source":"s","event_id":"after-%d"}`, i))
		if status == http.StatusOK {
			break
		}
		require.Equal(t, http.StatusServiceUnavailable, status, body)
		time.Sleep(50 * time.Millisecond)
	}
	waitLog(t, d.logs, ha.MsgFailedOver) // the event: claimd wrote to the promoted primary on timeline 2

	ready = c.must(http.StatusOK, "GET", "/readyz", "")
	rep = ready["database"].(map[string]any)["replication"].(map[string]any)
	require.Equal(t, false, rep["synchronous"], "%v", rep)
	require.EqualValues(t, 0, rep["standbys"], "%v", rep)
	require.EqualValues(t, 0, rep["sync_standbys"], "%v", rep)
	require.Equal(t, "", rep["synchronous_standby_names"], "%v", rep)
	v, _ = metricValue(t, d.url, "claimd_db_synchronous_replication")
	require.Zero(t, v)
	v, _ = metricValue(t, d.url, `claimd_db_standbys{sync_state="sync"}`)
	require.Zero(t, v)
}

// A claimd started after an old primary came back, on a host list that
// names it first, does not write there: the start-up survey sees both
// primaries of one system, the old one on timeline 1 and the promoted one
// on timeline 2, and refuses the older (logged, naming it). Claims won on
// the promoted server before are not won again; new claims land there
// only. With the promoted server down and a standby following it in the
// list, the old primary is still refused (the standby shows timeline 2):
// claimd waits, 503. A host list naming servers of different systems is
// refused: claimd does not start, and its error names the hosts, never
// the password.
func TestStartOnAHostListWithAReturnedOldPrimary(t *testing.T) {
	t.Parallel()
	primary := pgtest.NewPrimary(t, pgtest.ClusterOptions{})
	standby := primary.NewStandby("standby1", pgtest.Async)
	const key = "t1-survey-key-0123456789"
	env := map[string]string{"DATABASE_URL": pgtest.MultiHostURL(primary, standby), "CLAIMD_API_KEYS": "t1:" + key,
		"CLAIMD_DISPATCH": "false"}
	first := startInProcess(t, env)
	c1 := newAPI(t, first.url, key)
	for i := range 3 {
		c1.must(http.StatusOK, "POST", "/v1/claims", fmt.Sprintf(`{"source":"s","event_id":"before-%d"}`, i))
	}
	primary.StopImmediate()
	standby.Promote()
	for i := 0; i < 5; {
		status, m, err := c1.do("POST", "/v1/claims", fmt.Sprintf(`{"source":"s","event_id":"after-%d","request_id":"after-%d"}`, i, i))
		require.NoError(t, err)
		if status == http.StatusOK {
			require.Equal(t, "won", m["outcome"])
			i++
			continue
		}
		require.Equal(t, http.StatusServiceUnavailable, status, "%v", m)
		time.Sleep(50 * time.Millisecond)
	}
	primary.Start() // the old primary, unchanged, first in the list: a primary on timeline 1
	require.Equal(t, 1, primary.Timeline())
	require.Equal(t, 2, standby.Timeline())
	onOld := allClaims(t, primary)

	second := startInProcess(t, env)
	c2 := newAPI(t, second.url, key)
	for i := range 5 {
		m := c2.must(http.StatusOK, "POST", "/v1/claims", fmt.Sprintf(`{"source":"s","event_id":"after-%d"}`, i))
		require.NotEqual(t, "won", m["outcome"], "after-%d won a second time: %v", i, m)
	}
	won := c2.must(http.StatusOK, "POST", "/v1/claims", `{"source":"s","event_id":"new-0"}`)
	require.Equal(t, "won", won["outcome"])
	require.Equal(t, onOld, allClaims(t, primary), "nothing written to the old primary")
	var n int
	require.NoError(t, standby.QueryRowDB(pgtest.ClusterDB, `SELECT count(*) FROM claims WHERE event_id = 'new-0'`).Scan(&n))
	require.Equal(t, 1, n)
	refused := logMessages(second.logs, "refused the database server at "+primary.Addr()+": it is a primary on timeline 1, older than timeline 2")
	require.Len(t, refused, 1, second.logs.String())
	require.Equal(t, "error", refused[0]["level"])

	// The promoted server down, a standby following it in the list: the
	// old primary is still refused (the standby shows timeline 2); claimd
	// waits, and /readyz names the refused server.
	follower := standby.NewStandby("standby2", pgtest.Async)
	standby.StopImmediate()
	third := startInProcess(t, map[string]string{"DATABASE_URL": pgtest.MultiHostURL(primary, standby, follower),
		"CLAIMD_API_KEYS": "t1:" + key, "CLAIMD_DISPATCH": "false"})
	status, retryAfter, body := rawPost(t, third.url+"/v1/claims", key, `{"source":"s","event_id":"after-0"}`)
	require.Equal(t, http.StatusServiceUnavailable, status, body)
	require.Equal(t, "1", retryAfter)
	ready := newAPI(t, third.url, key).must(http.StatusServiceUnavailable, "GET", "/readyz", "")
	require.Contains(t, ready["reason"], primary.Addr())
	require.Contains(t, ready["reason"], "timeline 1, older than timeline 2")
	require.Equal(t, onOld, allClaims(t, primary), "nothing written to the old primary")

	// Servers of different systems in one list.
	other := pgtest.NewPrimary(t, pgtest.ClusterOptions{})
	const password = "pw-never-shown-0123"
	url := strings.Replace(pgtest.MultiHostURL(follower, other), "postgres@", "postgres:"+password+"@", 1)
	err := runUntilServing(t, map[string]string{"DATABASE_URL": url, "CLAIMD_API_KEYS": "t1:" + key, "CLAIMD_DISPATCH": "false"})
	require.Error(t, err)
	require.Contains(t, err.Error(), "DATABASE_URL lists servers of different PostgreSQL systems")
	require.Contains(t, err.Error(), follower.Addr())
	require.Contains(t, err.Error(), other.Addr())
	require.NotContains(t, err.Error(), password)
}

// runUntilServing runs Main with env and returns Run's error when it ends
// before serving; nil (and stops it) once it serves.
func runUntilServing(t *testing.T, env map[string]string) error {
	t.Helper()
	all := map[string]string{"CLAIMD_ADDR": "127.0.0.1:0", "CLAIMD_MAINTENANCE_INTERVAL_SECONDS": "0"}
	for k, v := range env {
		all[k] = v
	}
	cfg, err := config.Load(nil, func(k string) string { return all[k] })
	require.NoError(t, err)
	logs := newLogSink()
	m := NewMain(cfg, newLogger(cfg, logs))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- m.Run(ctx) }()
	select {
	case <-m.Ready:
		cancel()
		<-errc
		m.Close()
		return nil
	case err := <-errc:
		m.Close()
		require.NotContains(t, logs.String(), env["DATABASE_URL"])
		return err
	}
}

// cancelSyncWait waits until a session of application app waits for the
// synchronous standby (wait_event SyncRep) on s and cancels it with
// pg_cancel_backend, as an operator or a pooler might.
func cancelSyncWait(t *testing.T, s *pgtest.Server, app string) {
	t.Helper()
	var pid int
	waitFor(t, "a commit waiting for the synchronous standby", func() bool {
		err := s.QueryRow(`SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND application_name = $1`, app).Scan(&pid)
		return err == nil
	})
	var ok bool
	require.NoError(t, s.QueryRow(`SELECT pg_cancel_backend($1)`, pid).Scan(&ok))
	require.True(t, ok)
}

// A commit whose wait for the synchronous standby is cancelled on the
// server is kept on the primary unreplicated, and PostgreSQL answers it as
// done with a WARNING: pgx reports success (nil) and hands the warning to
// the notice handler only. claimd never answers such a write `won` (or
// completed): 503 with Retry-After, outcome unknown; the same request sent
// again is answered from the primary.
func TestCancelledSyncWaitIsNotAcknowledged(t *testing.T) {
	t.Parallel()
	primary := pgtest.NewPrimary(t, pgtest.ClusterOptions{})
	standby := primary.NewStandby("standby1", pgtest.Sync)
	const key = "t1-cancelled-key-0123456789"
	d := startInProcess(t, map[string]string{"DATABASE_URL": primary.URL(""), "CLAIMD_API_KEYS": "t1:" + key,
		"CLAIMD_DISPATCH": "false", "CLAIMD_REQUEST_TIMEOUT_SECONDS": "120"})
	c := newAPI(t, d.url, key)
	held := c.must(http.StatusOK, "POST", "/v1/claims", `{"source":"s","event_id":"held"}`)
	standby.StopImmediate() // commits now wait for it

	// What pgx reports: a nil error, the warning in the notice handler.
	cfg, err := pgx.ParseConfig(primary.URL(""))
	require.NoError(t, err)
	cfg.RuntimeParams["application_name"] = "probe"
	notices := make(chan *pgconn.Notice, 4)
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices <- n }
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := conn.Exec(context.Background(), `CREATE TABLE probe_unreplicated (x int)`)
		done <- err
	}()
	cancelSyncWait(t, primary, "probe")
	require.NoError(t, <-done, "pgx reports the cancelled wait's commit as done")
	n := <-notices
	require.Equal(t, "WARNING", n.SeverityUnlocalized)
	require.Equal(t, "01000", n.Code)
	require.Contains(t, n.Detail, "committed locally")

	type answer struct {
		status     int
		retryAfter string
		body       string
	}
	post := func(path, body string) answer {
		res := make(chan answer, 1)
		go func() {
			s, ra, b := rawPost(t, d.url+path, key, body)
			res <- answer{s, ra, b}
		}()
		cancelSyncWait(t, primary, "claimd")
		return <-res
	}
	for _, w := range []struct{ what, path, body string }{
		{"claim", "/v1/claims", `{"source":"s","event_id":"cancelled","request_id":"cancelled"}`},
		{"complete", "/v1/claims/" + str(held, "claim_id") + "/complete", `{"claim_token":"` + str(held, "claim_token") + `"}`},
		{"claim batch", "/v1/claims/batch", `{"claims":[{"source":"s","event_id":"b1"},{"source":"s","event_id":"b2"}]}`},
	} {
		a := post(w.path, w.body)
		require.Equal(t, http.StatusServiceUnavailable, a.status, "%s: %s", w.what, a.body)
		require.Equal(t, "1", a.retryAfter, w.what)
		require.Contains(t, a.body, "synchronous standby", w.what)
		require.Contains(t, a.body, "outcome is unknown", w.what)
	}
	// The write was kept on the primary: the same request is answered from it.
	var n2 int
	require.NoError(t, primary.QueryRowDB(pgtest.ClusterDB, `SELECT count(*) FROM claims WHERE event_id = 'cancelled'`).Scan(&n2))
	require.Equal(t, 1, n2)
}

// The dispatcher's writes are refused too: an event stored while the pair
// was synchronous is not dispatched by a claimd with the setting while the
// pair is asynchronous (River's own writes meet the read-only session, as
// its log says), and is dispatched once the standby is synchronous again.
func TestRequireSyncReplicationHoldsDispatch(t *testing.T) {
	t.Parallel()
	primary := pgtest.NewPrimary(t, pgtest.ClusterOptions{})
	primary.NewStandby("standby1", pgtest.Async)
	delivered := make(chan string, 10)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusOK)
		delivered <- string(b)
	}))
	defer target.Close()
	sources := filepath.Join(t.TempDir(), "sources.yaml")
	require.NoError(t, os.WriteFile(sources, []byte(reloadSources(target.URL, true, false)), 0o600))
	env := map[string]string{"DATABASE_URL": primary.URL(""), "CLAIMD_API_KEYS": "t1:t1-hold-key-0123456789",
		"CLAIMD_DISPATCH": "false", "CLAIMD_SOURCES_FILE": sources, "CLAIMD_RELOAD_INTERVAL_SECONDS": "0"}
	off := startInProcess(t, env) // stores, does not dispatch
	status, _ := ingestOrder(t, off.url, "held-1")
	require.Less(t, status, 300)

	env["CLAIMD_DISPATCH"], env["CLAIMD_REQUIRE_SYNC_REPLICATION"] = "true", "true"
	on := startInProcess(t, env)
	waitFor(t, "the dispatcher's writes refused", func() bool {
		for _, l := range on.logs.Lines() {
			if strings.Contains(l, `"component":"river"`) && strings.Contains(l, "read-only transaction") {
				return true
			}
		}
		return false
	})
	select {
	case b := <-delivered:
		t.Fatalf("dispatched on an asynchronous pair: %s", b)
	default:
	}
	var state string
	require.NoError(t, primary.QueryRowDB(pgtest.ClusterDB, `SELECT dispatch_state FROM inbox_events`).Scan(&state))
	require.Equal(t, "pending", state)

	primary.SetSynchronousStandbys("standby1")
	primary.WaitStreaming("standby1", true)
	select {
	case b := <-delivered:
		require.Contains(t, b, "held-1")
	case <-time.After(time.Minute):
		t.Fatal("not dispatched once the standby is synchronous")
	}
}
