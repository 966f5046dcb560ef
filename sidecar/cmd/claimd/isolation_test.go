package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/httpapi"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/migrate"
)

// The database's settings cannot break the claim (B16), and /readyz says
// which settings claimd cannot work with.

// alterDatabase runs ALTER DATABASE (the database of url) <set>.
func alterDatabase(t *testing.T, url, set string) {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	admin, err := pgx.Connect(ctx, pgtest.ServerURL(t))
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{cfg.Database}.Sanitize()+" "+set)
	require.NoError(t, err)
}

// httpStorm sends n requests at once and counts the answers as
// "status outcome" (or "status error-code" for an error).
func httpStorm(t *testing.T, c *api, n int, method, path string, body func(i int) string, hdr map[string]string,
	outcome func(m map[string]any) string) map[string]int {
	t.Helper()
	var mu sync.Mutex
	counts := map[string]int{}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			req, err := http.NewRequest(method, c.base+path, strings.NewReader(body(i)))
			if err != nil {
				panic(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+c.key)
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			k := "transport error"
			if resp, err := c.client.Do(req); err == nil {
				var m map[string]any
				_ = json.NewDecoder(resp.Body).Decode(&m)
				resp.Body.Close()
				k = fmt.Sprintf("%d %s", resp.StatusCode, outcome(m))
				if e, ok := m["error"].(map[string]any); ok {
					k = fmt.Sprintf("%d %v: %v", resp.StatusCode, e["code"], e["message"])
				}
			}
			mu.Lock()
			counts[k]++
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	return counts
}

func TestSerializableDefaultStormThroughHTTP(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	alterDatabase(t, db, "SET default_transaction_isolation = 'serializable'")
	sources := filepath.Join(t.TempDir(), "sources.yaml")
	require.NoError(t, os.WriteFile(sources, []byte(`
sources:
  orders:
    tenant: t1
    provider: token
    secrets: [forms-token-0123456789]
    options: {header: X-Forms-Token, key: {id_pointers: ["/id"]}}
    forward: {url: "http://127.0.0.1:9/hook/orders"}
`), 0o600))
	const key = "t1-serializable-key-0123456789"
	s := startInProcess(t, map[string]string{"DATABASE_URL": db, "CLAIMD_API_KEYS": "t1:" + key,
		"CLAIMD_SOURCES_FILE": sources, "CLAIMD_DISPATCH": "false"})
	c := newAPI(t, s.url, key)
	const n = 30

	claims := httpStorm(t, c, n, "POST", "/v1/claims",
		func(int) string { return `{"source":"orders","event_id":"evt-storm","payload":{"a":1}}` }, nil,
		func(m map[string]any) string { return str(m, "outcome") })
	require.Equal(t, map[string]int{"200 won": 1, "200 in_progress": n - 1}, claims)

	batch := httpStorm(t, c, n, "POST", "/v1/claims/batch", func(i int) string {
		items := make([]string, 5)
		for k := range items {
			items[k] = fmt.Sprintf(`{"source":"orders","event_id":"b%d"}`, (k+i)%5)
		}
		return `{"claims":[` + strings.Join(items, ",") + `]}`
	}, nil, func(m map[string]any) string {
		var outs []string
		rs, _ := m["results"].([]any)
		for _, r := range rs {
			outs = append(outs, str(r.(map[string]any), "event_id")+"="+str(r.(map[string]any), "outcome"))
		}
		sort.Strings(outs)
		won := 0
		for _, o := range outs {
			if strings.HasSuffix(o, "=won") {
				won++
			}
		}
		return fmt.Sprintf("%d items, %d won", len(outs), won)
	})
	total := 0
	for k, v := range batch {
		require.Regexp(t, `^200 5 items, [0-5] won$`, k)
		var won int
		_, err := fmt.Sscanf(k, "200 5 items, %d won", &won)
		require.NoError(t, err)
		total += won * v
	}
	require.Equal(t, 5, total, "one winner per key across all batches: %v", batch)

	ingest := httpStorm(t, c, 20, "POST", "/ingest/orders", func(int) string { return `{"id":"ing-1"}` },
		map[string]string{"X-Forms-Token": "forms-token-0123456789"}, func(m map[string]any) string {
			rs, _ := m["received"].([]any)
			if len(rs) != 1 {
				return fmt.Sprint(m)
			}
			return str(rs[0].(map[string]any), "status")
		})
	require.Equal(t, map[string]int{"200 accepted": 1, "200 duplicate": 19}, ingest)

	ready := c.must(http.StatusOK, "GET", "/readyz", "")
	dbFacts := ready["database"].(map[string]any)
	require.Equal(t, "read committed", dbFacts["transaction_isolation"], "claimd pins its sessions' isolation")
	require.Equal(t, "local", dbFacts["durability"])
	require.Contains(t, s.logs.String(), `"transaction_isolation":"read committed"`)
}

// "Ready" means "can write": a database whose transactions are read-only
// by default is not ready, and the reason names the setting; so are
// timeouts far too low. Fixing the setting with ALTER DATABASE makes the
// same claimd ready without a restart (a session keeps the defaults it
// started with, so the not-ready check renews the pool's sessions).
// synchronous_commit is reported, never refused.
func TestReadyzReportsDatabaseSettings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDatabase(t)
	pool, err := pgxpool.New(ctx, db) // the schema first: a read-only database cannot take it
	require.NoError(t, err)
	_, err = migrate.Up(ctx, pool)
	pool.Close()
	require.NoError(t, err)
	const key = "t1-readonly-key-0123456789"
	// Claim-only replicas serve at once (a dispatching one waits for
	// writes before serving: TestStartWaitsForAWritableDatabase).
	env := map[string]string{"DATABASE_URL": db, "CLAIMD_API_KEYS": "t1:" + key, "CLAIMD_DISPATCH": "false"}

	for i, c := range []struct {
		set, reset string
		reason     string // empty: ready
	}{
		{"SET default_transaction_read_only = on", "RESET default_transaction_read_only", "default_transaction_read_only"},
		{"SET statement_timeout = '200ms'", "SET statement_timeout = '5s'", "statement_timeout = 200ms"},
		{"SET lock_timeout = '50ms'", "RESET lock_timeout", "lock_timeout = 50ms"},
		{"SET synchronous_commit = off", "RESET synchronous_commit", ""},
	} {
		alterDatabase(t, db, c.set)
		s := startInProcess(t, env) // fresh sessions, with the new default
		api := newAPI(t, s.url, key)
		status, m, err := api.do("GET", "/readyz", "")
		require.NoError(t, err)
		facts, _ := m["database"].(map[string]any)
		require.NotNil(t, facts, "%s: %v", c.set, m)
		if c.reason == "" {
			require.Equal(t, http.StatusOK, status, "%s: %v", c.set, m)
		} else {
			require.Equal(t, http.StatusServiceUnavailable, status, "%s: %v", c.set, m)
			require.Equal(t, "not_ready", m["status"])
			require.Contains(t, m["reason"], c.reason, c.set)
			require.Contains(t, s.logs.String(), c.reason, "%s: the start-up log names the setting", c.set)
		}
		switch i {
		case 0:
			require.Equal(t, true, facts["read_only"])
			status, m, err := api.do("POST", "/v1/claims", `{"source":"s","event_id":"ro-1"}`)
			require.NoError(t, err)
			require.Equal(t, http.StatusServiceUnavailable, status, "a write refused by a read-only database is 503, not 500: %v", m)
		case 1:
			require.EqualValues(t, 200, facts["statement_timeout_ms"])
		case 3:
			require.Equal(t, "off", facts["synchronous_commit"])
			require.Equal(t, string(httpapi.DurabilityNone), facts["durability"])
			require.Contains(t, s.logs.String(), "synchronous_commit is off")
		}

		// The first check after the fix may still run on a session opened
		// before it; finding it not ready renews the pool's sessions.
		alterDatabase(t, db, c.reset)
		if status, _, err := api.do("GET", "/readyz", ""); err != nil || status != http.StatusOK {
			api.must(http.StatusOK, "GET", "/readyz", "")
		}
		won := api.must(http.StatusOK, "POST", "/v1/claims", fmt.Sprintf(`{"source":"s","event_id":"fixed-%d"}`, i))
		require.Equal(t, "won", won["outcome"])
	}
}

