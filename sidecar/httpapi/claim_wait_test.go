package httpapi_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/httpapi"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/metrics"
)

// setupWaiting is setup with a claim.Waiter, as claimd wires it: claims
// with wait_seconds wait for a concurrent holder. Its listener is
// connected when it returns.
func setupWaiting(t *testing.T) *bundle {
	t.Helper()
	const bodyLimit = 64 << 10
	pool := pgtest.NewPool(t)
	l, err := claim.New(pool, claim.Config{Jitter: func() float64 { return 1 }})
	require.NoError(t, err)
	w := claim.NewWaiter(l, claim.WaiterConfig{ConnConfig: pool.Config().ConnConfig, StepTimeout: 5 * time.Second,
		Logger: zerolog.Nop()})
	wctx, stop := context.WithCancel(context.Background())
	waiterDone := make(chan struct{})
	go func() { defer close(waiterDone); _ = w.Run(wctx) }()
	logs := &lockedBuffer{}
	srv := httpapi.New(httpapi.Config{
		Ledger:  l,
		Keys:    auth.NewKeys(pool, []auth.StaticKey{{Tenant: tenantA, Key: keyA}}, 0),
		Metrics: metrics.New(l.Stats),
		Ready: func(ctx context.Context) error {
			if err := pool.Ping(ctx); err != nil {
				return errors.New("database unreachable")
			}
			return nil
		},
		Logger:    zerolog.New(logs),
		BodyLimit: bodyLimit,
		MaxBatch:  8,
		Waiter:    w,
	})
	addr := serve(t, srv)
	t.Cleanup(func() { // before serve's cleanup (they run last first)
		stop()
		<-waiterDone
	})
	require.Eventually(t, w.Listening, 10*time.Second, 5*time.Millisecond, "the waiter's listener never connected")
	return &bundle{ctx: context.Background(), pool: pool, ledger: l, server: srv, logs: logs, cov: newCoverage(),
		addr: addr, bodyLimit: bodyLimit}
}

// timedAnswer is an answer with the time it took.
type timedAnswer struct {
	answer
	took time.Duration
}

// claimAsync sends POST /v1/claims in the background.
func (b *bundle) claimAsync(t *testing.T, body map[string]any) <-chan timedAnswer {
	out := make(chan timedAnswer, 1)
	go func() {
		start := time.Now()
		a := b.claim(t, keyA, body)
		out <- timedAnswer{a, time.Since(start)}
	}()
	return out
}

