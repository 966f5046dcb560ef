-- name: Record :one
-- The record id of tenant. Every statement of package claim that returns
-- a claims record selects these columns, in this order, so that its row
-- converts to RecordRow (claim's recordOf reads that).
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

-- The retention purge, per set of sources: the sources named in sources,
-- or, when exclude, every source NOT named in it (those under the default
-- policy). Each statement handles one bounded batch (max_rows) of
-- terminal records (completed, dead_lettered, stale; open records are
-- never purged) whose last change (updated_at) is older than
-- retention_seconds, oldest first, and skips rows another transaction
-- holds (SKIP LOCKED: a claim or a redelivery deciding on them, or a purge
-- on another replica). ORDER BY the indexed column keeps the plan on the
-- partial index whatever the estimate: the planner cannot estimate "older
-- than now() minus retention" and assumes a third of the rows match, and
-- with a bare LIMIT it would then rather scan the table for the first
-- matches, which with nothing due means reading every kept key on every
-- run. On the index a batch reads about as many entries as it removes,
-- and a run with nothing due a few pages.

-- name: PurgeKeys :execrows
-- Deletes one batch of records past their key retention: the key, its
-- hashes and result, and by cascade whatever payload and delivery log
-- they still hold. A later delivery of such a key is a new event. Index:
-- claims_terminal_updated_idx.
WITH doomed AS (
	SELECT id FROM claims
	WHERE state IN ('completed', 'dead_lettered', 'stale')
	  AND updated_at < statement_timestamp() - make_interval(secs => @retention_seconds::float8)
	  AND (CASE WHEN @exclude::boolean THEN source <> ALL(@sources::text[]) ELSE source = ANY(@sources::text[]) END)
	ORDER BY updated_at
	LIMIT @max_rows
	FOR UPDATE SKIP LOCKED
)
DELETE FROM claims USING doomed WHERE claims.id = doomed.id;

-- name: PurgePayloads :one
-- Removes the payload of one batch of records past their payload
-- retention and keeps the records: the inbox body and headers (the
-- inbox_events row: a dispatch job still queued for it finds nothing and
-- ends, a redelivery finds nothing to re-arm), the bodies of conflicting
-- deliveries, the delivery log and last_error. One payload_purged entry,
-- counting the entries removed, replaces the log. The key, payload_hash,
-- receipt_hash, state, result_ref, attempt and times stay, so a
-- redelivery or a claim of the key is still decided as before: duplicate
-- with its result_ref, conflict on another hash. payload_purged_at takes
-- the record out of the partial index the batch is chosen by
-- (claims_payload_purge_idx). FOR NO KEY UPDATE: the purge changes no key
-- column, so it never waits for, or blocks, a delivery-log insert of the
-- same record (a foreign-key check). The rows of the batch are found as
-- "claim_id = ANY(array)", by index whatever the tables' sizes (a join
-- with c may be planned as a scan of the whole delivery log). Returns how
-- many records it purged.
WITH doomed AS (
	SELECT id FROM claims
	WHERE state IN ('completed', 'dead_lettered', 'stale') AND payload_purged_at IS NULL
	  AND updated_at < statement_timestamp() - make_interval(secs => @retention_seconds::float8)
	  AND (CASE WHEN @exclude::boolean THEN source <> ALL(@sources::text[]) ELSE source = ANY(@sources::text[]) END)
	ORDER BY updated_at
	LIMIT @max_rows
	FOR NO KEY UPDATE SKIP LOCKED
), c AS (
	UPDATE claims SET payload_purged_at = statement_timestamp(), last_error = NULL
	FROM doomed WHERE claims.id = doomed.id
	RETURNING claims.id, claims.attempt
), body AS (
	DELETE FROM inbox_events WHERE claim_id = ANY(ARRAY(SELECT id FROM c))
), conflicts AS (
	DELETE FROM inbox_conflicts WHERE claim_id = ANY(ARRAY(SELECT id FROM c))
), trail AS (
	DELETE FROM claim_deliveries WHERE claim_id = ANY(ARRAY(SELECT id FROM c)) RETURNING claim_id
), summary AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail)
	SELECT c.id, 'payload_purged', c.attempt, 'removed ' || COALESCE(n.entries, 0) || ' entries'
	FROM c LEFT JOIN (SELECT claim_id, count(*) AS entries FROM trail GROUP BY claim_id) n ON n.claim_id = c.id
)
SELECT count(*) FROM c;

-- name: PurgeConflicts :execrows
-- Deletes one batch of conflicting deliveries' bodies that arrived after
-- their record's payload purge and are now older than the payload
-- retention, counted from their own arrival (the record's conflict_count
-- keeps counting them). Index: inbox_conflicts_received_idx.
WITH doomed AS (
	SELECT f.id FROM inbox_conflicts f JOIN claims c ON c.id = f.claim_id
	WHERE f.received_at < statement_timestamp() - make_interval(secs => @retention_seconds::float8)
	  AND c.payload_purged_at IS NOT NULL
	  AND (CASE WHEN @exclude::boolean THEN c.source <> ALL(@sources::text[]) ELSE c.source = ANY(@sources::text[]) END)
	ORDER BY f.received_at
	LIMIT @max_rows
	FOR UPDATE OF f SKIP LOCKED
)
DELETE FROM inbox_conflicts WHERE id = ANY(ARRAY(SELECT id FROM doomed));

