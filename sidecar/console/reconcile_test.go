package console_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// The record page shows a claim's reconcile: its reconciler, calls n of
// max, the next call, the last error and verdict, and "gave up — resolve
// by hand" once the reconciler was called max_calls times without an
// answer that settles it.
func TestRecordPageShowsTheReconcile(t *testing.T) {
	t.Parallel()
	e := setup(t, options{sources: `
reconcilers:
  crm: {url: "http://n8n.invalid/webhook/reconcile", max_calls: 2, delay_seconds: 0}
sources:
  orders: {reconciler: crm}
`})
	won := e.claim(t, tenantA, "orders", "evt_rc")
	_, err := e.ledger.Fail(e.ctx, tenantA, won.ID, won.Token, claim.UnknownOutcome, "socket hang up")
	require.NoError(t, err)
	b := e.browser(t)
	b.signIn(keyA)
	r := b.get("/ui/claims/" + won.ID)
	require.Equal(t, http.StatusOK, r.status, e.logs.String())
	require.NotContains(t, r.body, `data-testid="reconcile"`, "no reconcile before discovery")

	take := func() claim.ReconcileCall {
		t.Helper()
		_, err := e.ledger.ReconcileDiscover(e.ctx, 10)
		require.NoError(t, err)
		calls, err := e.ledger.ReconcileTake(e.ctx, 10)
		require.NoError(t, err)
		require.Len(t, calls, 1)
		return calls[0]
	}
	c := take()
	r = b.get("/ui/claims/" + won.ID)
	require.Equal(t, []string{"crm"}, texts(r.body, "reconcile-reconciler"))
	require.Equal(t, []string{"calling"}, texts(r.body, "reconcile-state"))
	require.Equal(t, []string{"1 of 2"}, texts(r.body, "reconcile-calls"))
	require.NotContains(t, r.body, c.Token, "the call's token is never shown")

	_, err = e.ledger.ReconcileFail(e.ctx, won.ID, c.Token, claim.ReconcileErrStatus5xx)
	require.NoError(t, err)
	r = b.get("/ui/claims/" + won.ID)
	require.Equal(t, []string{"waiting"}, texts(r.body, "reconcile-state"))
	require.Equal(t, []string{"status_5xx"}, texts(r.body, "reconcile-last_error"))
	require.NotEqual(t, []string{"—"}, texts(r.body, "reconcile-next_call_at"))
	require.Empty(t, texts(r.body, "reconcile-gave-up"))

	_, err = e.pool.Exec(e.ctx, `UPDATE reconciles SET next_call_at = now() WHERE claim_id = $1`, won.ID)
	require.NoError(t, err)
	c = take()
	_, err = e.ledger.ReconcileAnswer(e.ctx, tenantA, won.ID, c.Token, claim.ReconcileStillUnknown, "", "CRM is syncing", nil)
	require.NoError(t, err)
	r = b.get("/ui/claims/" + won.ID)
	require.Equal(t, []string{"gave_up"}, texts(r.body, "reconcile-state"))
	require.Equal(t, []string{"2 of 2"}, texts(r.body, "reconcile-calls"))
	require.Equal(t, []string{"still_unknown (CRM is syncing)"}, texts(r.body, "reconcile-verdict"))
	require.Len(t, texts(r.body, "reconcile-gave-up"), 1)
	require.Contains(t, r.body, `id="action-resolve"`, "resolve by hand")
	require.Contains(t, texts(r.body, "delivery-outcome"), claim.DeliveryReconcileGaveUp)

	// Another tenant sees neither the record nor its reconcile.
	other := e.browser(t)
	other.signIn(keyB)
	require.Equal(t, http.StatusNotFound, other.get("/ui/claims/"+won.ID).status)
}
