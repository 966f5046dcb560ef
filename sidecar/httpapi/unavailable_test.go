package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgfault"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// Every database error that means "try again" is answered 503 unavailable
// with Retry-After, in the sidecar's own words (the database's are logged
// with the request id), never 500 internal; a lost connection says the
// outcome is unknown and the same request again is answered as what
// happened; a read-only database refuses writes that way and keeps
// answering lookups.

// derivedPool is a second pool on the database of direct, changed by
// adjust, closed when t ends.
func derivedPool(t *testing.T, direct *pgxpool.Pool, adjust func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg := direct.Config()
	adjust(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// named is a server pool whose sessions carry application_name app, so a
// test can find their backends.
func named(app string, adjust ...func(*pgxpool.Config)) func(*testing.T, *pgxpool.Pool) *pgxpool.Pool {
	return func(t *testing.T, direct *pgxpool.Pool) *pgxpool.Pool {
		return derivedPool(t, direct, func(c *pgxpool.Config) {
			c.ConnConfig.RuntimeParams["application_name"] = app
			for _, f := range adjust {
				f(c)
			}
		})
	}
}

// through is a server pool that reaches the database through a pgfault
// proxy, stored in *proxy.
func through(proxy **pgfault.Proxy) func(*testing.T, *pgxpool.Pool) *pgxpool.Pool {
	return func(t *testing.T, direct *pgxpool.Pool) *pgxpool.Pool {
		*proxy = pgfault.New(t, direct.Config().ConnString())
		pc, err := pgxpool.ParseConfig((*proxy).URL(direct.Config().ConnString()))
		require.NoError(t, err)
		return derivedPool(t, direct, func(c *pgxpool.Config) {
			c.ConnConfig.Host, c.ConnConfig.Port, c.ConnConfig.Fallbacks = pc.ConnConfig.Host, pc.ConnConfig.Port, nil
		})
	}
}

// alterDB runs ALTER DATABASE on the bundle's database and renews the
// sessions of pools (a session keeps the defaults it started with).
func (b *bundle) alterDB(t *testing.T, set string, pools ...*pgxpool.Pool) {
	t.Helper()
	admin, err := pgx.Connect(b.ctx, pgtest.ServerURL(t))
	require.NoError(t, err)
	defer admin.Close(b.ctx)
	_, err = admin.Exec(b.ctx, "ALTER DATABASE "+pgx.Identifier{b.pool.Config().ConnConfig.Database}.Sanitize()+" "+set)
	require.NoError(t, err)
	for _, p := range append(pools, b.pool) {
		p.Reset()
	}
}

// unavailable sends c and requires the answer to a retryable database
// error: 503, Retry-After: 1, code unavailable, a message in the sidecar's
// words (saying the outcome is unknown when unknown), and a log line with
// the request id and the database's own error.
func (b *bundle) unavailable(t *testing.T, c call, unknown bool) answer {
	t.Helper()
	r, a := b.doJSON(t, c)
	require.Equal(t, http.StatusServiceUnavailable, r.status, "%s %s: %s", c.method, c.path, r)
	require.Equal(t, "1", r.header.Get("Retry-After"), "%s", r)
	require.NotNil(t, a.Error, "%s", r)
	require.Equal(t, "unavailable", a.Error.Code, "%s", r)
	msg := a.Error.Message
	for _, w := range []string{"SQLSTATE", "ERROR", "FATAL", "INSERT", "UPDATE", "SELECT", "WITH", "$1", "pg_",
		"EOF", "conn closed", "tcp", "canceling", "terminating", "read-only transaction"} {
		require.NotContains(t, msg, w, "the answer quotes the database: %s", r)
	}
	if unknown {
		require.Contains(t, msg, "outcome is unknown", "%s", r)
		require.Contains(t, msg, db.RetrySameRequest, "%s", r)
	}
	id := r.header.Get("X-Request-ID")
	require.NotEmpty(t, id)
	var logged bool
	sc := bufio.NewScanner(strings.NewReader(b.logs.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line struct {
			RequestID string `json:"request_id"`
			Message   string `json:"message"`
			Cause     string `json:"cause"`
			Reason    string `json:"reason"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.RequestID == id && line.Message == "dependency unavailable" {
			require.NotEmpty(t, line.Cause, "the database's error is logged")
			require.Equal(t, msg, line.Reason)
			logged = true
		}
	}
	require.True(t, logged, "no log line for request %s:\n%s", id, b.logs.String())
	return a
}

// A database whose transactions are read-only (default_transaction_read_only
// = on, as on a standby): every write is 503 unavailable with Retry-After,
// saying the database is read-only; every lookup is answered; once writable
// again, writes work without a restart.
func TestReadOnlyDatabaseRefusesWritesAndServesLookups(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dbKey, _, err := auth.Create(b.ctx, b.pool, "tenant-db", "read-only test")
	require.NoError(t, err)
	w := b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_ro", "execution_id": "4711"})
	id := "/v1/claims/" + w.ClaimID

	b.alterDB(t, "SET default_transaction_read_only = on")
	var ro string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SHOW transaction_read_only`).Scan(&ro))
	require.Equal(t, "on", ro)

	for _, c := range []call{
		{method: "POST", path: "/v1/claims", body: map[string]any{"source": "stripe", "event_id": "evt_new"}},
		{method: "POST", path: "/v1/claims", body: map[string]any{"source": "stripe", "event_id": "evt_ro"}},
		{method: "POST", path: "/v1/claims/batch", body: map[string]any{"claims": []any{
			map[string]any{"source": "stripe", "event_id": "evt_b1"}, map[string]any{"source": "stripe", "event_id": "evt_ro"}}}},
		{method: "POST", path: id + "/complete", body: map[string]any{"claim_token": w.ClaimToken, "result_ref": "inv_1"}},
		{method: "POST", path: id + "/fail", body: map[string]any{"claim_token": w.ClaimToken, "retry": "retryable", "error": "x"}},
		{method: "POST", path: id + "/extend", body: map[string]any{"claim_token": w.ClaimToken, "lease_seconds": 600}},
		{method: "POST", path: id + "/resolve", body: map[string]any{"outcome": "completed", "note": "by hand"}},
		{method: "POST", path: "/v1/claims/complete/batch", body: map[string]any{"claims": []any{
			map[string]any{"claim_id": w.ClaimID, "claim_token": w.ClaimToken}}}},
		{method: "POST", path: "/v1/claims/fail/batch", body: map[string]any{"claims": []any{
			map[string]any{"claim_id": w.ClaimID, "claim_token": w.ClaimToken, "retry": "permanent", "error": "x"}}}},
		{method: "POST", path: "/v1/claims/fail/execution", body: map[string]any{"execution_id": "4711", "retry": "unknown", "error": "x"}},
	} {
		c.key = keyA
		a := b.unavailable(t, c, false)
		require.Contains(t, a.Error.Message, "read-only", "%s %s", c.method, c.path)
	}

	// Lookups keep working, also with a key the database holds.
	got := b.ok(t, call{method: "GET", path: id, key: keyA})
	require.Equal(t, "processing", got.State)
	require.NotEmpty(t, got.Deliveries)
	b.ok(t, call{method: "GET", path: "/v1/claims?source=stripe&event_id=evt_ro", key: keyA})
	list := decodeAs[listReply](t, b.do(t, call{method: "GET", path: "/v1/claims/list?state=processing", key: keyA}))
	require.Len(t, list.Claims, 1)
	list = decodeAs[listReply](t, b.do(t, call{method: "GET", path: "/v1/claims/list?execution_id=4711", key: keyA}))
	require.Len(t, list.Claims, 1)
	me := b.ok(t, call{method: "GET", path: "/v1/whoami", key: dbKey})
	require.Equal(t, "tenant-db", me.Tenant)
	b.ok(t, call{method: "GET", path: "/v1/whoami", key: keyA})

	// Writable again: the same requests work, no restart.
	b.alterDB(t, "RESET default_transaction_read_only")
	done := b.ok(t, call{method: "POST", path: id + "/complete", key: keyA,
		body: map[string]any{"claim_token": w.ClaimToken, "result_ref": "inv_1"}})
	require.Equal(t, "completed", done.State)
	b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_new"})
}

// The connection to PostgreSQL breaks under a request after the server
// committed it (pgfault cuts the session once the server has answered,
// before the answer reaches the sidecar): 503 with Retry-After and "the
// outcome is unknown; retry the same request", never 500. The same request
// again is answered as what happened: a claim with the same request_id
// gets its own win back (the token the lost answer carried), a complete
// with the same token 200 with the completed record and its result_ref, a
// fail with the same token, retry and error 200 with the record. Single
// and batch routes alike; reads and the API key lookup too.
func TestLostConnectionIsUnavailableAndTheRetryIsAnswered(t *testing.T) {
	t.Parallel()
	var proxy *pgfault.Proxy
	b := setup(t, func(o *options) {
		o.serverPool = through(&proxy)
		o.keyTTL = 0
	})
	const (
		claimStmt    = "INSERT INTO claims AS cl"
		completeStmt = "UPDATE claims SET state = 'completed'"
		failStmt     = "SELECT c.id, 'failed_' || $1::text"
		extendStmt   = "'lease_extended'"
		commitStmt   = "commit"
	)
	// cut breaks the session at the first statement holding fragment, or
	// at the COMMIT (exactly: BEGIN … READ COMMITTED holds "commit" too).
	cut := func(fragment string, c pgfault.Cut) func() {
		fired := proxy.Arm(func(sql string) bool {
			if fragment == commitStmt {
				return sql == commitStmt
			}
			return strings.Contains(sql, fragment)
		}, c, false)
		return func() { t.Helper(); requireFired(t, fired) }
	}
	tokenOf := func(id string) string {
		var tok string
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT claim_token::text FROM claims WHERE id = $1`, id).Scan(&tok))
		return tok
	}
	stateOf := func(id string) (state, ref string) {
		var r *string
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT state, result_ref FROM claims WHERE id = $1`, id).Scan(&state, &r))
		if r != nil {
			ref = *r
		}
		return state, ref
	}

	// POST /v1/claims, committed as won, answer lost.
	body := map[string]any{"source": "stripe", "event_id": "evt_1", "request_id": "4711:Claim:0:0"}
	fired := cut(claimStmt, pgfault.AfterReply)
	b.unavailable(t, call{method: "POST", path: "/v1/claims", key: keyA, body: body}, true)
	fired()
	w := b.won(t, keyA, body)
	require.Equal(t, 1, w.Attempt)
	require.Equal(t, tokenOf(w.ClaimID), w.ClaimToken, "the win the lost answer carried")
	other := b.claim(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_1", "request_id": "4712:Claim:0:0"})
	require.Equal(t, "in_progress", other.Outcome, "another request is still a duplicate")

	// Extend, answer lost; again: the lease is extended.
	fired = cut(extendStmt, pgfault.AfterReply)
	id := "/v1/claims/" + w.ClaimID
	b.unavailable(t, call{method: "POST", path: id + "/extend", key: keyA,
		body: map[string]any{"claim_token": w.ClaimToken, "lease_seconds": 600}}, true)
	fired()
	b.ok(t, call{method: "POST", path: id + "/extend", key: keyA,
		body: map[string]any{"claim_token": w.ClaimToken, "lease_seconds": 600}})

	// POST /v1/claims/{id}/complete, committed, answer lost.
	fired = cut(completeStmt, pgfault.AfterReply)
	complete := call{method: "POST", path: id + "/complete", key: keyA,
		body: map[string]any{"claim_token": w.ClaimToken, "result_ref": "inv_42"}}
	b.unavailable(t, complete, true)
	fired()
	st, ref := stateOf(w.ClaimID)
	require.Equal(t, "completed", st, "the server committed the complete")
	require.Equal(t, "inv_42", ref)
	done := b.ok(t, complete)
	require.Equal(t, "completed", done.State)
	require.Equal(t, "inv_42", done.ResultRef)
	dup := b.claim(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_1"})
	require.Equal(t, "duplicate", dup.Outcome)
	require.Equal(t, "inv_42", dup.ResultRef)

	// POST /v1/claims/{id}/fail, committed, answer lost.
	f := b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_2"})
	fired = cut(failStmt, pgfault.AfterReply)
	fail := call{method: "POST", path: "/v1/claims/" + f.ClaimID + "/fail", key: keyA,
		body: map[string]any{"claim_token": f.ClaimToken, "retry": "retryable", "error": "smtp 451"}}
	b.unavailable(t, fail, true)
	fired()
	failed := b.ok(t, fail)
	require.Equal(t, "retryable_failed", failed.State)
	require.Equal(t, "smtp 451", failed.LastError)

	// A complete cut before it reached the server: the retry does it.
	c := b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_3"})
	fired = cut(completeStmt, pgfault.BeforeSend)
	complete = call{method: "POST", path: "/v1/claims/" + c.ClaimID + "/complete", key: keyA,
		body: map[string]any{"claim_token": c.ClaimToken, "result_ref": "inv_43"}}
	b.unavailable(t, complete, true)
	fired()
	st, _ = stateOf(c.ClaimID)
	require.Equal(t, "processing", st)
	require.Equal(t, "inv_43", b.ok(t, complete).ResultRef)

	// POST /v1/claims/batch, the commit's answer lost.
	batch := call{method: "POST", path: "/v1/claims/batch", key: keyA, body: map[string]any{"claims": []any{
		map[string]any{"source": "stripe", "event_id": "evt_b1", "request_id": "4713:Claim:0:0"},
		map[string]any{"source": "stripe", "event_id": "evt_b2", "request_id": "4713:Claim:0:1"}}}}
	fired = cut(commitStmt, pgfault.AfterReply)
	b.unavailable(t, batch, true)
	fired()
	res := b.ok(t, batch)
	require.Len(t, res.Results, 2)
	for i, r := range res.Results {
		require.Equal(t, "won", r.Outcome, i)
		require.Equal(t, tokenOf(r.ClaimID), r.ClaimToken, i)
	}

	// POST /v1/claims/complete/batch, the commit's answer lost.
	settle := call{method: "POST", path: "/v1/claims/complete/batch", key: keyA, body: map[string]any{"claims": []any{
		map[string]any{"claim_id": res.Results[0].ClaimID, "claim_token": res.Results[0].ClaimToken, "result_ref": "ref_b1"},
		map[string]any{"claim_id": res.Results[1].ClaimID, "claim_token": res.Results[1].ClaimToken, "result_ref": "ref_b2"}}}}
	fired = cut(commitStmt, pgfault.AfterReply)
	b.unavailable(t, settle, true)
	fired()
	settled := b.ok(t, settle)
	for i, r := range settled.Results {
		require.Nil(t, r.Error, i)
		require.Equal(t, "completed", r.State, i)
		require.Equal(t, fmt.Sprintf("ref_b%d", i+1), r.ResultRef, i)
	}

	// POST /v1/claims/fail/batch, the commit's answer lost.
	f1 := b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_f1"})
	f2 := b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_f2"})
	settle = call{method: "POST", path: "/v1/claims/fail/batch", key: keyA, body: map[string]any{"claims": []any{
		map[string]any{"claim_id": f1.ClaimID, "claim_token": f1.ClaimToken, "retry": "permanent", "error": "400"},
		map[string]any{"claim_id": f2.ClaimID, "claim_token": f2.ClaimToken, "retry": "unknown", "error": "timeout"}}}}
	fired = cut(commitStmt, pgfault.AfterReply)
	b.unavailable(t, settle, true)
	fired()
	settled = b.ok(t, settle)
	require.Equal(t, "dead_lettered", settled.Results[0].State)
	require.Equal(t, "unknown", settled.Results[1].State)

	// POST /v1/claims/fail/execution, the commit's answer lost: the retry
	// finds nothing left to fail, and the records are failed.
	e := b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_e1", "execution_id": "900"})
	failExec := call{method: "POST", path: "/v1/claims/fail/execution", key: keyA,
		body: map[string]any{"execution_id": "900", "retry": "unknown", "error": "crashed"}}
	fired = cut(commitStmt, pgfault.AfterReply)
	b.unavailable(t, failExec, true)
	fired()
	require.Empty(t, b.failExecution(t, keyA, failExec.body.(map[string]any)).Claims)
	st, _ = stateOf(e.ClaimID)
	require.Equal(t, "unknown", st)

	// A read whose connection breaks: 503, and the retry answers.
	fired = cut("WHERE id = $1 AND tenant = $2", pgfault.AfterReply)
	b.unavailable(t, call{method: "GET", path: id, key: keyA}, true)
	fired()
	require.Equal(t, "completed", b.ok(t, call{method: "GET", path: id, key: keyA}).State)

	// The API key lookup: 503, not 401 (the key may well be valid).
	dbKey, _, err := auth.Create(b.ctx, b.pool, "tenant-db", "lookup test")
	require.NoError(t, err)
	fired = cut("FROM api_keys", pgfault.BeforeSend)
	a := b.unavailable(t, call{method: "GET", path: "/v1/whoami", key: dbKey}, false)
	fired()
	require.Contains(t, a.Error.Message, "API key")
	require.Equal(t, "tenant-db", b.ok(t, call{method: "GET", path: "/v1/whoami", key: dbKey}).Tenant)
}

// Failures the server itself produces, each under a real request: the
// claim's own backend terminated (pg_terminate_backend) or cancelled
// (pg_cancel_backend) while it waits for a row lock, lock_timeout,
// statement_timeout, and a role over its CONNECTION LIMIT (53300, for the
// API key lookup and a claim). Every one is 503 with Retry-After, never
// 500 or 401.
func TestServerFailuresAreUnavailable(t *testing.T) {
	t.Parallel()
	type blocked struct {
		name    string
		params  map[string]string
		signal  string
		unknown bool
		says    string
	}
	for _, tc := range []blocked{
		{name: "terminated", signal: "pg_terminate_backend", unknown: true, says: "ended the session"},
		{name: "cancelled", signal: "pg_cancel_backend", says: "cancelled"},
		{name: "lock_timeout", params: map[string]string{"lock_timeout": "500ms"}, says: "lock_timeout"},
		{name: "statement_timeout", params: map[string]string{"statement_timeout": "500ms"}, says: "statement_timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			app := marker(t, tc.name)
			b := setup(t, func(o *options) {
				o.serverPool = named(app, func(c *pgxpool.Config) {
					for k, v := range tc.params {
						c.ConnConfig.RuntimeParams[k] = v
					}
				})
			})
			w := b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_1"})
			complete := call{method: "POST", path: "/v1/claims/" + w.ClaimID + "/complete", key: keyA,
				body: map[string]any{"claim_token": w.ClaimToken, "result_ref": "inv_1"}}

			// Another session holds the record's row: the complete waits.
			holder, err := b.pool.Begin(b.ctx)
			require.NoError(t, err)
			_, err = holder.Exec(b.ctx, `SELECT 1 FROM claims WHERE id = $1 FOR UPDATE`, w.ClaimID)
			require.NoError(t, err)
			answered := make(chan answer, 1)
			go func() {
				defer close(answered)
				answered <- b.unavailable(t, complete, tc.unknown)
			}()
			if tc.signal != "" {
				var pid uint32
				require.Eventually(t, func() bool {
					err := b.pool.QueryRow(b.ctx, `SELECT pid FROM pg_stat_activity
						WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&pid)
					return err == nil
				}, 10*time.Second, 10*time.Millisecond)
				var ok bool
				require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT `+tc.signal+`($1)`, pid).Scan(&ok))
				require.True(t, ok)
			}
			a, ok := <-answered
			require.True(t, ok, "the request was not answered 503")
			require.Contains(t, a.Error.Message, tc.says)
			require.NoError(t, holder.Rollback(b.ctx))

			// Nothing was kept; the same request again completes.
			done := b.ok(t, complete)
			require.Equal(t, "completed", done.State)
			require.Equal(t, "inv_1", done.ResultRef)
		})
	}

	t.Run("too many connections for the role", func(t *testing.T) {
		t.Parallel()
		role := strings.ToLower(marker(t, "role"))
		var server *pgxpool.Pool
		b := setup(t, func(o *options) {
			o.serverPool = func(t *testing.T, direct *pgxpool.Pool) *pgxpool.Pool {
				ctx := context.Background()
				_, err := direct.Exec(ctx, `CREATE ROLE `+role+` LOGIN CONNECTION LIMIT 1;
					GRANT USAGE ON SCHEMA public TO `+role+`;
					GRANT ALL ON ALL TABLES IN SCHEMA public TO `+role+`;
					GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO `+role)
				require.NoError(t, err)
				t.Cleanup(func() {
					_, _ = direct.Exec(ctx, `DROP OWNED BY `+role)
					_, _ = direct.Exec(ctx, `DROP ROLE `+role)
				})
				server = derivedPool(t, direct, func(c *pgxpool.Config) {
					c.ConnConfig.User = role
					c.MaxConns = 4
				})
				return server
			}
		})
		dbKey, _, err := auth.Create(b.ctx, b.pool, "tenant-db", "limit test")
		require.NoError(t, err)
		b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_1"})

		// The role's one connection is taken; the next one is refused.
		held, err := server.Acquire(b.ctx)
		require.NoError(t, err)
		a := b.unavailable(t, call{method: "GET", path: "/v1/whoami", key: dbKey}, false)
		require.Contains(t, a.Error.Message, "API key")
		require.Contains(t, a.Error.Message, "unreachable")
		b.unavailable(t, call{method: "POST", path: "/v1/claims", key: keyA,
			body: map[string]any{"source": "stripe", "event_id": "evt_2"}}, false)
		held.Release()

		require.Equal(t, "tenant-db", b.ok(t, call{method: "GET", path: "/v1/whoami", key: dbKey}).Tenant)
		b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_2"})
	})
}

func requireFired(t *testing.T, fired <-chan struct{}) {
	t.Helper()
	select {
	case <-fired:
	default:
		t.Fatal("the proxy's trap did not fire")
	}
}

// The inbox write of POST /ingest/{source}, before any 2xx: a database
// error is 503 with Retry-After (never 2xx, never 500), so the provider
// delivers the event again. On a read-only database nothing is stored; when
// the connection breaks after the commit the event is stored, and the
// provider's redelivery is answered as a duplicate, dispatched once.
func TestIngestDatabaseFailureIsUnavailable(t *testing.T) {
	t.Parallel()
	var proxy *pgfault.Proxy
	e := setupIngest(t, `
sources:
  hmac:
    tenant: acme
    provider: hmac
    secrets: ["`+identHMACSecret+`"]
    options: {signature: {header: X-Signature}, key: {id_header: X-Event-Id}}
    forward: {url: "http://127.0.0.1:1/unused"}
`, ingestOptions{pool: func(c *pgxpool.Config) {
		proxy = pgfault.New(t, c.ConnString())
		pc, err := pgxpool.ParseConfig(proxy.URL(c.ConnString()))
		require.NoError(t, err)
		c.ConnConfig.Host, c.ConnConfig.Port, c.ConnConfig.Fallbacks = pc.ConnConfig.Host, pc.ConnConfig.Port, nil
	}})
	unavailable := func(a ingestAnswer, says string) {
		t.Helper()
		require.Equal(t, http.StatusServiceUnavailable, a.status, "%s", a.body)
		require.Equal(t, "1", a.header.Get("Retry-After"))
		d := identError(t, a)
		require.Equal(t, "unavailable", string(d.Code))
		require.Contains(t, d.Message, says)
		for _, w := range []string{"SQLSTATE", "ERROR", "INSERT", "conn closed", "read-only transaction"} {
			require.NotContains(t, d.Message, w)
		}
	}
	body := []byte(`{"id":"evt_1","amount":1}`)

	// Read-only: refused, nothing stored; writable again: stored.
	admin, err := pgx.Connect(e.ctx, pgtest.ServerURL(t))
	require.NoError(t, err)
	defer admin.Close(e.ctx)
	db := pgx.Identifier{e.pool.Config().ConnConfig.Database}.Sanitize()
	_, err = admin.Exec(e.ctx, "ALTER DATABASE "+db+" SET default_transaction_read_only = on")
	require.NoError(t, err)
	e.pool.Reset()
	unavailable(e.send(t, "hmac", identHMACDelivery(t, "evt_1", body)), "read-only")
	require.Equal(t, ingestCounts{}, e.counts(t, "hmac"))
	_, err = admin.Exec(e.ctx, "ALTER DATABASE "+db+" RESET default_transaction_read_only")
	require.NoError(t, err)
	e.pool.Reset()
	a := e.send(t, "hmac", identHMACDelivery(t, "evt_1", body))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)

	// The commit's answer lost: 503; the redelivery is a duplicate.
	body = []byte(`{"id":"evt_2","amount":2}`)
	fired := proxy.Arm(func(sql string) bool { return sql == "commit" }, pgfault.AfterReply, false)
	unavailable(e.send(t, "hmac", identHMACDelivery(t, "evt_2", body)), "may or may not be stored")
	requireFired(t, fired)
	require.Equal(t, ingestCounts{2, 2, 2, 0}, e.counts(t, "hmac"), "the server committed the event")
	a = e.send(t, "hmac", identHMACDelivery(t, "evt_2", body))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	rs, _ := a.receipts(t)
	require.Equal(t, "duplicate", rs[0].Status)
	require.Equal(t, ingestCounts{2, 2, 2, 0}, e.counts(t, "hmac"), "one record, one dispatch job")
}
