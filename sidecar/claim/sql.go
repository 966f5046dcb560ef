package claim

import "strings"

// recordColumns is the column list every query returns, in scanRecord order.
const recordColumns = `id, tenant, source, event_id, action, COALESCE(event_type, ''), state,
	last_outcome, attempt, max_attempts, lease_policy, lease_until, next_attempt_at,
	COALESCE(payload_hash, ''), COALESCE(result_ref, ''), COALESCE(last_error, ''),
	COALESCE(object_id, ''), object_version, conflict_count, created_at, updated_at,
	claimed_at, completed_at, claim_token::text, COALESCE(receipt_hash, '')`

// baseOutcomeExpr decides the outcome for an existing, locked row (cl)
// against the proposed row (excluded); see the claim_outcome function in
// the schema.
const baseOutcomeExpr = `claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at,
	cl.attempt, cl.max_attempts, cl.lease_policy, excluded.payload_hash,
	excluded.state = 'stale', statement_timestamp())`

// outcomeExpr is baseOutcomeExpr, except for the holder asking again: a
// claim that anyone else would be answered in_progress for (the record is
// processing, its lease valid, the payload hash not in conflict) and that
// carries the request id of the claim holding that lease ($16, see
// migration 00006) is 'won_replayed': the same request, whose answer was
// lost. It is answered won with the stored claim token; the attempt,
// token and lease stay as they are (see claimSQL).
var outcomeExpr = strings.ReplaceAll(`CASE WHEN cl.request_id = $16::text AND {B} = 'in_progress'
	THEN 'won_replayed' ELSE {B} END`, "{B}", baseOutcomeExpr)

// newStateExpr is the state after the decision {O}.
const newStateExpr = `CASE {O} WHEN 'won' THEN 'processing' WHEN 'unknown' THEN 'unknown'
	WHEN 'dead_lettered' THEN 'dead_lettered' WHEN 'stale' THEN 'stale' ELSE cl.state END`