// TestClaimWaitsForTheHolder is the claim's wait for a concurrent holder
// (wait_seconds) with the real handler: two concurrent deliveries of one
// event, the winner's effect takes 2 s; the second, sent with wait_seconds,
// answers with the winner's outcome within about those 2 s.
func TestClaimWaitsForTheHolder(t *testing.T) {
	t.Parallel()
	b := setupWaiting(t)
	effect := 2 * time.Second

	t.Run("holder completes after 2 s: duplicate with its result_ref", func(t *testing.T) {
		body := map[string]any{"source": "orders", "event_id": "evt_done", "wait_seconds": 10}
		won := b.won(t, keyA, body)
		start := time.Now()
		second := b.claimAsync(t, body)
		time.Sleep(effect) // the winner's effect
		b.ok(t, call{method: "POST", path: "/v1/claims/" + won.ClaimID + "/complete", key: keyA,
			body: map[string]any{"claim_token": won.ClaimToken, "result_ref": "inv_2s"}})
		got := <-second
		require.Equal(t, "duplicate", got.Outcome)
		require.Equal(t, "inv_2s", got.ResultRef)
		require.Nil(t, got.RetryAfterSeconds)
		require.GreaterOrEqual(t, time.Since(start), effect)
		require.Less(t, got.took, effect+time.Second, "answered %s after the claim, want about %s", got.took, effect)
	})

	t.Run("holder fails: the retry outcome", func(t *testing.T) {
		body := map[string]any{"source": "orders", "event_id": "evt_failed", "wait_seconds": 10}
		won := b.won(t, keyA, body)
		second := b.claimAsync(t, body)
		time.Sleep(effect)
		b.ok(t, call{method: "POST", path: "/v1/claims/" + won.ClaimID + "/fail", key: keyA,
			body: map[string]any{"claim_token": won.ClaimToken, "error": "503 from the API", "retry": "retryable"}})
		got := <-second
		require.Equal(t, "retry_later", got.Outcome)
		require.NotNil(t, got.RetryAfterSeconds)
		require.Less(t, got.took, effect+time.Second)
	})

	t.Run("the wait ends at its bound with in_progress", func(t *testing.T) {
		body := map[string]any{"source": "orders", "event_id": "evt_slow", "wait_seconds": 2}
		b.won(t, keyA, body)
		got := <-b.claimAsync(t, body)
		require.Equal(t, "in_progress", got.Outcome)
		require.NotNil(t, got.RetryAfterSeconds)
		require.GreaterOrEqual(t, got.took, 2*time.Second)
		require.Less(t, got.took, 3*time.Second)
	})

	t.Run("a batch item waits up to its own wait_seconds", func(t *testing.T) {
		held := b.won(t, keyA, map[string]any{"source": "orders", "event_id": "evt_batch"})
		out := make(chan answer, 1)
		go func() {
			out <- b.ok(t, call{method: "POST", path: "/v1/claims/batch", key: keyA, body: map[string]any{"claims": []any{
				map[string]any{"source": "orders", "event_id": "evt_batch", "wait_seconds": 10},
				map[string]any{"source": "orders", "event_id": "evt_batch_new", "wait_seconds": 10},
			}}})
		}()
		require.Eventually(t, func() bool {
			var on bool
			require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT wait_notify FROM claims WHERE id = $1`, held.ClaimID).Scan(&on))
			return on
		}, 10*time.Second, 5*time.Millisecond)
		b.ok(t, call{method: "POST", path: "/v1/claims/" + held.ClaimID + "/complete", key: keyA,
			body: map[string]any{"claim_token": held.ClaimToken, "result_ref": "inv_batch"}})
		res := <-out
		require.Len(t, res.Results, 2)
		require.Equal(t, "duplicate", res.Results[0].Outcome)
		require.Equal(t, "inv_batch", res.Results[0].ResultRef)
		require.Equal(t, "won", res.Results[1].Outcome)
	})

	t.Run("wait_seconds is bounded", func(t *testing.T) {
		b.fails(t, call{method: "POST", path: "/v1/claims", key: keyA,
			body: map[string]any{"source": "orders", "event_id": "evt_x", "wait_seconds": 26}},
			http.StatusUnprocessableEntity, "invalid", "wait_seconds")
		b.fails(t, call{method: "POST", path: "/v1/claims", key: keyA,
			body: map[string]any{"source": "orders", "event_id": "evt_x", "wait_seconds": -1}},
			http.StatusUnprocessableEntity, "invalid", "wait_seconds")
		r, a := b.doJSON(t, call{method: "POST", path: "/v1/claims/batch", key: keyA, lax: true, body: map[string]any{"claims": []any{
			map[string]any{"source": "orders", "event_id": "evt_x", "wait_seconds": 30},
		}}})
		require.Equal(t, http.StatusOK, r.status, "%s", r)
		require.Equal(t, "claims[0].wait_seconds", a.Results[0].Error.Field)
	})
}

// TestInProgressRetryAfterFollowsTheSource: in_progress answers carry a
// Retry-After from how long the source's effects take, not the remaining
// lease (300 s by default).
func TestInProgressRetryAfterFollowsTheSource(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := map[string]any{"source": "quick", "event_id": "evt_0"}
	first := b.won(t, keyA, body)
	ip := b.claim(t, keyA, body)
	require.Equal(t, "in_progress", ip.Outcome)
	require.Equal(t, int(claim.RetryHintNoHistory/time.Second), *ip.RetryAfterSeconds, "no completion yet: the default")
	b.ok(t, call{method: "POST", path: "/v1/claims/" + first.ClaimID + "/complete", key: keyA,
		body: map[string]any{"claim_token": first.ClaimToken}})

	// A fresh source with fast completions, so no cached estimate applies.
	for _, id := range []string{"f1", "f2", "f3", "f4", "f5"} {
		w := b.won(t, keyA, map[string]any{"source": "quicker", "event_id": id})
		b.ok(t, call{method: "POST", path: "/v1/claims/" + w.ClaimID + "/complete", key: keyA,
			body: map[string]any{"claim_token": w.ClaimToken}})
	}
	b.won(t, keyA, map[string]any{"source": "quicker", "event_id": "busy", "lease_seconds": 300})
	ip = b.claim(t, keyA, map[string]any{"source": "quicker", "event_id": "busy"})
	require.Equal(t, "in_progress", ip.Outcome)
	require.Equal(t, 1, *ip.RetryAfterSeconds, "effects that take milliseconds: come back in a second, not in 300")
}
