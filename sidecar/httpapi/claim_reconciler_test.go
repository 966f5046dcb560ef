package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// A claim may name its reconciler (POST /v1/claims and the batch): a
// configured name is stored with the record the claim wins; any other is
// 422 naming reconciler (claims[i].reconciler in a batch), and the answer
// does not repeat it.
func TestClaimReconcilerIsAConfiguredName(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *options) {
		o.policies = claim.Policies{Reconcilers: map[string]claim.ReconcilerPolicy{"crm": {}}}
	})
	const evil = "https://evil.example/hook"
	a := b.fails(t, call{method: "POST", path: "/v1/claims", key: keyA,
		body: map[string]any{"source": "stripe", "event_id": "e1", "reconciler": evil}},
		http.StatusUnprocessableEntity, "invalid", "reconciler")
	require.NotContains(t, a.Error.Message, "evil")
	b.fails(t, call{method: "POST", path: "/v1/claims", key: keyA,
		body: `{"source":"stripe","event_id":"e1","reconciler":7}`}, http.StatusBadRequest, "malformed", "reconciler")
	require.Equal(t, 0, b.count(t, "claims"))

	w := b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "e1", "reconciler": "crm"})
	res := b.ok(t, call{method: "POST", path: "/v1/claims/batch", key: keyA, lax: true, body: map[string]any{"claims": []any{
		map[string]any{"source": "stripe", "event_id": "e2", "reconciler": evil},
		map[string]any{"source": "stripe", "event_id": "e3", "reconciler": "crm"},
		map[string]any{"source": "stripe", "event_id": "e4", "reconciler": ""},
	}}})
	require.Equal(t, "claims[0].reconciler", res.Results[0].Error.Field)
	require.NotContains(t, res.Results[0].Error.Message, "evil")
	require.Equal(t, "won", res.Results[1].Outcome)
	require.Equal(t, "won", res.Results[2].Outcome)
	stored := map[string]string{}
	rows, err := b.pool.Query(b.ctx, `SELECT event_id, COALESCE(reconciler, '') FROM claims`)
	require.NoError(t, err)
	for rows.Next() {
		var id, r string
		require.NoError(t, rows.Scan(&id, &r))
		stored[id] = r
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]string{"e1": "crm", "e3": "crm", "e4": ""}, stored)
	require.NotEmpty(t, w.ClaimID)
}
