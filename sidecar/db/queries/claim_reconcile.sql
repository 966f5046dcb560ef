-- name: DiscoverReconciles :one
-- Starts the reconciles of unknown claims. names are the configured
-- reconcilers, max_calls and delay_seconds (ReconcilerPolicy.Delay) each
-- one's; sources are the sources with a policy of their own,
-- source_reconcilers their default reconciler ('' none);
-- default_reconciler is the default policy's reconciler (NULL none) for
-- every other source; reconciled_sources the sources whose default
-- reconciler is configured; max_rows the limit. A claim's reconciler is
-- its own (claims.reconciler), else its source's default. This statement
-- leaves out the unknown claims naming no reconciler of the sources
-- without a policy of their own: it runs when the default policy's
-- reconciler is not configured (DiscoverReconcilesWithDefault when it is;
-- two statements, so that no plan of this one reads the unknown claims
-- of every source for a default that is not there; the rest of their
-- text is the same).
--
-- It inserts a waiting row (its first call due the reconciler's delay
-- after the claim went unknown: its updated_at; now if that has passed),
-- for at most max_rows unknown claims with a configured reconciler and no
-- row for their current episode (no row, or one of an earlier episode
-- whose call is not in flight: reset), oldest change first; a concurrent
-- discovery of the same claim inserts or resets it once (ON CONFLICT, its
-- WHERE judged on the row as the other left it). It returns the rows
-- started and how many unknown claims (at most max_rows) name a
-- reconciler of their own that is not configured.
--
-- Cost: only unknown claims that can be reconciled are visited (their own
-- reconciler configured, or none and a source whose default is), by
-- claims_unknown_reconciler_idx (migration 00026), with a primary-key
-- probe of reconciles each; unknown claims without a reconciler are not
-- read. Those with a reconcile of their current episode (waiting, gave up
-- for an operator) are still read on each run.
WITH cfg AS (
	SELECT * FROM ROWS FROM (unnest(@names::text[]), unnest(@max_calls::int[]), unnest(@delay_seconds::float8[]))
		AS r(name, max_calls, delay)
), src AS (
	SELECT * FROM ROWS FROM (unnest(@sources::text[]), unnest(@source_reconcilers::text[])) AS s(source, reconciler)
), cand AS (
	SELECT c.id, c.tenant, c.attempt, c.claim_token, c.updated_at,
		COALESCE(c.reconciler, CASE WHEN s.source IS NOT NULL THEN NULLIF(s.reconciler, '') ELSE sqlc.narg(default_reconciler)::text END) AS rname
	FROM claims c LEFT JOIN src s ON s.source = c.source
	WHERE c.state = 'unknown'
	  AND (c.reconciler = ANY(@names::text[])
		OR (c.reconciler IS NULL AND c.source = ANY(@reconciled_sources::text[])))
	  AND NOT EXISTS (SELECT 1 FROM reconciles r WHERE r.claim_id = c.id AND (r.state = 'calling'
		OR (r.episode_attempt = c.attempt AND r.episode_token IS NOT DISTINCT FROM c.claim_token)))
), ins AS (
	INSERT INTO reconciles AS r (claim_id, tenant, reconciler, episode_attempt, episode_token, state, calls,
		max_calls, next_call_at, created_at, updated_at)
	SELECT cand.id, cand.tenant, cand.rname, cand.attempt, cand.claim_token, 'waiting', 0, cfg.max_calls,
		GREATEST(cand.updated_at + make_interval(secs => cfg.delay), statement_timestamp()),
		statement_timestamp(), statement_timestamp()
	FROM cand JOIN cfg ON cfg.name = cand.rname
	ORDER BY cand.updated_at, cand.id
	LIMIT @max_rows
	ON CONFLICT (claim_id) DO UPDATE SET reconciler = excluded.reconciler,
		episode_attempt = excluded.episode_attempt, episode_token = excluded.episode_token,
		state = 'waiting', calls = 0, max_calls = excluded.max_calls, next_call_at = excluded.next_call_at,
		call_token = NULL, call_deadline = NULL, verdict = NULL, result_ref = NULL, note = NULL,
		last_error = NULL, updated_at = statement_timestamp()
	WHERE r.episode_attempt <> excluded.episode_attempt OR r.episode_token IS DISTINCT FROM excluded.episode_token
	RETURNING 1
)
SELECT (SELECT count(*) FROM ins) AS created,
	(SELECT count(*) FROM (SELECT 1 FROM claims c
		WHERE c.state = 'unknown' AND c.reconciler IS NOT NULL AND c.reconciler <> ALL(@names::text[])
		  AND NOT EXISTS (SELECT 1 FROM reconciles r WHERE r.claim_id = c.id
			AND r.episode_attempt = c.attempt AND r.episode_token IS NOT DISTINCT FROM c.claim_token)
		LIMIT @max_rows) k) AS skipped;

