package inbox_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// Tests of forward.retry_statuses: which answers of the target the real
// dispatcher retries and which dead-letter at once, against a real HTTP
// target and a fresh PostgreSQL database per test.

// n8nNotRegistered is n8n's answer (HTTP 404) for a production webhook that
// is not registered yet: while its workflow is being activated, or while
// n8n restarts (n8n-io/n8n#34038, #14646).
const n8nNotRegistered = `{"code":404,"message":"The requested webhook \"POST retry-hook\" is not registered.",` +
	`"hint":"The workflow must be active for a production URL to run successfully. ` +
	`You can activate the workflow using the toggle in the top-right of the editor."}`

// retryWait bounds every wait of these tests (a deadline, not a sleep).
const retryWait = time.Minute

// retryBundle is one running dispatcher with its target.
type retryBundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	ledger *claim.Ledger
	inbox  *inbox.Inbox
	cfg    sources.Config
	src    *sources.Source
	// results receives every Observer.Dispatched result: "retry",
	// "dispatched" or "dead_lettered".
	results chan string
	// hits counts the target's requests; effects the protected effects run.
	hits, effects atomic.Int32
}

// retryObserver signals each dispatch result to the test.
type retryObserver struct{ results chan<- string }

func (retryObserver) Received(string, inbox.Status) {}
func (retryObserver) Rejected(string, string)       {}
func (o retryObserver) Dispatched(_, result string, _ time.Duration) {
	o.results <- result
}

// setupRetry starts a dispatcher for source "n8n" whose forward block is
// the defaults plus forward (", max_attempts: 4"), posting to a target
// whose n-th request (1-based) respond answers.
func setupRetry(t *testing.T, forward string, respond func(b *retryBundle, n int, r *http.Request) (int, string)) *retryBundle {
	t.Helper()
	b := newDispatchBundle(t, "/webhook/retry-hook", forward, respond)
	b.inbox = b.startInbox(t, true)
	return b
}

// newDispatchBundle parses source "n8n" posting to path on a new target
// (forward as in setupRetry), on a fresh database, and starts the target;
// no inbox yet (startInbox).
func newDispatchBundle(t *testing.T, path, forward string, respond func(b *retryBundle, n int, r *http.Request) (int, string)) *retryBundle {
	t.Helper()
	return newDispatchBundleWith(t, path, forward, nil, respond)
}

// newDispatchBundleWith is newDispatchBundle with the ledger's
// configuration adjusted by ledgerCfg (nil: as it is).
func newDispatchBundleWith(t *testing.T, path, forward string, ledgerCfg func(*claim.Config),
	respond func(b *retryBundle, n int, r *http.Request) (int, string)) *retryBundle {
	t.Helper()
	b := &retryBundle{ctx: context.Background(), results: make(chan string, 64)}
	target := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		status, body := respond(b, int(b.hits.Add(1)), r)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(target.Close)
	cfg, err := sources.Parse([]byte(`
sources:
  n8n:
    tenant: acme
    provider: token
    secrets: [tok]
    options: {key: {id_header: X-Id}}
    forward: {url: "http://`+target.Listener.Addr().String()+path+`", backoff_base_seconds: 1, backoff_cap_seconds: 1`+forward+`}
`), envOf(nil))
	require.NoError(t, err)
	b.cfg = cfg
	b.src = cfg.Sources["n8n"]
	b.pool = pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 8 })
	lc := claim.Config{Policies: claim.Policies{BySource: cfg.Policies}}
	if ledgerCfg != nil {
		ledgerCfg(&lc)
	}
	b.ledger, err = claim.New(b.pool, lc)
	require.NoError(t, err)
	target.Start() // after b is complete: the handler reads it
	return b
}

// startInbox starts an inbox on b's database and configuration: a
// dispatcher (dispatch) or an ingest-only replica. Several may run at once,
// as replicas do. The first one started is b.inbox's stand-in for receive.
func (b *retryBundle) startInbox(t *testing.T, dispatch bool) *inbox.Inbox {
	t.Helper()
	in, err := inbox.New(inbox.Options{Pool: b.pool, Ledger: b.ledger, Config: b.cfg, Logger: zerolog.Nop(),
		Observer: retryObserver{b.results}, Dispatch: dispatch, PollInterval: 50 * time.Millisecond,
		// A twentieth of the configured 1 s backoff: retries come within 50 ms.
		Jitter: func() float64 { return 0.05 }})
	require.NoError(t, err)
	require.NoError(t, in.Start(b.ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, in.Stop(ctx))
	})
	return in
}

