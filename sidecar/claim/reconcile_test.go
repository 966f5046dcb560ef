package claim_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// reconcilePolicies configure reconciler crm (3 calls) as the default
// reconciler of source stripe.
func reconcilePolicies() claim.Policies {
	return claim.Policies{
		BySource:    map[string]claim.Policy{"stripe": {Reconciler: "crm"}},
		Reconcilers: map[string]claim.ReconcilerPolicy{"crm": {MaxCalls: 3}},
	}
}

// unknownClaim wins a claim of event and fails it unknown; it returns
// the claim's id and token.
func (b *bundle) unknownClaim(t *testing.T, tenant, event string) (string, string) {
	t.Helper()
	r, err := b.ledger.Claim(b.ctx, req(tenant, event))
	require.NoError(t, err)
	require.Equal(t, claim.Won, r.Outcome)
	_, err = b.ledger.Fail(b.ctx, tenant, r.ID, r.Token, claim.UnknownOutcome, "timeout")
	require.NoError(t, err)
	return r.ID, r.Token
}

// takeOne discovers and takes calls, and returns the one of claim id.
func (b *bundle) takeOne(t *testing.T, id string) claim.ReconcileCall {
	t.Helper()
	_, err := b.ledger.ReconcileDiscover(b.ctx, 100)
	require.NoError(t, err)
	calls, err := b.ledger.ReconcileTake(b.ctx, 100)
	require.NoError(t, err)
	for _, c := range calls {
		if c.ClaimID == id {
			return c
		}
	}
	t.Fatalf("no call taken for claim %s", id)
	return claim.ReconcileCall{}
}

func TestReconcileDoneCompletesTheClaim(t *testing.T) {
	t.Parallel()
	b := setup(t, reconcilePolicies())
	id, _ := b.unknownClaim(t, "a", "evt_done")
	c := b.takeOne(t, id)
	require.Equal(t, "crm", c.Reconciler)
	require.Equal(t, 1, c.Call)
	require.Equal(t, 3, c.MaxCalls)
	require.Equal(t, "stripe", c.Source)
	require.NotEmpty(t, c.IdempotencyKey)
	require.False(t, c.Ingested)
	res, err := b.ledger.ReconcileAnswer(b.ctx, "a", id, c.Token, claim.ReconcileDone, "inv_9", "found it", nil)
	require.NoError(t, err)
	require.Equal(t, claim.StateCompleted, res.Record.State)
	require.Equal(t, "inv_9", res.Record.ResultRef)
	require.Equal(t, claim.ReconcileAnswered, res.Reconcile.State)
	got, err := b.ledger.Get(b.ctx, "a", id)
	require.NoError(t, err)
	last := got.Deliveries[len(got.Deliveries)-1]
	require.Equal(t, claim.DeliveryReconciledDone, last.Outcome)
	require.Equal(t, "reconciler:crm", last.Actor)
	require.Contains(t, last.Detail, "reconciler crm")
	require.Contains(t, last.Detail, "call 1 of 3")

	_, err = b.ledger.ReconcileAnswer(b.ctx, "a", id, c.Token, claim.ReconcileNotDone, "", "", nil)
	require.Equal(t, apperr.InvalidState, apperr.CodeOf(err))
	_ = time.Second
}
