-- The ledger's statements (package claim). A statement that returns a
-- record selects the record columns of Record, in its order, so that its
-- row type converts to dbsqlc.RecordRow (claim's recordOf reads that).

-- name: Record :one
-- The record id of tenant.
SELECT id, tenant, source, event_id, action, COALESCE(event_type, '') AS event_type, state,
	last_outcome, attempt, max_attempts, lease_policy, lease_until, next_attempt_at,
	COALESCE(payload_hash, '') AS payload_hash, COALESCE(result_ref, '') AS result_ref,
	COALESCE(last_error, '') AS last_error, COALESCE(object_id, '') AS object_id, object_version,
	conflict_count, created_at, updated_at, claimed_at, completed_at, claim_token,
	COALESCE(receipt_hash, '') AS receipt_hash, COALESCE(origin, '') AS origin,
	COALESCE(reconciler, '') AS reconciler
FROM claims WHERE id = @id AND tenant = @tenant;

-- name: RecordByKey :one
-- The record of a key.
SELECT id, tenant, source, event_id, action, COALESCE(event_type, '') AS event_type, state,
	last_outcome, attempt, max_attempts, lease_policy, lease_until, next_attempt_at,
	COALESCE(payload_hash, '') AS payload_hash, COALESCE(result_ref, '') AS result_ref,
	COALESCE(last_error, '') AS last_error, COALESCE(object_id, '') AS object_id, object_version,
	conflict_count, created_at, updated_at, claimed_at, completed_at, claim_token,
	COALESCE(receipt_hash, '') AS receipt_hash, COALESCE(origin, '') AS origin,
	COALESCE(reconciler, '') AS reconciler
FROM claims
WHERE tenant = @tenant AND source = @source AND event_id = @event_id AND action = @action;

-- name: Deliveries :many
-- The delivery log of a record, oldest first, at most max_entries.
SELECT at, outcome, attempt, COALESCE(payload_hash, '') AS payload_hash,
	COALESCE(execution_id, '') AS execution_id, COALESCE(detail, '') AS detail, COALESCE(actor, '') AS actor,
	COALESCE(door, '') AS door, COALESCE(cause, '') AS cause, COALESCE(cause_note, '') AS cause_note, shadow,
	COALESCE(workflow_id, '') AS workflow_id, COALESCE(workflow_version, '') AS workflow_version
FROM claim_deliveries WHERE claim_id = @claim_id ORDER BY id LIMIT @max_entries;

-- name: Extend :one
-- Extends the lease of a processing record whose claim token is token to
-- lease_seconds from now, and logs it. No row: the guard matched none.
WITH c AS (
	UPDATE claims SET lease_until = statement_timestamp() + make_interval(secs => @lease_seconds::float8),
		updated_at = statement_timestamp()
	WHERE claims.id = @id AND claims.tenant = @tenant AND claim_token = @token::uuid AND state = 'processing'
	RETURNING *
), log AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail)
	SELECT c.id, 'lease_extended', c.attempt, (@lease_seconds::float8)::text || 's' FROM c
)
SELECT c.id, c.tenant, c.source, c.event_id, c.action, COALESCE(c.event_type, '') AS event_type, c.state,
	c.last_outcome, c.attempt, c.max_attempts, c.lease_policy, c.lease_until, c.next_attempt_at,
	COALESCE(c.payload_hash, '') AS payload_hash, COALESCE(c.result_ref, '') AS result_ref,
	COALESCE(c.last_error, '') AS last_error, COALESCE(c.object_id, '') AS object_id, c.object_version,
	c.conflict_count, c.created_at, c.updated_at, c.claimed_at, c.completed_at, c.claim_token,
	COALESCE(c.receipt_hash, '') AS receipt_hash, COALESCE(c.origin, '') AS origin,
	COALESCE(c.reconciler, '') AS reconciler FROM c;

-- name: Resolve :one
-- The operator's decision on an unknown or dead-lettered record: outcome
-- completed (the effect happened; result_ref, NULL keeps the record's),
-- retry (claimable at once, one more attempt allowed) or failed (an
-- unknown record becomes dead_lettered; a dead-lettered one is not
-- matched). The guard is the whole decision: a record in another state
-- (or resolved by a concurrent call) matches no row and nothing is
-- written. The completed record's object version is recorded as its
-- object's newest completed one. note is the delivery-log detail, actor
-- the operator's key prefix (NULL for none).
WITH c AS (
	UPDATE claims SET
		state = CASE @outcome::text WHEN 'completed' THEN 'completed' WHEN 'failed' THEN 'dead_lettered' ELSE 'retryable_failed' END,
		result_ref = CASE WHEN @outcome::text = 'completed' THEN COALESCE(sqlc.narg(result_ref)::text, result_ref) ELSE result_ref END,
		completed_at = CASE WHEN @outcome::text = 'completed' THEN statement_timestamp() END,
		next_attempt_at = CASE WHEN @outcome::text = 'retry' THEN statement_timestamp() END,
		max_attempts = CASE WHEN @outcome::text = 'retry' THEN GREATEST(max_attempts, attempt + 1) ELSE max_attempts END,
		lease_until = NULL, updated_at = statement_timestamp()
	WHERE claims.id = @id AND claims.tenant = @tenant AND state IN ('unknown', 'dead_lettered')
	  AND (@outcome::text <> 'failed' OR state = 'unknown')
	RETURNING *
), v AS (
	INSERT INTO object_versions AS ov (tenant, source, action, object_id, last_version)
	SELECT tenant, source, action, object_id, object_version FROM c
	WHERE state = 'completed' AND object_id IS NOT NULL AND object_version IS NOT NULL
	ON CONFLICT (tenant, source, action, object_id) DO UPDATE
	SET last_version = GREATEST(ov.last_version, excluded.last_version), updated_at = statement_timestamp()
), log AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail, actor)
	SELECT c.id, 'resolved_' || @outcome::text, c.attempt, @note::text, sqlc.narg(actor)::text FROM c
)
SELECT c.id, c.tenant, c.source, c.event_id, c.action, COALESCE(c.event_type, '') AS event_type, c.state,
	c.last_outcome, c.attempt, c.max_attempts, c.lease_policy, c.lease_until, c.next_attempt_at,
	COALESCE(c.payload_hash, '') AS payload_hash, COALESCE(c.result_ref, '') AS result_ref,
	COALESCE(c.last_error, '') AS last_error, COALESCE(c.object_id, '') AS object_id, c.object_version,
	c.conflict_count, c.created_at, c.updated_at, c.claimed_at, c.completed_at, c.claim_token,
	COALESCE(c.receipt_hash, '') AS receipt_hash, COALESCE(c.origin, '') AS origin,
	COALESCE(c.reconciler, '') AS reconciler FROM c;