// receive stores one event and returns its inbox id.
func (b *retryBundle) receive(t *testing.T, id string) string {
	t.Helper()
	rs, err := b.inbox.Receive(b.ctx, b.src, []verify.Event{{ID: id}}, []byte(`{"id":"`+id+`"}`), "application/json", nil)
	require.NoError(t, err)
	require.Len(t, rs, 1)
	require.Equal(t, inbox.Accepted, rs[0].Status)
	return rs[0].ClaimID
}

// waitEnd waits for the event's final dispatch result, which must be want,
// and returns the number of retries signalled before it. The inbox row is
// written before the signal.
func (b *retryBundle) waitEnd(t *testing.T, want string) int {
	t.Helper()
	deadline := time.NewTimer(retryWait)
	defer deadline.Stop()
	retries := 0
	for {
		select {
		case r := <-b.results:
			if r == "retry" {
				retries++
				continue
			}
			require.Equal(t, want, r, "after %d retries", retries)
			return retries
		case <-deadline.C:
			t.Fatalf("no final dispatch result within %s (%d retries, %d target hits)", retryWait, retries, b.hits.Load())
		}
	}
}

// inboxRow is the dispatch side of an inbox record.
type inboxRow struct {
	state      string
	attempts   int
	lastStatus *int
	lastError  string
}

func (b *retryBundle) row(t *testing.T, id string) inboxRow {
	t.Helper()
	var r inboxRow
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT dispatch_state, dispatch_attempts, last_dispatch_status,
		COALESCE(last_dispatch_error, '') FROM inbox_events WHERE claim_id = $1`, id).
		Scan(&r.state, &r.attempts, &r.lastStatus, &r.lastError))
	return r
}

// logEntry is one delivery-log row of the dispatcher.
type logEntry struct {
	outcome string
	attempt int
	detail  string
}

// dispatchLog returns the dispatcher's delivery-log rows of the event, oldest first.
func (b *retryBundle) dispatchLog(t *testing.T, id string) []logEntry {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT outcome, COALESCE(attempt, 0), COALESCE(detail, '') FROM claim_deliveries
		WHERE claim_id = $1 AND outcome LIKE 'dispatch%' ORDER BY id`, id)
	require.NoError(t, err)
	var out []logEntry
	for rows.Next() {
		var e logEntry
		require.NoError(t, rows.Scan(&e.outcome, &e.attempt, &e.detail))
		out = append(out, e)
	}
	require.NoError(t, rows.Err())
	return out
}

// claimAndComplete is what the n8n workflow does once it runs: claim the
// event named by the dispatcher's headers, run the effect, complete. It
// runs on the target's goroutine, so it reports failures with t.Errorf.
func (b *retryBundle) claimAndComplete(t *testing.T, r *http.Request) (int, string) {
	res, err := b.ledger.Claim(r.Context(), claim.Request{Tenant: "acme",
		Key: claim.Key{Source: r.Header.Get(inbox.HeaderSource), EventID: r.Header.Get(inbox.HeaderEventID)}})
	if err != nil {
		t.Errorf("claim: %v", err)
		return http.StatusServiceUnavailable, `{}`
	}
	if res.Outcome != claim.Won {
		return http.StatusOK, `{"outcome":"` + string(res.Outcome) + `"}`
	}
	b.effects.Add(1)
	if _, err := b.ledger.Complete(r.Context(), "acme", res.ID, res.Token, "effect-1"); err != nil {
		t.Errorf("complete: %v", err)
		return http.StatusServiceUnavailable, `{}`
	}
	return http.StatusOK, `{"outcome":"won"}`
}

