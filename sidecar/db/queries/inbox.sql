-- The inbox's statements (package inbox): stored events, their dispatch
-- and its reservations, re-arms and replays.
--
-- claimed_since_armed, written out where it is used: whether the
-- workflow has claimed the event of inbox row ie (its claim c) since the
-- dispatch was armed: the claim has left received and, when it is
-- retryable_failed, a claim has won it since (every win counts an
-- attempt; ie.armed_attempt is the claim's attempt when a replay, a
-- redelivery or a reconciler's not_done armed the dispatch again, NULL
-- when only ingest armed it). A claim already retryable_failed when its
-- dispatch was re-armed is no sign that the workflow ran: n8n answers 200
-- "n8n is starting up" and runs nothing. Any other state (processing,
-- completed, unknown, dead_lettered...) is one the workflow's claim, a
-- holder or an operator put it in, as before:
--
--	c.state <> 'received'
--	AND (c.state <> 'retryable_failed' OR c.attempt > COALESCE(ie.armed_attempt, 0))

-- name: InsertInboxEvent :exec
-- Stores a new event's body and headers for its dispatch.
INSERT INTO inbox_events (claim_id, tenant, source, body, content_type, headers)
VALUES (@claim_id, @tenant, @source, @body, @content_type, @headers);

-- name: InsertInboxConflict :exec
-- Keeps the body of a delivery that reused a key with another payload.
INSERT INTO inbox_conflicts (claim_id, body, payload_hash) VALUES (@claim_id, @body, @payload_hash);

-- name: RearmDeadLettered :one
-- Re-arms a dead-lettered dispatch and logs it; returns whether it did.
-- The claim's attempt now is kept as armed_attempt: under require_claim a
-- 2xx counts once a claim has won the record since (claimed_since_armed).
-- detail is the delivery-log detail, actor the operator's key prefix
-- (NULL for a provider's redelivery), tenant the tenant an operator acts
-- for (NULL for a redelivery, whose record the group found under its own
-- tenant).
WITH e AS (UPDATE inbox_events ie SET dispatch_state = 'pending', dispatch_attempts = 0,
	last_dispatch_error = NULL, armed_attempt = (SELECT c.attempt FROM claims c WHERE c.id = ie.claim_id)
	WHERE ie.claim_id = @claim_id AND ie.dispatch_state = 'dead_lettered' AND (sqlc.narg(tenant)::text IS NULL OR ie.tenant = sqlc.narg(tenant))
	RETURNING ie.claim_id),
log AS (INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail, actor)
	SELECT c.id, 'dispatch_replayed', c.attempt, @detail::text, sqlc.narg(actor)::text FROM claims c JOIN e ON c.id = e.claim_id)
SELECT EXISTS (SELECT 1 FROM e);

-- name: Redispatch :one
-- Re-arms the dispatch of inbox event claim_id of tenant that is not
-- pending: pending again with a fresh attempt budget and no attempt in
-- flight, armed_attempt the claim's attempt now (under require_claim a
-- 2xx counts once a claim has won the record since:
-- claimed_since_armed), logged dispatch_replayed with detail. It returns
-- the event's source; no row when the claim has no inbox event or its
-- dispatch is pending (a dispatch job already runs for it: see
-- RearmPending).
WITH e AS (UPDATE inbox_events ie SET dispatch_state = 'pending', dispatch_attempts = 0,
	last_dispatch_status = NULL, last_dispatch_error = NULL, dispatch_holder = NULL, dispatch_lease_until = NULL,
	armed_attempt = (SELECT c.attempt FROM claims c WHERE c.id = ie.claim_id)
	WHERE ie.claim_id = @claim_id AND ie.tenant = @tenant AND ie.dispatch_state <> 'pending'
	RETURNING ie.claim_id, ie.source),
log AS (INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail)
	SELECT c.id, 'dispatch_replayed', c.attempt, @detail::text FROM claims c JOIN e ON c.id = e.claim_id)
SELECT source FROM e;

-- name: RearmPending :exec
-- Marks the pending dispatch of inbox event claim_id of tenant as armed
-- at the claim's attempt now: its job runs on, and under require_claim
-- its next 2xx counts once a claim has won the record since
-- (claimed_since_armed), not for the win before the not_done.
UPDATE inbox_events ie SET armed_attempt = (SELECT c.attempt FROM claims c WHERE c.id = ie.claim_id)
	WHERE ie.claim_id = @claim_id AND ie.tenant = @tenant AND ie.dispatch_state = 'pending';