-- name: ClaimOne :one
-- THE claim: decides one claim attempt in one INSERT … ON CONFLICT … DO
-- UPDATE statement. ClaimMany is the same statement over many claims of
-- distinct keys; the two differ only in their first CTE (i: the claims,
-- as one row of arguments here, as arrays there), because PostgreSQL
-- plans the two differently for one row (a Result and nested loops here;
-- a function scan and hash joins for unnest's estimated ten rows there),
-- and a one-item batch runs this one. TestClaimStatementsDifferOnlyInTheirRows
-- (package claim) checks that the rest of the two is the same text.
--
-- The unique index on (tenant, source, event_id, action) arbitrates
-- concurrent inserts; for an existing key the conflicting row is locked
-- and the decision (claim_outcome, see the schema) and its write happen in
-- the same statement, for every row on its own. Rows are inserted, and
-- existing ones locked, in ord order (the caller's key order). The outcome
-- is stored in last_outcome and returned; the delivery-log entry of every
-- claim is written by the same statement, with the cause of a copy
-- (duplicate_cause), which each returned row carries after the record
-- columns ("" for none).
--
-- A winning claim stores its lease policy (the claim's own, else its
-- source's), which governs the lease it won; claim_outcome judges an
-- expired lease by the policy its holder won it under. It stores its
-- reconciler (the claim's own, else NULL: its source's default reconciler
-- when it goes unknown) and its request id (NULL for none; a new record
-- stores it whatever the outcome: a stale record never becomes
-- processing, so there it is inert). Any other outcome leaves them.
--
-- The holder asking again (won_replayed): a claim that anyone else would
-- be answered in_progress for (the record is processing, its lease
-- valid, the payload hash not in conflict) and that carries the request
-- id of the claim holding that lease is the same request, whose answer
-- was lost. It changes nothing but last_outcome, which becomes 'won'
-- again: the caller reads the stored claim token, and the log tells the
-- replay from a fresh win by the token (a fresh win stores the proposed
-- one) and records it as won_replayed. Concurrent copies of one request
-- therefore all get the one claim.
--
-- A plain duplicate of a completed record (see cur) is answered from the
-- record without locking or rewriting it: only its delivery-log entry is
-- written, so duplicates cost less than fresh claims and never wait for
-- one another. Its outcome is returned, not stored: last_outcome is the
-- outcome of the last decision that wrote the row (the delivery log has
-- every one).
--
-- Arguments: the key; event_type, payload_hash, object_id and
-- object_version (NULL: none); token, the claim token proposed for a win;
-- lease_seconds; max_attempts, lease_policy, backoff_base_seconds and
-- backoff_cap_seconds (the source policy, lease_policy the claim's own if
-- it has one); execution_id, request_id, door (the ingest or trigger
-- door, NULL for a claim), fingerprint, retry (the provider's retry
-- signal), mode (the n8n execution mode); shadow (the delivery-log entry
-- is marked shadow: the decision is recorded, not enforced);
-- workflow_id, workflow_version, reconciler (NULL: the source's default).
-- In the DO UPDATE the proposed values are read back from excluded:
-- claim_token is the proposed token and lease_until the proposed lease
-- whenever the outcome can be won (a stale proposal is never won).
WITH i AS (
	SELECT 1::bigint AS ord, @tenant::text AS tenant, @source::text AS source, @event_id::text AS event_id,
		@action::text AS action, sqlc.narg(event_type)::text AS event_type, @token::uuid AS token,
		@lease_seconds::float8 AS lease, sqlc.narg(payload_hash)::text AS hash,
		sqlc.narg(object_id)::text AS object_id, sqlc.narg(object_version)::bigint AS object_version,
		@max_attempts::int AS max_attempts, @lease_policy::text AS lease_policy,
		sqlc.narg(execution_id)::text AS execution_id, @backoff_base_seconds::float8 AS backoff_base,
		@backoff_cap_seconds::float8 AS backoff_cap, sqlc.narg(request_id)::text AS request_id,
		sqlc.narg(door)::text AS door, @fingerprint::bytea AS fingerprint, sqlc.narg(retry)::text AS retry,
		sqlc.narg(mode)::text AS mode, @shadow::boolean AS shadow, sqlc.narg(workflow_id)::text AS workflow_id,
		sqlc.narg(workflow_version)::text AS workflow_version, sqlc.narg(reconciler)::text AS reconciler
), cur AS (
	-- The record of each claim's key as the statement's snapshot has it,
	-- and whether the claim is a plain duplicate (i_fast): a completed
	-- record, this claim's payload hash equal or absent, and nothing it
	-- carries (event type, object) missing from the record. A completed
	-- record stays completed (the claim outcome of a completed record is
	-- duplicate or conflict, and neither changes it), so such a claim is
	-- answered from the snapshot without locking or rewriting the row:
	-- only its delivery-log entry is written (fast).
	SELECT i.ord AS i_ord, i.hash AS i_hash, i.execution_id AS i_execution_id, i.request_id AS i_request_id,
		i.door AS i_door, i.fingerprint AS i_fingerprint, i.retry AS i_retry, i.mode AS i_mode, i.shadow AS i_shadow,
		i.workflow_id AS i_workflow_id, i.workflow_version AS i_workflow_version,
		(cl.state = 'completed'
		 AND (i.hash IS NULL OR cl.payload_hash = i.hash)
		 AND (i.event_type IS NULL OR cl.event_type IS NOT NULL)
		 AND (i.object_id IS NULL OR cl.object_id IS NOT NULL)
		 AND (i.object_version IS NULL OR cl.object_version IS NOT NULL)) AS i_fast,
		cl.*
	FROM i JOIN claims cl ON cl.tenant = i.tenant AND cl.source = i.source AND cl.event_id = i.event_id AND cl.action = i.action
), req AS (
	-- Every other claim, with its object: the request's, else the one
	-- stored with the record at ingest (immutable once set); stale when a
	-- newer or equal version of it completed.
	SELECT o.*, (o.o_id IS NOT NULL AND o.o_version IS NOT NULL AND EXISTS (
		SELECT 1 FROM object_versions v
		WHERE v.tenant = o.tenant AND v.source = o.source AND v.action = o.action AND v.object_id = o.o_id
		  AND v.last_version >= o.o_version
	)) AS stale
	FROM (
		SELECT i.*, COALESCE(i.object_id, cur.object_id) AS o_id,
			CASE WHEN i.object_id IS NOT NULL THEN i.object_version ELSE cur.object_version END AS o_version
		FROM i LEFT JOIN cur ON cur.i_ord = i.ord
		WHERE cur.i_fast IS NOT TRUE
	) o
), c AS (
	-- The decision. For an existing key, every use of the outcome below
	-- is the same expression: claim_outcome (see the schema) on the locked
	-- row (cl) against the proposed one (excluded), except that the holder
	-- asking again (the request id of the claim holding a valid lease,
	-- which anyone else would be answered in_progress for) is
	-- 'won_replayed'.
	INSERT INTO claims AS cl (tenant, source, event_id, action, event_type, state, last_outcome,
		attempt, max_attempts, lease_policy, backoff_base, backoff_cap, claim_token, lease_until,
		payload_hash, object_id, object_version, claimed_at, created_at, updated_at, request_id, reconciler)
	SELECT tenant, source, event_id, action, event_type,
		CASE WHEN stale THEN 'stale' ELSE 'processing' END,
		CASE WHEN stale THEN 'stale' ELSE 'won' END,
		CASE WHEN stale THEN 0 ELSE 1 END,
		max_attempts, lease_policy, backoff_base, backoff_cap,
		CASE WHEN stale THEN NULL ELSE token END,
		CASE WHEN stale THEN NULL ELSE statement_timestamp() + make_interval(secs => lease) END,
		hash, object_id, object_version,
		CASE WHEN stale THEN NULL ELSE statement_timestamp() END,
		statement_timestamp(), statement_timestamp(), request_id, reconciler
	FROM req ORDER BY ord
	ON CONFLICT (tenant, source, event_id, action) DO UPDATE SET
		last_outcome = CASE WHEN (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END) = 'won_replayed' THEN 'won'
			ELSE (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END) END,
		state = (CASE (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END)
		WHEN 'won' THEN 'processing' WHEN 'unknown' THEN 'unknown' WHEN 'dead_lettered' THEN 'dead_lettered'
		WHEN 'stale' THEN 'stale' ELSE cl.state END),
		attempt = cl.attempt + CASE WHEN (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END) = 'won' THEN 1 ELSE 0 END,
		claim_token = CASE WHEN (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END) = 'won'
			THEN excluded.claim_token ELSE cl.claim_token END,
		request_id = CASE WHEN (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END) = 'won'
			THEN excluded.request_id ELSE cl.request_id END,
		lease_policy = CASE WHEN (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END) = 'won'
			THEN excluded.lease_policy ELSE cl.lease_policy END,
		reconciler = CASE WHEN (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END) = 'won'
			THEN excluded.reconciler ELSE cl.reconciler END,
		lease_until = CASE WHEN (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END) = 'won'
			THEN excluded.lease_until ELSE cl.lease_until END,
		next_attempt_at = CASE WHEN (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END) = 'won'
			THEN NULL ELSE cl.next_attempt_at END,
		claimed_at = CASE WHEN (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END) = 'won'
			THEN statement_timestamp() ELSE cl.claimed_at END,
		last_error = CASE WHEN (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END) = 'unknown' AND cl.state = 'processing'
			THEN 'lease expired under lease policy review' ELSE cl.last_error END,
		payload_hash = COALESCE(cl.payload_hash, excluded.payload_hash),
		event_type = COALESCE(cl.event_type, excluded.event_type),
		object_id = COALESCE(cl.object_id, excluded.object_id),
		object_version = COALESCE(cl.object_version, excluded.object_version),
		conflict_count = cl.conflict_count + CASE WHEN (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END) = 'conflict' THEN 1 ELSE 0 END,
		updated_at = CASE WHEN (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END) = 'won' OR (CASE (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END)
		WHEN 'won' THEN 'processing' WHEN 'unknown' THEN 'unknown' WHEN 'dead_lettered' THEN 'dead_lettered'
		WHEN 'stale' THEN 'stale' ELSE cl.state END) <> cl.state
			THEN statement_timestamp() ELSE cl.updated_at END
	RETURNING *
), fast AS (
	SELECT * FROM cur WHERE i_fast
), entry AS (
	-- Each claim's delivery-log entry, and for a copy (duplicate,
	-- in_progress) why it came (duplicate_cause, migrations 00014 and
	-- 00020), decided here, by the statement that logs it.
	SELECT e.*, CASE WHEN e.e_outcome IN ('duplicate', 'in_progress') THEN duplicate_cause(e.e_id,
		CASE WHEN e.e_door IS NULL THEN 'claim' ELSE 'trigger' END, e.e_door, e.e_fingerprint,
		e.e_retry, e.e_execution_id, e.e_mode, e.e_workflow_id, e.e_workflow_version) END AS why
	FROM (
		SELECT c.id AS e_id, CASE WHEN c.last_outcome = 'won' AND c.claim_token <> i.token THEN 'won_replayed'
			ELSE c.last_outcome END AS e_outcome, c.attempt AS e_attempt, i.hash AS e_hash,
			i.execution_id AS e_execution_id, i.request_id AS e_request_id, i.door AS e_door,
			i.fingerprint AS e_fingerprint, i.retry AS e_retry, i.mode AS e_mode, i.shadow AS e_shadow,
			i.workflow_id AS e_workflow_id, i.workflow_version AS e_workflow_version
		FROM c JOIN i ON i.tenant = c.tenant AND i.source = c.source AND i.event_id = c.event_id AND i.action = c.action
		UNION ALL
		SELECT id, 'duplicate', attempt, i_hash, i_execution_id, i_request_id, i_door, i_fingerprint, i_retry, i_mode, i_shadow,
			i_workflow_id, i_workflow_version
		FROM fast
	) e
), log AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, payload_hash, execution_id, detail,
		door, fingerprint, cause, cause_note, shadow, workflow_id, workflow_version)
	SELECT e_id, e_outcome, e_attempt, e_hash, e_execution_id, 'request_id=' || e_request_id,
		e_door, e_fingerprint, (why).cause, (why).note, e_shadow, e_workflow_id, e_workflow_version
	FROM entry
)
SELECT c.id, c.tenant, c.source, c.event_id, c.action, COALESCE(c.event_type, '') AS event_type, c.state,
	c.last_outcome, c.attempt, c.max_attempts, c.lease_policy, c.lease_until, c.next_attempt_at,
	COALESCE(c.payload_hash, '') AS payload_hash, COALESCE(c.result_ref, '') AS result_ref,
	COALESCE(c.last_error, '') AS last_error, COALESCE(c.object_id, '') AS object_id, c.object_version,
	c.conflict_count, c.created_at, c.updated_at, c.claimed_at, c.completed_at, c.claim_token,
	COALESCE(c.receipt_hash, '') AS receipt_hash, COALESCE(c.origin, '') AS origin,
	COALESCE(c.reconciler, '') AS reconciler,
	COALESCE((SELECT (why).cause FROM entry WHERE e_id = c.id), '')::text AS cause
FROM c
UNION ALL
SELECT fast.id, fast.tenant, fast.source, fast.event_id, fast.action,
	COALESCE(fast.event_type, '') AS event_type, fast.state, 'duplicate' AS last_outcome, fast.attempt,
	fast.max_attempts, fast.lease_policy, fast.lease_until, fast.next_attempt_at,
	COALESCE(fast.payload_hash, '') AS payload_hash, COALESCE(fast.result_ref, '') AS result_ref,
	COALESCE(fast.last_error, '') AS last_error, COALESCE(fast.object_id, '') AS object_id,
	fast.object_version, fast.conflict_count, fast.created_at, fast.updated_at, fast.claimed_at,
	fast.completed_at, fast.claim_token, COALESCE(fast.receipt_hash, '') AS receipt_hash,
	COALESCE(fast.origin, '') AS origin, COALESCE(fast.reconciler, '') AS reconciler,
	COALESCE((SELECT (why).cause FROM entry WHERE e_id = fast.id), '')::text AS cause
FROM fast
;

-- name: ClaimMany :many
-- ClaimOne for many claims of distinct keys (a row cannot be updated twice
-- by one statement), one array per argument of ClaimOne, all of one
-- length, taken in array order (ord). Arrays cannot hold the NULLs of
-- ClaimOne's optional arguments: '' stands for none (and
-- object_versions' element is read only where object_ids' is not ''),
-- which i turns back into NULL. Run it on its generic plan
-- (ForceGenericPlan first in its transaction).
WITH i AS (
	SELECT u.ord, u.tenant, u.source, u.event_id, u.action, NULLIF(u.event_type, '') AS event_type, u.token,
		u.lease, NULLIF(u.hash, '') AS hash, NULLIF(u.object_id, '') AS object_id,
		CASE WHEN u.object_id <> '' THEN u.object_version END AS object_version, u.max_attempts, u.lease_policy,
		NULLIF(u.execution_id, '') AS execution_id, u.backoff_base, u.backoff_cap,
		NULLIF(u.request_id, '') AS request_id, NULLIF(u.door, '') AS door, u.fingerprint,
		NULLIF(u.retry, '') AS retry, NULLIF(u.mode, '') AS mode, u.shadow, NULLIF(u.workflow_id, '') AS workflow_id,
		NULLIF(u.workflow_version, '') AS workflow_version, NULLIF(u.reconciler, '') AS reconciler
	FROM ROWS FROM (unnest(@tenants::text[]), unnest(@sources::text[]), unnest(@event_ids::text[]),
		unnest(@actions::text[]), unnest(@event_types::text[]), unnest(@tokens::uuid[]),
		unnest(@lease_seconds::float8[]), unnest(@payload_hashes::text[]), unnest(@object_ids::text[]),
		unnest(@object_versions::bigint[]), unnest(@max_attempts::int[]), unnest(@lease_policies::text[]),
		unnest(@execution_ids::text[]), unnest(@backoff_base_seconds::float8[]),
		unnest(@backoff_cap_seconds::float8[]), unnest(@request_ids::text[]), unnest(@doors::text[]),
		unnest(@fingerprints::bytea[]), unnest(@retries::text[]), unnest(@modes::text[]),
		unnest(@shadows::boolean[]), unnest(@workflow_ids::text[]), unnest(@workflow_versions::text[]),
		unnest(@reconcilers::text[]))
		WITH ORDINALITY AS u(tenant, source, event_id, action, event_type, token, lease, hash,
		object_id, object_version, max_attempts, lease_policy, execution_id, backoff_base,
		backoff_cap, request_id, door, fingerprint, retry, mode, shadow, workflow_id, workflow_version,
		reconciler, ord)
), cur AS (
	-- The record of each claim's key as the statement's snapshot has it,
	-- and whether the claim is a plain duplicate (i_fast): a completed
	-- record, this claim's payload hash equal or absent, and nothing it
	-- carries (event type, object) missing from the record. A completed
	-- record stays completed (the claim outcome of a completed record is
	-- duplicate or conflict, and neither changes it), so such a claim is
	-- answered from the snapshot without locking or rewriting the row:
	-- only its delivery-log entry is written (fast).
	SELECT i.ord AS i_ord, i.hash AS i_hash, i.execution_id AS i_execution_id, i.request_id AS i_request_id,
		i.door AS i_door, i.fingerprint AS i_fingerprint, i.retry AS i_retry, i.mode AS i_mode, i.shadow AS i_shadow,
		i.workflow_id AS i_workflow_id, i.workflow_version AS i_workflow_version,
		(cl.state = 'completed'
		 AND (i.hash IS NULL OR cl.payload_hash = i.hash)
		 AND (i.event_type IS NULL OR cl.event_type IS NOT NULL)
		 AND (i.object_id IS NULL OR cl.object_id IS NOT NULL)
		 AND (i.object_version IS NULL OR cl.object_version IS NOT NULL)) AS i_fast,
		cl.*
	FROM i JOIN claims cl ON cl.tenant = i.tenant AND cl.source = i.source AND cl.event_id = i.event_id AND cl.action = i.action
), req AS (
	-- Every other claim, with its object: the request's, else the one
	-- stored with the record at ingest (immutable once set); stale when a
	-- newer or equal version of it completed.
	SELECT o.*, (o.o_id IS NOT NULL AND o.o_version IS NOT NULL AND EXISTS (
		SELECT 1 FROM object_versions v
		WHERE v.tenant = o.tenant AND v.source = o.source AND v.action = o.action AND v.object_id = o.o_id
		  AND v.last_version >= o.o_version
	)) AS stale
	FROM (
		SELECT i.*, COALESCE(i.object_id, cur.object_id) AS o_id,
			CASE WHEN i.object_id IS NOT NULL THEN i.object_version ELSE cur.object_version END AS o_version
		FROM i LEFT JOIN cur ON cur.i_ord = i.ord
		WHERE cur.i_fast IS NOT TRUE
	) o
), c AS (
	-- The decision. For an existing key, every use of the outcome below
	-- is the same expression: claim_outcome (see the schema) on the locked
	-- row (cl) against the proposed one (excluded), except that the holder
	-- asking again (the request id of the claim holding a valid lease,
	-- which anyone else would be answered in_progress for) is
	-- 'won_replayed'.
	INSERT INTO claims AS cl (tenant, source, event_id, action, event_type, state, last_outcome,
		attempt, max_attempts, lease_policy, backoff_base, backoff_cap, claim_token, lease_until,
		payload_hash, object_id, object_version, claimed_at, created_at, updated_at, request_id, reconciler)
	SELECT tenant, source, event_id, action, event_type,
		CASE WHEN stale THEN 'stale' ELSE 'processing' END,
		CASE WHEN stale THEN 'stale' ELSE 'won' END,
		CASE WHEN stale THEN 0 ELSE 1 END,
		max_attempts, lease_policy, backoff_base, backoff_cap,
		CASE WHEN stale THEN NULL ELSE token END,
		CASE WHEN stale THEN NULL ELSE statement_timestamp() + make_interval(secs => lease) END,
		hash, object_id, object_version,
		CASE WHEN stale THEN NULL ELSE statement_timestamp() END,
		statement_timestamp(), statement_timestamp(), request_id, reconciler
	FROM req ORDER BY ord
	ON CONFLICT (tenant, source, event_id, action) DO UPDATE SET
		last_outcome = CASE WHEN (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END) = 'won_replayed' THEN 'won'
			ELSE (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END) END,
		state = (CASE (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END)
		WHEN 'won' THEN 'processing' WHEN 'unknown' THEN 'unknown' WHEN 'dead_lettered' THEN 'dead_lettered'
		WHEN 'stale' THEN 'stale' ELSE cl.state END),
		attempt = cl.attempt + CASE WHEN (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END) = 'won' THEN 1 ELSE 0 END,
		claim_token = CASE WHEN (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END) = 'won'
			THEN excluded.claim_token ELSE cl.claim_token END,
		request_id = CASE WHEN (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END) = 'won'
			THEN excluded.request_id ELSE cl.request_id END,
		lease_policy = CASE WHEN (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END) = 'won'
			THEN excluded.lease_policy ELSE cl.lease_policy END,
		reconciler = CASE WHEN (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END) = 'won'
			THEN excluded.reconciler ELSE cl.reconciler END,
		lease_until = CASE WHEN (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END) = 'won'
			THEN excluded.lease_until ELSE cl.lease_until END,
		next_attempt_at = CASE WHEN (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END) = 'won'
			THEN NULL ELSE cl.next_attempt_at END,
		claimed_at = CASE WHEN (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END) = 'won'
			THEN statement_timestamp() ELSE cl.claimed_at END,
		last_error = CASE WHEN (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END) = 'unknown' AND cl.state = 'processing'
			THEN 'lease expired under lease policy review' ELSE cl.last_error END,
		payload_hash = COALESCE(cl.payload_hash, excluded.payload_hash),
		event_type = COALESCE(cl.event_type, excluded.event_type),
		object_id = COALESCE(cl.object_id, excluded.object_id),
		object_version = COALESCE(cl.object_version, excluded.object_version),
		conflict_count = cl.conflict_count + CASE WHEN (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END) = 'conflict' THEN 1 ELSE 0 END,
		updated_at = CASE WHEN (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END) = 'won' OR (CASE (CASE WHEN cl.request_id = excluded.request_id AND claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) = 'in_progress'
		THEN 'won_replayed' ELSE claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at, cl.attempt,
			cl.max_attempts, cl.lease_policy, excluded.payload_hash, excluded.state = 'stale', statement_timestamp()) END)
		WHEN 'won' THEN 'processing' WHEN 'unknown' THEN 'unknown' WHEN 'dead_lettered' THEN 'dead_lettered'
		WHEN 'stale' THEN 'stale' ELSE cl.state END) <> cl.state
			THEN statement_timestamp() ELSE cl.updated_at END
	RETURNING *
), fast AS (
	SELECT * FROM cur WHERE i_fast
), entry AS (
	-- Each claim's delivery-log entry, and for a copy (duplicate,
	-- in_progress) why it came (duplicate_cause, migrations 00014 and
	-- 00020), decided here, by the statement that logs it.
	SELECT e.*, CASE WHEN e.e_outcome IN ('duplicate', 'in_progress') THEN duplicate_cause(e.e_id,
		CASE WHEN e.e_door IS NULL THEN 'claim' ELSE 'trigger' END, e.e_door, e.e_fingerprint,
		e.e_retry, e.e_execution_id, e.e_mode, e.e_workflow_id, e.e_workflow_version) END AS why
	FROM (
		SELECT c.id AS e_id, CASE WHEN c.last_outcome = 'won' AND c.claim_token <> i.token THEN 'won_replayed'
			ELSE c.last_outcome END AS e_outcome, c.attempt AS e_attempt, i.hash AS e_hash,
			i.execution_id AS e_execution_id, i.request_id AS e_request_id, i.door AS e_door,
			i.fingerprint AS e_fingerprint, i.retry AS e_retry, i.mode AS e_mode, i.shadow AS e_shadow,
			i.workflow_id AS e_workflow_id, i.workflow_version AS e_workflow_version
		FROM c JOIN i ON i.tenant = c.tenant AND i.source = c.source AND i.event_id = c.event_id AND i.action = c.action
		UNION ALL
		SELECT id, 'duplicate', attempt, i_hash, i_execution_id, i_request_id, i_door, i_fingerprint, i_retry, i_mode, i_shadow,
			i_workflow_id, i_workflow_version
		FROM fast
	) e
), log AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, payload_hash, execution_id, detail,
		door, fingerprint, cause, cause_note, shadow, workflow_id, workflow_version)
	SELECT e_id, e_outcome, e_attempt, e_hash, e_execution_id, 'request_id=' || e_request_id,
		e_door, e_fingerprint, (why).cause, (why).note, e_shadow, e_workflow_id, e_workflow_version
	FROM entry
)
SELECT c.id, c.tenant, c.source, c.event_id, c.action, COALESCE(c.event_type, '') AS event_type, c.state,
	c.last_outcome, c.attempt, c.max_attempts, c.lease_policy, c.lease_until, c.next_attempt_at,
	COALESCE(c.payload_hash, '') AS payload_hash, COALESCE(c.result_ref, '') AS result_ref,
	COALESCE(c.last_error, '') AS last_error, COALESCE(c.object_id, '') AS object_id, c.object_version,
	c.conflict_count, c.created_at, c.updated_at, c.claimed_at, c.completed_at, c.claim_token,
	COALESCE(c.receipt_hash, '') AS receipt_hash, COALESCE(c.origin, '') AS origin,
	COALESCE(c.reconciler, '') AS reconciler,
	COALESCE((SELECT (why).cause FROM entry WHERE e_id = c.id), '')::text AS cause