-- name: Release :one
-- An operator releasing a stuck processing record to unknown: what a
-- lease expiry under policy review does, at once and whatever the
-- record's policy or lease end. The claim token is kept, so the holder is
-- fenced exactly as after such an expiry: its Complete still lands (the
-- effect did happen; Complete takes unknown), its Fail and Extend answer
-- lease_lost, and every claim of the key answers unknown until an
-- operator resolves it. Only a processing record of tenant matches;
-- anything else writes nothing. note is the delivery-log detail, actor
-- the operator's key prefix.
WITH c AS (
	UPDATE claims SET state = 'unknown', last_outcome = 'unknown', lease_until = NULL,
		last_error = 'released to unknown by an operator', updated_at = statement_timestamp()
	WHERE claims.id = @id AND claims.tenant = @tenant AND state = 'processing'
	RETURNING *
), log AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail, actor)
	SELECT c.id, 'released', c.attempt, @note::text, sqlc.narg(actor)::text FROM c
)
SELECT c.id, c.tenant, c.source, c.event_id, c.action, COALESCE(c.event_type, '') AS event_type, c.state,
	c.last_outcome, c.attempt, c.max_attempts, c.lease_policy, c.lease_until, c.next_attempt_at,
	COALESCE(c.payload_hash, '') AS payload_hash, COALESCE(c.result_ref, '') AS result_ref,
	COALESCE(c.last_error, '') AS last_error, COALESCE(c.object_id, '') AS object_id, c.object_version,
	c.conflict_count, c.created_at, c.updated_at, c.claimed_at, c.completed_at, c.claim_token,
	COALESCE(c.receipt_hash, '') AS receipt_hash, COALESCE(c.origin, '') AS origin,
	COALESCE(c.reconciler, '') AS reconciler FROM c;

-- name: SweepExpiredLeases :one
-- Moves one batch of at most max_rows expired processing leases under
-- lease policy review to unknown, and logs each; returns how many.
WITH c AS (
	UPDATE claims SET state = 'unknown', last_outcome = 'unknown',
		last_error = 'lease expired under lease policy review', updated_at = statement_timestamp()
	WHERE id IN (
		SELECT id FROM claims
		WHERE state = 'processing' AND lease_policy = 'review' AND lease_until <= statement_timestamp()
		LIMIT @max_rows FOR UPDATE SKIP LOCKED)
	RETURNING id, attempt
), log AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail)
	SELECT c.id, 'lease_expired', c.attempt, 'moved to unknown under lease policy review' FROM c
)
SELECT count(*) FROM c;

-- name: LedgerStats :one
-- The gauges: open records by state, the age of the oldest processing
-- claim and received event (seconds), inbox dispatches pending and
-- dead-lettered, and the age of the oldest pending dispatch (seconds; the
-- first entry of inbox_events_pending_idx).
SELECT
	count(*) FILTER (WHERE state = 'unknown') AS unknown,
	count(*) FILTER (WHERE state = 'dead_lettered') AS dead_lettered,
	count(*) FILTER (WHERE state = 'processing') AS processing,
	count(*) FILTER (WHERE state = 'retryable_failed') AS retryable_failed,
	count(*) FILTER (WHERE state = 'received') AS received,
	COALESCE(EXTRACT(EPOCH FROM statement_timestamp() - min(claimed_at) FILTER (WHERE state = 'processing')), 0)::float8 AS oldest_processing_seconds,
	COALESCE(EXTRACT(EPOCH FROM statement_timestamp() - min(created_at) FILTER (WHERE state = 'received')), 0)::float8 AS oldest_received_seconds,
	(SELECT count(*) FROM inbox_events WHERE dispatch_state = 'pending') AS dispatch_pending,
	(SELECT count(*) FROM inbox_events WHERE dispatch_state = 'dead_lettered') AS dispatch_dead_lettered,
	COALESCE((SELECT EXTRACT(EPOCH FROM statement_timestamp() - min(received_at))
		FROM inbox_events WHERE dispatch_state = 'pending'), 0)::float8 AS oldest_pending_dispatch_seconds
FROM claims
WHERE state IN ('unknown', 'dead_lettered', 'processing', 'retryable_failed', 'received');
