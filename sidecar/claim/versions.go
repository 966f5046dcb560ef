package claim

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
)

// An execution's workflow version, told after its claims.
//
// A claim may name the claiming workflow and its version
// (Request.WorkflowID, WorkflowVersion), and duplicate_cause (migration
// 00020) tells CauseN8nTwoVersions from CauseN8nTwice only when both
// executions' claims named their version. n8n gives a node no version id
// (a node sees its workflow's id, name and active flag), so the
// Idempotent Claim node names none; n8n's `workflow.postExecute` hook sees
// the version that ran (the workflow data's versionId), and the settle
// hook tells claimd when the execution ends (RecordExecutionWorkflow).
//
// RecordExecutionWorkflow writes the version on the execution's claim
// entries (outcomes won, duplicate, in_progress, conflict) that name none,
// then explains again the copies of the records those entries belong to:
// a copy explained CauseN8nTwice or CauseUpstreamRepeat whose execution or
// whose winning execution is this one. When both executions' versions
// are now known and differ (one workflow, or a workflow id not known on
// either side), the copy becomes CauseN8nTwoVersions, its note naming both
// executions and both versions, as duplicate_cause would have said had the
// claims named them; otherwise its note names the versions now known. A
// copy is revised only when its note still names the same two executions
// the revision judges (the winner before it in the log and the copy's
// execution), so a copy explained against another winner is left as it
// is. Copies that came through a door (trigger claims, whose notes name no
// execution) are not revised.
//
// Two reports of one record's two executions may run at once: each locks
// the records its execution's entries belong to (FOR NO KEY UPDATE, which
// lets claims log entries meanwhile) before it writes, and writes and
// explains in later statements of its transaction, so the second sees the
// first's version whichever commits first.

// MaxExecutionWorkflowRecords is the most records one
// RecordExecutionWorkflow call writes the version on; an execution with
// more answers More, and the next call takes the rest (the entries
// written no longer lack a version).
const MaxExecutionWorkflowRecords = 1000

// ExecutionWorkflow is what RecordExecutionWorkflow takes.
type ExecutionWorkflow struct {
	// ExecutionID is the execution (n8n's execution id, as its claims sent
	// it in Request.ExecutionID): required, at most MaxExecIDLen bytes.
	ExecutionID string
	// WorkflowID and WorkflowVersion are the workflow the execution ran and
	// its version (n8n: the workflow's id and its versionId): both
	// required, each at most MaxWorkflowFieldLen bytes of printable ASCII
	// without spaces (CheckWorkflow).
	WorkflowID      string
	WorkflowVersion string
}

// ExecutionWorkflowRecorded is the answer of RecordExecutionWorkflow.
type ExecutionWorkflowRecorded struct {
	// Entries is how many delivery-log entries took the version (0 when
	// the execution has none without one: unknown to this tenant, or told
	// before).
	Entries int
	// Revised is how many copies' causes changed (to
	// CauseN8nTwoVersions); copies whose note only gained the versions are
	// not counted.
	Revised int
	// More reports that more than MaxExecutionWorkflowRecords records hold
	// the execution's entries without a version: call again for the rest.
	More bool
}

// CauseRevision is one copy whose cause RecordExecutionWorkflow changed:
// the record's source, the cause the copy was logged with and the cause
// it has now.
type CauseRevision struct {
	Source   string
	From, To Cause
}

// CauseRevisionObserver is an Observer that is also told every copy whose
// cause a later report revised (RecordExecutionWorkflow). Shadow copies
// are not told: their decisions are not counted as duplicates either.
type CauseRevisionObserver interface {
	CauseRevised(r CauseRevision)
}

// RecordExecutionWorkflow records that execution w.ExecutionID of tenant
// ran version w.WorkflowVersion of workflow w.WorkflowID, on the
// execution's claim entries that name no version (and no other
// workflow), and explains those records' copies again (see "An
// execution's workflow version, told after its claims" in this file), in
// one transaction, for at most MaxExecutionWorkflowRecords records.
// Calling again is safe: the entries written already name a version, so a
// second call changes nothing. An execution unknown to tenant changes
// nothing and answers zeros. Execution ids are unique per n8n instance
// only (see FailExecution). Each copy revised is told to a
// CauseRevisionObserver after the commit (not shadow copies).
// Errors: Invalid naming execution_id, workflow_id or workflow_version;
// Unauthorized without a tenant; Unavailable; otherwise internal.
func (l *Ledger) RecordExecutionWorkflow(ctx context.Context, tenant string, w ExecutionWorkflow) (ExecutionWorkflowRecorded, error) {
	if tenant == "" {
		return ExecutionWorkflowRecorded{}, apperr.New(apperr.Unauthorized, "no tenant")
	}
	if err := CheckExecutionWorkflow(w); err != nil {
		return ExecutionWorkflowRecorded{}, err
	}
	var out ExecutionWorkflowRecorded
	var revisions []CauseRevision
	err := db.RunTx(ctx, l.pool, func(tx pgx.Tx) error {
		out, revisions = ExecutionWorkflowRecorded{}, nil
		ids, err := queries.LockExecutionRecords(ctx, tx, dbsqlc.LockExecutionRecordsParams{Tenant: tenant,
			ExecutionID: w.ExecutionID, WorkflowID: w.WorkflowID, MaxRows: MaxExecutionWorkflowRecords + 1})
		if err != nil {
			return err
		}
		if len(ids) > MaxExecutionWorkflowRecords {
			ids, out.More = ids[:MaxExecutionWorkflowRecords], true
		}
		if len(ids) == 0 {
			return nil
		}
		n, err := queries.SetExecutionVersion(ctx, tx, dbsqlc.SetExecutionVersionParams{ClaimIDs: ids,
			ExecutionID: w.ExecutionID, WorkflowID: w.WorkflowID, WorkflowVersion: w.WorkflowVersion})
		if err != nil {
			return err
		}
		out.Entries = int(n)
		revised, err := queries.ReexplainCopies(ctx, tx, dbsqlc.ReexplainCopiesParams{ClaimIDs: ids, ExecutionID: w.ExecutionID})
		for _, r := range revised {
			if r.OldCause != r.NewCause {
				out.Revised++
				if !r.Shadow {
					revisions = append(revisions, CauseRevision{Source: r.Source, From: Cause(r.OldCause), To: Cause(r.NewCause)})
				}
			}
		}
		return err
	})
	if err != nil {
		return ExecutionWorkflowRecorded{}, db.Error(err)
	}
	if o, ok := l.obs.(CauseRevisionObserver); ok {
		for _, r := range revisions {
			o.CauseRevised(r)
		}
	}
	return out, nil
}

// CheckExecutionWorkflow returns an Invalid error naming execution_id,
// workflow_id or workflow_version when w is not one
// RecordExecutionWorkflow takes (each required; the execution id as a
// claim's, the workflow fields as CheckWorkflow says); the error quotes no
// value.
func CheckExecutionWorkflow(w ExecutionWorkflow) error {
	if err := checkExecutionID(w.ExecutionID); err != nil {
		return err
	}
	if w.WorkflowID == "" {
		return apperr.Field("workflow_id", "is required")
	}
	if w.WorkflowVersion == "" {
		return apperr.Field("workflow_version", "is required")
	}
	return CheckWorkflow(w.WorkflowID, w.WorkflowVersion)
}
