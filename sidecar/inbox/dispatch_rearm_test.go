package inbox_test

import (
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
)

// n8nStartingUp is what n8n answers (HTTP 200) to a webhook while it
// boots: it runs no workflow.
const n8nStartingUp = `{"status":"error","message":"n8n is starting up. Please wait"}`

// rearmBundle starts a dispatcher (require_claim, the default; forward
// as in setupRetry) whose ledger knows reconciler crm and retries a
// failed claim at once.
func rearmBundle(t *testing.T, forward string, respond func(b *retryBundle, n int, r *http.Request) (int, string)) *retryBundle {
	t.Helper()
	b := newDispatchBundleWith(t, "/webhook/rearm-hook", forward, func(c *claim.Config) {
		c.Policies.Reconcilers = map[string]claim.ReconcilerPolicy{"crm": {}}
		c.Jitter = func() float64 { return 0 }
	}, respond)
	b.inbox = b.startInbox(t, true)
	require.True(t, b.src.Forward.RequireClaim)
	return b
}

// claimAndFail is the workflow's first run: it claims the event (naming
// reconciler crm) and its effect fails with kind.
func (b *retryBundle) claimAndFail(t *testing.T, r *http.Request, kind claim.FailKind) {
	res, err := b.ledger.Claim(r.Context(), claim.Request{Tenant: "acme", Reconciler: "crm",
		Key: claim.Key{Source: r.Header.Get(inbox.HeaderSource), EventID: r.Header.Get(inbox.HeaderEventID)}})
	if err != nil || res.Outcome != claim.Won {
		t.Errorf("first claim: %v %v", res.Outcome, err)
		return
	}
	if _, err := b.ledger.Fail(r.Context(), "acme", res.ID, res.Token, kind, "CRM call failed"); err != nil {
		t.Errorf("fail: %v", err)
	}
}

func (b *retryBundle) claimState(t *testing.T, id string) claim.State {
	t.Helper()
	rec, err := b.ledger.Get(b.ctx, "acme", id)
	require.NoError(t, err)
	return rec.State
}

// After a reconciler answers not_done, the re-armed dispatch of the
// ingested event counts a 2xx only once the workflow has claimed the
// record again: the claim is retryable_failed already when the dispatch
// is re-armed, so that state says nothing of the new run. n8n's 200 "n8n
// is starting up" (nothing ran) is retried, and the next attempt runs the
// effect and completes the claim.
func TestRedispatchAfterNotDoneCountsOnlyANewClaim(t *testing.T) {
	t.Parallel()
	b := rearmBundle(t, "", func(b *retryBundle, n int, r *http.Request) (int, string) {
		switch n {
		case 1: // claimed, then the CRM call timed out: outcome unknown
			b.claimAndFail(t, r, claim.UnknownOutcome)
			return http.StatusOK, `{}`
		case 2:
			return http.StatusOK, n8nStartingUp
		}
		return b.claimAndComplete(t, r)
	})
	id := b.receive(t, "evt-not-done")
	require.Zero(t, b.waitEnd(t, "dispatched"))
	require.Equal(t, claim.StateUnknown, b.claimState(t, id))

	// The reconciler's call and its not_done answer, re-arming the dispatch.
	d, err := b.ledger.ReconcileDiscover(b.ctx, 10)
	require.NoError(t, err)
	require.Equal(t, 1, d.Created)
	calls, err := b.ledger.ReconcileTake(b.ctx, 10)
	require.NoError(t, err)
	require.Len(t, calls, 1)
	res, err := b.ledger.ReconcileAnswer(b.ctx, "acme", id, calls[0].Token, claim.ReconcileNotDone, "", "", b.inbox.RedispatchTx)
	require.NoError(t, err)
	require.Equal(t, claim.StateRetryableFailed, res.Record.State)

	require.Equal(t, 1, b.waitEnd(t, "dispatched"), "the 200 of an n8n starting up is retried")
	require.EqualValues(t, 3, b.hits.Load())
	require.EqualValues(t, 1, b.effects.Load())
	require.Equal(t, claim.StateCompleted, b.claimState(t, id))
	log := b.dispatchLog(t, id)
	require.Len(t, log, 4)
	require.Equal(t, logEntry{"dispatched", 1, "HTTP 200"}, log[0])
	require.Equal(t, "dispatch_replayed", log[1].outcome)
	require.Equal(t, "dispatch_failed", log[2].outcome)
	require.Equal(t, 1, log[2].attempt)
	require.Contains(t, log[2].detail, "not claimed")
	require.Equal(t, logEntry{"dispatched", 2, "HTTP 200"}, log[3])
}

