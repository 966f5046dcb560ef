-- name: LockExecutionRecords :many
-- Locks (FOR NO KEY UPDATE, in id order) the records of tenant that hold
-- entries of execution execution_id without a version, whose workflow is
-- not named or is workflow_id, at most max_rows of them (claims index
-- claim_deliveries_unversioned_execution_idx, migration 00021).
SELECT c.id FROM claims c
WHERE c.tenant = @tenant AND c.id IN (
	SELECT d.claim_id FROM claim_deliveries d
	WHERE d.execution_id = @execution_id::text AND d.workflow_version IS NULL
	  AND d.outcome IN ('won', 'duplicate', 'in_progress', 'conflict')
	  AND (d.workflow_id IS NULL OR d.workflow_id = @workflow_id::text)
	LIMIT @max_rows)
ORDER BY c.id FOR NO KEY UPDATE OF c;

-- name: SetExecutionVersion :execrows
-- Writes workflow workflow_id version workflow_version on the entries of
-- execution execution_id of records claim_ids that name no version.
UPDATE claim_deliveries d
SET workflow_version = @workflow_version::text, workflow_id = COALESCE(d.workflow_id, @workflow_id::text)
WHERE d.claim_id = ANY(@claim_ids::uuid[]) AND d.execution_id = @execution_id::text AND d.workflow_version IS NULL
  AND d.outcome IN ('won', 'duplicate', 'in_progress', 'conflict')
  AND (d.workflow_id IS NULL OR d.workflow_id = @workflow_id::text);

-- name: ReexplainCopies :many
-- Explains again the copies of records claim_ids explained n8n_twice or
-- upstream_repeat against execution execution_id (theirs or their
-- winner's: the last won entry before them), when the note still starts
-- as duplicate_cause wrote it for those two executions. Notes in
-- duplicate_cause's words (migration 00020). It returns each entry it
-- changed with its record's source, the cause before and after, and
-- whether it is a shadow entry.
WITH cand AS (
	SELECT e.id, e.claim_id, e.cause AS old_cause, COALESCE(e.cause_note, '') AS old_note, e.shadow,
		e.execution_id AS e_exec, e.workflow_id AS e_wid, e.workflow_version AS e_ver,
		w.execution_id AS w_exec, w.workflow_id AS w_wid, w.workflow_version AS w_ver
	FROM claim_deliveries e
	CROSS JOIN LATERAL (SELECT execution_id, workflow_id, workflow_version FROM claim_deliveries
		WHERE claim_id = e.claim_id AND outcome = 'won' AND id < e.id ORDER BY id DESC LIMIT 1) w
	WHERE e.claim_id = ANY(@claim_ids::uuid[]) AND e.outcome IN ('duplicate', 'in_progress')
	  AND e.cause IN ('n8n_twice', 'upstream_repeat') AND e.door IS NULL
	  AND e.execution_id IS NOT NULL AND w.execution_id IS NOT NULL AND w.execution_id <> e.execution_id
	  AND @execution_id::text IN (e.execution_id, w.execution_id)
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
RETURNING c.source, r.old_cause::text AS old_cause, r.new_cause::text AS new_cause, r.shadow;