// A dispatching claimd started on a database that does not take writes
// (a standby, here a read-only default) waits instead of exiting: it
// listens at once, /healthz answers, /readyz names the reason, writes are
// 503 with Retry-After; once the database takes writes it starts (the
// dispatcher included) and is ready without a restart.
func TestStartWaitsForAWritableDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDatabase(t)
	pool, err := pgxpool.New(ctx, db)
	require.NoError(t, err)
	_, err = migrate.Up(ctx, pool)
	pool.Close()
	require.NoError(t, err)
	alterDatabase(t, db, "SET default_transaction_read_only = on")

	const key = "t1-readonly-start-key-0123456789"
	s := startInProcess(t, map[string]string{"DATABASE_URL": db, "CLAIMD_API_KEYS": "t1:" + key})
	waitLog(t, s.logs, msgWaiting)
	c := newAPI(t, s.url, key)
	c.must(http.StatusOK, "GET", "/healthz", "")
	m := c.must(http.StatusServiceUnavailable, "GET", "/readyz", "")
	require.Contains(t, m["reason"], "default_transaction_read_only")
	status, retryAfter, body := rawPost(t, s.url+"/v1/claims", key, `{"source":"s","event_id":"ro-start"}`)
	require.Equal(t, http.StatusServiceUnavailable, status, "%s", body)
	require.Equal(t, "1", retryAfter)

	alterDatabase(t, db, "RESET default_transaction_read_only")
	waitReady(t, c, 30*time.Second)
	waitLog(t, s.logs, msgStarted)
	won := c.must(http.StatusOK, "POST", "/v1/claims", `{"source":"s","event_id":"ro-start"}`)
	require.Equal(t, "won", won["outcome"])
}

func TestSessionProblemsNameTheSetting(t *testing.T) {
	t.Parallel()
	ok := httpapi.DatabaseFacts{TransactionIsolation: "read committed", SynchronousCommit: "on", Durability: httpapi.DurabilityLocal}
	require.Empty(t, sessionProblems(ok))
	for _, c := range []struct {
		change func(*httpapi.DatabaseFacts)
		want   string
	}{
		{func(f *httpapi.DatabaseFacts) { f.ReadOnly = true }, "default_transaction_read_only"},
		{func(f *httpapi.DatabaseFacts) { f.ReadOnly, f.InRecovery = true, true }, "standby"},
		{func(f *httpapi.DatabaseFacts) { f.TransactionIsolation = "serializable" }, "default_transaction_isolation"},
		{func(f *httpapi.DatabaseFacts) { f.StatementTimeoutMS = 999 }, "statement_timeout = 999ms"},
		{func(f *httpapi.DatabaseFacts) { f.LockTimeoutMS = 1 }, "lock_timeout = 1ms"},
	} {
		f := ok
		c.change(&f)
		ps := sessionProblems(f)
		require.Len(t, ps, 1, c.want)
		require.Contains(t, ps[0], c.want)
	}
	f := ok
	f.StatementTimeoutMS, f.LockTimeoutMS, f.SynchronousCommit = 1000, 60000, "off"
	require.Empty(t, sessionProblems(f), "a second or more, and synchronous_commit, are never refused")
}