// claimSQL is THE claim: one INSERT … ON CONFLICT … DO UPDATE statement. The
// unique index on (tenant, source, event_id, action) arbitrates concurrent
// inserts; for an existing key the conflicting row is locked and the
// decision (claim_outcome) and its write happen in the same statement. The
// outcome is stored in last_outcome and returned; the delivery log entry is
// written by the same statement.
//
// A winning claim stores its lease policy ($12: the claim's own, else its
// source's), which governs the lease it won; claim_outcome judges an
// expired lease by the policy its holder won it under. Any other outcome
// (a replay included) leaves the stored policy.
//
// A winning claim stores its request id ($16, NULL when it has none). A
// replay (outcomeExpr: the same request again while its lease is valid)
// changes nothing but last_outcome, which becomes 'won' again: the caller
// reads the stored claim token, and the log tells the replay from a fresh
// win by the token (a fresh win stores $6) and records it as won_replayed.
// Concurrent copies of one request therefore all get the one claim.
//
// $1 tenant, $2 source, $3 event_id, $4 action, $5 event_type, $6 new claim
// token, $7 lease seconds, $8 payload hash, $9 object id, $10 object
// version, $11 max attempts, $12 lease policy, $13 execution id,
// $14 backoff base seconds, $15 backoff cap seconds, $16 request id.
var claimSQL = strings.NewReplacer("{O}", outcomeExpr, "{S}", strings.ReplaceAll(newStateExpr, "{O}", outcomeExpr)).Replace(`
WITH obj AS (
	-- The object of the claim: the request's, else the one stored with the
	-- record at ingest (immutable once set).
	SELECT COALESCE($9::text, cur.object_id) AS id,
	       CASE WHEN $9::text IS NOT NULL THEN $10::bigint ELSE cur.object_version END AS version
	FROM (SELECT 1) one
	LEFT JOIN claims cur ON cur.tenant = $1 AND cur.source = $2 AND cur.event_id = $3 AND cur.action = $4
), req AS (
	SELECT (obj.id IS NOT NULL AND obj.version IS NOT NULL AND EXISTS (
		SELECT 1 FROM object_versions v
		WHERE v.tenant = $1 AND v.source = $2 AND v.action = $4 AND v.object_id = obj.id
		  AND v.last_version >= obj.version
	)) AS stale
	FROM obj
), c AS (
	INSERT INTO claims AS cl (tenant, source, event_id, action, event_type, state, last_outcome,
		attempt, max_attempts, lease_policy, backoff_base, backoff_cap, claim_token, lease_until,
		payload_hash, object_id, object_version, claimed_at, created_at, updated_at, request_id)
	SELECT $1, $2, $3, $4, $5,
		CASE WHEN req.stale THEN 'stale' ELSE 'processing' END,
		CASE WHEN req.stale THEN 'stale' ELSE 'won' END,
		CASE WHEN req.stale THEN 0 ELSE 1 END,
		$11, $12, $14, $15,
		CASE WHEN req.stale THEN NULL ELSE $6::uuid END,
		CASE WHEN req.stale THEN NULL ELSE statement_timestamp() + make_interval(secs => $7) END,
		$8, $9, $10,
		CASE WHEN req.stale THEN NULL ELSE statement_timestamp() END,
		statement_timestamp(), statement_timestamp(),
		CASE WHEN req.stale THEN NULL ELSE $16::text END
	FROM req
	ON CONFLICT (tenant, source, event_id, action) DO UPDATE SET
		last_outcome    = CASE WHEN {O} = 'won_replayed' THEN 'won' ELSE {O} END,
		state           = {S},
		attempt         = cl.attempt + CASE WHEN {O} = 'won' THEN 1 ELSE 0 END,
		claim_token     = CASE WHEN {O} = 'won' THEN $6::uuid ELSE cl.claim_token END,
		request_id      = CASE WHEN {O} = 'won' THEN $16::text ELSE cl.request_id END,
		lease_policy    = CASE WHEN {O} = 'won' THEN $12 ELSE cl.lease_policy END,
		lease_until     = CASE WHEN {O} = 'won' THEN statement_timestamp() + make_interval(secs => $7) ELSE cl.lease_until END,
		next_attempt_at = CASE WHEN {O} = 'won' THEN NULL ELSE cl.next_attempt_at END,
		claimed_at      = CASE WHEN {O} = 'won' THEN statement_timestamp() ELSE cl.claimed_at END,
		last_error      = CASE WHEN {O} = 'unknown' AND cl.state = 'processing'
		                       THEN 'lease expired under lease policy review' ELSE cl.last_error END,
		payload_hash    = COALESCE(cl.payload_hash, excluded.payload_hash),
		event_type      = COALESCE(cl.event_type, excluded.event_type),
		object_id       = COALESCE(cl.object_id, excluded.object_id),
		object_version  = COALESCE(cl.object_version, excluded.object_version),
		conflict_count  = cl.conflict_count + CASE WHEN {O} = 'conflict' THEN 1 ELSE 0 END,
		updated_at      = CASE WHEN {O} = 'won' OR {S} <> cl.state THEN statement_timestamp() ELSE cl.updated_at END
	RETURNING *
), log AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, payload_hash, execution_id, detail)
	SELECT id, CASE WHEN last_outcome = 'won' AND claim_token <> $6::uuid THEN 'won_replayed' ELSE last_outcome END,
		attempt, $8, $13, 'request_id=' || $16::text FROM c
)
SELECT ` + recordColumns + ` FROM c`)

// completeSQL moves a processing (or unknown) record to completed when the
// token is current, records the object version for out-of-order protection
// and logs the transition, in one statement.
const completeSQL = `
WITH c AS (
	UPDATE claims SET state = 'completed', result_ref = $4, completed_at = statement_timestamp(),
		updated_at = statement_timestamp(), lease_until = NULL, next_attempt_at = NULL
	WHERE id = $1 AND tenant = $2 AND claim_token = $3 AND state IN ('processing', 'unknown')
	RETURNING *
), v AS (
	INSERT INTO object_versions AS ov (tenant, source, action, object_id, last_version)
	SELECT tenant, source, action, object_id, object_version FROM c
	WHERE object_id IS NOT NULL AND object_version IS NOT NULL
	ON CONFLICT (tenant, source, action, object_id) DO UPDATE
	SET last_version = GREATEST(ov.last_version, excluded.last_version), updated_at = statement_timestamp()
), log AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail)
	SELECT id, 'completed', attempt, $5 FROM c
)
SELECT ` + recordColumns + ` FROM c`

