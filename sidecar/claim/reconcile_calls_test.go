package claim_test

import (
	"testing"

	"github.com/stretchr/testify/require"

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

// A copy after a reconciler's verdict is explained reconciled, the note
// naming the verdict and the reconciler (not operator_replay "by
// operator reconciler:crm"); an operator's later act explains the next
// copy as operator_replay: the latest act decides.
func TestReconcileDuplicateCause(t *testing.T) {
	t.Parallel()
	b := setup(t, reconcilePolicies())
	copyOf := func(event string) claim.Delivery {
		t.Helper()
		dup, err := b.ledger.Claim(b.ctx, req("a", event))
		require.NoError(t, err)
		require.Equal(t, claim.Duplicate, dup.Outcome)
		require.Equal(t, claim.CauseReconciled, dup.Cause)
		return lastDelivery(t, b, "a", dup.ID)
	}

	// done: the claim completed by the reconciler, then a copy.
	id, _ := b.unknownClaim(t, "a", "evt_done")
	c := b.takeOne(t, id)
	_, err := b.ledger.ReconcileAnswer(b.ctx, "a", id, c.Token, claim.ReconcileDone, "inv_1", "", nil)
	require.NoError(t, err)
	d := copyOf("evt_done")
	require.Equal(t, claim.CauseReconciled, d.Cause)
	require.Equal(t, "after reconciled_done by reconciler crm", d.CauseNote)

	// not_done: a claim wins the record again and completes it, then a copy.
	id, _ = b.unknownClaim(t, "a", "evt_not_done")
	c = b.takeOne(t, id)
	_, err = b.ledger.ReconcileAnswer(b.ctx, "a", id, c.Token, claim.ReconcileNotDone, "", "", nil)
	require.NoError(t, err)
	won, err := b.ledger.Claim(b.ctx, req("a", "evt_not_done"))
	require.NoError(t, err)
	require.Equal(t, claim.Won, won.Outcome)
	_, err = b.ledger.Complete(b.ctx, "a", id, won.Token, "inv_2")
	require.NoError(t, err)
	d = copyOf("evt_not_done")
	require.Equal(t, "after reconciled_not_done by reconciler crm", d.CauseNote)

	// An operator acts after the reconciler: the next copy is the operator's.
	id, _ = b.unknownClaim(t, "a", "evt_operator")
	c = b.takeOne(t, id)
	_, err = b.ledger.ReconcileAnswer(b.ctx, "a", id, c.Token, claim.ReconcileNotDone, "", "", nil)
	require.NoError(t, err)
	won, err = b.ledger.Claim(b.ctx, req("a", "evt_operator"))
	require.NoError(t, err)
	require.Equal(t, claim.Won, won.Outcome)
	_, err = b.ledger.Fail(b.ctx, "a", id, won.Token, claim.UnknownOutcome, "timeout again")
	require.NoError(t, err)
	_, err = b.ledger.ResolveAs(b.ctx, "a", id, claim.ResolveCompleted, "inv_3", "done by hand", "ick_ops")
	require.NoError(t, err)
	dup, err := b.ledger.Claim(b.ctx, req("a", "evt_operator"))
	require.NoError(t, err)
	require.Equal(t, claim.Duplicate, dup.Outcome)
	require.Equal(t, claim.CauseOperatorReplay, dup.Cause)
	require.Contains(t, lastDelivery(t, b, "a", id).CauseNote, "by operator ick_ops")
}