FROM c
UNION ALL
SELECT fast.id, fast.tenant, fast.source, fast.event_id, fast.action,
	COALESCE(fast.event_type, '') AS event_type, fast.state, 'duplicate' AS last_outcome, fast.attempt,
	fast.max_attempts, fast.lease_policy, fast.lease_until, fast.next_attempt_at,
	COALESCE(fast.payload_hash, '') AS payload_hash, COALESCE(fast.result_ref, '') AS result_ref,
	COALESCE(fast.last_error, '') AS last_error, COALESCE(fast.object_id, '') AS object_id,
	fast.object_version, fast.conflict_count, fast.created_at, fast.updated_at, fast.claimed_at,
	fast.completed_at, fast.claim_token, COALESCE(fast.receipt_hash, '') AS receipt_hash,
	COALESCE(fast.origin, '') AS origin, COALESCE(fast.reconciler, '') AS reconciler,
	COALESCE((SELECT (why).cause FROM entry WHERE e_id = fast.id), '')::text AS cause
FROM fast
;

-- name: ForceGenericPlan :exec
-- Sets plan_cache_mode = force_generic_plan until the end of the
-- transaction it runs in (set_config with is_local: what SET LOCAL sets,
-- without the warning SET LOCAL gives in PostgreSQL's implicit transaction
-- of a pipeline, where the setting holds all the same), so that the
-- prepared statements after it run on their cached generic plan. The
-- ledger sends it first in the transaction of its multi-row statements
-- (ClaimMany, SettleMany); no statement outside that transaction sees the
-- setting.
--
-- Why: those statements take their rows as arrays (unnest). A custom
-- plan, made for the arguments at hand, knows the arrays' length (one row
-- for a group of one); the generic plan cannot and assumes ten rows. Each
-- row costs an index lookup (the claim's key, the record's id), so the
-- generic plan is estimated about ten times dearer than the custom plan
-- of a small group (on a table of 200,000 records: 86 against 9 for one
-- claim, 85 against 9 for one settle), and under the default
-- plan_cache_mode PostgreSQL never chooses it: every run, groups of one
-- included, was planned afresh (2.3–2.7 ms, more than the claim's own
-- work). Both plans read the tables the same way, one index lookup per row
-- (and ClaimMany inserts in ord order, its ORDER BY, in either), right for
-- a group of any size, so the fresh plan buys nothing.
SELECT set_config('plan_cache_mode', 'force_generic_plan', true);