// failSQL records a failed attempt. $4 kind, $5 error text, $6 jitter in [0,1),
// $7 the execution id that FailExecution failed it for (NULL for a Fail by
// token), kept in the delivery-log entry.
// Retryable failures back off with full jitter:
// delay = jitter · min(backoff_cap, backoff_base · 2^(attempt-1)) seconds.
const failSQL = `
WITH c AS (
	UPDATE claims SET
		state = CASE WHEN $4 = 'permanent' THEN 'dead_lettered'
		             WHEN $4 = 'unknown' THEN 'unknown'
		             WHEN attempt >= max_attempts THEN 'dead_lettered'
		             ELSE 'retryable_failed' END,
		next_attempt_at = CASE WHEN $4 = 'retryable' AND attempt < max_attempts
			THEN statement_timestamp() + make_interval(secs =>
				$6::float8 * LEAST(backoff_cap, backoff_base * power(2, attempt - 1)))
			END,
		last_error = $5, lease_until = NULL, updated_at = statement_timestamp()
	WHERE id = $1 AND tenant = $2 AND claim_token = $3 AND state = 'processing'
	RETURNING *
), log AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail, execution_id)
	SELECT id, 'failed_' || $4, attempt, $5, $7::text FROM c
)
SELECT ` + recordColumns + ` FROM c`

const extendSQL = `
WITH c AS (
	UPDATE claims SET lease_until = statement_timestamp() + make_interval(secs => $4),
		updated_at = statement_timestamp()
	WHERE id = $1 AND tenant = $2 AND claim_token = $3 AND state = 'processing'
	RETURNING *
), log AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail)
	SELECT id, 'lease_extended', attempt, $4::text || 's' FROM c
)
SELECT ` + recordColumns + ` FROM c`

// resolveSQL is the operator's decision on an unknown or dead-lettered record.
// retry makes it claimable at once and allows one more attempt.
const resolveSQL = `
WITH c AS (
	UPDATE claims SET
		state = CASE WHEN $3 = 'completed' THEN 'completed' ELSE 'retryable_failed' END,
		result_ref = CASE WHEN $3 = 'completed' THEN COALESCE($4, result_ref) ELSE result_ref END,
		completed_at = CASE WHEN $3 = 'completed' THEN statement_timestamp() END,
		next_attempt_at = CASE WHEN $3 = 'retry' THEN statement_timestamp() END,
		max_attempts = CASE WHEN $3 = 'retry' THEN GREATEST(max_attempts, attempt + 1) ELSE max_attempts END,
		lease_until = NULL, updated_at = statement_timestamp()
	WHERE id = $1 AND tenant = $2 AND state IN ('unknown', 'dead_lettered')
	RETURNING *
), v AS (
	INSERT INTO object_versions AS ov (tenant, source, action, object_id, last_version)
	SELECT tenant, source, action, object_id, object_version FROM c
	WHERE state = 'completed' AND object_id IS NOT NULL AND object_version IS NOT NULL
	ON CONFLICT (tenant, source, action, object_id) DO UPDATE
	SET last_version = GREATEST(ov.last_version, excluded.last_version), updated_at = statement_timestamp()
), log AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail)
	SELECT id, 'resolved_' || $3, attempt, $5 FROM c
)
SELECT ` + recordColumns + ` FROM c`

const getSQL = `SELECT ` + recordColumns + ` FROM claims WHERE id = $1 AND tenant = $2`

const findSQL = `SELECT ` + recordColumns + ` FROM claims
	WHERE tenant = $1 AND source = $2 AND event_id = $3 AND action = $4`

const deliveriesSQL = `SELECT at, outcome, attempt, COALESCE(payload_hash, ''),
	COALESCE(execution_id, ''), COALESCE(detail, '')
	FROM claim_deliveries WHERE claim_id = $1 ORDER BY id LIMIT $2`

// The retention purge, per set of sources: the sources named in $1, or,
// when $4, every source NOT named in $1 (those under the default policy).
// Each statement handles one bounded batch ($3 rows) of terminal records
// (completed, dead_lettered, stale; open records are never purged) whose
// last change (updated_at) is older than $2 seconds, oldest first, and
// skips rows another transaction holds (SKIP LOCKED: a claim or a
// redelivery deciding on them, or a purge on another replica). ORDER BY
// the indexed column keeps the plan on the partial index whatever the
// estimate: the planner cannot estimate "older than now() minus $2" and
// assumes a third of the rows match, and with a bare LIMIT it would then
// rather scan the table for the first matches, which with nothing due
// means reading every kept key on every run. On the index a batch reads
// about as many entries as it removes, and a run with nothing due a few
// pages.

// purgeKeysSQL deletes one batch of records past their key retention
// ($2): the key, its hashes and result, and by cascade whatever payload
// and delivery log they still hold. A later delivery of such a key is a
// new event. Index: claims_terminal_updated_idx.
const purgeKeysSQL = `
WITH doomed AS (
	SELECT id FROM claims
	WHERE state IN ('completed', 'dead_lettered', 'stale')
	  AND updated_at < statement_timestamp() - make_interval(secs => $2)
	  AND (CASE WHEN $4 THEN source <> ALL($1::text[]) ELSE source = ANY($1::text[]) END)
	ORDER BY updated_at
	LIMIT $3
	FOR UPDATE SKIP LOCKED
)
DELETE FROM claims USING doomed WHERE claims.id = doomed.id`

