package claim

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
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

// executionRecordsSQL locks (FOR NO KEY UPDATE, in id order) the records
// of tenant $1 that hold entries of execution $2 without a version, whose
// workflow is not named or is $4, at most $3 of them (claims index
// claim_deliveries_unversioned_execution_idx, migration 00021).
const executionRecordsSQL = `SELECT c.id FROM claims c
	WHERE c.tenant = $1 AND c.id IN (
		SELECT d.claim_id FROM claim_deliveries d
		WHERE d.execution_id = $2 AND d.workflow_version IS NULL
		  AND d.outcome IN ('won', 'duplicate', 'in_progress', 'conflict')
		  AND (d.workflow_id IS NULL OR d.workflow_id = $4)
		LIMIT $3)
	ORDER BY c.id FOR NO KEY UPDATE OF c`

// executionVersionSQL writes workflow $3 version $4 on the entries of
// execution $2 of records $1 that name no version.
const executionVersionSQL = `UPDATE claim_deliveries d
	SET workflow_version = $4, workflow_id = COALESCE(d.workflow_id, $3)
	WHERE d.claim_id = ANY($1::uuid[]) AND d.execution_id = $2 AND d.workflow_version IS NULL
	  AND d.outcome IN ('won', 'duplicate', 'in_progress', 'conflict')
	  AND (d.workflow_id IS NULL OR d.workflow_id = $3)`

// reexplainSQL explains again the copies of records $1 explained n8n_twice
// or upstream_repeat against execution $2 (theirs or their winner's: the
// last won entry before them), when the note still starts as
// duplicate_cause wrote it for those two executions. Notes in
// duplicate_cause's words (migration 00020). It returns each entry it
// changed with its record's source, the cause before and after, and
// whether it is a shadow entry.
const reexplainSQL = `WITH cand AS (
	SELECT e.id, e.claim_id, e.cause AS old_cause, COALESCE(e.cause_note, '') AS old_note, e.shadow,
		e.execution_id AS e_exec, e.workflow_id AS e_wid, e.workflow_version AS e_ver,
		w.execution_id AS w_exec, w.workflow_id AS w_wid, w.workflow_version AS w_ver
	FROM claim_deliveries e
	CROSS JOIN LATERAL (SELECT execution_id, workflow_id, workflow_version FROM claim_deliveries
		WHERE claim_id = e.claim_id AND outcome = 'won' AND id < e.id ORDER BY id DESC LIMIT 1) w
	WHERE e.claim_id = ANY($1::uuid[]) AND e.outcome IN ('duplicate', 'in_progress')
	  AND e.cause IN ('n8n_twice', 'upstream_repeat') AND e.door IS NULL
	  AND e.execution_id IS NOT NULL AND w.execution_id IS NOT NULL AND w.execution_id <> e.execution_id
	  AND $2 IN (e.execution_id, w.execution_id)
), judged AS (
	SELECT cand.*,
		CASE WHEN old_cause = 'n8n_twice'
			THEN format('executions %s and %s both ran the one delivery claimd dispatched once', w_exec, e_exec)
			ELSE format('execution %s claimed it again after execution %s; claimd did not dispatch it, '
				|| 'so the repeat came from what started the workflow', e_exec, w_exec) END AS prefix,
		(w_ver IS NOT NULL AND e_ver IS NOT NULL AND w_ver <> e_ver
			AND (w_wid IS NULL OR e_wid IS NULL OR w_wid = e_wid)) AS two
	FROM cand
), revised AS (
	SELECT j.id, j.claim_id, j.old_cause, j.shadow,
		CASE WHEN j.two THEN 'n8n_two_versions' ELSE j.old_cause END AS new_cause,
		CASE WHEN j.two THEN format('execution %s ran %s and execution %s ran %s: two versions of the '
				|| 'workflow were active at once (after an edit or a new activation, the old version''s trigger still ran)',
				j.w_exec, workflow_words(j.w_wid, j.w_ver), j.e_exec, workflow_words(j.e_wid, j.e_ver))
			ELSE j.prefix || format('; execution %s ran %s, execution %s ran %s', j.w_exec,
				workflow_words(j.w_wid, j.w_ver), j.e_exec, workflow_words(j.e_wid, j.e_ver)) END AS new_note
	FROM judged j
	WHERE starts_with(j.old_note, j.prefix)
)
UPDATE claim_deliveries d SET cause = r.new_cause, cause_note = r.new_note
FROM revised r JOIN claims c ON c.id = r.claim_id
WHERE d.id = r.id AND (d.cause, d.cause_note) IS DISTINCT FROM (r.new_cause, r.new_note)
RETURNING c.source, r.old_cause, r.new_cause, r.shadow`

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
		rows, err := tx.Query(ctx, executionRecordsSQL, tenant, w.ExecutionID, MaxExecutionWorkflowRecords+1, w.WorkflowID)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		if len(ids) > MaxExecutionWorkflowRecords {
			ids, out.More = ids[:MaxExecutionWorkflowRecords], true
		}
		if len(ids) == 0 {
			return nil
		}
		tag, err := tx.Exec(ctx, executionVersionSQL, ids, w.ExecutionID, w.WorkflowID, w.WorkflowVersion)
		if err != nil {
			return err
		}
		out.Entries = int(tag.RowsAffected())
		rows, err = tx.Query(ctx, reexplainSQL, ids, w.ExecutionID)
		if err != nil {
			return err
		}
		var (
			r      CauseRevision
			from   string
			to     string
			shadow bool
		)
		_, err = pgx.ForEachRow(rows, []any{&r.Source, &from, &to, &shadow}, func() error {
			if from != to {
				out.Revised++
				if !shadow {
					revisions = append(revisions, CauseRevision{Source: r.Source, From: Cause(from), To: Cause(to)})
				}
			}
			return nil
		})
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
