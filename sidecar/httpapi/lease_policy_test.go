package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// Safe by default: a claim of a source that sets no lease policy is stored
// under review, and after its lease expired no redelivery wins it again.
func TestDefaultLeasePolicyIsReviewOverHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := map[string]any{"source": "payments", "event_id": "pi_1", "lease_seconds": 60}
	w := b.won(t, keyA, body)
	require.Equal(t, "review", w.LeasePolicy)
	b.expireLease(t, w.ClaimID)
	for range 3 {
		u := b.claim(t, keyA, body)
		require.Equal(t, "unknown", u.Outcome, "never a second winner")
		require.Empty(t, u.ClaimToken)
		require.Equal(t, 1, u.Attempt)
	}
}

func TestClaimLeasePolicyOverHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t, reclaimSources("idem"))

	t.Run("valid values are stored when the claim wins", func(t *testing.T) {
		require.Equal(t, "reclaim", b.won(t, keyA, map[string]any{"source": "payments", "event_id": "v1",
			"lease_policy": "reclaim"}).LeasePolicy)
		require.Equal(t, "review", b.won(t, keyA, map[string]any{"source": "idem", "event_id": "v2",
			"lease_policy": "review"}).LeasePolicy)
		require.Equal(t, "reclaim", b.won(t, keyA, map[string]any{"source": "idem", "event_id": "v3"}).LeasePolicy,
			"absent: the source's")
		null := b.ok(t, call{method: "POST", path: "/v1/claims", key: keyA, lax: true,
			body: `{"source":"payments","event_id":"v4","lease_policy":null}`})
		require.Equal(t, "won", null.Outcome)
		require.Equal(t, "review", null.LeasePolicy, "null is absent, as for every optional member")
	})

	t.Run("win, then win again with another policy", func(t *testing.T) {
		body := map[string]any{"source": "payments", "event_id": "rw", "lease_policy": "reclaim", "lease_seconds": 60}
		first := b.won(t, keyA, body)
		require.Equal(t, "reclaim", first.LeasePolicy)
		// in_progress with another policy changes nothing.
		ip := b.claim(t, keyA, map[string]any{"source": "payments", "event_id": "rw", "lease_policy": "review"})
		require.Equal(t, "in_progress", ip.Outcome)
		require.Equal(t, "reclaim", ip.LeasePolicy)
		// Expired under reclaim: the next claim wins, and stores its own.
		b.expireLease(t, first.ClaimID)
		second := b.won(t, keyA, map[string]any{"source": "payments", "event_id": "rw", "lease_policy": "review"})
		require.Equal(t, 2, second.Attempt)
		require.Equal(t, "review", second.LeasePolicy)
		// Expired under review: unknown, whatever the claim asks for.
		b.expireLease(t, first.ClaimID)
		u := b.claim(t, keyA, body)
		require.Equal(t, "unknown", u.Outcome)
		require.Equal(t, "review", u.LeasePolicy)

		// A retry after a retryable fail stores the new winner's.
		f := b.won(t, keyA, map[string]any{"source": "idem", "event_id": "rf", "lease_policy": "review"})
		b.ok(t, call{method: "POST", path: "/v1/claims/" + f.ClaimID + "/fail", key: keyA,
			body: map[string]any{"claim_token": f.ClaimToken, "error": "503", "retry": "retryable"}})
		b.dueNow(t, f.ClaimID)
		again := b.won(t, keyA, map[string]any{"source": "idem", "event_id": "rf"})
		require.Equal(t, "reclaim", again.LeasePolicy, "absent: the source's")
		b.ok(t, call{method: "POST", path: "/v1/claims/" + f.ClaimID + "/complete", key: keyA,
			body: map[string]any{"claim_token": again.ClaimToken}})
		dup := b.claim(t, keyA, map[string]any{"source": "idem", "event_id": "rf", "lease_policy": "review"})
		require.Equal(t, "duplicate", dup.Outcome)
		require.Equal(t, "reclaim", dup.LeasePolicy, "a duplicate leaves the stored policy")
	})

	t.Run("any other value is refused naming lease_policy, nothing written", func(t *testing.T) {
		claims, deliveries := b.count(t, "claims"), b.count(t, "claim_deliveries")
		for _, c := range []struct {
			value  any
			status int
			code   string
		}{
			{"", http.StatusUnprocessableEntity, "invalid"},
			{"Reclaim", http.StatusUnprocessableEntity, "invalid"},
			{"REVIEW", http.StatusUnprocessableEntity, "invalid"},
			{"sometimes", http.StatusUnprocessableEntity, "invalid"},
			{1, http.StatusBadRequest, "malformed"},
			{true, http.StatusBadRequest, "malformed"},
			{[]string{"review"}, http.StatusBadRequest, "malformed"},
		} {
			b.fails(t, call{method: "POST", path: "/v1/claims", key: keyA,
				body: map[string]any{"source": "payments", "event_id": "bad", "lease_policy": c.value}}, c.status, c.code, "lease_policy")
		}
		// A case variant of the member name is malformed too.
		b.fails(t, call{method: "POST", path: "/v1/claims", key: keyA,
			body: `{"source":"payments","event_id":"bad","Lease_Policy":"review"}`}, http.StatusBadRequest, "malformed", "Lease_Policy")
		require.Equal(t, claims, b.count(t, "claims"))
		require.Equal(t, deliveries, b.count(t, "claim_deliveries"))
	})

	t.Run("batch: each entry its own; a bad entry fails alone", func(t *testing.T) {
		claims := b.count(t, "claims")
		res := b.ok(t, call{method: "POST", path: "/v1/claims/batch", key: keyA, lax: true, body: map[string]any{"claims": []any{
			map[string]any{"source": "payments", "event_id": "b1", "lease_policy": "reclaim"},
			map[string]any{"source": "payments", "event_id": "b2", "lease_policy": "Review"},
			map[string]any{"source": "payments", "event_id": "b3"},
			map[string]any{"source": "payments", "event_id": "b4", "lease_policy": ""},
			map[string]any{"source": "idem", "event_id": "b5", "lease_policy": "review"},
			map[string]any{"source": "payments", "event_id": "b6", "lease_policy": 7},
		}}})
		require.Len(t, res.Results, 6)
		require.Equal(t, "won", res.Results[0].Outcome)
		require.Equal(t, "reclaim", res.Results[0].LeasePolicy)
		require.Equal(t, "invalid", res.Results[1].Error.Code)
		require.Equal(t, "claims[1].lease_policy", res.Results[1].Error.Field)
		require.Equal(t, "review", res.Results[2].LeasePolicy)
		require.Equal(t, "invalid", res.Results[3].Error.Code)
		require.Equal(t, "claims[3].lease_policy", res.Results[3].Error.Field)
		require.Equal(t, "review", res.Results[4].LeasePolicy)
		require.Equal(t, "malformed", res.Results[5].Error.Code)
		require.Equal(t, "claims[5].lease_policy", res.Results[5].Error.Field)
		require.Equal(t, claims+3, b.count(t, "claims"), "only the valid entries are stored")
		b.fails(t, call{method: "GET", path: "/v1/claims?source=payments&event_id=b2", key: keyA}, http.StatusNotFound, "not_found", "")
	})
}
