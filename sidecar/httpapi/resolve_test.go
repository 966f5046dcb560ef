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

// Release (processing → unknown) through the API: the holder's token no
// longer fails or extends the record, its late Complete is kept, claims
// of the key answer unknown meanwhile, and the entry names the key by its
// prefix with the note. Only processing records are released; the note is
// required and bounded; another tenant's record is not found.
func TestReleaseThroughTheAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_release"})
	path := "/v1/claims/" + w.ClaimID

	b.fails(t, call{method: "POST", path: path + "/release", key: keyA, body: map[string]any{}}, 422, "invalid", "note")
	b.fails(t, call{method: "POST", path: path + "/release", key: keyA,
		body: map[string]any{"note": string(make([]byte, 4001))}}, 422, "invalid", "note")
	b.fails(t, call{method: "POST", path: path + "/release", key: keyB,
		body: map[string]any{"note": "not yours"}}, 404, "not_found", "")

	rec := b.ok(t, call{method: "POST", path: path + "/release", key: keyA, body: map[string]any{"note": "worker gone"}})
	require.Equal(t, "unknown", rec.State)
	b.fails(t, call{method: "POST", path: path + "/release", key: keyA,
		body: map[string]any{"note": "again"}}, 409, "invalid_state", "")
	b.fails(t, call{method: "POST", path: path + "/fail", key: keyA,
		body: map[string]any{"claim_token": w.ClaimToken, "error": "x", "retry": "retryable"}}, 409, "lease_lost", "")
	b.fails(t, call{method: "POST", path: path + "/extend", key: keyA,
		body: map[string]any{"claim_token": w.ClaimToken, "lease_seconds": 600}}, 409, "lease_lost", "")
	again := b.claim(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_release"})
	require.Equal(t, "unknown", again.Outcome)

	done := b.ok(t, call{method: "POST", path: path + "/complete", key: keyA,
		body: map[string]any{"claim_token": w.ClaimToken, "result_ref": "inv_late"}})
	require.Equal(t, "completed", done.State)
	require.Equal(t, "inv_late", done.ResultRef)

	got := b.ok(t, call{method: "GET", path: path, key: keyA})
	var released []string
	for _, d := range got.Deliveries {
		if d.Outcome == "released" {
			released = append(released, d.Detail)
			h := sha256.Sum256([]byte(keyA))
			require.Equal(t, "static:"+hex.EncodeToString(h[:4]), d.Actor)
		}
	}
	require.Equal(t, []string{"worker gone"}, released)
}
