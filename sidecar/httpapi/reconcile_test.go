package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// reconcileAnswer is the reconcile member of a record.
type reconcileAnswer struct {
	Reconcile *struct {
		State      string `json:"state"`
		Reconciler string `json:"reconciler"`
		Calls      int    `json:"calls"`
		MaxCalls   int    `json:"max_calls"`
		NextCallAt string `json:"next_call_at"`
		AnswerBy   string `json:"answer_by"`
		LastError  string `json:"last_error"`
		Verdict    string `json:"verdict"`
		Note       string `json:"note"`
	} `json:"reconcile"`
}

func reconcileOf(t *testing.T, r reply) reconcileAnswer {
	t.Helper()
	var a reconcileAnswer
	require.NoError(t, json.Unmarshal(r.body, &a), "%s", r)
	return a
}

// takeCall starts the reconcile of the unknown claim id and takes its
// call as the runner would, returning the call's token.
func takeCall(t *testing.T, b *bundle, id string) string {
	t.Helper()
	_, err := b.ledger.ReconcileDiscover(b.ctx, 100)
	require.NoError(t, err)
	calls, err := b.ledger.ReconcileTake(b.ctx, 100)
	require.NoError(t, err)
	for _, c := range calls {
		if c.ClaimID == id {
			return c.Token
		}
	}
	t.Fatalf("no call taken for %s", id)
	return ""
}