-- name: Complete :one
-- Moves a record to completed when token is its current claim token and
-- it is processing, unknown (its holder's Complete after a lease expiry
-- under review, a Fail unknown or a Release: the effect did happen), or
-- retryable_failed by a reconciler's not_done answer with no claim since
-- (the reconcile of the token's episode answered not_done; a claim that
-- wins the record replaces the token; only this case probes reconciles,
-- by its primary key). It records the object version as its object's
-- newest completed one (out-of-order protection: a later claim of an
-- older or equal version is stale) and logs the transition, in one
-- statement. No row: the guard matched none.
WITH c AS (
	UPDATE claims SET state = 'completed', result_ref = sqlc.narg(result_ref)::text, completed_at = statement_timestamp(),
		updated_at = statement_timestamp(), lease_until = NULL, next_attempt_at = NULL
	WHERE claims.id = @id AND claims.tenant = @tenant AND claims.claim_token = @token::uuid
	  AND (claims.state IN ('processing', 'unknown')
		OR (claims.state = 'retryable_failed' AND EXISTS (SELECT 1 FROM reconciles rc WHERE rc.claim_id = claims.id
			AND rc.state = 'answered' AND rc.verdict = 'not_done' AND rc.episode_token = claims.claim_token)))
	RETURNING *
), v AS (
	INSERT INTO object_versions AS ov (tenant, source, action, object_id, last_version)
	SELECT c.tenant, c.source, c.action, c.object_id, c.object_version FROM c
	WHERE c.object_id IS NOT NULL AND c.object_version IS NOT NULL
	ON CONFLICT (tenant, source, action, object_id) DO UPDATE
	SET last_version = GREATEST(ov.last_version, excluded.last_version), updated_at = statement_timestamp()
), log AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail)
	SELECT c.id, 'completed', c.attempt, NULL FROM c
)
SELECT c.id, c.tenant, c.source, c.event_id, c.action, COALESCE(c.event_type, '') AS event_type, c.state,
	c.last_outcome, c.attempt, c.max_attempts, c.lease_policy, c.lease_until, c.next_attempt_at,
	COALESCE(c.payload_hash, '') AS payload_hash, COALESCE(c.result_ref, '') AS result_ref,
	COALESCE(c.last_error, '') AS last_error, COALESCE(c.object_id, '') AS object_id, c.object_version,
	c.conflict_count, c.created_at, c.updated_at, c.claimed_at, c.completed_at, c.claim_token,
	COALESCE(c.receipt_hash, '') AS receipt_hash, COALESCE(c.origin, '') AS origin,
	COALESCE(c.reconciler, '') AS reconciler
