package claim

import "strings"

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

// receiveSQL stores an inbox record (state received) for a verified provider
// event, or reports the existing record of the key. inserted tells which.
// The provider view's hash goes to receipt_hash, never to payload_hash:
// redeliveries are compared with the receipt hash, claims with the hash the
// first claim presented (see migration 00004), so each view is only ever
// compared with itself. A known key with a different receipt hash counts a
// conflict; a record created by a claim adopts the first receipt hash, so
// the returned receipt_hash differs from $5 exactly when this delivery is a
// conflict. The delivery log entry is written by the same statement. A
// plain redelivery (the receipt hash the record already has) neither
// locks nor rewrites the record: only its delivery is logged.
//
// Adoption (adopted): a record of the key that an enforcing door never
// stored (a claim made it, e.g. an ingest door in shadow: no inbox row)
// and that is not settled for good is adopted by a delivery of its
// payload (receipt hash equal, or none yet): the record becomes what this
// delivery would have made, state received with a fresh attempt budget
// (max_attempts = attempt + $8), no claim token, lease, retry time or
// claims' payload hash (the workflow's claim sets its own view), and the
// caller stores the body as its inbox row and queues its dispatch job in
// the same transaction (ingest). Adoptable (adoptableExpr): no inbox row,
// payload not purged, and retryable_failed, dead_lettered, or processing
// under lease policy reclaim with its lease ended (its holder lost it, as
// a claim would take it over). Not adopted, answered as before: completed
// and stale (settled), unknown (an operator resolves it; resolved to
// retry, the next delivery adopts it; resolved failed, never), processing with a live lease (a
// shadow forward in flight: its outcome is relayed to the provider, which
// delivers a failure again), processing under review (the sweeper makes it
// unknown). The adopt CTE locks the record (FOR UPDATE) and, in READ
// COMMITTED, re-checks its state on the version it locked, so of
// concurrent deliveries exactly one adopts; the others find it received
// and are duplicates. Clearing the claim token fences a settle of the
// former holder that lands later: it no longer matches, changes nothing
// and is answered lease_lost.
//
// Cost: a plain redelivery of a completed or received record (the
// normal case) is decided by cur as before; of another state it also
// probes inbox_events by its primary key, in the same statement. The adopt
// CTE runs only when cur found nothing (a one-time filter).
//
// $1 tenant, $2 source, $3 event_id, $4 event_type, $5 receipt hash,
// $6 object id, $7 object version, $8 max attempts, $9 lease policy,
// $10 backoff base, $11 backoff cap, $12 door (the source name),
// $13 request fingerprint, $14 the provider's retry signal. After
// recordColumns, inserted and adopted, each row carries the cause logged
// with a duplicate ("" for none).
var receiveSQL = strings.ReplaceAll(`
WITH cur AS (
	-- A plain redelivery: the record exists with this very receipt hash
	-- (set once, never changed) and is not adoptable, so nothing of it
	-- would change; it is answered from the statement's snapshot without
	-- locking or rewriting the row, and only its delivery is logged.
	SELECT * FROM claims
	WHERE tenant = $1 AND source = $2 AND event_id = $3 AND action = '' AND receipt_hash = $5::text
	  AND NOT ({ADOPTABLE})
), adopt AS (
	SELECT id FROM claims
	WHERE NOT EXISTS (SELECT 1 FROM cur)
	  AND tenant = $1 AND source = $2 AND event_id = $3 AND action = ''
	  AND (receipt_hash = $5::text OR receipt_hash IS NULL) AND {ADOPTABLE}
	FOR UPDATE
), a AS (
	UPDATE claims cl SET state = 'received', last_outcome = 'received', max_attempts = cl.attempt + $8::int,
		claim_token = NULL, lease_until = NULL, next_attempt_at = NULL, request_id = NULL, payload_hash = NULL,
		receipt_hash = COALESCE(cl.receipt_hash, $5::text), updated_at = statement_timestamp()
	FROM adopt WHERE cl.id = adopt.id
	RETURNING cl.*
), c AS (
	INSERT INTO claims AS cl (tenant, source, event_id, action, event_type, state, last_outcome,
		attempt, max_attempts, lease_policy, backoff_base, backoff_cap, receipt_hash, object_id, object_version)
	SELECT $1::text, $2::text, $3::text, '', $4::text, 'received', 'received', 0, $8::int, $9::text,
		$10::float8, $11::float8, $5::text, $6::text, $7::bigint
	WHERE NOT EXISTS (SELECT 1 FROM cur) AND NOT EXISTS (SELECT 1 FROM adopt)
	ON CONFLICT (tenant, source, event_id, action) DO UPDATE SET
		conflict_count = cl.conflict_count + CASE WHEN cl.receipt_hash IS NOT NULL
			AND cl.receipt_hash <> excluded.receipt_hash THEN 1 ELSE 0 END,
		receipt_hash = COALESCE(cl.receipt_hash, excluded.receipt_hash)
	RETURNING *, (xmax = 0) AS inserted
), entry AS (
	-- The delivery-log entry, and for a duplicate why it came
	-- (duplicate_cause, migration 00014), decided here.
	SELECT e.*, CASE WHEN e_outcome = 'ingest_duplicate' THEN duplicate_cause(e_id, 'ingest', $12::text,
		$13::bytea, $14::text, NULL, NULL, NULL, NULL) END AS why
	FROM (
		SELECT id AS e_id, CASE WHEN inserted THEN 'received'
		                        WHEN receipt_hash <> $5 THEN 'ingest_conflict'
		                        ELSE 'ingest_duplicate' END AS e_outcome, attempt AS e_attempt,
			'provider delivery' AS e_detail FROM c
		UNION ALL
		SELECT id, 'ingest_duplicate', attempt, 'provider delivery' FROM cur
		UNION ALL
		SELECT id, 'received', attempt, 'provider delivery: adopted a record without an inbox row (made by a claim, e.g. in shadow)' FROM a
	) e
), log AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, payload_hash, detail, door, fingerprint, cause, cause_note)
	SELECT e_id, e_outcome, e_attempt, $5, e_detail, $12::text, $13::bytea, (why).cause, (why).note
	FROM entry
)
SELECT `+recordColumns+`, inserted, false, COALESCE((SELECT (why).cause FROM entry), '') FROM c
UNION ALL
SELECT `+recordColumns+`, false, false, COALESCE((SELECT (why).cause FROM entry), '') FROM cur
UNION ALL
SELECT `+recordColumns+`, false, true, '' FROM a`, "{ADOPTABLE}", adoptableExpr)

// adoptableExpr is whether the record of claims (unqualified columns) is
// adopted by a delivery of its payload (see receiveSQL): no inbox row, its
// payload not purged, and a state that leaves the event undone with
// nothing to do it; not a record an operator resolved failed (dead
// lettered by a resolved_failed decision: the operator said it is not to
// run; resolved retry, it is adoptable again). The state tests come first:
// a completed or received record (most redeliveries) never probes
// inbox_events.
const adoptableExpr = `(state IN ('retryable_failed', 'dead_lettered')
	   OR (state = 'processing' AND lease_policy = 'reclaim' AND lease_until <= statement_timestamp()))
	  AND payload_purged_at IS NULL
	  AND NOT EXISTS (SELECT 1 FROM inbox_events ie WHERE ie.claim_id = claims.id)
	  AND NOT (state = 'dead_lettered' AND EXISTS (SELECT 1 FROM claim_deliveries d
		WHERE d.claim_id = claims.id AND d.outcome = 'resolved_failed'))`

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