-- name: DiscoverReconcilesWithDefault :one
-- DiscoverReconciles, and the unknown claims naming no reconciler of
-- every source without a policy of its own, under the default policy's
-- reconciler (configured).
WITH cfg AS (
	SELECT * FROM ROWS FROM (unnest(@names::text[]), unnest(@max_calls::int[]), unnest(@delay_seconds::float8[]))
		AS r(name, max_calls, delay)
), src AS (
	SELECT * FROM ROWS FROM (unnest(@sources::text[]), unnest(@source_reconcilers::text[])) AS s(source, reconciler)
), cand AS (
	SELECT c.id, c.tenant, c.attempt, c.claim_token, c.updated_at,
		COALESCE(c.reconciler, CASE WHEN s.source IS NOT NULL THEN NULLIF(s.reconciler, '') ELSE sqlc.narg(default_reconciler)::text END) AS rname
	FROM claims c LEFT JOIN src s ON s.source = c.source
	WHERE c.state = 'unknown'
	  AND (c.reconciler = ANY(@names::text[])
		OR (c.reconciler IS NULL AND c.source = ANY(@reconciled_sources::text[]))
		OR (c.reconciler IS NULL AND c.source <> ALL(@sources::text[])))
	  AND NOT EXISTS (SELECT 1 FROM reconciles r WHERE r.claim_id = c.id AND (r.state = 'calling'
		OR (r.episode_attempt = c.attempt AND r.episode_token IS NOT DISTINCT FROM c.claim_token)))
), ins AS (
	INSERT INTO reconciles AS r (claim_id, tenant, reconciler, episode_attempt, episode_token, state, calls,
		max_calls, next_call_at, created_at, updated_at)
	SELECT cand.id, cand.tenant, cand.rname, cand.attempt, cand.claim_token, 'waiting', 0, cfg.max_calls,
		GREATEST(cand.updated_at + make_interval(secs => cfg.delay), statement_timestamp()),
		statement_timestamp(), statement_timestamp()
	FROM cand JOIN cfg ON cfg.name = cand.rname
	ORDER BY cand.updated_at, cand.id
	LIMIT @max_rows
	ON CONFLICT (claim_id) DO UPDATE SET reconciler = excluded.reconciler,
		episode_attempt = excluded.episode_attempt, episode_token = excluded.episode_token,
		state = 'waiting', calls = 0, max_calls = excluded.max_calls, next_call_at = excluded.next_call_at,
		call_token = NULL, call_deadline = NULL, verdict = NULL, result_ref = NULL, note = NULL,
		last_error = NULL, updated_at = statement_timestamp()
	WHERE r.episode_attempt <> excluded.episode_attempt OR r.episode_token IS DISTINCT FROM excluded.episode_token
	RETURNING 1
)
SELECT (SELECT count(*) FROM ins) AS created,
	(SELECT count(*) FROM (SELECT 1 FROM claims c
		WHERE c.state = 'unknown' AND c.reconciler IS NOT NULL AND c.reconciler <> ALL(@names::text[])
		  AND NOT EXISTS (SELECT 1 FROM reconciles r WHERE r.claim_id = c.id
			AND r.episode_attempt = c.attempt AND r.episode_token IS NOT DISTINCT FROM c.claim_token)
		LIMIT @max_rows) k) AS skipped;