FROM c;

-- name: Fail :one
-- Records a failed attempt of a processing record whose current claim
-- token is token: kind permanent dead-letters it, unknown moves it to
-- unknown, retryable backs off with full jitter (jitter in [0,1): delay =
-- jitter · min(backoff_cap, backoff_base · 2^(attempt-1)) seconds) or
-- dead-letters it at the attempt cap. error is stored as last_error;
-- execution_id (NULL for a Fail by token) is the execution that
-- FailExecution failed it for, kept in the delivery-log entry. No row: the
-- guard matched none.
WITH c AS (
	UPDATE claims SET
		state = CASE WHEN @kind::text = 'permanent' THEN 'dead_lettered'
		             WHEN @kind::text = 'unknown' THEN 'unknown'
		             WHEN attempt >= max_attempts THEN 'dead_lettered'
		             ELSE 'retryable_failed' END,
		next_attempt_at = CASE WHEN @kind::text = 'retryable' AND attempt < max_attempts
			THEN statement_timestamp() + make_interval(secs =>
				sqlc.arg(jitter)::float8 * LEAST(backoff_cap, backoff_base * power(2, attempt - 1)))
			END,
		last_error = @error::text, lease_until = NULL, updated_at = statement_timestamp()
	WHERE claims.id = @id AND claims.tenant = @tenant AND claims.claim_token = @token::uuid AND claims.state = 'processing'
	RETURNING *
), log AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail, execution_id)
	SELECT c.id, 'failed_' || @kind::text, c.attempt, @error::text, sqlc.narg(execution_id)::text FROM c
)
SELECT c.id, c.tenant, c.source, c.event_id, c.action, COALESCE(c.event_type, '') AS event_type, c.state,
	c.last_outcome, c.attempt, c.max_attempts, c.lease_policy, c.lease_until, c.next_attempt_at,
	COALESCE(c.payload_hash, '') AS payload_hash, COALESCE(c.result_ref, '') AS result_ref,
	COALESCE(c.last_error, '') AS last_error, COALESCE(c.object_id, '') AS object_id, c.object_version,
	c.conflict_count, c.created_at, c.updated_at, c.claimed_at, c.completed_at, c.claim_token,
	COALESCE(c.receipt_hash, '') AS receipt_hash, COALESCE(c.origin, '') AS origin,
	COALESCE(c.reconciler, '') AS reconciler