// TestDispatchRetriesN8nWebhookNotRegistered is B06: n8n answers 404
// "webhook not registered" while the workflow is being activated; with the
// default forward.retry_statuses the dispatcher retries, and the event is
// dispatched on the third attempt with one effect and no dead letter.
func TestDispatchRetriesN8nWebhookNotRegistered(t *testing.T) {
	t.Parallel()
	b := setupRetry(t, "", func(b *retryBundle, n int, r *http.Request) (int, string) {
		if n <= 2 {
			return http.StatusNotFound, n8nNotRegistered
		}
		return b.claimAndComplete(t, r)
	})
	require.True(t, b.src.Forward.RequireClaim, "the default: a 2xx counts once the workflow claimed")
	id := b.receive(t, "evt-not-registered")
	require.Equal(t, 2, b.waitEnd(t, "dispatched"))

	require.EqualValues(t, 3, b.hits.Load(), "three target hits")
	require.EqualValues(t, 1, b.effects.Load(), "one effect")
	v := b.row(t, id)
	require.Equal(t, "dispatched", v.state)
	require.Equal(t, 3, v.attempts)
	require.Equal(t, http.StatusOK, *v.lastStatus)
	require.Empty(t, v.lastError)
	const retried = "target answered HTTP 404 (retryable for this source)"
	require.Equal(t, []logEntry{
		{"dispatch_failed", 1, retried},
		{"dispatch_failed", 2, retried},
		{"dispatched", 3, "HTTP 200"},
	}, b.dispatchLog(t, id), "no dead letter")
	var completed string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT state FROM claims WHERE id = $1`, id).Scan(&completed))
	require.Equal(t, string(claim.StateCompleted), completed)
	// The two 404s were backoff retries (errors River recorded), not snoozes.
	var errs int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT COALESCE(array_length(errors, 1), 0) FROM river_job
		WHERE args->>'claim_id' = $1`, id).Scan(&errs))
	require.Equal(t, 2, errs)
}

// TestDispatchDeadLettersStatusNotListed: a 400 is not in the default
// list, so the event is dead-lettered after one attempt, and the reason
// says why.
func TestDispatchDeadLettersStatusNotListed(t *testing.T) {
	t.Parallel()
	b := setupRetry(t, "", func(*retryBundle, int, *http.Request) (int, string) {
		return http.StatusBadRequest, `{"message":"bad request"}`
	})
	id := b.receive(t, "evt-400")
	require.Zero(t, b.waitEnd(t, "dead_lettered"), "no retry")

	require.EqualValues(t, 1, b.hits.Load())
	v := b.row(t, id)
	require.Equal(t, "dead_lettered", v.state)
	require.Equal(t, 1, v.attempts)
	require.Equal(t, http.StatusBadRequest, *v.lastStatus)
	const reason = "target answered HTTP 400 (not retryable for this source: not in forward.retry_statuses)"
	require.Equal(t, reason, v.lastError)
	require.Equal(t, []logEntry{{"dispatch_dead_lettered", 1, reason}}, b.dispatchLog(t, id))
}

// TestDispatchCustomRetryStatusesWithout404: a source whose list leaves
// 404 out dead-letters a 404 at once, as before the default included it.
func TestDispatchCustomRetryStatusesWithout404(t *testing.T) {
	t.Parallel()
	b := setupRetry(t, `, retry_statuses: [429, "500-599"]`, func(*retryBundle, int, *http.Request) (int, string) {
		return http.StatusNotFound, n8nNotRegistered
	})
	require.Equal(t, sources.Statuses{{Lo: 429, Hi: 429}, {Lo: 500, Hi: 599}}, b.src.Forward.RetryStatuses)
	id := b.receive(t, "evt-404-custom")
	require.Zero(t, b.waitEnd(t, "dead_lettered"), "no retry")

	require.EqualValues(t, 1, b.hits.Load())
	v := b.row(t, id)
	require.Equal(t, 1, v.attempts)
	require.Equal(t, http.StatusNotFound, *v.lastStatus)
	require.Equal(t, "target answered HTTP 404 (not retryable for this source: not in forward.retry_statuses)", v.lastError)
}