-- name: InboxEventOf :one
-- An inbox event of tenant with what its record's key expiry needs: the
-- record's source (the dedupe scope) and last change.
SELECT e.claim_id, e.source, c.event_id, c.state, e.dispatch_state, e.dispatch_attempts,
	e.last_dispatch_status, COALESCE(e.last_dispatch_error, '') AS last_dispatch_error, e.received_at, e.dispatched_at,
	c.source AS scope, c.updated_at, COALESCE(c.origin, '') AS origin
	FROM inbox_events e JOIN claims c ON c.id = e.claim_id WHERE e.claim_id = @claim_id AND e.tenant = @tenant;

-- name: AdoptReceipts :exec
-- Gives each record of a shadow copy the receipt hash that an enforcing
-- door gives a record on its first provider delivery (the first
-- delivery's, kept when one is set), so that once shadow is turned off
-- the door compares its next copies with the payload seen in shadow: the
-- same payload is a duplicate, another a conflict. Claim ids and receipt
-- hashes in pairs.
UPDATE claims c SET receipt_hash = v.h
	FROM ROWS FROM (unnest(@ids::uuid[]), unnest(@hashes::text[])) AS v(id, h)
	WHERE c.id = v.id AND c.receipt_hash IS NULL AND v.h <> '';

-- name: PendingDispatchSources :many
-- The sources with pending dispatches.
SELECT DISTINCT source FROM inbox_events WHERE dispatch_state = 'pending';

-- name: WaitingDispatches :many
-- The pending dispatches of source that wait for it to be configured
-- (reason is their last_dispatch_error).
SELECT claim_id::text AS claim_id FROM inbox_events
		WHERE source = @source AND dispatch_state = 'pending' AND last_dispatch_error = @reason::text;

-- name: LoadEvents :many
-- The stored events of claim_ids, for their dispatch.
SELECT e.claim_id::text AS claim_id, c.tenant, c.source, c.event_id, COALESCE(c.event_type, '') AS event_type, e.content_type,
	e.dispatch_state, e.body, e.headers, e.dispatch_attempts, e.received_at
	FROM inbox_events e JOIN claims c ON c.id = e.claim_id WHERE e.claim_id = ANY(@ids::uuid[]);

-- name: ReserveDispatch :one
-- Reserves the next attempt of a pending dispatch that no attempt holds:
-- counts it and sets the holder token and the lease (lease_ms
-- milliseconds), in one autocommitted statement. No row: not pending, or
-- an attempt holds it.
UPDATE inbox_events SET dispatch_attempts = dispatch_attempts + 1, dispatch_holder = @holder::uuid,
	dispatch_lease_until = now() + sqlc.arg(lease_ms)::float8 * interval '1 millisecond'
	WHERE claim_id = @claim_id AND dispatch_state = 'pending' AND dispatch_holder IS NULL RETURNING dispatch_attempts;

-- name: LockDispatch :one
-- Locks a dispatch (the inbox row) and reads its reservation: whether an
-- attempt holds it, whether its lease is live and for how many
-- milliseconds more, and claimed_since_armed.
SELECT ie.dispatch_state, ie.dispatch_attempts, (ie.dispatch_holder IS NOT NULL)::boolean AS held,
			COALESCE(ie.dispatch_lease_until > now(), false)::boolean AS live,
			COALESCE(extract(epoch FROM ie.dispatch_lease_until - now()) * 1000, 0)::numeric AS remaining_ms, c.state <> 'received'
	AND (c.state <> 'retryable_failed' OR c.attempt > COALESCE(ie.armed_attempt, 0)) AS claimed
			FROM inbox_events ie JOIN claims c ON c.id = ie.claim_id WHERE ie.claim_id = @claim_id FOR UPDATE OF ie;

-- name: ReserveLockedDispatch :one
-- Reserves the next attempt of a dispatch locked by LockDispatch.
UPDATE inbox_events SET dispatch_attempts = dispatch_attempts + 1, dispatch_holder = @holder::uuid,
			dispatch_lease_until = now() + sqlc.arg(lease_ms)::float8 * interval '1 millisecond' WHERE claim_id = @claim_id::uuid RETURNING dispatch_attempts;

-- name: MarkDispatched :one
-- Marks a dispatch done with its delivery-log row and says whether it
-- did: only while the attempt (holder) holds the event and, with
-- require_claim, only once the event was claimed since the dispatch was
-- armed (claimed_since_armed). status is the HTTP status.
WITH e AS (UPDATE inbox_events ie SET dispatch_state = 'dispatched',
	last_dispatch_status = @status::int, last_dispatch_error = NULL, dispatched_at = now(),
	dispatch_holder = NULL, dispatch_lease_until = NULL
	WHERE ie.claim_id = @claim_id AND ie.dispatch_holder = @holder::uuid
	AND (NOT @require_claim::boolean OR EXISTS (SELECT 1 FROM claims c WHERE c.id = @claim_id AND c.state <> 'received'
	AND (c.state <> 'retryable_failed' OR c.attempt > COALESCE(ie.armed_attempt, 0))))
	RETURNING ie.claim_id), log AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail)
	SELECT claim_id, 'dispatched', @attempt, @detail::text FROM e)
	SELECT EXISTS (SELECT 1 FROM e);