FROM c;

-- name: SettleMany :many
-- Complete and Fail for many records at once, one row per report, of
-- distinct ids, in array order: ids, tenants, tokens, ops ('complete', or
-- the fail kind: 'retryable', 'permanent', 'unknown'), result_refs
-- (completes; '' for none), errors (fails), jitters in [0,1) (fails).
-- Each row is decided exactly as its own statement decides it: the same
-- guard (token current; processing, or Complete's states for a complete),
-- the same new state, the same delivery-log entry; object versions of the
-- completed records are recorded, the highest per object. A report whose
-- guard matched no row returns nothing (the caller tells a repeat from a
-- lost lease). Run it on its generic plan (ForceGenericPlan first in its
-- transaction).
WITH u AS (
	SELECT * FROM ROWS FROM (unnest(@ids::uuid[]), unnest(@tenants::text[]), unnest(@tokens::uuid[]),
		unnest(@ops::text[]), unnest(@result_refs::text[]), unnest(@errors::text[]), unnest(@jitters::float8[]))
		WITH ORDINALITY AS u(id, tenant, token, op, result_ref, error, jitter, ord)
), c AS (
	UPDATE claims cl SET
		state = CASE WHEN u.op = 'complete' THEN 'completed'
		             WHEN u.op = 'permanent' THEN 'dead_lettered'
		             WHEN u.op = 'unknown' THEN 'unknown'
		             WHEN cl.attempt >= cl.max_attempts THEN 'dead_lettered'
		             ELSE 'retryable_failed' END,
		result_ref = CASE WHEN u.op = 'complete' THEN NULLIF(u.result_ref, '') ELSE cl.result_ref END,
		completed_at = CASE WHEN u.op = 'complete' THEN statement_timestamp() ELSE cl.completed_at END,
		next_attempt_at = CASE WHEN u.op = 'retryable' AND cl.attempt < cl.max_attempts
			THEN statement_timestamp() + make_interval(secs =>
				u.jitter * LEAST(cl.backoff_cap, cl.backoff_base * power(2, cl.attempt - 1)))
			END,
		last_error = CASE WHEN u.op = 'complete' THEN cl.last_error ELSE u.error END,
		lease_until = NULL, updated_at = statement_timestamp()
	FROM u
	WHERE cl.id = u.id AND cl.tenant = u.tenant AND cl.claim_token = u.token
	  AND (cl.state = 'processing' OR (u.op = 'complete' AND (cl.state IN ('processing', 'unknown')
		OR (cl.state = 'retryable_failed' AND EXISTS (SELECT 1 FROM reconciles rc WHERE rc.claim_id = cl.id
			AND rc.state = 'answered' AND rc.verdict = 'not_done' AND rc.episode_token = cl.claim_token)))))
	RETURNING cl.*, u.op AS u_op, u.error AS u_error
), v AS (
	INSERT INTO object_versions AS ov (tenant, source, action, object_id, last_version)
	SELECT c.tenant, c.source, c.action, c.object_id, max(c.object_version) FROM c
	WHERE c.u_op = 'complete' AND c.object_id IS NOT NULL AND c.object_version IS NOT NULL
	GROUP BY c.tenant, c.source, c.action, c.object_id
	ON CONFLICT (tenant, source, action, object_id) DO UPDATE
	SET last_version = GREATEST(ov.last_version, excluded.last_version), updated_at = statement_timestamp()
), log AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail)
	SELECT c.id, CASE WHEN c.u_op = 'complete' THEN 'completed' ELSE 'failed_' || c.u_op END, c.attempt,
		CASE WHEN c.u_op = 'complete' THEN NULL ELSE c.u_error END FROM c
)
SELECT c.id, c.tenant, c.source, c.event_id, c.action, COALESCE(c.event_type, '') AS event_type, c.state,
	c.last_outcome, c.attempt, c.max_attempts, c.lease_policy, c.lease_until, c.next_attempt_at,
	COALESCE(c.payload_hash, '') AS payload_hash, COALESCE(c.result_ref, '') AS result_ref,
	COALESCE(c.last_error, '') AS last_error, COALESCE(c.object_id, '') AS object_id, c.object_version,
	c.conflict_count, c.created_at, c.updated_at, c.claimed_at, c.completed_at, c.claim_token,
	COALESCE(c.receipt_hash, '') AS receipt_hash, COALESCE(c.origin, '') AS origin,
	COALESCE(c.reconciler, '') AS reconciler
FROM c;

