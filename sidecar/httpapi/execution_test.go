package httpapi_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// failExecution posts POST /v1/claims/fail/execution and requires 200.
func (b *bundle) failExecution(t *testing.T, key string, body map[string]any) answer {
	t.Helper()
	a := b.ok(t, call{method: "POST", path: "/v1/claims/fail/execution", key: key, body: body})
	require.NotNil(t, a.Claims, "claims is always present, [] when none")
	return a
}

func claimIDs(as []answer) []string {
	out := make([]string, 0, len(as))
	for _, a := range as {
		out = append(out, a.ClaimID)
	}
	return out
}

func TestListByExecutionOverHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t, reclaimSources("idem"))
	list := func(query string) listReply {
		t.Helper()
		r := b.do(t, call{method: "GET", path: "/v1/claims/list?" + query, key: keyA})
		require.Equal(t, http.StatusOK, r.status, "%s", r)
		return decodeAs[listReply](t, r)
	}
	done := b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "l1", "execution_id": "4711"})
	b.ok(t, call{method: "POST", path: "/v1/claims/" + done.ClaimID + "/complete", key: keyA,
		body: map[string]any{"claim_token": done.ClaimToken, "result_ref": "ref"}})
	held := b.won(t, keyA, map[string]any{"source": "mail", "event_id": "l2", "execution_id": "4711"})
	moved := b.won(t, keyA, map[string]any{"source": "idem", "event_id": "l3", "execution_id": "4711", "lease_seconds": 60})
	b.expireLease(t, moved.ClaimID)
	b.won(t, keyA, map[string]any{"source": "idem", "event_id": "l3", "execution_id": "4712"})
	b.won(t, keyB, map[string]any{"source": "stripe", "event_id": "l1", "execution_id": "4711"})

	all := list("execution_id=4711")
	require.Equal(t, []string{done.ClaimID, held.ClaimID}, claimIDs(all.Claims),
		"any state; not the record 4712 won since; not tenant B's")
	require.Empty(t, all.NextCursor)
	require.Equal(t, "completed", all.Claims[0].State)
	require.Equal(t, []string{done.ClaimID}, claimIDs(list("execution_id=4711&state=completed").Claims))
	require.Equal(t, []string{held.ClaimID}, claimIDs(list("execution_id=4711&source=mail").Claims))
	require.Empty(t, list("execution_id=4711&state=stale").Claims)
	require.Equal(t, []string{moved.ClaimID}, claimIDs(list("execution_id=4712").Claims))
	page := list("execution_id=4711&limit=1")
	require.Equal(t, []string{done.ClaimID}, claimIDs(page.Claims))
	require.NotEmpty(t, page.NextCursor)
	page = list("execution_id=4711&limit=1&cursor=" + page.NextCursor)
	require.Equal(t, []string{held.ClaimID}, claimIDs(page.Claims))
	require.Empty(t, page.NextCursor)
	// Without execution_id: as before.
	require.Equal(t, []string{held.ClaimID, moved.ClaimID}, claimIDs(list("state=processing").Claims))

	for _, c := range []struct{ query, field string }{
		{"execution_id=", "execution_id"},
		{"execution_id=&state=processing", "execution_id"},
		{"execution_id=" + strings.Repeat("9", 201), "execution_id"},
		{"execution_id=" + url.QueryEscape("a\x00b"), "execution_id"},
		{"execution_id=4711&state=done", "state"},
		{"execution_id=4711&source=" + url.QueryEscape("no spaces"), "source"},
		{"execution_id=4711&limit=0", "limit"},
		{"execution_id=4711&cursor=nope", "cursor"},
		{"", "state"},
		{"state=completed", "state"},
	} {
		b.fails(t, call{method: "GET", path: "/v1/claims/list?" + c.query, key: keyA}, http.StatusUnprocessableEntity, "invalid", c.field)
	}
	require.Len(t, list("execution_id="+strings.Repeat("9", 200)).Claims, 0, "200 bytes is allowed")
}

func TestFailExecutionOverHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t, reclaimSources("idem"), func(o *options) {
		p := o.policies.BySource["once"]
		p.MaxAttempts = 1
		o.policies.BySource["once"] = p
	})

	t.Run("each retry kind moves the records as a fail by token", func(t *testing.T) {
		for _, c := range []struct {
			retry, source, state string
		}{
			{"retryable", "stripe", "retryable_failed"},
			{"retryable", "once", "dead_lettered"},
			{"permanent", "stripe", "dead_lettered"},
			{"unknown", "stripe", "unknown"},
		} {
			exec := "x-" + c.retry + "-" + c.source
			w1 := b.won(t, keyA, map[string]any{"source": c.source, "event_id": exec + "-1", "execution_id": exec})
			w2 := b.won(t, keyA, map[string]any{"source": c.source, "event_id": exec + "-2", "execution_id": exec})
			got := b.failExecution(t, keyA, map[string]any{"execution_id": exec, "retry": c.retry, "error": "execution crashed"})
			require.False(t, got.More)
			require.ElementsMatch(t, []string{w1.ClaimID, w2.ClaimID}, claimIDs(got.Claims), exec)
			for _, r := range got.Claims {
				require.Equal(t, c.state, r.State, exec)
				require.Equal(t, "execution crashed", r.LastError)
				require.Equal(t, 1, r.Attempt)
			}
			rec := b.ok(t, call{method: "GET", path: "/v1/claims/" + w1.ClaimID, key: keyA})
			last := rec.Deliveries[len(rec.Deliveries)-1]
			require.Equal(t, "failed_"+c.retry, last.Outcome)
			require.Equal(t, exec, last.ExecutionID)
			// The holder's own late report: as after a fail by token.
			late := call{method: "POST", path: "/v1/claims/" + w1.ClaimID + "/fail", key: keyA,
				body: map[string]any{"claim_token": w1.ClaimToken, "error": "late", "retry": "retryable"}}
			b.fails(t, late, http.StatusConflict, "lease_lost", "")
			// Twice is safe.
			again := b.failExecution(t, keyA, map[string]any{"execution_id": exec, "retry": c.retry, "error": "execution crashed"})
			require.Empty(t, again.Claims)
			require.JSONEq(t, `{"claims":[]}`, string(b.do(t, call{method: "POST", path: "/v1/claims/fail/execution", key: keyA,
				body: map[string]any{"execution_id": exec, "retry": c.retry, "error": "x"}}).body))
		}
	})

	t.Run("only what the execution still holds", func(t *testing.T) {
		held := b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "h1", "execution_id": "E"})
		heldMail := b.won(t, keyA, map[string]any{"source": "mail", "event_id": "h2", "execution_id": "E"})
		lost := b.won(t, keyA, map[string]any{"source": "idem", "event_id": "h3", "execution_id": "E", "lease_seconds": 60})
		b.expireLease(t, lost.ClaimID)
		rewon := b.won(t, keyA, map[string]any{"source": "idem", "event_id": "h3", "execution_id": "F"})
		done := b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "h4", "execution_id": "E"})
		b.ok(t, call{method: "POST", path: "/v1/claims/" + done.ClaimID + "/complete", key: keyA,
			body: map[string]any{"claim_token": done.ClaimToken, "result_ref": "ref"}})
		otherTenant := b.won(t, keyB, map[string]any{"source": "stripe", "event_id": "h1", "execution_id": "E"})
		snapshot := func(key, id string) string {
			return stableRecord(t, b.do(t, call{method: "GET", path: "/v1/claims/" + id, key: key}).body)
		}
		before := map[string]string{rewon.ClaimID: snapshot(keyA, rewon.ClaimID), done.ClaimID: snapshot(keyA, done.ClaimID)}
		otherBefore := snapshot(keyB, otherTenant.ClaimID)

		got := b.failExecution(t, keyA, map[string]any{"execution_id": "E", "source": "mail", "retry": "unknown", "error": "crashed"})
		require.Equal(t, []string{heldMail.ClaimID}, claimIDs(got.Claims), "narrowed to the source")
		got = b.failExecution(t, keyA, map[string]any{"execution_id": "E", "retry": "unknown", "error": "crashed"})
		require.Equal(t, []string{held.ClaimID}, claimIDs(got.Claims))
		for id, s := range before {
			require.JSONEq(t, s, snapshot(keyA, id), "%s is not E's to fail", id)
		}
		require.JSONEq(t, otherBefore, snapshot(keyB, otherTenant.ClaimID), "another tenant's record is untouched")
		// F still holds its claim.
		b.ok(t, call{method: "POST", path: "/v1/claims/" + rewon.ClaimID + "/complete", key: keyA,
			body: map[string]any{"claim_token": rewon.ClaimToken}})
	})

	t.Run("bounded: more says there is more", func(t *testing.T) {
		reqs := make([]claim.Request, claim.MaxExecutionFail+3)
		for i := range reqs {
			reqs[i] = claim.Request{Tenant: tenantA, Key: claim.Key{Source: "bulk", EventID: fmt.Sprintf("m%04d", i)},
				ExecutionID: "M"}
		}
		_, err := b.ledger.ClaimBatch(b.ctx, reqs)
		require.NoError(t, err)
		body := map[string]any{"execution_id": "M", "retry": "unknown", "error": "crashed"}
		first := b.do(t, call{method: "POST", path: "/v1/claims/fail/execution", key: keyA, body: body})
		require.Equal(t, http.StatusOK, first.status)
		require.Contains(t, string(first.body), `"more":true`)
		require.Len(t, decodeAs[answer](t, first).Claims, claim.MaxExecutionFail)
		second := b.failExecution(t, keyA, body)
		require.Len(t, second.Claims, 3)
		require.False(t, second.More)
		require.NotContains(t, string(b.do(t, call{method: "POST", path: "/v1/claims/fail/execution", key: keyA, body: body}).body),
			"more", "absent when nothing more is held")
	})

	t.Run("bad bodies are refused naming the field, nothing written", func(t *testing.T) {
		w := b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "bad1", "execution_id": "B"})
		deliveries := b.count(t, "claim_deliveries")
		ok := map[string]any{"execution_id": "B", "retry": "unknown", "error": "crashed"}
		with := func(k string, v any) map[string]any {
			m := map[string]any{}
			for kk, vv := range ok {
				m[kk] = vv
			}
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
			return m
		}
		for _, c := range []struct {
			body   any
			status int
			code   string
			field  string
		}{
			{with("execution_id", nil), http.StatusUnprocessableEntity, "invalid", "execution_id"},
			{with("execution_id", ""), http.StatusUnprocessableEntity, "invalid", "execution_id"},
			{with("execution_id", strings.Repeat("e", 201)), http.StatusUnprocessableEntity, "invalid", "execution_id"},
			{with("execution_id", "a\x00b"), http.StatusUnprocessableEntity, "invalid", "execution_id"},
			{with("execution_id", 42), http.StatusBadRequest, "malformed", "execution_id"},
			{with("retry", nil), http.StatusUnprocessableEntity, "invalid", "retry"},
			{with("retry", "maybe"), http.StatusUnprocessableEntity, "invalid", "retry"},
			{with("retry", "Unknown"), http.StatusUnprocessableEntity, "invalid", "retry"},
			{with("error", nil), http.StatusUnprocessableEntity, "invalid", "error"},
			{with("error", ""), http.StatusUnprocessableEntity, "invalid", "error"},
			{with("error", strings.Repeat("x", 4001)), http.StatusUnprocessableEntity, "invalid", "error"},
			{with("source", "no spaces"), http.StatusUnprocessableEntity, "invalid", "source"},
			{with("source", strings.Repeat("s", 201)), http.StatusUnprocessableEntity, "invalid", "source"},
			{with("claim_token", w.ClaimToken), http.StatusBadRequest, "malformed", "claim_token"},
			{`{"execution_id":"B","execution_id":"C","retry":"unknown","error":"x"}`, http.StatusBadRequest, "malformed", "execution_id"},
			{`{"Execution_ID":"B","retry":"unknown","error":"x"}`, http.StatusBadRequest, "malformed", "Execution_ID"},
			{`[]`, http.StatusBadRequest, "malformed", ""},
		} {
			b.fails(t, call{method: "POST", path: "/v1/claims/fail/execution", key: keyA, body: c.body}, c.status, c.code, c.field)
		}
		b.fails(t, call{method: "POST", path: "/v1/claims/fail/execution", body: ok}, http.StatusUnauthorized, "unauthorized", "")
		require.Equal(t, deliveries, b.count(t, "claim_deliveries"), "nothing written")
		rec := b.ok(t, call{method: "GET", path: "/v1/claims/" + w.ClaimID, key: keyA})
		require.Equal(t, "processing", rec.State)
		got := b.failExecution(t, keyA, map[string]any{"execution_id": "B", "retry": "unknown", "error": strings.Repeat("x", 4000)})
		require.Equal(t, []string{w.ClaimID}, claimIDs(got.Claims), "still held; 4000 bytes of error is allowed")
		require.Equal(t, "unknown", got.Claims[0].State)
	})
}

// A claim waiting for its holder (wait_seconds) is answered as soon as the
// holder's execution is failed.
func TestFailExecutionWakesAWaitingClaim(t *testing.T) {
	t.Parallel()
	b := setupWaiting(t)
	body := map[string]any{"source": "orders", "event_id": "evt_crashed", "execution_id": "4711", "wait_seconds": 20}
	held := b.won(t, keyA, body)
	start := time.Now()
	second := b.claimAsync(t, map[string]any{"source": "orders", "event_id": "evt_crashed", "wait_seconds": 20})
	require.Eventually(t, func() bool { // the second claim waits on the record
		var on bool
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT wait_notify FROM claims WHERE id = $1`, held.ClaimID).Scan(&on))
		return on
	}, 10*time.Second, 5*time.Millisecond)
	got := b.failExecution(t, keyA, map[string]any{"execution_id": "4711", "retry": "unknown", "error": "execution crashed"})
	require.Len(t, got.Claims, 1)
	w := <-second
	require.Equal(t, "unknown", w.Outcome)
	require.Less(t, time.Since(start), 10*time.Second, "woken by the fail, not by the end of its wait")
}
