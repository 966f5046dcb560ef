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
