-- name: OverviewOpen :many
-- Counts tenant's open records per source and state, with the oldest
-- received and processing ages (seconds), through the partial index
-- claims_list_idx (tenant, state, …).
SELECT source, state, count(*) AS records,
	COALESCE(EXTRACT(EPOCH FROM statement_timestamp() - min(created_at) FILTER (WHERE state = 'received')), 0)::float8
		AS oldest_received_seconds,
	COALESCE(EXTRACT(EPOCH FROM statement_timestamp() - min(claimed_at) FILTER (WHERE state = 'processing')), 0)::float8
		AS oldest_processing_seconds
FROM claims
WHERE tenant = @tenant AND state IN ('received', 'processing', 'retryable_failed', 'dead_lettered', 'unknown')
GROUP BY source, state;

-- name: OverviewConflicts :many
-- Counts tenant's records with conflicts, and the conflicts, per source
-- (partial index claims_conflicts_idx, migration 00010).
SELECT source, count(*) AS records, sum(conflict_count)::bigint AS conflicts FROM claims
WHERE tenant = @tenant AND conflict_count > 0 GROUP BY source;

-- name: OverviewDeadDispatches :many
-- Counts tenant's dead-lettered dispatches per source of their record
-- (partial index inbox_events_dispatch_dead_idx).
SELECT c.source, count(*) AS dispatches FROM inbox_events e JOIN claims c ON c.id = e.claim_id
WHERE e.tenant = @tenant AND e.dispatch_state = 'dead_lettered' AND c.tenant = @tenant GROUP BY c.source;

-- name: BrowseByUpdated :many
-- One page of tenant's records, newest first by (updated_at, id) (the last change),
-- after the cursor position (after_at, after_id) when given (after_at
-- NULL: from the start); state, source and event_id_prefix (each NULL:
-- any), from and until (NULL: unbounded; from ≤ updated_at < until), at most
-- max_rows. The prefix is compared with starts_with, so no byte of it is
-- a wildcard.
SELECT claims.id, claims.tenant, claims.source, claims.event_id, claims.action,
	COALESCE(claims.event_type, '') AS event_type, claims.state, claims.last_outcome, claims.attempt,
	claims.max_attempts, claims.lease_policy, claims.lease_until, claims.next_attempt_at,
	COALESCE(claims.payload_hash, '') AS payload_hash, COALESCE(claims.result_ref, '') AS result_ref,
	COALESCE(claims.last_error, '') AS last_error, COALESCE(claims.object_id, '') AS object_id,
	claims.object_version, claims.conflict_count, claims.created_at, claims.updated_at,
	claims.claimed_at, claims.completed_at, claims.claim_token,
	COALESCE(claims.receipt_hash, '') AS receipt_hash, COALESCE(claims.origin, '') AS origin,
	COALESCE(claims.reconciler, '') AS reconciler
FROM claims
WHERE claims.tenant = @tenant
  AND (sqlc.narg(state)::text IS NULL OR claims.state = sqlc.narg(state)::text)
  AND (sqlc.narg(source)::text IS NULL OR claims.source = sqlc.narg(source)::text)
  AND (sqlc.narg(event_id_prefix)::text IS NULL OR starts_with(claims.event_id, sqlc.narg(event_id_prefix)::text))
  AND (sqlc.narg(from_at)::timestamptz IS NULL OR claims.updated_at >= sqlc.narg(from_at)::timestamptz)
  AND (sqlc.narg(until_at)::timestamptz IS NULL OR claims.updated_at < sqlc.narg(until_at)::timestamptz)
  AND (sqlc.narg(after_at)::timestamptz IS NULL
       OR (claims.updated_at, claims.id) < (sqlc.narg(after_at)::timestamptz, sqlc.narg(after_id)::uuid))
ORDER BY claims.updated_at DESC, claims.id DESC
LIMIT @max_rows;

-- name: BrowseByCreated :many
-- One page of tenant's records, newest first by (created_at, id) (when first seen),
-- after the cursor position (after_at, after_id) when given (after_at
-- NULL: from the start); state, source and event_id_prefix (each NULL:
-- any), from and until (NULL: unbounded; from ≤ created_at < until), at most
-- max_rows. The prefix is compared with starts_with, so no byte of it is
-- a wildcard.
SELECT claims.id, claims.tenant, claims.source, claims.event_id, claims.action,
	COALESCE(claims.event_type, '') AS event_type, claims.state, claims.last_outcome, claims.attempt,
	claims.max_attempts, claims.lease_policy, claims.lease_until, claims.next_attempt_at,
	COALESCE(claims.payload_hash, '') AS payload_hash, COALESCE(claims.result_ref, '') AS result_ref,
	COALESCE(claims.last_error, '') AS last_error, COALESCE(claims.object_id, '') AS object_id,
	claims.object_version, claims.conflict_count, claims.created_at, claims.updated_at,
	claims.claimed_at, claims.completed_at, claims.claim_token,
	COALESCE(claims.receipt_hash, '') AS receipt_hash, COALESCE(claims.origin, '') AS origin,
	COALESCE(claims.reconciler, '') AS reconciler
FROM claims
WHERE claims.tenant = @tenant
  AND (sqlc.narg(state)::text IS NULL OR claims.state = sqlc.narg(state)::text)
  AND (sqlc.narg(source)::text IS NULL OR claims.source = sqlc.narg(source)::text)
  AND (sqlc.narg(event_id_prefix)::text IS NULL OR starts_with(claims.event_id, sqlc.narg(event_id_prefix)::text))
  AND (sqlc.narg(from_at)::timestamptz IS NULL OR claims.created_at >= sqlc.narg(from_at)::timestamptz)
  AND (sqlc.narg(until_at)::timestamptz IS NULL OR claims.created_at < sqlc.narg(until_at)::timestamptz)
  AND (sqlc.narg(after_at)::timestamptz IS NULL
       OR (claims.created_at, claims.id) < (sqlc.narg(after_at)::timestamptz, sqlc.narg(after_id)::uuid))
ORDER BY claims.created_at DESC, claims.id DESC
LIMIT @max_rows;
