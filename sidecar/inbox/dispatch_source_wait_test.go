package inbox_test

import (
	"context"
	"net/http"
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

// B15: a source missing from the configuration (removed on purpose, or a
// reload that dropped it) never dead-letters its pending dispatches: they
// wait, visibly and without using attempts, and go out when the source is
// configured again.

// waitingSources is the sources file of these tests: "orders" posts to
// target (require_claim: false), "payments" is claim-only.
func waitingSources(t *testing.T, target string, withOrders bool) sources.Config {
	t.Helper()
	spec := "sources:\n  payments: {lease_policy: review}\n"
	if withOrders {
		spec += `  orders:
    tenant: acme
    provider: token
    secrets: [tok]
    options: {key: {id_header: X-Id}}
    forward: {url: "` + target + `/hook/orders", require_claim: false, max_attempts: 20, backoff_base_seconds: 1, backoff_cap_seconds: 1}
`
	}
	cfg, err := sources.Parse([]byte(spec), envOf(nil))
	require.NoError(t, err)
	return cfg
}

// startInbox runs a dispatcher over pool with cfg and signals every
// Observer.Dispatched result on results. Its backoffs are jitter times
// their ceiling.
func startInbox(t *testing.T, pool *pgxpool.Pool, cfg sources.Config, results chan string, jitter float64) *inbox.Inbox {
	t.Helper()
	ledger, err := claim.New(pool, claim.Config{Policies: claim.Policies{BySource: cfg.Policies}})
	require.NoError(t, err)
	in, err := inbox.New(inbox.Options{Pool: pool, Ledger: ledger, Config: cfg, Logger: zerolog.Nop(),
		Observer: retryObserver{results}, Dispatch: true, PollInterval: 50 * time.Millisecond,
		Jitter: func() float64 { return jitter }})
	require.NoError(t, err)
	require.NoError(t, in.Start(context.Background()))
	t.Cleanup(func() { stopInbox(t, in) })
	return in
}

func stopInbox(t *testing.T, in *inbox.Inbox) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, in.Stop(ctx))
}

// next waits for the next dispatch result other than skip.
func next(t *testing.T, results <-chan string, skip string) string {
	t.Helper()
	deadline := time.NewTimer(retryWait)
	defer deadline.Stop()
	for {
		select {
		case r := <-results:
			if r != skip {
				return r
			}
		case <-deadline.C:
			t.Fatalf("no dispatch result within %s", retryWait)
		}
	}
}

func TestDispatchWaitsForRemovedSourceAndResumes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var healthy atomic.Bool
	target := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		if healthy.Load() {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 6 })
	results := make(chan string, 256)
	with, without := waitingSources(t, target.srv.URL, true), waitingSources(t, target.srv.URL, false)
	in := startInbox(t, pool, with, results, 0.05)
	rs, err := in.Receive(ctx, with.Sources["orders"], []verify.Event{{ID: "ord-1"}}, []byte(`{"id":"ord-1"}`), "application/json", nil)
	require.NoError(t, err)
	id := rs[0].ClaimID
	require.Equal(t, "retry", next(t, results, ""), "the target answers 503: the dispatch is pending")

	// The source is removed (on purpose, or by a reload that lost it).
	require.NoError(t, in.Reload(ctx, without))
	require.Equal(t, "waiting", next(t, results, "retry"))
	require.Equal(t, "waiting", next(t, results, ""), "checked again later, still waiting")
	b := &retryBundle{ctx: ctx, pool: pool}
	row := b.row(t, id)
	require.Equal(t, "pending", row.state, "never dead-lettered while the source is missing")
	require.Equal(t, `source "orders" is not configured; waiting (the dispatch resumes when the sources file configures it again)`, row.lastError)
	attempts := row.attempts
	log := b.dispatchLog(t, id)
	waits := 0
	for _, e := range log {
		require.NotEqual(t, "dispatch_dead_lettered", e.outcome)
		if strings.Contains(e.detail, "is not configured; waiting") {
			waits++
			require.Equal(t, "dispatch_failed", e.outcome)
		}
	}
	require.Equal(t, 1, waits, "one delivery-log row per wait, not one per check")

	// The source comes back and the target is healthy: the waiting
	// dispatch is made due at once and goes out.
	healthy.Store(true)
	require.NoError(t, in.Reload(ctx, with))
	require.Equal(t, "dispatched", next(t, results, "waiting"))
	row = b.row(t, id)
	require.Equal(t, "dispatched", row.state)
	require.Equal(t, attempts+1, row.attempts, "the waits used no attempt")
	for _, e := range b.dispatchLog(t, id) {
		require.NotEqual(t, "dispatch_dead_lettered", e.outcome)
	}
	posts := target.requests("/hook/orders")
	require.Equal(t, `{"id":"ord-1"}`, posts[len(posts)-1].body)
}

// A process that starts without a source whose dispatches are pending
// still works them: they wait, visibly, and resume as soon as the source
// is configured again, not at their next check.
func TestDispatchOfUnconfiguredSourceWaitsAfterRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var healthy atomic.Bool
	target := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		if healthy.Load() {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 6 })
	with, without := waitingSources(t, target.srv.URL, true), waitingSources(t, target.srv.URL, false)
	first := make(chan string, 256)
	in := startInbox(t, pool, with, first, 0.05)
	rs, err := in.Receive(ctx, with.Sources["orders"], []verify.Event{{ID: "ord-2"}}, []byte(`{"id":"ord-2"}`), "application/json", nil)
	require.NoError(t, err)
	id := rs[0].ClaimID
	require.Equal(t, "retry", next(t, first, ""))
	stopInbox(t, in)

	results := make(chan string, 256)
	// Full backoffs: the next check of a waiting dispatch is 5 s away.
	in = startInbox(t, pool, without, results, 1)
	require.Equal(t, "waiting", next(t, results, "retry"))
	b := &retryBundle{ctx: ctx, pool: pool}
	require.Equal(t, "pending", b.row(t, id).state)

	healthy.Store(true)
	job := func() (state string, due bool) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT state, scheduled_at <= now() FROM river_job
			WHERE args->>'claim_id' = $1 ORDER BY id DESC LIMIT 1`, id).Scan(&state, &due))
		return state, due
	}
	// River records the snooze after Work returns: wait for it (a bound,
	// not a timing assertion).
	for deadline := time.Now().Add(retryWait); ; time.Sleep(5 * time.Millisecond) {
		if state, _ := job(); state == "scheduled" {
			break
		}
		require.True(t, time.Now().Before(deadline), "the waiting job was never snoozed")
	}
	_, due := job()
	require.False(t, due, "snoozed until its next check")
	require.NoError(t, in.Reload(ctx, with))
	state, due := job()
	require.True(t, due || state != "scheduled", "made due by the reload that configures its source again (%s)", state)
	require.Equal(t, "dispatched", next(t, results, "waiting"))
	require.Equal(t, "dispatched", b.row(t, id).state)
}
