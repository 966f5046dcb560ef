package claim

import "strings"

// recordColumns is the column list every query returns, in scanRecord order.
const recordColumns = `id, tenant, source, event_id, action, COALESCE(event_type, ''), state,
	last_outcome, attempt, max_attempts, lease_policy, lease_until, next_attempt_at,
	COALESCE(payload_hash, ''), COALESCE(result_ref, ''), COALESCE(last_error, ''),
	COALESCE(object_id, ''), object_version, conflict_count, created_at, updated_at,
	claimed_at, completed_at, claim_token::text, COALESCE(receipt_hash, ''), COALESCE(origin, ''),
	COALESCE(reconciler, '')`

// baseOutcomeExpr decides the outcome for an existing, locked row (cl)
// against the proposed row (excluded); see the claim_outcome function in
// the schema.
const baseOutcomeExpr = `claim_outcome(cl.state, cl.payload_hash, cl.lease_until, cl.next_attempt_at,
	cl.attempt, cl.max_attempts, cl.lease_policy, excluded.payload_hash,
	excluded.state = 'stale', statement_timestamp())`

// outcomeExpr is baseOutcomeExpr, except for the holder asking again: a
// claim that anyone else would be answered in_progress for (the record is
// processing, its lease valid, the payload hash not in conflict) and that
// carries the request id of the claim holding that lease (see migration
// 00006) is 'won_replayed': the same request, whose answer was lost. It is
// answered won with the stored claim token; the attempt, token and lease
// stay as they are (see claimTemplate).
var outcomeExpr = strings.ReplaceAll(`CASE WHEN cl.request_id = excluded.request_id AND {B} = 'in_progress'
	THEN 'won_replayed' ELSE {B} END`, "{B}", baseOutcomeExpr)

// newStateExpr is the state after the decision {O}.
const newStateExpr = `CASE {O} WHEN 'won' THEN 'processing' WHEN 'unknown' THEN 'unknown'
	WHEN 'dead_lettered' THEN 'dead_lettered' WHEN 'stale' THEN 'stale' ELSE cl.state END`