-- name: TakeReconcileCalls :many
-- Takes at most max_rows due calls of configured reconcilers (names,
-- seconds each one's call plus answer), oldest due first, FOR UPDATE SKIP
-- LOCKED (a call is taken by one replica): a due row whose claim is still
-- unknown in its episode becomes calling, with a fresh call token, one
-- more call counted and its deadline (last_error, verdict and note stay
-- as the previous call left them until this one ends); one whose claim
-- left unknown or changed episode is dropped. It returns the calls taken,
-- with what their requests need. A claim is in the episode of reconcile r
-- when it is unknown, at r's episode_attempt, with r's episode_token.
WITH cfg AS (
	SELECT * FROM ROWS FROM (unnest(@names::text[]), unnest(@seconds::float8[])) AS r(name, secs)
), due AS (
	SELECT claim_id FROM reconciles
	WHERE state = 'waiting' AND next_call_at <= statement_timestamp() AND reconciler = ANY(@names::text[])
	ORDER BY next_call_at
	LIMIT @max_rows
	FOR UPDATE SKIP LOCKED
), gone AS (
	UPDATE reconciles r SET state = 'dropped', updated_at = statement_timestamp()
	FROM due WHERE r.claim_id = due.claim_id
	  AND NOT EXISTS (SELECT 1 FROM claims c WHERE c.id = r.claim_id AND c.state = 'unknown' AND c.attempt = r.episode_attempt
	AND c.claim_token IS NOT DISTINCT FROM r.episode_token)
), taken AS (
	UPDATE reconciles r SET state = 'calling', call_token = gen_random_uuid(), calls = r.calls + 1,
		call_deadline = statement_timestamp() + make_interval(secs => cfg.secs), updated_at = statement_timestamp()
	FROM due, cfg, claims c
	WHERE r.claim_id = due.claim_id AND cfg.name = r.reconciler AND c.id = r.claim_id AND c.state = 'unknown' AND c.attempt = r.episode_attempt
	AND c.claim_token IS NOT DISTINCT FROM r.episode_token
	RETURNING r.claim_id, r.tenant, c.source, c.event_id, c.action, COALESCE(c.event_type, '') AS event_type,
		COALESCE(c.payload_hash, '') AS payload_hash, COALESCE(c.result_ref, '') AS result_ref,
		COALESCE(c.last_error, '') AS last_error, c.attempt, r.call_token::text AS call_token, r.calls, r.max_calls,
		r.call_deadline, r.reconciler, EXISTS (SELECT 1 FROM inbox_events e WHERE e.claim_id = c.id) AS ingested
)
SELECT * FROM taken ORDER BY call_deadline, claim_id;

-- name: LockReconcile :one
-- Locks a claim's reconcile row (tenant NULL: any); after the reconcile
-- columns, whether its call's deadline has passed.
SELECT claim_id::text AS claim_id, tenant, reconciler, state, episode_attempt, calls, max_calls,
	next_call_at, call_deadline, COALESCE(verdict, '') AS verdict, COALESCE(result_ref, '') AS result_ref,
	COALESCE(note, '') AS note, COALESCE(last_error, '') AS last_error, created_at, updated_at,
	COALESCE(call_token::text, '')::text AS call_token,
	COALESCE(call_deadline <= statement_timestamp(), false)::boolean AS late
FROM reconciles WHERE claim_id = @claim_id AND (sqlc.narg(tenant)::text IS NULL OR tenant = sqlc.narg(tenant)::text)
FOR UPDATE;

-- name: LockReconcileEpisode :one
-- Locks the claim of reconcile claim_id (FOR NO KEY UPDATE: what its
-- update takes, so no Complete, claim or operator decision lands between
-- this check and the answer's write) and says whether it is unknown in
-- the reconcile's episode.
SELECT (c.state = 'unknown' AND c.attempt = r.episode_attempt
	AND c.claim_token IS NOT DISTINCT FROM r.episode_token)::boolean AS same_episode
FROM claims c JOIN reconciles r ON r.claim_id = c.id
WHERE c.id = @claim_id FOR NO KEY UPDATE OF c;

-- name: DropReconcile :one
-- Drops reconcile claim_id.
UPDATE reconciles SET state = 'dropped', updated_at = statement_timestamp()
WHERE claim_id = @claim_id RETURNING claim_id::text AS claim_id, tenant, reconciler, state, episode_attempt, calls, max_calls,
	next_call_at, call_deadline, COALESCE(verdict, '') AS verdict, COALESCE(result_ref, '') AS result_ref,
	COALESCE(note, '') AS note, COALESCE(last_error, '') AS last_error, created_at, updated_at,
	COALESCE(call_token::text, '')::text AS call_token;

-- name: SettleReconciled :one
-- Applies a done or not_done verdict to the claim (locked, unknown in the
-- episode; see LockReconcileEpisode), as an operator's Resolve completed
-- or retry would: done → completed with the result_ref found (NULL keeps
-- the claim's) and its object version recorded as its object's newest
-- completed one; not_done → retryable_failed, claimable at once, one more
-- attempt allowed. Logged with actor and detail.
WITH c AS (
	UPDATE claims SET
		state = CASE WHEN @verdict::text = 'done' THEN 'completed' ELSE 'retryable_failed' END,
		result_ref = CASE WHEN @verdict::text = 'done' THEN COALESCE(sqlc.narg(result_ref)::text, result_ref) ELSE result_ref END,
		completed_at = CASE WHEN @verdict::text = 'done' THEN statement_timestamp() END,
		next_attempt_at = CASE WHEN @verdict::text = 'not_done' THEN statement_timestamp() END,
		max_attempts = CASE WHEN @verdict::text = 'not_done' THEN GREATEST(max_attempts, attempt + 1) ELSE max_attempts END,
		lease_until = NULL, updated_at = statement_timestamp()
	WHERE claims.id = @claim_id AND claims.state = 'unknown'
	RETURNING *
), v AS (
	INSERT INTO object_versions AS ov (tenant, source, action, object_id, last_version)
	SELECT c.tenant, c.source, c.action, c.object_id, c.object_version FROM c
	WHERE c.state = 'completed' AND c.object_id IS NOT NULL AND c.object_version IS NOT NULL
	ON CONFLICT (tenant, source, action, object_id) DO UPDATE
	SET last_version = GREATEST(ov.last_version, excluded.last_version), updated_at = statement_timestamp()
), log AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail, actor)
	SELECT c.id, CASE WHEN @verdict::text = 'done' THEN 'reconciled_done' ELSE 'reconciled_not_done' END, c.attempt,
		@detail::text, @actor::text FROM c
)
SELECT c.id, c.tenant, c.source, c.event_id, c.action, COALESCE(c.event_type, '') AS event_type, c.state,
	c.last_outcome, c.attempt, c.max_attempts, c.lease_policy, c.lease_until, c.next_attempt_at,
	COALESCE(c.payload_hash, '') AS payload_hash, COALESCE(c.result_ref, '') AS result_ref,
	COALESCE(c.last_error, '') AS last_error, COALESCE(c.object_id, '') AS object_id, c.object_version,
	c.conflict_count, c.created_at, c.updated_at, c.claimed_at, c.completed_at, c.claim_token,
	COALESCE(c.receipt_hash, '') AS receipt_hash, COALESCE(c.origin, '') AS origin,
	COALESCE(c.reconciler, '') AS reconciler
FROM c;

-- name: AnswerReconcile :one
-- Records a done or not_done answer on reconcile claim_id.
UPDATE reconciles SET state = 'answered', verdict = @verdict::text, result_ref = sqlc.narg(result_ref)::text,
	note = sqlc.narg(note)::text, last_error = NULL, updated_at = statement_timestamp()
WHERE claim_id = @claim_id RETURNING claim_id::text AS claim_id, tenant, reconciler, state, episode_attempt, calls, max_calls,
	next_call_at, call_deadline, COALESCE(verdict, '') AS verdict, COALESCE(result_ref, '') AS result_ref,
	COALESCE(note, '') AS note, COALESCE(last_error, '') AS last_error, created_at, updated_at,
	COALESCE(call_token::text, '')::text AS call_token;

-- name: ReconcileAgain :one
-- Ends reconcile claim_id's call without a decision: waiting for the
-- next call after wait_seconds, or gave_up when gave_up (the calls
-- reached max_calls), with the gave-up entry logged (actor, detail).
-- verdict (NULL for a failed call), note, error class.
WITH r AS (
	UPDATE reconciles SET state = CASE WHEN @gave_up::boolean THEN 'gave_up' ELSE 'waiting' END,
		next_call_at = CASE WHEN @gave_up::boolean THEN next_call_at
			ELSE statement_timestamp() + make_interval(secs => @wait_seconds::float8) END,
		verdict = sqlc.narg(verdict)::text, note = sqlc.narg(note)::text, last_error = sqlc.narg(error_class)::text,
		result_ref = NULL, updated_at = statement_timestamp()
	WHERE reconciles.claim_id = @claim_id
	RETURNING *
), log AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail, actor)
	SELECT c.id, 'reconcile_gave_up', c.attempt, @detail::text, @actor::text
	FROM r JOIN claims c ON c.id = r.claim_id WHERE @gave_up::boolean
)
SELECT r.claim_id::text AS claim_id, r.tenant, r.reconciler, r.state, r.episode_attempt, r.calls, r.max_calls,
	r.next_call_at, r.call_deadline, COALESCE(r.verdict, '') AS verdict, COALESCE(r.result_ref, '') AS result_ref,
	COALESCE(r.note, '') AS note, COALESCE(r.last_error, '') AS last_error, r.created_at, r.updated_at,
	COALESCE(r.call_token::text, '')::text AS call_token
