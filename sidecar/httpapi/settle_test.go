package httpapi_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// deliveryOutcomes returns the delivery log of a record, oldest first.
func (b *bundle) deliveryOutcomes(t *testing.T, key, id string) []string {
	t.Helper()
	rec := b.ok(t, call{method: "GET", path: "/v1/claims/" + id, key: key})
	var out []string
	for _, d := range rec.Deliveries {
		out = append(out, d.Outcome)
	}
	return out
}

func TestCompleteBatchDecidesEachItemInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, reclaimSources("stripe"))
	w1 := b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_c1"})
	w2 := b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_c2"})
	// Lease lost: the lease ran out and another delivery won the claim.
	old := b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_c3"})
	b.expireLease(t, old.ClaimID)
	newer := b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_c3"})
	require.Equal(t, 2, newer.Attempt)
	other := b.won(t, keyB, map[string]any{"source": "stripe", "event_id": "evt_c4"})

	batch := map[string]any{"claims": []any{
		map[string]any{"claim_id": w1.ClaimID, "claim_token": w1.ClaimToken, "result_ref": "inv_1"},
		map[string]any{"claim_id": old.ClaimID, "claim_token": old.ClaimToken, "result_ref": "late"},
		map[string]any{"claim_id": w2.ClaimID, "claim_token": w2.ClaimToken},
		map[string]any{"claim_id": other.ClaimID, "claim_token": other.ClaimToken},
		map[string]any{"claim_id": w2.ClaimID, "claim_token": "not-a-token"},
		map[string]any{"claim_id": w2.ClaimID, "claim_token": w2.ClaimToken, "colour": "red"},
		map[string]any{"claim_id": "nope", "claim_token": w2.ClaimToken},
		map[string]any{"claim_token": w2.ClaimToken},
	}}
	res := b.ok(t, call{method: "POST", path: "/v1/claims/complete/batch", key: keyA, body: batch, lax: true})
	require.Len(t, res.Results, 8)

	require.Nil(t, res.Results[0].Error)
	require.Equal(t, w1.ClaimID, res.Results[0].ClaimID)
	require.Equal(t, "completed", res.Results[0].State)
	require.Equal(t, "inv_1", res.Results[0].ResultRef)
	require.Equal(t, "lease_lost", res.Results[1].Error.Code, "a superseded token is refused for its item only")
	require.Equal(t, "completed", res.Results[2].State)
	require.Equal(t, "not_found", res.Results[3].Error.Code, "another tenant's claim is not found")
	require.Equal(t, "invalid", res.Results[4].Error.Code)
	require.Equal(t, "claims[4].claim_token", res.Results[4].Error.Field)
	require.Equal(t, "malformed", res.Results[5].Error.Code)
	require.Equal(t, "claims[5].colour", res.Results[5].Error.Field)
	require.Equal(t, "not_found", res.Results[6].Error.Code)
	require.Equal(t, "invalid", res.Results[7].Error.Code)
	require.Equal(t, "claims[7].claim_id", res.Results[7].Error.Field)

	// The newer holder keeps its claim; tenant B's claim is untouched.
	require.Equal(t, "processing", b.ok(t, call{method: "GET", path: "/v1/claims/" + newer.ClaimID, key: keyA}).State)
	require.Equal(t, "processing", b.ok(t, call{method: "GET", path: "/v1/claims/" + other.ClaimID, key: keyB}).State)

	// The same batch again (a retry whose answer was lost): the same
	// answers, and nothing is completed or logged twice.
	again := b.ok(t, call{method: "POST", path: "/v1/claims/complete/batch", key: keyA, body: batch, lax: true})
	require.Len(t, again.Results, 8)
	for i := range res.Results {
		if res.Results[i].Error != nil {
			require.NotNil(t, again.Results[i].Error, "item %d", i)
			require.Equal(t, res.Results[i].Error.Code, again.Results[i].Error.Code, "item %d", i)
			continue
		}
		require.Nil(t, again.Results[i].Error, "item %d: %+v", i, again.Results[i].Error)
		require.Equal(t, res.Results[i].ClaimID, again.Results[i].ClaimID)
		require.Equal(t, "completed", again.Results[i].State)
		require.Equal(t, res.Results[i].ResultRef, again.Results[i].ResultRef)
	}
	require.Equal(t, []string{"won", "completed"}, b.deliveryOutcomes(t, keyA, w1.ClaimID))
	require.Equal(t, []string{"won", "completed"}, b.deliveryOutcomes(t, keyA, w2.ClaimID))

	// A duplicate claim now gets the stored result reference.
	d := b.claim(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_c1"})
	require.Equal(t, "duplicate", d.Outcome)
	require.Equal(t, "inv_1", d.ResultRef)
}