// TestDispatchRetryableStatusUntilTheCap: a target that answers 404 every
// time gets forward.max_attempts requests, then the event is dead-lettered
// with a reason naming the last status and the cap.
func TestDispatchRetryableStatusUntilTheCap(t *testing.T) {
	t.Parallel()
	b := setupRetry(t, ", max_attempts: 4", func(*retryBundle, int, *http.Request) (int, string) {
		return http.StatusNotFound, n8nNotRegistered
	})
	id := b.receive(t, "evt-404-forever")
	require.Equal(t, 3, b.waitEnd(t, "dead_lettered"))

	require.EqualValues(t, 4, b.hits.Load())
	v := b.row(t, id)
	require.Equal(t, "dead_lettered", v.state)
	require.Equal(t, 4, v.attempts)
	require.Equal(t, http.StatusNotFound, *v.lastStatus)
	const final = "target answered HTTP 404 (retryable for this source); attempt cap 4 reached"
	require.Equal(t, final, v.lastError)
	const retried = "target answered HTTP 404 (retryable for this source)"
	require.Equal(t, []logEntry{
		{"dispatch_failed", 1, retried},
		{"dispatch_failed", 2, retried},
		{"dispatch_failed", 3, retried},
		{"dispatch_dead_lettered", 4, final},
	}, b.dispatchLog(t, id))
}

