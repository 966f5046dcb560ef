package claim_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// RecordExecutionWorkflow: an execution's workflow version, told after
// its claims named none. Without an inbox dispatch a second execution's
// claim is upstream_repeat; with both versions known and different it
// becomes n8n_two_versions. Reports are tenant-scoped, and two reports of
// one record's two executions sent at once still see each other.

// twoRuns makes record event of tenant "a": execution <event>-1 of
// workflow wf wins and completes it, <event>-2 claims it again; neither
// names a version.
func twoRuns(t *testing.T, b *bundle, event string) string {
	t.Helper()
	r := req("a", event)
	r.ExecutionID, r.WorkflowID = event+"-1", "wf"
	won := completed(t, b, r)
	r.ExecutionID = event + "-2"
	dup, err := b.ledger.Claim(b.ctx, r)
	require.NoError(t, err)
	require.Equal(t, claim.Duplicate, dup.Outcome)
	require.Equal(t, claim.CauseUpstreamRepeat, dup.Cause)
	return won.ID
}

// lastCopy is the record's last duplicate entry.
func lastCopy(t *testing.T, b *bundle, id string) claim.Delivery {
	t.Helper()
	rec, err := b.ledger.Get(b.ctx, "a", id)
	require.NoError(t, err)
	for i := len(rec.Deliveries) - 1; i >= 0; i-- {
		if rec.Deliveries[i].Outcome == string(claim.Duplicate) {
			return rec.Deliveries[i]
		}
	}
	t.Fatalf("no duplicate entry in %+v", rec.Deliveries)
	return claim.Delivery{}
}

func tell(t *testing.T, b *bundle, tenant, execution, version string) claim.ExecutionWorkflowRecorded {
	t.Helper()
	out, err := b.ledger.RecordExecutionWorkflow(b.ctx, tenant, claim.ExecutionWorkflow{
		ExecutionID: execution, WorkflowID: "wf", WorkflowVersion: version})
	require.NoError(t, err)
	return out
}

func TestRecordExecutionWorkflowTenantScoped(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	id := twoRuns(t, b, "evt_wv_tenant")
	// Another tenant's n8n reusing the execution ids changes nothing.
	require.Equal(t, claim.ExecutionWorkflowRecorded{}, tell(t, b, "b", "evt_wv_tenant-1", "v1"))
	require.Equal(t, claim.ExecutionWorkflowRecorded{}, tell(t, b, "b", "evt_wv_tenant-2", "v2"))
	d := lastCopy(t, b, id)
	require.Equal(t, string(claim.CauseUpstreamRepeat), string(d.Cause))
	require.Empty(t, d.WorkflowVersion)

	require.Equal(t, claim.ExecutionWorkflowRecorded{Entries: 1}, tell(t, b, "a", "evt_wv_tenant-1", "v1"))
	require.Equal(t, claim.ExecutionWorkflowRecorded{Entries: 1, Revised: 1}, tell(t, b, "a", "evt_wv_tenant-2", "v2"))
	d = lastCopy(t, b, id)
	require.Equal(t, claim.CauseN8nTwoVersions, d.Cause)
	require.Equal(t, "execution evt_wv_tenant-1 ran workflow wf version v1 and execution evt_wv_tenant-2 ran workflow wf version v2: "+
		"two versions of the workflow were active at once (after an edit or a new activation, the old version's trigger still ran)", d.CauseNote)
	// Told again, or told another version: the entries already name one.
	require.Equal(t, claim.ExecutionWorkflowRecorded{}, tell(t, b, "a", "evt_wv_tenant-2", "v3"))
	require.Equal(t, "v2", lastCopy(t, b, id).WorkflowVersion)
}

// TestRecordExecutionWorkflowAtOnce: both executions tell at the same
// moment, many records over; each record ends n8n_two_versions, revised
// once.
func TestRecordExecutionWorkflowAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	const n = 12
	ids := make([]string, n)
	for i := range ids {
		ids[i] = twoRuns(t, b, fmt.Sprintf("evt_wv_race_%d", i))
	}
	var wg sync.WaitGroup
	revised := make([]int, 2*n)
	for i := 0; i < n; i++ {
		for j, v := range []string{"v1", "v2"} {
			wg.Add(1)
			go func(k int, execution, version string) {
				defer wg.Done()
				out, err := b.ledger.RecordExecutionWorkflow(b.ctx, "a", claim.ExecutionWorkflow{
					ExecutionID: execution, WorkflowID: "wf", WorkflowVersion: version})
				if err == nil {
					revised[k] = out.Revised
				}
				require.NoError(t, err)
			}(2*i+j, fmt.Sprintf("evt_wv_race_%d-%d", i, j+1), v)
		}
	}
	wg.Wait()
	for i, id := range ids {
		require.Equal(t, claim.CauseN8nTwoVersions, lastCopy(t, b, id).Cause, "record %d", i)
		require.Equal(t, 1, revised[2*i]+revised[2*i+1], "record %d revised once", i)
	}
}

func TestRecordExecutionWorkflowRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	for _, tc := range []struct {
		w     claim.ExecutionWorkflow
		field string
	}{
		{claim.ExecutionWorkflow{WorkflowID: "wf", WorkflowVersion: "v"}, "execution_id"},
		{claim.ExecutionWorkflow{ExecutionID: strings.Repeat("1", claim.MaxExecIDLen+1), WorkflowID: "wf", WorkflowVersion: "v"}, "execution_id"},
		{claim.ExecutionWorkflow{ExecutionID: "1", WorkflowVersion: "v"}, "workflow_id"},
		{claim.ExecutionWorkflow{ExecutionID: "1", WorkflowID: "wf"}, "workflow_version"},
		{claim.ExecutionWorkflow{ExecutionID: "1", WorkflowID: "w f", WorkflowVersion: "v"}, "workflow_id"},
		{claim.ExecutionWorkflow{ExecutionID: "1", WorkflowID: "wf", WorkflowVersion: strings.Repeat("v", claim.MaxWorkflowFieldLen+1)}, "workflow_version"},
	} {
		_, err := b.ledger.RecordExecutionWorkflow(b.ctx, "a", tc.w)
		e := apperr.As(err)
		require.NotNil(t, e, "%v", err)
		require.Equal(t, apperr.Invalid, e.Code)
		require.Equal(t, tc.field, e.Field)
	}
	_, err := b.ledger.RecordExecutionWorkflow(b.ctx, "", claim.ExecutionWorkflow{ExecutionID: "1", WorkflowID: "wf", WorkflowVersion: "v"})
	require.Equal(t, apperr.Unauthorized, apperr.CodeOf(err))
}