// purgePayloadsSQL removes the payload of one batch of records past their
// payload retention ($2) and keeps the records: the inbox body and headers
// (the inbox_events row: a dispatch job still queued for it finds nothing
// and ends, a redelivery finds nothing to re-arm), the bodies of
// conflicting deliveries, the delivery log and last_error. One
// payload_purged entry, counting the entries removed, replaces the log.
// The key, payload_hash, receipt_hash, state, result_ref, attempt and
// times stay, so a redelivery or a claim of the key is still decided as
// before: duplicate with its result_ref, conflict on another hash.
// payload_purged_at takes the record out of the partial index the batch
// is chosen by (claims_payload_purge_idx). FOR NO KEY UPDATE: the purge
// changes no key column, so it never waits for, or blocks, a delivery-log
// insert of the same record (a foreign-key check). The rows of the batch
// are found as "claim_id = ANY(array)", by index whatever the tables'
// sizes (a join with c may be planned as a scan of the whole delivery log).
const purgePayloadsSQL = `
WITH doomed AS (
	SELECT id FROM claims
	WHERE state IN ('completed', 'dead_lettered', 'stale') AND payload_purged_at IS NULL
	  AND updated_at < statement_timestamp() - make_interval(secs => $2)
	  AND (CASE WHEN $4 THEN source <> ALL($1::text[]) ELSE source = ANY($1::text[]) END)
	ORDER BY updated_at
	LIMIT $3
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
SELECT count(*) FROM c`

// purgeConflictsSQL deletes one batch of conflicting deliveries' bodies
// that arrived after their record's payload purge and are now older than
// the payload retention ($2), counted from their own arrival (the
// record's conflict_count keeps counting them). Index:
// inbox_conflicts_received_idx.
const purgeConflictsSQL = `
WITH doomed AS (
	SELECT f.id FROM inbox_conflicts f JOIN claims c ON c.id = f.claim_id
	WHERE f.received_at < statement_timestamp() - make_interval(secs => $2)
	  AND c.payload_purged_at IS NOT NULL
	  AND (CASE WHEN $4 THEN c.source <> ALL($1::text[]) ELSE c.source = ANY($1::text[]) END)
	ORDER BY f.received_at
	LIMIT $3
	FOR UPDATE OF f SKIP LOCKED
)
DELETE FROM inbox_conflicts WHERE id = ANY(ARRAY(SELECT id FROM doomed))`

// sweepSQL moves one bounded batch of expired processing leases under lease
// policy review to unknown.
const sweepSQL = `
WITH c AS (
	UPDATE claims SET state = 'unknown', last_outcome = 'unknown',
		last_error = 'lease expired under lease policy review', updated_at = statement_timestamp()
	WHERE id IN (
		SELECT id FROM claims
		WHERE state = 'processing' AND lease_policy = 'review' AND lease_until <= statement_timestamp()
		LIMIT $1 FOR UPDATE SKIP LOCKED)
	RETURNING id, attempt
), log AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail)
	SELECT id, 'lease_expired', attempt, 'moved to unknown under lease policy review' FROM c
)
SELECT count(*) FROM c`

// statsSQL feeds the gauges: open records by state, the age of the oldest
// processing claim and received event (seconds), and inbox dispatches
// pending and dead-lettered.
const statsSQL = `
SELECT
	count(*) FILTER (WHERE state = 'unknown'),
	count(*) FILTER (WHERE state = 'dead_lettered'),
	count(*) FILTER (WHERE state = 'processing'),
	count(*) FILTER (WHERE state = 'retryable_failed'),
	count(*) FILTER (WHERE state = 'received'),
	COALESCE(EXTRACT(EPOCH FROM statement_timestamp() - min(claimed_at) FILTER (WHERE state = 'processing')), 0),
	COALESCE(EXTRACT(EPOCH FROM statement_timestamp() - min(created_at) FILTER (WHERE state = 'received')), 0),
	(SELECT count(*) FROM inbox_events WHERE dispatch_state = 'pending'),
	(SELECT count(*) FROM inbox_events WHERE dispatch_state = 'dead_lettered')
FROM claims
WHERE state IN ('unknown', 'dead_lettered', 'processing', 'retryable_failed', 'received')`