// TestSourcesFileRetryStatuses: forward.retry_statuses takes statuses and
// ranges, defaults to the n8n list, and refuses anything else with an
// error naming the item.
func TestSourcesFileRetryStatuses(t *testing.T) {
	t.Parallel()
	parse := func(list string) (*sources.Source, error) {
		forward := `forward: {url: "http://n8n/x"}`
		if list != "" {
			forward = `forward: {url: "http://n8n/x", retry_statuses: ` + list + `}`
		}
		cfg, err := sources.Parse([]byte("sources:\n  gh: {tenant: acme, provider: github, secrets: [s], "+forward+"}\n"), envOf(nil))
		if err != nil {
			return nil, err
		}
		return cfg.Sources["gh"], nil
	}

	src, err := parse("null")
	require.NoError(t, err)
	require.Equal(t, sources.DefaultRetryStatuses(), src.Forward.RetryStatuses, "null is unset")
	src, err = parse("")
	require.NoError(t, err)
	require.Equal(t, sources.DefaultRetryStatuses(), src.Forward.RetryStatuses)
	require.Equal(t, "404, 408, 409, 425, 429, 500-599", src.Forward.RetryStatuses.String())
	for status, retried := range map[int]bool{
		404: true, 408: true, 409: true, 425: true, 429: true, 500: true, 503: true, 599: true,
		200: false, 204: false, 301: false, 400: false, 401: false, 403: false, 410: false, 413: false, 422: false,
	} {
		require.Equal(t, retried, src.Forward.RetryStatuses.Has(status), "default, HTTP %d", status)
	}

	for _, tc := range []struct {
		list string
		want sources.Statuses
	}{
		{`[503]`, sources.Statuses{{Lo: 503, Hi: 503}}},
		{`["404", 429]`, sources.Statuses{{Lo: 404, Hi: 404}, {Lo: 429, Hi: 429}}},
		{`[500-599, 404]`, sources.Statuses{{Lo: 404, Hi: 404}, {Lo: 500, Hi: 599}}},
		{`["502 - 504", 503, "500-502", 100]`, sources.Statuses{{Lo: 100, Hi: 100}, {Lo: 500, Hi: 504}}},
		{`["300-399", 599]`, sources.Statuses{{Lo: 300, Hi: 399}, {Lo: 599, Hi: 599}}},
	} {
		src, err := parse(tc.list)
		require.NoError(t, err, tc.list)
		require.Equal(t, tc.want, src.Forward.RetryStatuses, tc.list)
	}

	for _, tc := range []struct{ list, want string }{
		{`[]`, `forward.retry_statuses is empty; leave it out for the defaults (404, 408, 409, 425, 429, 500-599)`},
		{`[404, 429, 200]`, `forward.retry_statuses[2]: 200 includes a 2xx: a 2xx is a success`},
		{`["100-599"]`, `forward.retry_statuses[0]: "100-599" includes a 2xx`},
		{`["250-260"]`, `forward.retry_statuses[0]: "250-260" includes a 2xx`},
		{`[404, 600]`, `forward.retry_statuses[1]: 600 is not an HTTP status (100-599)`},
		{`[99]`, `forward.retry_statuses[0]: 99 is not an HTTP status (100-599)`},
		{`[-404]`, `forward.retry_statuses[0]: -404 is not an HTTP status (100-599)`},
		{`[404, "500-600"]`, `forward.retry_statuses[1]: "500-600" is not an HTTP status (100-599)`},
		{`["599-500"]`, `forward.retry_statuses[0]: "599-500": a range runs from the lower status to the higher`},
		{`[5xx]`, `forward.retry_statuses[0]: want a status (404) or a range written as a string ("500-599"), not other text`},
		{`["404,429"]`, `forward.retry_statuses[0]: want a status (404) or a range written as a string ("500-599"), not other text`},
		{`["500-"]`, `forward.retry_statuses[0]: want a status (404) or a range written as a string ("500-599"), not other text`},
		{`[404.5]`, `forward.retry_statuses[0]: want a status (404) or a range written as a string ("500-599"), not a YAML float`},
		{`[true]`, `forward.retry_statuses[0]: want a status (404) or a range written as a string ("500-599"), not a YAML bool`},
		{`[404, null]`, `forward.retry_statuses[1]: want a status (404) or a range written as a string ("500-599"), not null`},
		{`[[500, 599]]`, `forward.retry_statuses[0]: want a status (404) or a range written as a string ("500-599"), not a list`},
		{`[{from: 500, to: 599}]`, `forward.retry_statuses[0]: want a status (404) or a range written as a string ("500-599"), not a map`},
		{`[99999999999999999999999]`, `forward.retry_statuses[0]: want a status (404) or a range written as a string ("500-599"), not a YAML float`},
		{`404`, `forward.retry_statuses must be a list, such as [404, 429, "500-599"]`},
		{`"500-599"`, `forward.retry_statuses must be a list`},
		{`{a: 1}`, `forward.retry_statuses must be a list`},
	} {
		_, err := parse(tc.list)
		require.Error(t, err, tc.list)
		require.Contains(t, err.Error(), `source "gh": `, tc.list)
		require.Contains(t, err.Error(), tc.want, tc.list)
	}

	// YAML aliases, for one list shared by several sources.
	cfg, err := sources.Parse([]byte(`
sources:
  a: {tenant: acme, provider: github, secrets: [s], forward: {url: "http://n8n/x", retry_statuses: &retry [404, &server "500-599"]}}
  b: {tenant: acme, provider: github, secrets: [s], forward: {url: "http://n8n/x", retry_statuses: *retry}}
  c: {tenant: acme, provider: github, secrets: [s], forward: {url: "http://n8n/x", retry_statuses: [429, *server]}}
`), envOf(nil))
	require.NoError(t, err)
	require.Equal(t, sources.Statuses{{Lo: 404, Hi: 404}, {Lo: 500, Hi: 599}}, cfg.Sources["a"].Forward.RetryStatuses)
	require.Equal(t, sources.Statuses{{Lo: 404, Hi: 404}, {Lo: 500, Hi: 599}}, cfg.Sources["b"].Forward.RetryStatuses)
	require.Equal(t, sources.Statuses{{Lo: 429, Hi: 429}, {Lo: 500, Hi: 599}}, cfg.Sources["c"].Forward.RetryStatuses)

	// JSON is YAML too: numbers and range strings.
	cfg, err = sources.Parse([]byte(`{"sources": {"gh": {"tenant": "acme", "provider": "github", "secrets": ["s"],
		"forward": {"url": "http://n8n/x", "retry_statuses": [404, "500-599"]}}}}`), envOf(nil))
	require.NoError(t, err)
	require.Equal(t, sources.Statuses{{Lo: 404, Hi: 404}, {Lo: 500, Hi: 599}}, cfg.Sources["gh"].Forward.RetryStatuses)
	require.False(t, strings.Contains(cfg.Sources["gh"].Forward.RetryStatuses.String(), "409"))
}