-- name: MarkUnknownDispatched :exec
-- An attempt of unknown outcome (its lease ended, the record locked) that
-- the workflow's claim shows was received: dispatched, logged with detail.
WITH e AS (UPDATE inbox_events SET dispatch_state = 'dispatched', last_dispatch_status = NULL,
			last_dispatch_error = NULL, dispatched_at = now(), dispatch_holder = NULL, dispatch_lease_until = NULL
			WHERE claim_id = @claim_id::uuid RETURNING claim_id, received_at)
			INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail) SELECT claim_id, 'dispatched', @attempt, @detail::text FROM e;

-- name: DeadLetterUnknown :exec
-- An attempt of unknown outcome (the record locked) at the attempt cap:
-- dead-lettered, reason recorded and logged.
WITH e AS (UPDATE inbox_events SET dispatch_state = 'dead_lettered', last_dispatch_status = NULL,
			last_dispatch_error = @reason::text, dispatch_holder = NULL, dispatch_lease_until = NULL WHERE claim_id = @claim_id::uuid RETURNING claim_id)
			INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail) SELECT claim_id, 'dispatch_dead_lettered', @attempt, @reason::text FROM e;

-- name: FailUnknown :exec
-- An attempt of unknown outcome (the record locked) counted as failed:
-- released, reason recorded and logged.
WITH e AS (UPDATE inbox_events SET last_dispatch_status = NULL, last_dispatch_error = @reason::text,
		dispatch_holder = NULL, dispatch_lease_until = NULL WHERE claim_id = @claim_id::uuid RETURNING claim_id)
		INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail) SELECT claim_id, 'dispatch_failed', @attempt, @reason::text FROM e;

-- name: FailDispatch :execrows
-- Records a failed attempt (holder) to retry: its status (0 for none)
-- and reason, released and logged. No row: the attempt no longer holds
-- the event.
WITH e AS (UPDATE inbox_events SET last_dispatch_status = NULLIF(@status::int, 0),
		last_dispatch_error = @reason::text, dispatch_holder = NULL, dispatch_lease_until = NULL
		WHERE claim_id = @claim_id::uuid AND dispatch_holder = @holder::uuid RETURNING claim_id)
		INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail)
		SELECT claim_id, 'dispatch_failed', @attempt, @reason::text FROM e;

-- name: WaitForSource :execrows
-- Records that a pending dispatch waits for its source (reason), once:
-- no row when it already said so.
WITH e AS (UPDATE inbox_events SET last_dispatch_error = @reason::text
		WHERE claim_id = @claim_id::uuid AND dispatch_state = 'pending' AND last_dispatch_error IS DISTINCT FROM @reason::text RETURNING claim_id)
		INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail)
		SELECT claim_id, 'dispatch_failed', @attempt, @reason::text FROM e;

-- name: DeadLetterDispatch :execrows
-- Dead-letters the dispatch whose attempt (holder) got status (0 for
-- none), reason recorded and logged. No row: the attempt no longer holds
-- the event.
WITH e AS (UPDATE inbox_events SET dispatch_state = 'dead_lettered',
		last_dispatch_status = NULLIF(@status::int, 0), last_dispatch_error = @reason::text, dispatch_holder = NULL, dispatch_lease_until = NULL
		WHERE claim_id = @claim_id::uuid AND dispatch_holder = @holder::uuid RETURNING claim_id)
		INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail)
		SELECT claim_id, 'dispatch_dead_lettered', @attempt, @reason::text FROM e;
