package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
)

// POST /v1/executions/workflow: n8n's settle hook tells which workflow
// version each execution ran after its claims named none (n8n gives a
// node no version id). Two executions of one dispatched delivery, first
// explained n8n_twice, become n8n_two_versions once both versions are
// known and differ, whichever execution tells first, in one request or
// two; the same version keeps n8n_twice with the version named.

// executionWorkflowAnswer is the answer of POST /v1/executions/workflow.
type executionWorkflowAnswer struct {
	Results []struct {
		ExecutionID string `json:"execution_id"`
		Entries     int    `json:"entries"`
		Revised     int    `json:"revised"`
		More        bool   `json:"more"`
	} `json:"results"`
}

// report posts executions' versions: pairs of execution id and version of
// workflow wf-1.
func (e *causeEnv) report(t *testing.T, pairs ...string) executionWorkflowAnswer {
	t.Helper()
	var items []string
	for i := 0; i < len(pairs); i += 2 {
		items = append(items, fmt.Sprintf(`{"execution_id":%q,"workflow_id":"wf-1","workflow_version":%q}`, pairs[i], pairs[i+1]))
	}
	ans := e.apiPost(t, "/v1/executions/workflow", `{"executions":[`+strings.Join(items, ",")+`]}`)
	require.Equal(t, http.StatusOK, ans.status, "%s", ans.body)
	var out executionWorkflowAnswer
	require.NoError(t, json.Unmarshal(ans.body, &out))
	require.Len(t, out.Results, len(pairs)/2)
	return out
}

// revisions is claimd_duplicate_cause_revisions_total{source,from,to}.
func (e *causeEnv) revisions(t *testing.T, source string, from, to claim.Cause) float64 {
	t.Helper()
	families, err := e.met.Registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "claimd_duplicate_cause_revisions_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["source"] == source && labels["from"] == string(from) && labels["to"] == string(to) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestExecutionWorkflowRevisesCause(t *testing.T) {
	t.Parallel()
	var base atomic.Value
	// The dispatched run: execution <event>-a of workflow wf-1, no version
	// (as the n8n node claims), completes it.
	target := newIngestTarget(t, func(int) (int, http.Header) { return http.StatusOK, nil })
	target.before = func(_ int, r *http.Request) {
		e := base.Load().(*causeEnv)
		id := r.Header.Get(inbox.HeaderEventID)
		c := e.claim(t, map[string]any{"source": "hooks", "event_id": id, "execution_id": id + "-a",
			"execution_mode": "webhook", "workflow_id": "wf-1"})
		if c.Outcome == "won" {
			e.complete(t, c)
		}
	}
	e := setupCauses(t, target.srv.URL, true)
	base.Store(e)

	// twice: one dispatched event, run by execution <id>-a and claimed
	// again by <id>-b, both naming no version: n8n_twice.
	twice := func(t *testing.T, id string) string {
		t.Helper()
		rec := e.receiveOne(t, id)
		e.waitDispatchState(t, rec, "dispatched")
		c := e.claim(t, map[string]any{"source": "hooks", "event_id": id, "execution_id": id + "-b",
			"execution_mode": "webhook", "workflow_id": "wf-1"})
		require.Equal(t, "duplicate", c.Outcome)
		require.Equal(t, "n8n_twice", c.Cause)
		d := e.last(t, rec, "duplicate")
		require.Contains(t, d.CauseNote, fmt.Sprintf("execution %s-b ran workflow wf-1 (version not known)", id))
		return rec
	}
	twoVersions := func(t *testing.T, rec, id string) {
		t.Helper()
		d := e.last(t, rec, "duplicate")
		require.Equal(t, "n8n_two_versions", d.Cause, "%+v", d)
		require.Equal(t, "v2", d.WorkflowVersion)
		require.Equal(t, fmt.Sprintf("execution %[1]s-a ran workflow wf-1 version v1 and execution %[1]s-b ran workflow wf-1 version v2: "+
			"two versions of the workflow were active at once (after an edit or a new activation, the old version's trigger still ran)", id), d.CauseNote)
		require.Equal(t, "v1", e.last(t, rec, "won").WorkflowVersion)
	}
	require.Equal(t, 0.0, e.revisions(t, "hooks", claim.CauseN8nTwice, claim.CauseN8nTwoVersions))

	// The winner tells first, then the copy: the second report revises.
	rec := twice(t, "gh-wv-1")
	ans := e.report(t, "gh-wv-1-a", "v1")
	require.Equal(t, 1, ans.Results[0].Entries)
	require.Equal(t, 0, ans.Results[0].Revised)
	require.Equal(t, "n8n_twice", e.last(t, rec, "duplicate").Cause, "one version known is no second version")
	require.Contains(t, e.last(t, rec, "duplicate").CauseNote,
		"execution gh-wv-1-a ran workflow wf-1 version v1, execution gh-wv-1-b ran workflow wf-1 (version not known)")
	ans = e.report(t, "gh-wv-1-b", "v2")
	require.Equal(t, 1, ans.Results[0].Entries)
	require.Equal(t, 1, ans.Results[0].Revised)
	twoVersions(t, rec, "gh-wv-1")
	require.Equal(t, 1.0, e.revisions(t, "hooks", claim.CauseN8nTwice, claim.CauseN8nTwoVersions))
	// claimd_duplicates_total keeps the copy under the cause it was
	// counted with.
	require.Equal(t, 0.0, e.metric(t, "hooks", claim.CauseN8nTwoVersions))

	// Told again: nothing left to write, nothing revised again.
	ans = e.report(t, "gh-wv-1-b", "v2", "gh-wv-1-a", "v1")
	require.Zero(t, ans.Results[0].Entries+ans.Results[1].Entries+ans.Results[0].Revised+ans.Results[1].Revised)
	twoVersions(t, rec, "gh-wv-1")
	require.Equal(t, 1.0, e.revisions(t, "hooks", claim.CauseN8nTwice, claim.CauseN8nTwoVersions))

	// The copy tells first, then the winner.
	rec = twice(t, "gh-wv-2")
	require.Equal(t, 0, e.report(t, "gh-wv-2-b", "v2").Results[0].Revised)
	require.Equal(t, "n8n_twice", e.last(t, rec, "duplicate").Cause)
	require.Equal(t, 1, e.report(t, "gh-wv-2-a", "v1").Results[0].Revised)
	twoVersions(t, rec, "gh-wv-2")

	// Both in one request, the copy first.
	rec = twice(t, "gh-wv-3")
	ans = e.report(t, "gh-wv-3-b", "v2", "gh-wv-3-a", "v1")
	require.Equal(t, 1, ans.Results[1].Revised)
	twoVersions(t, rec, "gh-wv-3")
	require.Equal(t, 3.0, e.revisions(t, "hooks", claim.CauseN8nTwice, claim.CauseN8nTwoVersions))

	// The same version: n8n_twice, the note naming it for both.
	rec = twice(t, "gh-wv-4")
	ans = e.report(t, "gh-wv-4-a", "v7", "gh-wv-4-b", "v7")
	require.Zero(t, ans.Results[0].Revised+ans.Results[1].Revised)
	d := e.last(t, rec, "duplicate")
	require.Equal(t, "n8n_twice", d.Cause)
	require.Equal(t, "executions gh-wv-4-a and gh-wv-4-b both ran the one delivery claimd dispatched once; "+
		"execution gh-wv-4-a ran workflow wf-1 version v7, execution gh-wv-4-b ran workflow wf-1 version v7", d.CauseNote)
	require.Equal(t, 3.0, e.revisions(t, "hooks", claim.CauseN8nTwice, claim.CauseN8nTwoVersions))

	// An execution claimd does not know: answered, nothing written.
	ans = e.report(t, "no-such-execution", "v1")
	require.Equal(t, "no-such-execution", ans.Results[0].ExecutionID)
	require.Zero(t, ans.Results[0].Entries+ans.Results[0].Revised)
	require.Equal(t, 4.0, e.metric(t, "hooks", claim.CauseN8nTwice), "the four copies stay counted under n8n_twice")
	require.Equal(t, 0.0, e.metric(t, "hooks", claim.CauseN8nTwoVersions))
}

