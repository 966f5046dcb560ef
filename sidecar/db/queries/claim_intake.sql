-- name: RecordNonce :one
-- Records nonce_hash for the delivery delivery_hash, kept ttl_seconds,
-- and answers whether the nonce is now bound to this delivery: true when
-- it is new (or its row expired, not yet purged: replaced), or was
-- recorded with this same delivery; false when it is bound to another.
-- The conflicting row is locked (DO UPDATE), so two deliveries of one
-- nonce at once are decided one after the other.
INSERT INTO delivery_nonces AS n (tenant, scope, nonce_hash, delivery_hash, expires_at)
VALUES (@tenant, @scope, @nonce_hash, @delivery_hash, statement_timestamp() + make_interval(secs => @ttl_seconds::float8))
ON CONFLICT (tenant, scope, nonce_hash) DO UPDATE SET
	delivery_hash = CASE WHEN n.expires_at <= statement_timestamp() THEN EXCLUDED.delivery_hash ELSE n.delivery_hash END,
	expires_at = CASE WHEN n.expires_at <= statement_timestamp() THEN EXCLUDED.expires_at ELSE n.expires_at END
RETURNING (n.delivery_hash = @delivery_hash)::boolean AS same_delivery;

-- name: PurgeNonces :execrows
-- Deletes one batch (max_rows) of expired nonces, oldest first, skipping
-- rows another transaction holds. Index: delivery_nonces_expires_idx.
WITH doomed AS (
	SELECT tenant, scope, nonce_hash FROM delivery_nonces
	WHERE expires_at <= statement_timestamp()
	ORDER BY expires_at
	LIMIT @max_rows
	FOR UPDATE SKIP LOCKED
)
DELETE FROM delivery_nonces n USING doomed d
WHERE n.tenant = d.tenant AND n.scope = d.scope AND n.nonce_hash = d.nonce_hash;

-- name: KnownEventIDs :many
-- The event ids among event_ids that tenant holds records of (the
-- event-level claim, action '') for source.
SELECT event_id FROM claims
WHERE tenant = @tenant AND source = @source AND event_id = ANY(@event_ids::text[]) AND action = '';

-- name: ReceiveBackfilled :one
-- Stores an inbox record claimd made from the provider's list (origin
-- backfill), logged 'received' with detail; payload_hash (the copy's
-- hash) goes to the log only. No row: the key exists already, and
-- nothing was written.
WITH c AS (
	INSERT INTO claims (tenant, source, event_id, action, event_type, state, last_outcome,
		attempt, max_attempts, lease_policy, backoff_base, backoff_cap, receipt_hash, object_id, object_version, origin)
	VALUES (@tenant::text, @source::text, @event_id::text, '', sqlc.narg(event_type)::text, 'received', 'received', 0,
		@max_attempts::int, @lease_policy::text, @backoff_base_seconds::float8, @backoff_cap_seconds::float8, NULL,
		sqlc.narg(object_id)::text, sqlc.narg(object_version)::bigint, 'backfill')
	ON CONFLICT (tenant, source, event_id, action) DO NOTHING
	RETURNING id, attempt
), log AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, payload_hash, detail)
	SELECT c.id, 'received', c.attempt, sqlc.narg(payload_hash)::text, @detail::text FROM c
)
SELECT c.id::text AS id FROM c;

-- name: RetryHint :one
-- The quantile of the claim-to-complete times, in seconds, of the latest
-- max_entries completions of (tenant, source, action), and how many there
-- were. claims_completed_idx (tenant, source, action, completed_at) WHERE
-- state = 'completed' serves it newest first, reading at most max_entries
-- entries whatever the table's size.
SELECT count(*) AS completions,
	COALESCE(percentile_disc(@quantile::float8) WITHIN GROUP (ORDER BY d), 0)::float8 AS seconds
FROM (
	SELECT EXTRACT(EPOCH FROM completed_at - claimed_at)::float8 AS d
	FROM claims
	WHERE tenant = @tenant AND source = @source AND action = @action AND state = 'completed'
	  AND claimed_at IS NOT NULL AND completed_at >= claimed_at
	ORDER BY completed_at DESC
	LIMIT @max_entries
) recent;

-- name: ArmWait :many
-- Marks the records ids of tenant that are still processing as waited on
-- (wait_notify, see migration 00007) and returns each one's id, its lease
-- end and the database's clock (db_now), so that the caller counts the
-- time left of the lease by the database's clock (a skewed clock on this
-- host cannot make a waiter decide again and again before the lease
-- really ended). A record that is not returned has left processing
-- (or does not exist). Records already marked are only read: the first
-- branch updates the unmarked ones, the second reads the marked ones in
-- the statement's snapshot (where the first branch's updates are not
-- visible, so no record is returned twice). A settle that commits after
-- this statement finds the mark and notifies; one that commits before it
-- is seen by it.
WITH marked AS (
	UPDATE claims SET wait_notify = true
	WHERE claims.tenant = @tenant AND claims.id = ANY(@ids::uuid[]) AND claims.state = 'processing' AND NOT claims.wait_notify
	RETURNING claims.id, claims.lease_until
)
SELECT marked.id::text AS id, marked.lease_until, statement_timestamp()::timestamptz AS db_now
FROM marked
UNION ALL
SELECT claims.id::text, claims.lease_until, statement_timestamp() FROM claims
WHERE claims.tenant = @tenant AND claims.id = ANY(@ids::uuid[]) AND claims.state = 'processing' AND claims.wait_notify;
