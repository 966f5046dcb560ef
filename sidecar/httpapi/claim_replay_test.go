package httpapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// Case B19: a claim committed, its answer was lost, and the same request
// (same request_id) is sent again. The caller that won gets its claim back;
// anyone else is decided as before.

// replayPolicies: "payments" moves an expired lease to unknown (review),
// "orders" lets the next claim win (reclaim).
func replayPolicies(o *options) {
	o.policies = claim.Policies{BySource: map[string]claim.Policy{
		"payments": {LeasePolicy: claim.Review},
		"orders":   {LeasePolicy: claim.Reclaim},
	}}
}

// leaseOf reads what a replay must leave alone: attempt, token and lease end.
func (b *bundle) leaseOf(t *testing.T, id string) (attempt int, token string, until time.Time) {
	t.Helper()
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT attempt, claim_token::text, lease_until FROM claims WHERE id = $1`, id).
		Scan(&attempt, &token, &until))
	return attempt, token, until
}

// trail is the delivery log of a record: "outcome detail" per entry.
func (b *bundle) trail(t *testing.T, key, id string) []string {
	t.Helper()
	rec := b.ok(t, call{method: "GET", path: "/v1/claims/" + id, key: key})
	out := make([]string, 0, len(rec.Deliveries))
	for _, d := range rec.Deliveries {
		out = append(out, strings.TrimSpace(d.Outcome+" "+d.Detail))
	}
	return out
}

func TestClaimReplayOfTheSameRequestGetsItsClaimBack(t *testing.T) {
	t.Parallel()
	b := setup(t, replayPolicies)
	body := func(requestID string) map[string]any {
		m := map[string]any{"source": "payments", "event_id": "pi_1", "execution_id": "4711", "lease_seconds": 60,
			"payload": map[string]any{"amount": 4200, "currency": "eur"}}
		if requestID != "" {
			m["request_id"] = requestID
		}
		return m
	}
	const r1 = "4711:Claim payment:0:0"

	w := b.won(t, keyA, body(r1))
	require.Equal(t, 1, w.Attempt)
	attempt, token, until := b.leaseOf(t, w.ClaimID)
	require.Equal(t, w.ClaimToken, token)

	// The answer was lost; the same request again gets the same claim.
	again := b.won(t, keyA, body(r1))
	require.Equal(t, w.ClaimID, again.ClaimID)
	require.Equal(t, w.ClaimToken, again.ClaimToken, "the same token, not a new one")
	require.Equal(t, 1, again.Attempt, "the attempt is not counted again")
	require.Equal(t, "processing", again.State)
	a2, tok2, until2 := b.leaseOf(t, w.ClaimID)
	require.Equal(t, attempt, a2)
	require.Equal(t, token, tok2)
	require.True(t, until.Equal(until2), "the lease is neither shortened nor moved: %s, then %s", until, until2)

	// Another request (another item, another execution) or none: in progress.
	other := b.claim(t, keyA, body("4712:Claim payment:0:0"))
	require.Equal(t, "in_progress", other.Outcome)
	require.Empty(t, other.ClaimToken)
	require.NotNil(t, other.RetryAfterSeconds)
	none := b.claim(t, keyA, body(""))
	require.Equal(t, "in_progress", none.Outcome)
	require.Empty(t, none.ClaimToken)

	// After another request was answered in_progress, the holder's retry
	// is still its own claim.
	third := b.won(t, keyA, body(r1))
	require.Equal(t, w.ClaimToken, third.ClaimToken)
	require.Equal(t, 1, third.Attempt)

	// Another tenant's request with the same id is its own claim.
	theirs := b.won(t, keyB, body(r1))
	require.NotEqual(t, w.ClaimID, theirs.ClaimID)
	require.NotEqual(t, w.ClaimToken, theirs.ClaimToken)

	// The token works: Complete, then the same request is a duplicate.
	done := b.ok(t, call{method: "POST", path: "/v1/claims/" + w.ClaimID + "/complete", key: keyA,
		body: map[string]any{"claim_token": again.ClaimToken, "result_ref": "ch_1"}})
	require.Equal(t, "completed", done.State)
	dup := b.claim(t, keyA, body(r1))
	require.Equal(t, "duplicate", dup.Outcome)
	require.Equal(t, "ch_1", dup.ResultRef)
	require.Empty(t, dup.ClaimToken)

	require.Equal(t, []string{
		"won request_id=" + r1,
		"won_replayed request_id=" + r1,
		"in_progress request_id=4712:Claim payment:0:0",
		"in_progress",
		"won_replayed request_id=" + r1,
		"completed",
		"duplicate request_id=" + r1,
	}, b.trail(t, keyA, w.ClaimID))
}

func TestClaimReplayAfterTheLeaseIsDecidedLikeAnyClaim(t *testing.T) {
	t.Parallel()
	b := setup(t, replayPolicies)

	// review: the lease ran out with no answer, so the effect may have run.
	review := map[string]any{"source": "payments", "event_id": "pi_2", "request_id": "e1:Claim:0:0", "lease_seconds": 60}
	w := b.won(t, keyA, review)
	b.expireLease(t, w.ClaimID)
	u := b.claim(t, keyA, review)
	require.Equal(t, "unknown", u.Outcome, "not won: the lease is over")
	require.Empty(t, u.ClaimToken)
	require.Equal(t, "unknown", u.State)
	require.Equal(t, "unknown", b.claim(t, keyA, review).Outcome)

	// reclaim: the same request after the lease wins a new attempt, with a
	// new token; the old token is lost.
	reclaim := map[string]any{"source": "orders", "event_id": "ord_2", "request_id": "e1:Claim:0:0", "lease_seconds": 60}
	first := b.won(t, keyA, reclaim)
	b.expireLease(t, first.ClaimID)
	second := b.won(t, keyA, reclaim)
	require.Equal(t, 2, second.Attempt)
	require.NotEqual(t, first.ClaimToken, second.ClaimToken)
	b.fails(t, call{method: "POST", path: "/v1/claims/" + first.ClaimID + "/complete", key: keyA,
		body: map[string]any{"claim_token": first.ClaimToken}}, http.StatusConflict, "lease_lost", "")
	// …and replays the new claim from then on.
	third := b.won(t, keyA, reclaim)
	require.Equal(t, second.ClaimToken, third.ClaimToken)
	require.Equal(t, 2, third.Attempt)

	// A retryable failure ends the claim: the same request, once due, is a
	// new attempt with a new token.
	b.ok(t, call{method: "POST", path: "/v1/claims/" + first.ClaimID + "/fail", key: keyA,
		body: map[string]any{"claim_token": second.ClaimToken, "error": "smtp 451", "retry": "retryable"}})
	require.Equal(t, "retry_later", b.claim(t, keyA, reclaim).Outcome)
	b.dueNow(t, first.ClaimID)
	fourth := b.won(t, keyA, reclaim)
	require.Equal(t, 3, fourth.Attempt)
	require.NotEqual(t, second.ClaimToken, fourth.ClaimToken)

	// A conflicting payload is a conflict, whoever sends it.
	c := map[string]any{"source": "orders", "event_id": "ord_3", "request_id": "e1:Claim:0:0", "payload": map[string]any{"n": 1}}
	b.won(t, keyA, c)
	c["payload"] = map[string]any{"n": 2}
	require.Equal(t, "conflict", b.claim(t, keyA, c).Outcome)
}

func TestClaimReplayInABatchKeepsItemsDistinct(t *testing.T) {
	t.Parallel()
	b := setup(t, replayPolicies)
	batch := map[string]any{"claims": []any{
		map[string]any{"source": "orders", "event_id": "z", "request_id": "e9:Claim:0:0"},
		map[string]any{"source": "orders", "event_id": "a", "request_id": "e9:Claim:0:1"},
		map[string]any{"source": "orders", "event_id": "z", "request_id": "e9:Claim:0:2"},
	}}
	outcomes := func(res answer) []string {
		out := make([]string, len(res.Results))
		for i, r := range res.Results {
			out[i] = r.Outcome
		}
		return out
	}
	first := b.ok(t, call{method: "POST", path: "/v1/claims/batch", key: keyA, body: batch})
	require.Equal(t, []string{"won", "won", "in_progress"}, outcomes(first), "B04: one key twice in one execution")
	require.NotEmpty(t, first.Results[0].ClaimToken)
	require.Empty(t, first.Results[2].ClaimToken)

	// The whole batch again (n8n's Retry On Fail of the node): both claims
	// come back with their tokens; the second copy of z is still not its
	// holder.
	again := b.ok(t, call{method: "POST", path: "/v1/claims/batch", key: keyA, body: batch})
	require.Equal(t, []string{"won", "won", "in_progress"}, outcomes(again))
	for i := range 2 {
		require.Equal(t, first.Results[i].ClaimID, again.Results[i].ClaimID)
		require.Equal(t, first.Results[i].ClaimToken, again.Results[i].ClaimToken, "item %d", i)
		require.Equal(t, 1, again.Results[i].Attempt)
	}
	require.Empty(t, again.Results[2].ClaimToken)
	require.Equal(t, []string{"won request_id=e9:Claim:0:0", "in_progress request_id=e9:Claim:0:2",
		"won_replayed request_id=e9:Claim:0:0", "in_progress request_id=e9:Claim:0:2"},
		b.trail(t, keyA, first.Results[0].ClaimID))
}

func TestClaimReplayOfConcurrentCopiesIsOneClaim(t *testing.T) {
	t.Parallel()
	b := setup(t, replayPolicies)
	c := call{method: "POST", path: "/v1/claims", key: keyA, body: map[string]any{"source": "payments",
		"event_id": "pi_storm", "request_id": "e7:Claim:0:0", "lease_seconds": 60}}
	raw := encode(t, c.body)

	// 20 copies of one request at once, over real connections (the
	// handler, the pool and PostgreSQL all concurrent); checked afterwards.
	const n = 20
	replies := make([]reply, n)
	errs := make([]error, n)
	var start, wg sync.WaitGroup
	start.Add(1)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start.Wait()
			req, err := http.NewRequestWithContext(b.ctx, c.method, "http://"+b.addr+c.path, bytes.NewReader(raw))
			if err != nil {
				errs[i] = err
				return
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+c.key)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			defer res.Body.Close()
			body, err := io.ReadAll(res.Body)
			replies[i], errs[i] = reply{status: res.StatusCode, header: res.Header, body: body}, err
		}()
	}
	start.Done()
	wg.Wait()

	tokens := map[string]int{}
	var id string
	for i, r := range replies {
		require.NoError(t, errs[i])
		b.conform(t, c, raw, r)
		require.Equal(t, http.StatusOK, r.status, "%s", r)
		var a answer
		require.NoError(t, json.Unmarshal(r.body, &a))
		require.Equal(t, "won", a.Outcome, "copy %d: %s", i, r)
		require.Equal(t, 1, a.Attempt)
		tokens[a.ClaimToken]++
		id = a.ClaimID
	}
	require.Len(t, tokens, 1, "every copy gets the one claim token")
	attempt, token, _ := b.leaseOf(t, id)
	require.Equal(t, 1, attempt, "exactly one attempt")
	require.Equal(t, n, tokens[token])
	log := b.trail(t, keyA, id)
	require.Len(t, log, n)
	require.Equal(t, "won request_id=e7:Claim:0:0", log[0])
	for _, e := range log[1:] {
		require.Equal(t, "won_replayed request_id=e7:Claim:0:0", e)
	}
}

func TestClaimRequestIDIsValidated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		name, body  string
		status      int
		code, field string
	}{
		{"too long", `{"source":"stripe","event_id":"e1","request_id":"` + strings.Repeat("r", 201) + `"}`, 422, "invalid", "request_id"},
		{"NUL", `{"source":"stripe","event_id":"e1","request_id":"a\u0000b"}`, 422, "invalid", "request_id"},
		{"invalid UTF-8", "{\"source\":\"stripe\",\"event_id\":\"e1\",\"request_id\":\"a\xffb\"}", 400, "malformed", "request_id"},
		{"wrong type", `{"source":"stripe","event_id":"e1","request_id":7}`, 400, "malformed", "request_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b.fails(t, call{method: "POST", path: "/v1/claims", key: keyA, body: tc.body}, tc.status, tc.code, tc.field)
		})
	}
	res := b.ok(t, call{method: "POST", path: "/v1/claims/batch", key: keyA, lax: true, body: `{"claims":[
		{"source":"stripe","event_id":"e1","request_id":"` + strings.Repeat("r", 201) + `"},
		{"source":"stripe","event_id":"e2","request_id":"a\u0000b"},
		{"source":"stripe","event_id":"e3","request_id":"` + strings.Repeat("r", 200) + `"}
	]}`})
	require.Equal(t, "claims[0].request_id", res.Results[0].Error.Field)
	require.Equal(t, "claims[1].request_id", res.Results[1].Error.Field)
	require.Equal(t, "won", res.Results[2].Outcome, "200 bytes are allowed")
	require.Equal(t, 1, b.count(t, "claims"))
}

// The node retries Complete and Fail as it retries Claim: a Fail whose
// answer was lost, sent again, is answered as it was, not as lease lost.
func TestFailSentAgainIsIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t, replayPolicies)
	w := b.won(t, keyA, map[string]any{"source": "orders", "event_id": "ord_f", "request_id": "e3:Claim:0:0"})
	fail := func(token, msg, kind string) call {
		return call{method: "POST", path: "/v1/claims/" + w.ClaimID + "/fail", key: keyA,
			body: map[string]any{"claim_token": token, "error": msg, "retry": kind}}
	}
	first := b.ok(t, fail(w.ClaimToken, "smtp 451", "retryable"))
	require.Equal(t, "retryable_failed", first.State)
	again := b.ok(t, fail(w.ClaimToken, "smtp 451", "retryable"))
	require.Equal(t, "retryable_failed", again.State)
	require.Equal(t, "smtp 451", again.LastError)
	// Another report is not the same Fail: the claim is over.
	b.fails(t, fail(w.ClaimToken, "smtp 550", "retryable"), http.StatusConflict, "lease_lost", "")
	b.fails(t, fail(w.ClaimToken, "smtp 451", "permanent"), http.StatusConflict, "lease_lost", "")
	b.fails(t, fail(w.ClaimToken, "smtp 451", "unknown"), http.StatusConflict, "lease_lost", "")
	require.Equal(t, []string{"won request_id=e3:Claim:0:0", "failed_retryable smtp 451"}, b.trail(t, keyA, w.ClaimID),
		"the repeated Fail changed and logged nothing")

	// Once a new claim won, the old token's Fail is lease lost.
	b.dueNow(t, w.ClaimID)
	next := b.won(t, keyA, map[string]any{"source": "orders", "event_id": "ord_f"})
	b.fails(t, fail(w.ClaimToken, "smtp 451", "retryable"), http.StatusConflict, "lease_lost", "")
	b.ok(t, fail(next.ClaimToken, "bounced", "permanent"))
	dl := b.ok(t, fail(next.ClaimToken, "bounced", "permanent"))
	require.Equal(t, "dead_lettered", dl.State)
}