// TestExecutionWorkflowRefused: the body is strict, every field is
// required and bounded as a claim's; a bad item is 422 naming
// executions[i].<field> and nothing of the request is recorded; no value
// is quoted.
func TestExecutionWorkflowRefused(t *testing.T) {
	t.Parallel()
	e := setupCauses(t, "http://n8n.invalid/webhook/hooks", false)
	secretish := "sk_live_SECRET_looking_value"
	good := `{"execution_id":"1","workflow_id":"wf","workflow_version":"v"}`
	for _, tc := range []struct{ body, field string }{
		{`{"executions":[` + good + `,{"execution_id":"2","workflow_id":"wf","workflow_version":"` + secretish + ` x"}]}`, "executions[1].workflow_version"},
		{`{"executions":[{"execution_id":"2","workflow_id":"` + strings.Repeat("w", claim.MaxWorkflowFieldLen+1) + `","workflow_version":"v"}]}`, "executions[0].workflow_id"},
		{`{"executions":[{"execution_id":"2","workflow_id":"` + secretish + `\u00e9","workflow_version":"v"}]}`, "executions[0].workflow_id"},
		{`{"executions":[{"execution_id":"2","workflow_version":"` + secretish + `"}]}`, "executions[0].workflow_id"},
		{`{"executions":[{"execution_id":"2","workflow_id":"` + secretish + `"}]}`, "executions[0].workflow_version"},
		{`{"executions":[{"workflow_id":"wf","workflow_version":"` + secretish + `"}]}`, "executions[0].execution_id"},
		{`{"executions":[{"execution_id":"` + strings.Repeat("9", 201) + `","workflow_id":"wf","workflow_version":"v"}]}`, "executions[0].execution_id"},
		{`{"executions":[]}`, "executions"},
		{`{"executions":[` + strings.TrimSuffix(strings.Repeat(good+",", 101), ",") + `]}`, "executions"},
	} {
		ans := e.apiPost(t, "/v1/executions/workflow", tc.body)
		require.Equal(t, http.StatusUnprocessableEntity, ans.status, "%s", ans.body)
		require.Contains(t, string(ans.body), `"field":"`+tc.field+`"`)
		require.NotContains(t, string(ans.body), "SECRET")
	}
	for _, body := range []string{
		`{"executions":[{"execution_id":"1","workflow_id":"wf","workflow_version":"v","note":"` + secretish + `"}]}`,
		`{"executions":[{"execution_id":1,"workflow_id":"wf","workflow_version":"v"}]}`,
		`{"executions":{}}`,
		``,
	} {
		ans := e.apiPost(t, "/v1/executions/workflow", body)
		require.True(t, ans.status == http.StatusBadRequest || ans.status == http.StatusUnprocessableEntity, "%d %s", ans.status, ans.body)
		require.NotContains(t, string(ans.body), "SECRET")
	}
}
