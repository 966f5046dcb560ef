package claim

// recordColumns is the column list every query returns, in scanRecord order.
const recordColumns = `id, tenant, source, event_id, action, COALESCE(event_type, ''), state,
	last_outcome, attempt, max_attempts, lease_policy, lease_until, next_attempt_at,
	COALESCE(payload_hash, ''), COALESCE(result_ref, ''), COALESCE(last_error, ''),
	COALESCE(object_id, ''), object_version, conflict_count, created_at, updated_at,
	claimed_at, completed_at, claim_token::text, COALESCE(receipt_hash, ''), COALESCE(origin, ''),
	COALESCE(reconciler, '')`

// completedObjectVersionSQL records, for the rows of CTE c that became
// completed, their object version as the newest completed one of their
// object (out-of-order protection: a later claim of an older or equal
// version is stale). The body of the v CTE of a decision that completes a
// record by hand: the operator's Resolve and a reconciler's done.
const completedObjectVersionSQL = `INSERT INTO object_versions AS ov (tenant, source, action, object_id, last_version)
	SELECT tenant, source, action, object_id, object_version FROM c
	WHERE state = 'completed' AND object_id IS NOT NULL AND object_version IS NOT NULL
	ON CONFLICT (tenant, source, action, object_id) DO UPDATE
	SET last_version = GREATEST(ov.last_version, excluded.last_version), updated_at = statement_timestamp()`
