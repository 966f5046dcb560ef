package claim_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// The last failed call's error class stays on the reconcile while the
// next call is in flight (an operator reading the record sees why call 1
// failed during call 2), until that call ends: an answer clears it, a
// failure replaces it.
func TestReconcileLastErrorKeptDuringNextCall(t *testing.T) {
	t.Parallel()
	b := setup(t, reconcilePolicies())
	id, _ := b.unknownClaim(t, "a", "evt_le")
	c := b.takeOne(t, id)
	_, err := b.ledger.ReconcileFail(b.ctx, id, c.Token, claim.ReconcileErrTimeout)
	require.NoError(t, err)
	b.dueNow(t, id)
	c = b.takeOne(t, id)
	st := b.reconcileOf(t, "a", id)
	require.Equal(t, claim.ReconcileCalling, st.State)
	require.Equal(t, 2, st.Calls)
	require.Equal(t, claim.ReconcileErrTimeout, st.LastError, "call 1's error while call 2 is in flight")

	st, err = b.ledger.ReconcileFail(b.ctx, id, c.Token, claim.ReconcileErrStatus5xx)
	require.NoError(t, err)
	require.Equal(t, claim.ReconcileErrStatus5xx, st.LastError, "call 2's failure replaces it")
	b.dueNow(t, id)
	c = b.takeOne(t, id)
	require.Equal(t, claim.ReconcileErrStatus5xx, b.reconcileOf(t, "a", id).LastError)
	res, err := b.ledger.ReconcileAnswer(b.ctx, "a", id, c.Token, claim.ReconcileStillUnknown, "", "", nil)
	require.NoError(t, err)
	require.Empty(t, res.Reconcile.LastError, "an answer clears it")
	require.Empty(t, b.reconcileOf(t, "a", id).LastError)
}

// Each call ends once, and its end is reported once (Ended) for the
// calls metric: by the answer applied (not by its repeat), or by the
// answer that finds the claim settled first and drops the reconcile. A
// claim that goes unknown in a new episode while the old episode's call
// is in flight is not started afresh until that call ends, so that call
// still ends (and is counted) once.
func TestReconcileAnswerEndsTheCallOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, reconcilePolicies())
	id, _ := b.unknownClaim(t, "a", "evt_once")
	c := b.takeOne(t, id)
	res, err := b.ledger.ReconcileAnswer(b.ctx, "a", id, c.Token, claim.ReconcileStillUnknown, "", "", nil)
	require.NoError(t, err)
	require.True(t, res.Ended, "the answer applied ends the call")
	res, err = b.ledger.ReconcileAnswer(b.ctx, "a", id, c.Token, claim.ReconcileStillUnknown, "", "", nil)
	require.NoError(t, err)
	require.False(t, res.Ended, "a repeat ends nothing")
	_, err = b.ledger.ReconcileAnswer(b.ctx, "a", id, c.Token, claim.ReconcileDone, "", "", nil)
	require.Equal(t, apperr.InvalidState, apperr.CodeOf(err), "another verdict")

	// Call 2 in flight; an operator retries, a claim wins and fails
	// unknown again (a new episode) before the answer.
	b.dueNow(t, id)
	c = b.takeOne(t, id)
	_, err = b.ledger.Resolve(b.ctx, "a", id, claim.ResolveRetry, "", "checked")
	require.NoError(t, err)
	again, err := b.ledger.Claim(b.ctx, req("a", "evt_once"))
	require.NoError(t, err)
	require.Equal(t, claim.Won, again.Outcome)
	_, err = b.ledger.Fail(b.ctx, "a", id, again.Token, claim.UnknownOutcome, "timeout")
	require.NoError(t, err)
	d, err := b.ledger.ReconcileDiscover(b.ctx, 100)
	require.NoError(t, err)
	require.Zero(t, d.Created, "the new episode waits for the call in flight to end")
	require.Equal(t, claim.ReconcileCalling, b.reconcileOf(t, "a", id).State)

	res, err = b.ledger.ReconcileAnswer(b.ctx, "a", id, c.Token, claim.ReconcileNotDone, "", "", nil)
	require.Equal(t, apperr.InvalidState, apperr.CodeOf(err), "the old episode's answer is not applied")
	require.True(t, res.Ended, "the answer that drops the reconcile ends the call")
	require.Equal(t, claim.ReconcileDropped, res.Reconcile.State)
	require.Equal(t, "crm", res.Reconcile.Reconciler)
	res, err = b.ledger.ReconcileAnswer(b.ctx, "a", id, c.Token, claim.ReconcileNotDone, "", "", nil)
	require.Equal(t, apperr.ReconcileTokenStale, apperr.CodeOf(err))
	require.False(t, res.Ended, "the call had ended")

	d, err = b.ledger.ReconcileDiscover(b.ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 1, d.Created, "then the new episode starts")
	st := b.reconcileOf(t, "a", id)
	require.Equal(t, claim.ReconcileWaiting, st.State)
	require.Equal(t, 2, st.EpisodeAttempt)
	require.Zero(t, st.Calls)
}

// The first call of an episode is due the reconciler's Delay after the
// claim went unknown (its updated_at when discovered), so a holder that
// may still be mid-effect is not judged at once; a claim that went
// unknown longer ago than the delay is called at once.
func TestReconcileFirstCallAfterDelay(t *testing.T) {
	t.Parallel()
	ps := reconcilePolicies()
	ps.Reconcilers["crm"] = claim.ReconcilerPolicy{MaxCalls: 3, Delay: time.Minute}
	b := setup(t, ps)
	id, _ := b.unknownClaim(t, "a", "evt_delay")
	var wentUnknown time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT updated_at FROM claims WHERE id = $1`, id).Scan(&wentUnknown))
	d, err := b.ledger.ReconcileDiscover(b.ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 1, d.Created)
	st := b.reconcileOf(t, "a", id)
	require.Equal(t, claim.ReconcileWaiting, st.State)
	require.True(t, st.NextCallAt.Equal(wentUnknown.Add(time.Minute)), "%v, went unknown %v", st.NextCallAt, wentUnknown)
	b.noCall(t, id)
	b.dueNow(t, id)
	require.Equal(t, 1, b.takeOne(t, id).Call)

	// Unknown for longer than the delay before discovery: due at once.
	old, _ := b.unknownClaim(t, "a", "evt_old")
	_, err = b.pool.Exec(b.ctx, `UPDATE claims SET updated_at = updated_at - interval '2 minutes' WHERE id = $1`, old)
	require.NoError(t, err)
	require.Equal(t, 1, b.takeOne(t, old).Call)

	p := claim.ReconcilerPolicy{Delay: -time.Second}.WithDefaults()
	require.ErrorContains(t, p.Validate(), "delay")
	require.Zero(t, claim.ReconcilerPolicy{}.WithDefaults().Delay, "not defaulted: 0 is no delay")
}
