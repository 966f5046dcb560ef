package reconcile_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/reconcile"
)

// Each call is counted once, when it ends. The node's Answer Reconcile
// answers through the API and the workflow's response carries the same
// answer: the call counts once (its verdict; a still_unknown that gives up
// gives up once); another verdict in the response after the API's was
// applied is not counted either. A failure reported after the call ended
// (its deadline passed meanwhile: counted timeout) is not counted again.
// So the results sum to the calls made.
func TestEachCallCountedOnce(t *testing.T) {
	t.Parallel()
	var e *env
	rc := newReconciler(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		id, token := body["claim_id"].(string), body["reconcile_token"].(string)
		api, resp := "done", `{"verdict":"done","result_ref":"inv_1"}`
		switch body["event_id"] {
		case "evt-other":
			resp = `{"verdict":"not_done"}`
		case "evt-unknown":
			api, resp = "still_unknown", `{"verdict":"still_unknown"}`
		case "evt-late-fail":
			// The deadline passes while the call is in flight: another
			// run ends it as a timeout; then the reconciler answers 500.
			_, err := e.pool.Exec(r.Context(), `UPDATE reconciles SET call_deadline = now() - interval '1 second'
				WHERE claim_id = $1`, id)
			require.NoError(t, err)
			_, err = e.newRunner(nil).RunOnce(r.Context())
			require.NoError(t, err)
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		a := reconcile.Answer{Verdict: api}
		if api == "done" {
			a.ResultRef = "inv_1"
		}
		_, err := e.runner.Answer(r.Context(), "acme", id, token, a) // the node's answer through the API
		require.NoError(t, err)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, resp)
	})
	e = setupEnv(t, rc, "max_calls: 1", 0)
	same, other := e.unknown(t, "orders", "evt-same"), e.unknown(t, "orders", "evt-other")
	unknown, late := e.unknown(t, "orders", "evt-unknown"), e.unknown(t, "orders", "evt-late-fail")

	require.Equal(t, 4, e.runOnce(t))
	require.Equal(t, claim.StateCompleted, e.record(t, same.ID).State)
	require.Equal(t, claim.StateCompleted, e.record(t, other.ID).State, "the first answer applied stands")
	require.Equal(t, claim.ReconcileGaveUp, e.reconcile(t, unknown.ID).State)
	st := e.reconcile(t, late.ID)
	require.Equal(t, claim.ReconcileGaveUp, st.State)
	require.Equal(t, claim.ReconcileErrTimeout, st.LastError)

	require.Equal(t, float64(2), e.calls("crm", "done"), "evt-same and evt-other, once each")
	require.Equal(t, float64(1), e.calls("crm", "still_unknown"))
	require.Equal(t, float64(1), e.calls("crm", "timeout"))
	for _, res := range []string{"not_done", "fenced", "status_5xx"} {
		require.Zero(t, e.calls("crm", res), res)
	}
	require.Equal(t, float64(2), e.gaveUp("crm"), "evt-unknown and evt-late-fail gave up once each")
	total := 0.0
	for _, res := range reconcile.Results {
		total += e.calls("crm", res)
	}
	require.Equal(t, float64(4), total, "the results sum to the calls made")
}

// delay_seconds: the reconciler is not called until that long after the
// claim went unknown; then it is.
func TestFirstCallAfterDelaySeconds(t *testing.T) {
	t.Parallel()
	rc := newReconciler(t, answerJSON(`{"verdict":"done"}`))
	e := setupEnv(t, rc, "delay_seconds: 60", 0)
	rec := e.unknown(t, "orders", "evt-delay")
	require.Zero(t, e.runOnce(t), "no call within delay_seconds")
	st := e.reconcile(t, rec.ID)
	require.Equal(t, claim.ReconcileWaiting, st.State)
	require.True(t, st.NextCallAt.Equal(e.record(t, rec.ID).UpdatedAt.Add(60*time.Second)))
	require.Empty(t, rc.callsOf(rec.ID))
	e.due(t, rec.ID)
	require.Equal(t, 1, e.runOnce(t))
	require.Equal(t, claim.StateCompleted, e.record(t, rec.ID).State)
}