FROM r;

-- name: LockExpiredReconcileCalls :many
-- Locks at most max_rows calls past their deadline.
SELECT claim_id::text AS claim_id, tenant, reconciler, state, episode_attempt, calls, max_calls,
	next_call_at, call_deadline, COALESCE(verdict, '') AS verdict, COALESCE(result_ref, '') AS result_ref,
	COALESCE(note, '') AS note, COALESCE(last_error, '') AS last_error, created_at, updated_at,
	COALESCE(call_token::text, '')::text AS call_token
FROM reconciles
WHERE state = 'calling' AND call_deadline <= statement_timestamp()
ORDER BY call_deadline LIMIT @max_rows FOR UPDATE SKIP LOCKED;

-- name: ReconcileOf :one
-- The reconcile of claim claim_id of tenant.
SELECT claim_id::text AS claim_id, tenant, reconciler, state, episode_attempt, calls, max_calls,
	next_call_at, call_deadline, COALESCE(verdict, '') AS verdict, COALESCE(result_ref, '') AS result_ref,
	COALESCE(note, '') AS note, COALESCE(last_error, '') AS last_error, created_at, updated_at,
	COALESCE(call_token::text, '')::text AS call_token
FROM reconciles WHERE claim_id = @claim_id AND tenant = @tenant;