// claimTemplate is THE claim: one INSERT … ON CONFLICT … DO UPDATE
// statement over the claims of {ROWS} (one row for claimSQL, up to a
// group's worth for claimManySQL), whose keys must be distinct (a row
// cannot be updated twice by one statement). The unique index on (tenant,
// source, event_id, action) arbitrates concurrent inserts; for an existing
// key the conflicting row is locked and the decision (claim_outcome) and
// its write happen in the same statement, for every row on its own. Rows
// are inserted, and existing ones locked, in ord order (the caller's key
// order). The outcome is stored in last_outcome and returned; the delivery
// log entry of every claim is written by the same statement.
//
// A winning claim stores its lease policy (the claim's own, else its
// source's), which governs the lease it won; claim_outcome judges an
// expired lease by the policy its holder won it under. Any other outcome
// (a replay included) leaves the stored policy.
//
// A winning claim stores its reconciler (the claim's own, else NULL: its
// source's default reconciler when it goes unknown, see reconcile.go), as
// it stores its lease policy; any other outcome leaves the stored one.
//
// A winning claim stores its request id (NULL when it has none; a new
// record stores it whatever the outcome: a stale record never becomes
// processing, so there it is inert). A replay (outcomeExpr: the same
// request again while its lease is valid) changes nothing but
// last_outcome, which becomes 'won' again: the caller reads the stored
// claim token, and the log tells the replay from a fresh win by the token
// (a fresh win stores the proposed one) and records it as won_replayed.
// Concurrent copies of one request therefore all get the one claim.
//
// A plain duplicate of a completed record (see cur below) is answered from
// the record without locking or rewriting it: only its delivery-log entry
// is written, so duplicates cost less than fresh claims and never wait for
// one another. Its outcome is returned, not stored: last_outcome is the
// outcome of the last decision that wrote the row (the delivery log has
// every one), and never leaves this package.
//
// The columns of {ROWS}: ord (the order), tenant, source, event_id,
// action, event_type, token (the new claim token proposed), lease
// (seconds), hash (payload hash), object_id, object_version, max_attempts,
// lease_policy, execution_id, backoff_base, backoff_cap (seconds),
// request_id, door, fingerprint, retry (the provider's retry signal), mode
// (the n8n execution mode), shadow, workflow_id, workflow_version, reconciler. Every row returned carries, after
// recordColumns, the cause logged with it ("" when none). In the DO UPDATE the proposed values are read back from
// excluded: claim_token is the proposed token and lease_until the proposed
// lease whenever the outcome can be won (a stale proposal is never won).
var claimTemplate = strings.NewReplacer("{O}", outcomeExpr, "{S}", strings.ReplaceAll(newStateExpr, "{O}", outcomeExpr)).Replace(`
WITH i AS (
	{ROWS}
), cur AS (
	-- The record of each claim's key as the statement's snapshot has it,
	-- and whether the claim is a plain duplicate (i_fast): a completed
	-- record, this claim's payload hash equal or absent, and nothing it
	-- carries (event type, object) missing from the record. A completed record stays completed (the claim outcome of a
	-- completed record is duplicate or conflict, and neither changes it),
	-- so such a claim is answered from the snapshot without locking or
	-- rewriting the row: only its delivery-log entry is written (fast).
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
	SELECT i.*, (o.id IS NOT NULL AND o.version IS NOT NULL AND EXISTS (
		SELECT 1 FROM object_versions v
		WHERE v.tenant = i.tenant AND v.source = i.source AND v.action = i.action AND v.object_id = o.id
		  AND v.last_version >= o.version
	)) AS stale
	FROM i
	LEFT JOIN cur ON cur.i_ord = i.ord
	CROSS JOIN LATERAL (SELECT COALESCE(i.object_id, cur.object_id) AS id,
		CASE WHEN i.object_id IS NOT NULL THEN i.object_version ELSE cur.object_version END AS version) o
	WHERE cur.i_fast IS NOT TRUE
), c AS (
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
		last_outcome    = CASE WHEN {O} = 'won_replayed' THEN 'won' ELSE {O} END,
		state           = {S},
		attempt         = cl.attempt + CASE WHEN {O} = 'won' THEN 1 ELSE 0 END,
		claim_token     = CASE WHEN {O} = 'won' THEN excluded.claim_token ELSE cl.claim_token END,
		request_id      = CASE WHEN {O} = 'won' THEN excluded.request_id ELSE cl.request_id END,
		lease_policy    = CASE WHEN {O} = 'won' THEN excluded.lease_policy ELSE cl.lease_policy END,
		reconciler      = CASE WHEN {O} = 'won' THEN excluded.reconciler ELSE cl.reconciler END,
		lease_until     = CASE WHEN {O} = 'won' THEN excluded.lease_until ELSE cl.lease_until END,
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
SELECT ` + recordColumns + `, COALESCE((SELECT (why).cause FROM entry WHERE e_id = c.id), '') FROM c
UNION ALL
SELECT ` + duplicateColumns + `, COALESCE((SELECT (why).cause FROM entry WHERE e_id = fast.id), '') FROM fast`)

// duplicateColumns is recordColumns with the outcome of a plain duplicate
// in place of the stored last_outcome.
var duplicateColumns = func() string {
	cols := strings.Replace(recordColumns, "\tlast_outcome,", "\t'duplicate',", 1)
	if cols == recordColumns {
		panic("claim: recordColumns has no last_outcome column to replace")
	}
	return cols
}()