-- name: ListOpen :many
-- One page of a tenant's records in one open state, oldest first by
-- (updated_at, id), after the cursor position (after_at, after_id) when
-- given (after_at NULL: from the start), of source (NULL: any), at most
-- max_rows. The literal state list lets the planner use the partial index
-- claims_list_idx whatever state is.
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
WHERE claims.tenant = @tenant AND claims.state = @state::text
  AND claims.state IN ('received', 'processing', 'retryable_failed', 'dead_lettered', 'unknown')
  AND (sqlc.narg(source)::text IS NULL OR claims.source = sqlc.narg(source)::text)
  AND (sqlc.narg(after_at)::timestamptz IS NULL
       OR (claims.updated_at, claims.id) > (sqlc.narg(after_at)::timestamptz, sqlc.narg(after_id)::uuid))
ORDER BY claims.updated_at, claims.id
LIMIT @max_rows;

-- name: ListByExecution :many
-- One page of a tenant's records whose current attempt execution
-- execution_id won, oldest first by (updated_at, id), after the cursor
-- position (after_at, after_id) when given, of state and source (NULL:
-- any), at most max_rows. won is the current attempts won by the
-- execution: its 'won' delivery-log entries, through the partial index
-- claim_deliveries_won_execution_idx, each naming a record and the
-- attempt that win gave it; joined with claims ON id = won_id AND attempt
-- = won_attempt it keeps the records whose current attempt that
-- execution won (a later win raised attempt past it).
WITH won AS (
	SELECT claim_id AS won_id, attempt AS won_attempt FROM claim_deliveries
	WHERE execution_id = @execution_id::text AND outcome = 'won'
)
SELECT claims.id, claims.tenant, claims.source, claims.event_id, claims.action,
	COALESCE(claims.event_type, '') AS event_type, claims.state, claims.last_outcome, claims.attempt,
	claims.max_attempts, claims.lease_policy, claims.lease_until, claims.next_attempt_at,
	COALESCE(claims.payload_hash, '') AS payload_hash, COALESCE(claims.result_ref, '') AS result_ref,
	COALESCE(claims.last_error, '') AS last_error, COALESCE(claims.object_id, '') AS object_id,
	claims.object_version, claims.conflict_count, claims.created_at, claims.updated_at,
	claims.claimed_at, claims.completed_at, claims.claim_token,
	COALESCE(claims.receipt_hash, '') AS receipt_hash, COALESCE(claims.origin, '') AS origin,
	COALESCE(claims.reconciler, '') AS reconciler
FROM claims JOIN won ON claims.id = won.won_id AND claims.attempt = won.won_attempt
WHERE claims.tenant = @tenant
  AND (sqlc.narg(state)::text IS NULL OR claims.state = sqlc.narg(state)::text)
  AND (sqlc.narg(source)::text IS NULL OR claims.source = sqlc.narg(source)::text)
  AND (sqlc.narg(after_at)::timestamptz IS NULL
       OR (claims.updated_at, claims.id) > (sqlc.narg(after_at)::timestamptz, sqlc.narg(after_id)::uuid))
ORDER BY claims.updated_at, claims.id
LIMIT @max_rows;

-- name: ExecutionHeld :many
-- The id and current claim token of at most max_rows processing records
-- of tenant whose current attempt execution execution_id won (won: as in
-- ListByExecution), of source (NULL: any), in id order (the order settle
-- batches lock rows in). FailExecution fails each with Fail, guarded by
-- that token.
WITH won AS (
	SELECT claim_id AS won_id, attempt AS won_attempt FROM claim_deliveries
	WHERE execution_id = @execution_id::text AND outcome = 'won'
)
SELECT claims.id::text AS id, claims.claim_token::text AS claim_token
FROM claims JOIN won ON claims.id = won.won_id AND claims.attempt = won.won_attempt
WHERE claims.tenant = @tenant AND claims.state = 'processing'
  AND (sqlc.narg(source)::text IS NULL OR claims.source = sqlc.narg(source)::text)
ORDER BY claims.id
LIMIT @max_rows;