// receiveSQL stores an inbox record (state received) for a verified provider
// event, or reports the existing record of the key. inserted tells which.
// The provider view's hash goes to receipt_hash, never to payload_hash:
// redeliveries are compared with the receipt hash, claims with the hash the
// first claim presented (see migration 00004), so each view is only ever
// compared with itself. A known key with a different receipt hash counts a
// conflict; a record created by a claim adopts the first receipt hash, so
// the returned receipt_hash differs from $5 exactly when this delivery is a
// conflict. The delivery log entry is written by the same statement.
//
// $1 tenant, $2 source, $3 event_id, $4 event_type, $5 receipt hash,
// $6 object id, $7 object version, $8 max attempts, $9 lease policy,
// $10 backoff base, $11 backoff cap.
const receiveSQL = `
WITH c AS (
	INSERT INTO claims AS cl (tenant, source, event_id, action, event_type, state, last_outcome,
		attempt, max_attempts, lease_policy, backoff_base, backoff_cap, receipt_hash, object_id, object_version)
	VALUES ($1, $2, $3, '', $4, 'received', 'received', 0, $8, $9, $10, $11, $5, $6, $7)
	ON CONFLICT (tenant, source, event_id, action) DO UPDATE SET
		conflict_count = cl.conflict_count + CASE WHEN cl.receipt_hash IS NOT NULL
			AND cl.receipt_hash <> excluded.receipt_hash THEN 1 ELSE 0 END,
		receipt_hash = COALESCE(cl.receipt_hash, excluded.receipt_hash)
	RETURNING *, (xmax = 0) AS inserted
), log AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, payload_hash, detail)
	SELECT id, CASE WHEN inserted THEN 'received'
	                WHEN receipt_hash <> $5 THEN 'ingest_conflict'
	                ELSE 'ingest_duplicate' END,
		attempt, $5, 'provider delivery' FROM c
)
SELECT ` + recordColumns + `, inserted FROM c`

// listSQL returns one page of a tenant's records in one open state, oldest
// first by (updated_at, id), after the cursor position ($4, $5) when given.
// The literal state list lets the planner use the partial index
// claims_list_idx whatever $2 is.
//
// $1 tenant, $2 state, $3 source (NULL: any), $4 cursor updated_at (NULL:
// from the start), $5 cursor id, $6 row limit.
const listSQL = `SELECT ` + recordColumns + ` FROM claims
	WHERE tenant = $1 AND state = $2
	  AND state IN ('received', 'processing', 'retryable_failed', 'dead_lettered', 'unknown')
	  AND ($3::text IS NULL OR source = $3)
	  AND ($4::timestamptz IS NULL OR (updated_at, id) > ($4::timestamptz, $5::uuid))
	ORDER BY updated_at, id
	LIMIT $6`

// executionWonCTE is the current attempts won by execution $2: the 'won'
// delivery-log entries of $2, through the partial index
// claim_deliveries_won_execution_idx (migration 00008), each naming a
// record and the attempt that win gave it. Joined with claims ON id =
// won_id AND attempt = won_attempt it keeps the records whose current
// attempt that execution won (a later win raised attempt past it).
const executionWonCTE = `won AS (
	SELECT claim_id AS won_id, attempt AS won_attempt FROM claim_deliveries
	WHERE execution_id = $2::text AND outcome = 'won'
)`

// listExecutionSQL returns one page of a tenant's records whose current
// attempt execution $2 won, oldest first by (updated_at, id), after the
// cursor position ($5, $6) when given.
//
// $1 tenant, $2 execution id, $3 state (NULL: any), $4 source (NULL: any),
// $5 cursor updated_at (NULL: from the start), $6 cursor id, $7 row limit.
const listExecutionSQL = `WITH ` + executionWonCTE + `
SELECT ` + recordColumns + ` FROM claims JOIN won ON id = won_id AND attempt = won_attempt
	WHERE tenant = $1
	  AND ($3::text IS NULL OR state = $3)
	  AND ($4::text IS NULL OR source = $4)
	  AND ($5::timestamptz IS NULL OR (updated_at, id) > ($5::timestamptz, $6::uuid))
	ORDER BY updated_at, id
	LIMIT $7`

// executionHeldSQL returns the id and current claim token of at most $4
// processing records of tenant $1 whose current attempt execution $2 won,
// of source $3 (NULL: any), in id order (the order settle batches lock
// rows in). FailExecution fails each with failSQL, guarded by that token.
const executionHeldSQL = `WITH ` + executionWonCTE + `
SELECT id::text, claim_token::text FROM claims JOIN won ON id = won_id AND attempt = won_attempt
	WHERE tenant = $1 AND state = 'processing'
	  AND ($3::text IS NULL OR source = $3)
	ORDER BY claims.id
	LIMIT $4`