// claimSQL is claimTemplate for one claim: $1 tenant, $2 source,
// $3 event_id, $4 action, $5 event_type, $6 new claim token, $7 lease
// seconds, $8 payload hash, $9 object id, $10 object version, $11 max
// attempts, $12 lease policy, $13 execution id, $14 backoff base seconds,
// $15 backoff cap seconds, $16 request id, $17 door, $18 fingerprint,
// $19 retry signal, $20 execution mode, $21 shadow (the delivery-log
// entry is marked shadow: the decision is recorded, not enforced; see
// Request.Shadow), $22 workflow id, $23 workflow version, $24 reconciler
// (NULL: the source's default; see claimArgs).
var claimSQL = strings.Replace(claimTemplate, "{ROWS}", `SELECT 1::bigint AS ord, $1::text AS tenant, $2::text AS source,
		$3::text AS event_id, $4::text AS action, $5::text AS event_type, $6::uuid AS token,
		$7::float8 AS lease, $8::text AS hash, $9::text AS object_id, $10::bigint AS object_version,
		$11::int AS max_attempts, $12::text AS lease_policy, $13::text AS execution_id,
		$14::float8 AS backoff_base, $15::float8 AS backoff_cap, $16::text AS request_id,
		$17::text AS door, $18::bytea AS fingerprint, $19::text AS retry, $20::text AS mode,
		$21::boolean AS shadow, $22::text AS workflow_id, $23::text AS workflow_version,
		$24::text AS reconciler`, 1)

// claimManySQL is claimTemplate for many claims of distinct keys, one
// array per column of claimSQL's parameters, in the same order ($1
// tenants … $24 reconcilers, all of one length; see claimManyArgs); the
// rows are taken in array order.
var claimManySQL = strings.Replace(claimTemplate, "{ROWS}", `SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[],
		$5::text[], $6::uuid[], $7::float8[], $8::text[], $9::text[], $10::bigint[], $11::int[],
		$12::text[], $13::text[], $14::float8[], $15::float8[], $16::text[], $17::text[], $18::bytea[],
		$19::text[], $20::text[], $21::boolean[], $22::text[], $23::text[], $24::text[])
		WITH ORDINALITY AS u(tenant, source, event_id, action, event_type, token, lease, hash,
		object_id, object_version, max_attempts, lease_policy, execution_id, backoff_base,
		backoff_cap, request_id, door, fingerprint, retry, mode, shadow, workflow_id, workflow_version,
		reconciler, ord)`, 1)

