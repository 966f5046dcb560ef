package httpapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// TestIngestMollieClassicNudges shows, through the real handler on
// PostgreSQL, the pattern for Mollie's classic webhooks
// (https://docs.mollie.com/reference/webhooks), which POST the same
// unsigned form id=tr_… for every status change of a payment and again
// when unanswered:
//   - the source authenticates a nudge by the token in its webhook URL's
//     query (a wrong or missing token is the unauthenticated answer,
//     nothing stored) and never keys it on the id: two identical nudges
//     are two records, each forwarded to the workflow;
//   - the token reaches neither the forwarded request nor the log;
//   - the workflow fetches the payment and claims on id + status with the
//     node (POST /v1/claims with key_parts): the second nudge of one
//     transition is a duplicate there, a later transition (refunded) is
//     won again.
func TestIngestMollieClassicNudges(t *testing.T) {
	t.Parallel()
	const token = "mollie-classic-url-token-7f3a9c2e"
	target := newIngestTarget(t, nil)
	sources, err := json.Marshal(map[string]any{"sources": map[string]any{
		"mollie-classic": map[string]any{"tenant": ingestTenant, "provider": "mollie", "secrets": []string{token},
			"forward": map[string]any{"url": target.srv.URL + "/webhook/mollie"}},
	}})
	require.NoError(t, err)
	e := setupIngest(t, string(sources), ingestOptions{dispatch: true})

	nudge := verifytest.MollieNudge(token, "tr_d0b0E3EA3v")
	send := func(d verifytest.Delivery) ingestAnswer {
		req, err := http.NewRequest(http.MethodPost, e.base+"/ingest/mollie-classic?"+d.RawQuery, bytes.NewReader(d.Body))
		require.NoError(t, err)
		req.Header = d.Header.Clone()
		return e.do(t, req)
	}

	// Refused: no token, a wrong token. Nothing stored.
	before := e.counts(t, "mollie-classic")
	bare := nudge
	bare.RawQuery = ""
	require.Equal(t, http.StatusUnauthorized, send(bare).status)
	require.Equal(t, http.StatusUnauthorized, send(verifytest.MollieNudge("not-the-token", "tr_d0b0E3EA3v")).status)
	require.Equal(t, before, e.counts(t, "mollie-classic"))

	// Two identical nudges: two records, never a duplicate of each other.
	var claims []string
	for i := range 2 {
		a := send(nudge)
		require.Equal(t, http.StatusOK, a.status, "nudge %d: %s", i, a.body)
		rs, _ := a.receipts(t)
		require.Len(t, rs, 1)
		require.Equal(t, "accepted", rs[0].Status, "nudge %d is a new event", i)
		require.True(t, strings.HasPrefix(rs[0].EventID, "13:tr_d0b0E3EA3v|5:nudge|"), rs[0].EventID)
		claims = append(claims, rs[0].ClaimID)
	}
	require.NotEqual(t, claims[0], claims[1])
	require.Equal(t, ingestCounts{before.claims + 2, before.inbox + 2, before.jobs + 2, before.conflicts}, e.counts(t, "mollie-classic"))

	// Both reach the workflow, without the token.
	e.eventually(t, "both nudges forwarded", func() bool { return len(target.requests()) >= 2 })
	for _, r := range target.requests() {
		require.Equal(t, "id=tr_d0b0E3EA3v", string(r.body))
		for k, vs := range r.header {
			for _, v := range vs {
				require.NotContains(t, v, token, "forwarded header %s", k)
			}
		}
	}
	require.NotContains(t, e.logs.String(), token, "the token is not logged")

	// The workflow, for each nudge, fetches the payment (paid both times)
	// and claims the transition it found.
	claim := func(status string) map[string]any {
		body, err := json.Marshal(map[string]any{"source": "mollie-classic", "key_parts": []string{"tr_d0b0E3EA3v", status}})
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodPost, e.base+"/v1/claims", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+ingestAPIKey)
		req.Header.Set("Content-Type", "application/json")
		a := e.do(t, req)
		require.Less(t, a.status, 300, "claim %s: %s", status, a.body)
		var out map[string]any
		require.NoError(t, json.Unmarshal(a.body, &out))
		return out
	}
	complete := func(c map[string]any) {
		body, err := json.Marshal(map[string]any{"claim_token": c["claim_token"], "result_ref": "order-shipped"})
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodPost, e.base+"/v1/claims/"+c["claim_id"].(string)+"/complete", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+ingestAPIKey)
		req.Header.Set("Content-Type", "application/json")
		a := e.do(t, req)
		require.Less(t, a.status, 300, "complete: %s", a.body)
	}
	first := claim("paid")
	require.Equal(t, "won", first["outcome"])
	complete(first)
	require.Equal(t, "duplicate", claim("paid")["outcome"], "the second nudge of one transition runs nothing")
	require.Equal(t, "won", claim("refunded")["outcome"], "a later transition of the payment is its own event")
}