// conformReconcile drives POST /v1/claims/{id}/reconcile (the conformance
// bundle's source recon defaults to reconciler crm, max_calls 2) and the
// reconcile member of GET /v1/claims/{id}: answers applied, repeated,
// refused; tenant-scoped; bad input named, never echoed.
func conformReconcile(t *testing.T, b *bundle) {
	t.Helper()
	unknown := func(event string) answer {
		w := b.won(t, keyA, map[string]any{"source": "recon", "event_id": event})
		b.ok(t, call{method: "POST", path: "/v1/claims/" + w.ClaimID + "/fail", key: keyA,
			body: map[string]any{"claim_token": w.ClaimToken, "error": "socket hang up", "retry": "unknown"}})
		return w
	}
	path := func(id string) string { return "/v1/claims/" + id + "/reconcile" }

	// A record shows the reconciler its winning claim named, absent when
	// it named none (the source's default applies).
	named := func(r reply) string {
		t.Helper()
		var rec struct {
			Reconciler *string `json:"reconciler"`
		}
		require.NoError(t, json.Unmarshal(r.body, &rec), "%s", r)
		if rec.Reconciler == nil {
			return "(absent)"
		}
		return *rec.Reconciler
	}
	own := b.won(t, keyA, map[string]any{"source": "recon", "event_id": "evt_rc_own", "reconciler": "crm"})
	require.Equal(t, "crm", named(b.do(t, call{method: "POST", path: "/v1/claims/" + own.ClaimID + "/fail", key: keyA,
		body: map[string]any{"claim_token": own.ClaimToken, "error": "socket hang up", "retry": "unknown"}})))
	require.Equal(t, "crm", named(b.do(t, call{method: "GET", path: "/v1/claims/" + own.ClaimID, key: keyA})))
	plain := b.won(t, keyA, map[string]any{"source": "recon", "event_id": "evt_rc_plain"})
	require.Equal(t, "(absent)", named(b.do(t, call{method: "GET", path: "/v1/claims/" + plain.ClaimID, key: keyA})))

	// done: completed with the result_ref found; the same answer again is 200.
	w := unknown("evt_rc_done")
	require.Nil(t, reconcileOf(t, b.do(t, call{method: "GET", path: "/v1/claims/" + w.ClaimID, key: keyA})).Reconcile,
		"no reconcile before discovery")
	tok := takeCall(t, b, w.ClaimID)
	got := reconcileOf(t, b.do(t, call{method: "GET", path: "/v1/claims/" + w.ClaimID, key: keyA}))
	require.NotNil(t, got.Reconcile)
	require.Equal(t, "calling", got.Reconcile.State)
	require.Equal(t, "crm", got.Reconcile.Reconciler)
	require.Equal(t, 1, got.Reconcile.Calls)
	require.Equal(t, 2, got.Reconcile.MaxCalls)
	require.NotEmpty(t, got.Reconcile.AnswerBy)
	// The lookup by key (the node's Lookup by Source and Event ID) shows it too.
	byKey := reconcileOf(t, b.do(t, call{method: "GET", path: "/v1/claims?source=recon&event_id=evt_rc_done", key: keyA}))
	require.NotNil(t, byKey.Reconcile, "lookup by key: the record's reconcile")
	require.Equal(t, "calling", byKey.Reconcile.State)
	require.Equal(t, 1, byKey.Reconcile.Calls)
	// Another tenant's key does not see it or answer it.
	b.fails(t, call{method: "POST", path: path(w.ClaimID), key: keyB, body: map[string]any{"reconcile_token": tok, "verdict": "done"}},
		http.StatusNotFound, "not_found", "")
	body := map[string]any{"reconcile_token": tok, "verdict": "done", "result_ref": "inv_rc", "note": "found in the CRM"}
	a := b.ok(t, call{method: "POST", path: path(w.ClaimID), key: keyA, body: body})
	require.Equal(t, "completed", a.State)
	require.Equal(t, "inv_rc", a.ResultRef)
	again := b.do(t, call{method: "POST", path: path(w.ClaimID), key: keyA, body: body})
	require.Equal(t, http.StatusOK, again.status, "%s", again)
	rc := reconcileOf(t, again)
	require.Equal(t, "answered", rc.Reconcile.State)
	require.Equal(t, "done", rc.Reconcile.Verdict)
	require.Equal(t, "found in the CRM", rc.Reconcile.Note)
	b.fails(t, call{method: "POST", path: path(w.ClaimID), key: keyA, body: map[string]any{"reconcile_token": tok, "verdict": "not_done"}},
		http.StatusConflict, "invalid_state", "")
	rec := b.ok(t, call{method: "GET", path: "/v1/claims/" + w.ClaimID, key: keyA})
	last := rec.Deliveries[len(rec.Deliveries)-1]
	require.Equal(t, claim.DeliveryReconciledDone, last.Outcome)
	require.Equal(t, "reconciler:crm", last.Actor)

	// still_unknown: waiting for the next call; another verdict with its
	// token is 409 invalid_state, a token of no call in flight 409
	// reconcile_token_stale; not_done on the next call makes the record
	// claimable again.
	u := unknown("evt_rc_later")
	tok = takeCall(t, b, u.ClaimID)
	rc = reconcileOf(t, b.do(t, call{method: "POST", path: path(u.ClaimID), key: keyA,
		body: map[string]any{"reconcile_token": tok, "verdict": "still_unknown", "note": "syncing"}}))
	require.Equal(t, "waiting", rc.Reconcile.State)
	require.NotEmpty(t, rc.Reconcile.NextCallAt)
	b.fails(t, call{method: "POST", path: path(u.ClaimID), key: keyA, body: map[string]any{"reconcile_token": tok, "verdict": "done"}},
		http.StatusConflict, "invalid_state", "")
	b.fails(t, call{method: "POST", path: path(u.ClaimID), key: keyA,
		body: map[string]any{"reconcile_token": "6f1c1f59-0d55-4b0e-9a43-3f8f0cf1d0aa", "verdict": "done"}},
		http.StatusConflict, "reconcile_token_stale", "")
	_, err := b.pool.Exec(b.ctx, `UPDATE reconciles SET next_call_at = now() WHERE claim_id = $1`, u.ClaimID)
	require.NoError(t, err)
	tok = takeCall(t, b, u.ClaimID)
	a = b.ok(t, call{method: "POST", path: path(u.ClaimID), key: keyA, body: map[string]any{"reconcile_token": tok, "verdict": "not_done"}})
	require.Equal(t, "retryable_failed", a.State)
	require.Equal(t, "won", b.claim(t, keyA, map[string]any{"source": "recon", "event_id": "evt_rc_later"}).Outcome)

	// Settled first by an operator: the answer writes nothing.
	s := unknown("evt_rc_settled")
	tok = takeCall(t, b, s.ClaimID)
	b.ok(t, call{method: "POST", path: "/v1/claims/" + s.ClaimID + "/resolve", key: keyA,
		body: map[string]any{"outcome": "completed", "note": "checked by hand"}})
	b.fails(t, call{method: "POST", path: path(s.ClaimID), key: keyA, body: map[string]any{"reconcile_token": tok, "verdict": "not_done"}},
		http.StatusConflict, "invalid_state", "")
	require.Equal(t, "completed", b.ok(t, call{method: "GET", path: "/v1/claims/" + s.ClaimID, key: keyA}).State)

	// Bad input is named, never echoed.
	const marker = "sk_live_MARKER"
	for _, tc := range []struct {
		body        any
		status      int
		code, field string
	}{
		{map[string]any{"reconcile_token": marker, "verdict": "done"}, http.StatusUnprocessableEntity, "invalid", "reconcile_token"},
		{map[string]any{"verdict": "done"}, http.StatusUnprocessableEntity, "invalid", "reconcile_token"},
		{map[string]any{"reconcile_token": tok, "verdict": marker}, http.StatusUnprocessableEntity, "invalid", "verdict"},
		{map[string]any{"reconcile_token": tok, "verdict": "done", "result_ref": string(make([]byte, 2001))}, http.StatusUnprocessableEntity, "invalid", "result_ref"},
		{map[string]any{"reconcile_token": tok, "verdict": "done", "note": marker + string(make([]byte, 4001))}, http.StatusUnprocessableEntity, "invalid", "note"},
		{map[string]any{"reconcile_token": tok, "verdict": "done", marker: 1}, http.StatusBadRequest, "malformed", marker},
	} {
		r := b.fails(t, call{method: "POST", path: path(s.ClaimID), key: keyA, body: tc.body}, tc.status, tc.code, tc.field)
		require.NotContains(t, r.Error.Message, marker)
	}
	b.fails(t, call{method: "POST", path: path("00000000-0000-4000-8000-000000000000"), key: keyA,
		body: map[string]any{"reconcile_token": tok, "verdict": "done"}}, http.StatusNotFound, "not_found", "")
}