func TestCompleteBatchSameClaimTwiceAndSingleRouteAgree(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_twice"})
	item := map[string]any{"claim_id": w.ClaimID, "claim_token": w.ClaimToken, "result_ref": "r1"}
	res := b.ok(t, call{method: "POST", path: "/v1/claims/complete/batch", key: keyA,
		body: map[string]any{"claims": []any{item, item}}})
	require.Equal(t, "completed", res.Results[0].State)
	require.Equal(t, "completed", res.Results[1].State, "the second item is a repeat of the first")
	// The single route sees the batch's completion as its own repeat.
	single := b.ok(t, call{method: "POST", path: "/v1/claims/" + w.ClaimID + "/complete", key: keyA,
		body: map[string]any{"claim_token": w.ClaimToken, "result_ref": "r1"}})
	require.Equal(t, "completed", single.State)
	require.Equal(t, []string{"won", "completed"}, b.deliveryOutcomes(t, keyA, w.ClaimID))

	// A batch completes a record its single route completed, and an
	// unknown record (lease expired under review) with the current token,
	// as the single route does.
	s := b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_single"})
	b.ok(t, call{method: "POST", path: "/v1/claims/" + s.ClaimID + "/complete", key: keyA,
		body: map[string]any{"claim_token": s.ClaimToken}})
	u := b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_unknown"})
	b.ok(t, call{method: "POST", path: "/v1/claims/" + u.ClaimID + "/fail", key: keyA,
		body: map[string]any{"claim_token": u.ClaimToken, "error": "timeout", "retry": "unknown"}})
	res = b.ok(t, call{method: "POST", path: "/v1/claims/complete/batch", key: keyA, body: map[string]any{"claims": []any{
		map[string]any{"claim_id": s.ClaimID, "claim_token": s.ClaimToken},
		map[string]any{"claim_id": u.ClaimID, "claim_token": u.ClaimToken, "result_ref": "found"},
	}}})
	require.Equal(t, "completed", res.Results[0].State)
	require.Equal(t, "completed", res.Results[1].State)
	require.Equal(t, "found", res.Results[1].ResultRef)
}

func TestFailBatchDecidesEachItemInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *options) {
		o.policies = claim.Policies{Default: claim.Policy{MaxAttempts: 3}}
	})
	r := b.won(t, keyA, map[string]any{"source": "mail", "event_id": "evt_f1"})
	p := b.won(t, keyA, map[string]any{"source": "mail", "event_id": "evt_f2"})
	u := b.won(t, keyA, map[string]any{"source": "mail", "event_id": "evt_f3"})
	done := b.won(t, keyA, map[string]any{"source": "mail", "event_id": "evt_f4"})
	b.ok(t, call{method: "POST", path: "/v1/claims/" + done.ClaimID + "/complete", key: keyA,
		body: map[string]any{"claim_token": done.ClaimToken}})

	batch := map[string]any{"claims": []any{
		map[string]any{"claim_id": r.ClaimID, "claim_token": r.ClaimToken, "error": "smtp 451", "retry": "retryable"},
		map[string]any{"claim_id": p.ClaimID, "claim_token": p.ClaimToken, "error": "422 bad address", "retry": "permanent"},
		map[string]any{"claim_id": u.ClaimID, "claim_token": u.ClaimToken, "error": "timeout", "retry": "unknown"},
		map[string]any{"claim_id": done.ClaimID, "claim_token": done.ClaimToken, "error": "late", "retry": "retryable"},
		map[string]any{"claim_id": r.ClaimID, "claim_token": r.ClaimToken, "error": "x", "retry": "maybe"},
		map[string]any{"claim_id": r.ClaimID, "claim_token": r.ClaimToken, "retry": "retryable"},
	}}
	res := b.ok(t, call{method: "POST", path: "/v1/claims/fail/batch", key: keyA, body: batch, lax: true})
	require.Len(t, res.Results, 6)
	require.Equal(t, "retryable_failed", res.Results[0].State)
	require.Equal(t, "smtp 451", res.Results[0].LastError)
	require.Equal(t, "dead_lettered", res.Results[1].State)
	require.Equal(t, "unknown", res.Results[2].State)
	require.Equal(t, "lease_lost", res.Results[3].Error.Code, "a completed claim cannot be failed")
	require.Equal(t, "claims[4].retry", res.Results[4].Error.Field)
	require.Equal(t, "claims[5].error", res.Results[5].Error.Field)

	// Again: the same records, logged once.
	again := b.ok(t, call{method: "POST", path: "/v1/claims/fail/batch", key: keyA, body: batch, lax: true})
	for i, want := range []string{"retryable_failed", "dead_lettered", "unknown"} {
		require.Nil(t, again.Results[i].Error, "item %d", i)
		require.Equal(t, want, again.Results[i].State, "item %d", i)
	}
	require.Equal(t, "lease_lost", again.Results[3].Error.Code)
	require.Equal(t, []string{"won", "failed_retryable"}, b.deliveryOutcomes(t, keyA, r.ClaimID))
	require.Equal(t, []string{"won", "failed_permanent"}, b.deliveryOutcomes(t, keyA, p.ClaimID))

	// The same token with another error is not a repeat: the report it
	// would replace is already stored.
	other := b.ok(t, call{method: "POST", path: "/v1/claims/fail/batch", key: keyA, body: map[string]any{"claims": []any{
		map[string]any{"claim_id": r.ClaimID, "claim_token": r.ClaimToken, "error": "something else", "retry": "retryable"},
	}}})
	require.Equal(t, "lease_lost", other.Results[0].Error.Code)
}

func TestSettleBatchRequestErrors(t *testing.T) {
	t.Parallel()
	b := setup(t) // maxBatch 8
	w := b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_e"})
	item := fmt.Sprintf(`{"claim_id":%q,"claim_token":%q}`, w.ClaimID, w.ClaimToken)
	nine := "[" + item
	for i := 1; i < 9; i++ {
		nine += "," + item
	}
	nine += "]"
	for _, path := range []string{"/v1/claims/complete/batch", "/v1/claims/fail/batch"} {
		for _, tc := range []struct {
			body        string
			status      int
			code, field string
		}{
			{`{"claims":[]}`, 422, "invalid", "claims"},
			{`{}`, 422, "invalid", "claims"},
			{`{"claims":{}}`, 400, "malformed", "claims"},
			{`{"claims":` + nine + `}`, 422, "invalid", "claims"},
			{`{"claims":[` + item + `],"extra":1}`, 400, "malformed", "extra"},
			{`[` + item + `]`, 400, "malformed", ""},
		} {
			b.fails(t, call{method: "POST", path: path, key: keyA, body: tc.body}, tc.status, tc.code, tc.field)
		}
		b.fails(t, call{method: "POST", path: path, body: `{"claims":[` + item + `]}`}, http.StatusUnauthorized, "unauthorized", "")
	}
	require.Equal(t, "processing", b.ok(t, call{method: "GET", path: "/v1/claims/" + w.ClaimID, key: keyA}).State)
}