// An operator's replay of a dead-lettered dispatch whose claim is
// retryable_failed (the workflow claimed, failed, and n8n kept answering
// 500) counts a 2xx only once the workflow has claimed the record again.
func TestReplayCountsOnlyANewClaim(t *testing.T) {
	t.Parallel()
	b := rearmBundle(t, ", max_attempts: 2", func(b *retryBundle, n int, r *http.Request) (int, string) {
		switch n {
		case 1: // claimed, the effect failed (retryable), the workflow answers 500
			b.claimAndFail(t, r, claim.Retryable)
			return http.StatusInternalServerError, `{}`
		case 2:
			return http.StatusInternalServerError, `{}`
		case 3:
			return http.StatusOK, n8nStartingUp
		}
		return b.claimAndComplete(t, r)
	})
	id := b.receive(t, "evt-replayed")
	require.Equal(t, 1, b.waitEnd(t, "dead_lettered"))
	require.Equal(t, claim.StateRetryableFailed, b.claimState(t, id))

	_, err := b.inbox.Replay(b.ctx, "acme", id)
	require.NoError(t, err)

	require.Equal(t, 1, b.waitEnd(t, "dispatched"), "the 200 of an n8n starting up is retried")
	require.EqualValues(t, 4, b.hits.Load())
	require.EqualValues(t, 1, b.effects.Load())
	require.Equal(t, claim.StateCompleted, b.claimState(t, id))
	v := b.row(t, id)
	require.Equal(t, "dispatched", v.state)
	require.Equal(t, 2, v.attempts)
}

// A not_done answer while the event's dispatch is still pending (its
// next attempt in flight) marks the dispatch armed all the same: the
// 2xx of that attempt counts only if the workflow claimed the record
// after the answer, not for the claim before it.
func TestNotDoneWhileDispatchPendingCountsOnlyANewClaim(t *testing.T) {
	t.Parallel()
	inFlight, answered := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(answered) }) }
	b := rearmBundle(t, "", func(b *retryBundle, n int, r *http.Request) (int, string) {
		switch n {
		case 1: // claimed, outcome unknown, the workflow answers 500
			b.claimAndFail(t, r, claim.UnknownOutcome)
			return http.StatusInternalServerError, `{}`
		case 2: // in flight while the reconciler answers; then n8n restarts
			close(inFlight)
			<-answered
			return http.StatusOK, n8nStartingUp
		}
		return b.claimAndComplete(t, r)
	})
	t.Cleanup(release) // before the target closes and the inbox stops (cleanups run last first)
	id := b.receive(t, "evt-pending")
	<-inFlight
	require.Equal(t, "pending", b.row(t, id).state)
	_, err := b.ledger.ReconcileDiscover(b.ctx, 10)
	require.NoError(t, err)
	calls, err := b.ledger.ReconcileTake(b.ctx, 10)
	require.NoError(t, err)
	require.Len(t, calls, 1)
	_, err = b.ledger.ReconcileAnswer(b.ctx, "acme", id, calls[0].Token, claim.ReconcileNotDone, "", "", b.inbox.RedispatchTx)
	require.NoError(t, err)
	release()

	require.Equal(t, 2, b.waitEnd(t, "dispatched"), "the 500, then the 200 of an n8n starting up")
	require.EqualValues(t, 3, b.hits.Load())
	require.EqualValues(t, 1, b.effects.Load())
	require.Equal(t, claim.StateCompleted, b.claimState(t, id))
}