// genericPlanSQL sets plan_cache_mode = force_generic_plan until the end
// of the transaction it runs in (set_config with is_local: what SET LOCAL
// sets, without the warning SET LOCAL gives in PostgreSQL's implicit
// transaction of a pipeline, where the setting holds all the same), so
// that the prepared statements after it run on their cached generic plan.
// claimMany and settleBatch send it first, in the transaction of their
// multi-row statements (claimManySQL, settleManySQL); no statement
// outside that transaction sees the setting.
//
// Why: those statements take their rows as arrays (unnest). A custom
// plan, made for the arguments at hand, knows the arrays' length (one
// row for a group of one); the generic plan cannot and assumes ten rows.
// Each row costs an index lookup (the claim's key, the record's id), so
// the generic plan is estimated about ten times dearer than the custom
// plan of a small group (on a table of 200,000 records: 86 against 9 for
// one claim, 85 against 9 for one settle), and under the default
// plan_cache_mode PostgreSQL never chooses it: every run, groups of one
// included, was planned afresh (2.3–2.7 ms, more than the claim's own
// work). Both plans read the tables the same way, one index lookup per
// row (and claimManySQL inserts in ord order, its ORDER BY, in either),
// right for a group of any size, so the fresh plan buys nothing.
const genericPlanSQL = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true)`

// completableExpr is whether a record of claims {C} whose claim token is
// the one a Complete presents may be completed: processing, unknown
// (its holder's Complete after a lease expiry under review, a Fail
// unknown or a Release: the effect did happen), or retryable_failed by a
// reconciler's not_done answer with no claim since (the reconcile of the
// token's episode answered not_done; a claim that wins the record
// replaces the token). Only the last one probes reconciles (its primary
// key).
const completableExpr = `({C}.state IN ('processing', 'unknown')
	OR ({C}.state = 'retryable_failed' AND EXISTS (SELECT 1 FROM reconciles rc WHERE rc.claim_id = {C}.id
		AND rc.state = 'answered' AND rc.verdict = 'not_done' AND rc.episode_token = {C}.claim_token)))`

// completeSQL moves a processing, unknown or reconciled-not-done record
// (completableExpr) to completed when the token is current, records the
// object version for out-of-order protection and logs the transition, in
// one statement.
var completeSQL = `
WITH c AS (
	UPDATE claims SET state = 'completed', result_ref = $4, completed_at = statement_timestamp(),
		updated_at = statement_timestamp(), lease_until = NULL, next_attempt_at = NULL
	WHERE id = $1 AND tenant = $2 AND claim_token = $3 AND ` + strings.ReplaceAll(completableExpr, "{C}", "claims") + `
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

// settleManySQL is completeSQL and failSQL for many records at once, one
// row per report, of distinct ids, in array order: $1 ids, $2 tenants,
// $3 tokens, $4 ops ('complete', or the fail kind: 'retryable',
// 'permanent', 'unknown'), $5 result refs (completes), $6 error texts
// (fails), $7 jitters in [0,1) (fails), $8 execution ids (fails by
// execution; NULL otherwise). Each row is decided exactly as its own
// statement decides it: the same guard (token current; processing, or
// completableExpr for a complete), the same new state, the same delivery-log
// entry; object versions of the completed records are recorded, the
// highest per object. A report whose guard matched no row returns
// nothing (the caller tells a repeat from a lost lease).
var settleManySQL = `
WITH u AS (
	SELECT * FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::text[], $5::text[], $6::text[],
		$7::float8[], $8::text[]) WITH ORDINALITY AS u(id, tenant, token, op, result_ref, error, jitter, execution_id, ord)
), c AS (
	UPDATE claims cl SET
		state = CASE WHEN u.op = 'complete' THEN 'completed'
		             WHEN u.op = 'permanent' THEN 'dead_lettered'
		             WHEN u.op = 'unknown' THEN 'unknown'
		             WHEN cl.attempt >= cl.max_attempts THEN 'dead_lettered'
		             ELSE 'retryable_failed' END,
		result_ref = CASE WHEN u.op = 'complete' THEN u.result_ref ELSE cl.result_ref END,
		completed_at = CASE WHEN u.op = 'complete' THEN statement_timestamp() ELSE cl.completed_at END,
		next_attempt_at = CASE WHEN u.op = 'retryable' AND cl.attempt < cl.max_attempts
			THEN statement_timestamp() + make_interval(secs =>
				u.jitter * LEAST(cl.backoff_cap, cl.backoff_base * power(2, cl.attempt - 1)))
			END,
		last_error = CASE WHEN u.op = 'complete' THEN cl.last_error ELSE u.error END,
		lease_until = NULL, updated_at = statement_timestamp()
	FROM u
	WHERE cl.id = u.id AND cl.tenant = u.tenant AND cl.claim_token = u.token
	  AND (cl.state = 'processing' OR (u.op = 'complete' AND ` + strings.ReplaceAll(completableExpr, "{C}", "cl") + `))
	RETURNING cl.*, u.op AS u_op, u.error AS u_error, u.execution_id AS u_execution_id
), v AS (
	INSERT INTO object_versions AS ov (tenant, source, action, object_id, last_version)
	SELECT tenant, source, action, object_id, max(object_version) FROM c
	WHERE u_op = 'complete' AND object_id IS NOT NULL AND object_version IS NOT NULL
	GROUP BY tenant, source, action, object_id
	ON CONFLICT (tenant, source, action, object_id) DO UPDATE
	SET last_version = GREATEST(ov.last_version, excluded.last_version), updated_at = statement_timestamp()
), log AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail, execution_id)
	SELECT id, CASE WHEN u_op = 'complete' THEN 'completed' ELSE 'failed_' || u_op END, attempt,
		CASE WHEN u_op = 'complete' THEN NULL ELSE u_error END, u_execution_id FROM c
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

// resolveSQL is the operator's decision on an unknown or dead-lettered
// record: completed (the effect happened; $4 result_ref, NULL keeps the
// record's), retry (claimable at once, one more attempt allowed) or failed
// (an unknown record becomes dead_lettered; a dead-lettered one is not
// matched). The guard is the whole decision: a record in another state
// (or resolved by a concurrent call) matches no row and nothing is
// written. $1 id, $2 tenant, $3 outcome, $4 result_ref, $5 note (the
// delivery-log detail), $6 actor (the operator's key prefix, NULL for
// none).
const resolveSQL = `
WITH c AS (
	UPDATE claims SET
		state = CASE $3 WHEN 'completed' THEN 'completed' WHEN 'failed' THEN 'dead_lettered' ELSE 'retryable_failed' END,
		result_ref = CASE WHEN $3 = 'completed' THEN COALESCE($4, result_ref) ELSE result_ref END,
		completed_at = CASE WHEN $3 = 'completed' THEN statement_timestamp() END,
		next_attempt_at = CASE WHEN $3 = 'retry' THEN statement_timestamp() END,
		max_attempts = CASE WHEN $3 = 'retry' THEN GREATEST(max_attempts, attempt + 1) ELSE max_attempts END,
		lease_until = NULL, updated_at = statement_timestamp()
	WHERE id = $1 AND tenant = $2 AND state IN ('unknown', 'dead_lettered')
	  AND ($3 <> 'failed' OR state = 'unknown')
	RETURNING *
), v AS (
	` + completedObjectVersionSQL + `
), log AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail, actor)
	SELECT id, 'resolved_' || $3, attempt, $5, $6::text FROM c
)
SELECT ` + recordColumns + ` FROM c`

// releaseSQL is an operator releasing a stuck processing record to
// unknown: what a lease expiry under policy review does, at once and
// whatever the record's policy or lease end. The claim token is kept, so
// the holder is fenced exactly as after such an expiry: its Complete still
// lands (the effect did happen; completeSQL takes unknown), its Fail and
// Extend answer lease_lost, and every claim of the key answers unknown
// until an operator resolves it. Only a processing record of tenant $2
// matches; anything else writes nothing. $1 id, $2 tenant, $3 note (the
// delivery-log detail), $4 actor (the operator's key prefix).
const releaseSQL = `
WITH c AS (
	UPDATE claims SET state = 'unknown', last_outcome = 'unknown', lease_until = NULL,
		last_error = 'released to unknown by an operator', updated_at = statement_timestamp()
	WHERE id = $1 AND tenant = $2 AND state = 'processing'
	RETURNING *
), log AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail, actor)
	SELECT id, 'released', attempt, $3, $4::text FROM c
)
SELECT ` + recordColumns + ` FROM c`

const getSQL = `SELECT ` + recordColumns + ` FROM claims WHERE id = $1 AND tenant = $2`

const findSQL = `SELECT ` + recordColumns + ` FROM claims
	WHERE tenant = $1 AND source = $2 AND event_id = $3 AND action = $4`

const deliveriesSQL = `SELECT at, outcome, attempt, COALESCE(payload_hash, ''),
	COALESCE(execution_id, ''), COALESCE(detail, ''), COALESCE(actor, ''),
	COALESCE(door, ''), COALESCE(cause, ''), COALESCE(cause_note, ''), shadow,
	COALESCE(workflow_id, ''), COALESCE(workflow_version, '')
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
// processing claim and received event (seconds), inbox dispatches pending
// and dead-lettered, and the age of the oldest pending dispatch (seconds;
// the first entry of inbox_events_pending_idx).
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
	(SELECT count(*) FROM inbox_events WHERE dispatch_state = 'dead_lettered'),
	COALESCE((SELECT EXTRACT(EPOCH FROM statement_timestamp() - min(received_at))
		FROM inbox_events WHERE dispatch_state = 'pending'), 0)
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