-- name: Receive :one
-- Stores an inbox record (state received) for a verified provider event,
-- or reports the existing record of the key; inserted tells which. The
-- provider view's hash (receipt_hash) goes to receipt_hash, never to
-- payload_hash: redeliveries are compared with the receipt hash, claims
-- with the hash the first claim presented (see migration 00004), so each
-- view is only ever compared with itself. A known key with a different
-- receipt hash counts a conflict; a record created by a claim adopts the
-- first receipt hash, so the returned receipt_hash differs from the
-- argument exactly when this delivery is a conflict. The delivery-log
-- entry is written by the same statement. A plain redelivery (the receipt
-- hash the record already has) neither locks nor rewrites the record: only
-- its delivery is logged.
--
-- Adoption (adopted): a record of the key that an enforcing door never
-- stored (a claim made it, e.g. an ingest door in shadow: no inbox row)
-- and that is not settled for good is adopted by a delivery of its
-- payload (receipt hash equal, or none yet): the record becomes what this
-- delivery would have made, state received with a fresh attempt budget
-- (max_attempts = attempt + max_attempts), no claim token, lease, retry
-- time or claims' payload hash (the workflow's claim sets its own view),
-- and the caller stores the body as its inbox row and queues its dispatch
-- job in the same transaction (ingest). Adoptable (the condition written
-- out in cur and adopt): no inbox row, payload not purged, and
-- retryable_failed, dead_lettered, or processing under lease policy
-- reclaim with its lease ended (its holder lost it, as a claim would take
-- it over); not a record an operator resolved failed (dead lettered by a
-- resolved_failed decision: the operator said it is not to run; resolved
-- retry, it is adoptable again). The state tests come first: a completed
-- or received record (most redeliveries) never probes inbox_events. Not
-- adopted, answered as before: completed and stale (settled), unknown (an
-- operator resolves it; resolved to retry, the next delivery adopts it;
-- resolved failed, never), processing with a live lease (a shadow forward
-- in flight: its outcome is relayed to the provider, which delivers a
-- failure again), processing under review (the sweeper makes it unknown).
-- The adopt CTE locks the record (FOR UPDATE) and, in READ COMMITTED,
-- re-checks its state on the version it locked, so of concurrent
-- deliveries exactly one adopts; the others find it received and are
-- duplicates. Clearing the claim token fences a settle of the former
-- holder that lands later: it no longer matches, changes nothing and is
-- answered lease_lost.
--
-- Cost: a plain redelivery of a completed or received record (the normal
-- case) is decided by cur; of another state it also probes inbox_events by
-- its primary key, in the same statement. The adopt CTE runs only when cur
-- found nothing (a one-time filter).
--
-- Arguments: the key (action ''), event_type, receipt_hash, object_id and
-- object_version (NULL: none), the source policy's max_attempts,
-- lease_policy, backoff_base_seconds and backoff_cap_seconds, door (the
-- source name), fingerprint (of the request), retry (the provider's retry
-- signal). After the record columns, inserted and adopted, each row
-- carries the cause logged with a duplicate ("" for none).
WITH cur AS (
	-- A plain redelivery: the record exists with this very receipt hash
	-- (set once, never changed) and is not adoptable, so nothing of it
	-- would change; it is answered from the statement's snapshot without
	-- locking or rewriting the row, and only its delivery is logged.
	SELECT * FROM claims
	WHERE claims.tenant = @tenant AND claims.source = @source AND claims.event_id = @event_id AND claims.action = ''
	  AND claims.receipt_hash = sqlc.narg(receipt_hash)::text
	  AND NOT ((claims.state IN ('retryable_failed', 'dead_lettered')
	     OR (claims.state = 'processing' AND claims.lease_policy = 'reclaim' AND claims.lease_until <= statement_timestamp()))
	  AND claims.payload_purged_at IS NULL
	  AND NOT EXISTS (SELECT 1 FROM inbox_events ie WHERE ie.claim_id = claims.id)
	  AND NOT (claims.state = 'dead_lettered' AND EXISTS (SELECT 1 FROM claim_deliveries d
		WHERE d.claim_id = claims.id AND d.outcome = 'resolved_failed')))
), adopt AS (
	SELECT claims.id FROM claims
	WHERE NOT EXISTS (SELECT 1 FROM cur)
	  AND claims.tenant = @tenant AND claims.source = @source AND claims.event_id = @event_id AND claims.action = ''
	  AND (claims.receipt_hash = sqlc.narg(receipt_hash)::text OR claims.receipt_hash IS NULL)
	  AND (claims.state IN ('retryable_failed', 'dead_lettered')
	     OR (claims.state = 'processing' AND claims.lease_policy = 'reclaim' AND claims.lease_until <= statement_timestamp()))
	  AND claims.payload_purged_at IS NULL
	  AND NOT EXISTS (SELECT 1 FROM inbox_events ie WHERE ie.claim_id = claims.id)
	  AND NOT (claims.state = 'dead_lettered' AND EXISTS (SELECT 1 FROM claim_deliveries d
		WHERE d.claim_id = claims.id AND d.outcome = 'resolved_failed'))
	FOR UPDATE
), a AS (
	UPDATE claims cl SET state = 'received', last_outcome = 'received', max_attempts = cl.attempt + @max_attempts::int,
		claim_token = NULL, lease_until = NULL, next_attempt_at = NULL, request_id = NULL, payload_hash = NULL,
		receipt_hash = COALESCE(cl.receipt_hash, sqlc.narg(receipt_hash)::text), updated_at = statement_timestamp()
	FROM adopt WHERE cl.id = adopt.id
	RETURNING cl.*
), c AS (
	INSERT INTO claims AS cl (tenant, source, event_id, action, event_type, state, last_outcome,
		attempt, max_attempts, lease_policy, backoff_base, backoff_cap, receipt_hash, object_id, object_version)
	SELECT @tenant::text, @source::text, @event_id::text, '', sqlc.narg(event_type)::text, 'received', 'received', 0,
		@max_attempts::int, @lease_policy::text, @backoff_base_seconds::float8, @backoff_cap_seconds::float8,
		sqlc.narg(receipt_hash)::text, sqlc.narg(object_id)::text, sqlc.narg(object_version)::bigint
	WHERE NOT EXISTS (SELECT 1 FROM cur) AND NOT EXISTS (SELECT 1 FROM adopt)
	ON CONFLICT (tenant, source, event_id, action) DO UPDATE SET
		conflict_count = cl.conflict_count + CASE WHEN cl.receipt_hash IS NOT NULL
			AND cl.receipt_hash <> excluded.receipt_hash THEN 1 ELSE 0 END,
		receipt_hash = COALESCE(cl.receipt_hash, excluded.receipt_hash)
	RETURNING *, (xmax = 0) AS inserted
), entry AS (
	-- The delivery-log entry, and for a duplicate why it came
	-- (duplicate_cause, migration 00014), decided here.
	SELECT e.*, CASE WHEN e_outcome = 'ingest_duplicate' THEN duplicate_cause(e_id, 'ingest', sqlc.narg(door)::text,
		sqlc.narg(fingerprint)::bytea, sqlc.narg(retry)::text, NULL, NULL, NULL, NULL) END AS why
	FROM (
		SELECT c.id AS e_id, CASE WHEN c.inserted THEN 'received'
		                          WHEN c.receipt_hash <> sqlc.narg(receipt_hash)::text THEN 'ingest_conflict'
		                          ELSE 'ingest_duplicate' END AS e_outcome, c.attempt AS e_attempt,
			'provider delivery' AS e_detail FROM c
		UNION ALL
		SELECT cur.id, 'ingest_duplicate', cur.attempt, 'provider delivery' FROM cur
		UNION ALL
		SELECT a.id, 'received', a.attempt, 'provider delivery: adopted a record without an inbox row (made by a claim, e.g. in shadow)' FROM a
	) e
), log AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, payload_hash, detail, door, fingerprint, cause, cause_note)
	SELECT e_id, e_outcome, e_attempt, sqlc.narg(receipt_hash)::text, e_detail, sqlc.narg(door)::text,
		sqlc.narg(fingerprint)::bytea, (why).cause, (why).note
	FROM entry
)
SELECT c.id, c.tenant, c.source, c.event_id, c.action, COALESCE(c.event_type, '') AS event_type, c.state,
	c.last_outcome, c.attempt, c.max_attempts, c.lease_policy, c.lease_until, c.next_attempt_at,
	COALESCE(c.payload_hash, '') AS payload_hash, COALESCE(c.result_ref, '') AS result_ref,
	COALESCE(c.last_error, '') AS last_error, COALESCE(c.object_id, '') AS object_id, c.object_version,
	c.conflict_count, c.created_at, c.updated_at, c.claimed_at, c.completed_at, c.claim_token,
	COALESCE(c.receipt_hash, '') AS receipt_hash, COALESCE(c.origin, '') AS origin,
	COALESCE(c.reconciler, '') AS reconciler,
	c.inserted, false AS adopted, COALESCE((SELECT (why).cause FROM entry), '')::text AS cause
FROM c
UNION ALL
SELECT cur.id, cur.tenant, cur.source, cur.event_id, cur.action,
	COALESCE(cur.event_type, '') AS event_type, cur.state, cur.last_outcome, cur.attempt,
	cur.max_attempts, cur.lease_policy, cur.lease_until, cur.next_attempt_at,
	COALESCE(cur.payload_hash, '') AS payload_hash, COALESCE(cur.result_ref, '') AS result_ref,
	COALESCE(cur.last_error, '') AS last_error, COALESCE(cur.object_id, '') AS object_id,
	cur.object_version, cur.conflict_count, cur.created_at, cur.updated_at, cur.claimed_at,
	cur.completed_at, cur.claim_token, COALESCE(cur.receipt_hash, '') AS receipt_hash,
	COALESCE(cur.origin, '') AS origin, COALESCE(cur.reconciler, '') AS reconciler,
	false, false, COALESCE((SELECT (why).cause FROM entry), '')::text
FROM cur
UNION ALL
SELECT a.id, a.tenant, a.source, a.event_id, a.action, COALESCE(a.event_type, '') AS event_type, a.state,
	a.last_outcome, a.attempt, a.max_attempts, a.lease_policy, a.lease_until, a.next_attempt_at,
	COALESCE(a.payload_hash, '') AS payload_hash, COALESCE(a.result_ref, '') AS result_ref,
	COALESCE(a.last_error, '') AS last_error, COALESCE(a.object_id, '') AS object_id, a.object_version,
	a.conflict_count, a.created_at, a.updated_at, a.claimed_at, a.completed_at, a.claim_token,
	COALESCE(a.receipt_hash, '') AS receipt_hash, COALESCE(a.origin, '') AS origin,
	COALESCE(a.reconciler, '') AS reconciler,
	false, true, ''::text
FROM a;
