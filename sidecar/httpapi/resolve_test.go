package httpapi_test

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"
)

// Resolve as failed (unknown → dead_lettered); the delivery-log entry
// names the key by its prefix, never the key.
func TestResolveFailedRecordsTheKeyPrefix(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_resolve_failed"})
	path := "/v1/claims/" + w.ClaimID
	b.ok(t, call{method: "POST", path: path + "/fail", key: keyA,
		body: map[string]any{"claim_token": w.ClaimToken, "error": "timeout", "retry": "unknown"}})
	rec := b.ok(t, call{method: "POST", path: path + "/resolve", key: keyA,
		body: map[string]any{"outcome": "failed", "note": "never sent"}})
	require.Equal(t, "dead_lettered", rec.State)
	b.fails(t, call{method: "POST", path: path + "/resolve", key: keyA,
		body: map[string]any{"outcome": "failed", "note": "again"}}, 409, "invalid_state", "")

	got := b.ok(t, call{method: "GET", path: path, key: keyA})
	last := got.Deliveries[len(got.Deliveries)-1]
	require.Equal(t, "resolved_failed", last.Outcome)
	require.Equal(t, "never sent", last.Detail)
	h := sha256.Sum256([]byte(keyA))
	require.Equal(t, "static:"+hex.EncodeToString(h[:4]), last.Actor)
	for _, d := range got.Deliveries[:len(got.Deliveries)-1] {
		require.Empty(t, d.Actor, d.Outcome)
	}
}
