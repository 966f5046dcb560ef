-- The benchmark's statements (cmd/claimbench): what it reports of the
-- server, and the records its retention benchmark generates.

-- name: BackendIdentity :one
-- This session's server process and database.
SELECT pg_backend_pid()::int AS pid, current_database()::text AS database;

-- name: BenchServer :one
-- The server's version and the settings the benchmark reports, and how
-- many client sessions it has.
SELECT version()::text AS version, current_setting('max_connections')::text AS max_connections,
	current_setting('synchronous_commit')::text AS synchronous_commit,
	(SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE backend_type = 'client backend') AS client_backends;

-- name: BenchSettings :one
-- The server's version and shared_buffers.
SELECT current_setting('server_version')::text AS server_version, current_setting('shared_buffers')::text AS shared_buffers;

-- name: DispatchStates :many
-- How many inbox events of source are in each dispatch state.
SELECT dispatch_state, count(*) FROM inbox_events WHERE source = @source GROUP BY 1 ORDER BY 1;

-- name: LedgerSizes :many
-- The sizes of the ledger tables (TOAST counted with its table) and
-- their indexes, in bytes, in a fixed order.
SELECT t.relname::text AS table_name, t.relname::text AS name, false AS is_index, pg_table_size(t.oid) AS bytes
FROM pg_catalog.pg_class t WHERE t.relname IN ('claims', 'claim_deliveries', 'inbox_events', 'inbox_conflicts') AND t.relkind = 'r'
UNION ALL
SELECT t.relname, i.relname, true, pg_relation_size(i.oid)
FROM pg_catalog.pg_index x JOIN pg_catalog.pg_class t ON t.oid = x.indrelid JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid
WHERE t.relname IN ('claims', 'claim_deliveries', 'inbox_events', 'inbox_conflicts')
ORDER BY 1, 3, 2;

-- name: KeptRowSizes :one
-- The average stored size of a kept record's row and of its
-- payload_purged delivery-log entry, and how many kept records there are.
SELECT avg(pg_column_size(c.*))::float8 AS claim_row, count(*) AS kept,
	(SELECT avg(pg_column_size(d.*)) FROM claim_deliveries d WHERE d.outcome = 'payload_purged')::float8 AS log_row
FROM claims c WHERE c.payload_purged_at IS NOT NULL;

-- The retention benchmark's records: completed records numbered from_i
-- to to_i of tenant's source, last changed at t; each set's event ids
-- have their own prefix (k, d, e).

-- name: GenerateKeptKeys :exec
-- Records whose payload was purged, last changed 31 to 399 days ago, each
-- with its payload_purged delivery-log entry.
WITH c AS (
	INSERT INTO claims (tenant, source, event_id, event_type, state, last_outcome, attempt, max_attempts, lease_policy,
	backoff_base, backoff_cap, claim_token, payload_hash, receipt_hash, result_ref, created_at, updated_at,
	claimed_at, completed_at, payload_purged_at)
	SELECT @tenant::text, @source::text, 'msg_' || substr(md5('k' || i), 1, 27), 'invoice.paid',
	'completed', 'won', 1, 5, 'reclaim', 30, 3600, gen_random_uuid(),
	encode(sha256(('pk' || i)::bytea), 'hex'), encode(sha256(('rk' || i)::bytea), 'hex'),
	're_' || substr(md5('refk' || i), 1, 24), t - interval '3 seconds', t, t - interval '2 seconds', t, t + interval '30 days' FROM (SELECT i, now() - interval '31 days'
		- (i % 368) * interval '1 day' - (i % 86400) * interval '1 second' AS t
		FROM generate_series(@from_i::int, @to_i::int) i) g
	RETURNING id, payload_purged_at)
INSERT INTO claim_deliveries (claim_id, at, outcome, attempt, detail)
SELECT id, payload_purged_at, 'payload_purged', 1, 'removed 4 entries' FROM c;

-- name: GenerateDueKeys :exec
-- Records past the payload retention with everything ingest and one
-- dispatch store: inbox row (a JSON body of body_bytes bytes, headers)
-- and four log entries.
WITH c AS (
	INSERT INTO claims (tenant, source, event_id, event_type, state, last_outcome, attempt, max_attempts, lease_policy,
	backoff_base, backoff_cap, claim_token, payload_hash, receipt_hash, result_ref, created_at, updated_at,
	claimed_at, completed_at, payload_purged_at)
	SELECT @tenant::text, @source::text, 'msg_' || substr(md5('d' || i), 1, 27), 'invoice.paid',
	'completed', 'won', 1, 5, 'reclaim', 30, 3600, gen_random_uuid(),
	encode(sha256(('pd' || i)::bytea), 'hex'), encode(sha256(('rd' || i)::bytea), 'hex'),
	're_' || substr(md5('refd' || i), 1, 24), t - interval '3 seconds', t, t - interval '2 seconds', t, NULL::timestamptz FROM (SELECT i, now() - interval '31 days'
		- (i % 2) * interval '1 day' - (i % 86400) * interval '1 second' AS t
		FROM generate_series(@from_i::int, @to_i::int) i) g
	RETURNING id, event_id, payload_hash, created_at, completed_at),
e AS (
	INSERT INTO inbox_events (claim_id, tenant, source, body, content_type, headers, received_at,
		dispatch_state, dispatch_attempts, last_dispatch_status, dispatched_at)
	SELECT id, @tenant::text, @source::text,
		convert_to(rpad('{"type":"invoice.paid","data":{"id":"' || md5(event_id) || '","pad":"', sqlc.arg(body_bytes)::int - 2, md5(id::text)) || '"}', 'UTF8'),
		'application/json', jsonb_build_object('webhook-id', event_id, 'content-type', 'application/json',
			'user-agent', 'Svix-Webhooks/1.38', 'webhook-timestamp', extract(epoch FROM created_at)::bigint::text),
		created_at, 'dispatched', 1, 200, completed_at FROM c)
INSERT INTO claim_deliveries (claim_id, at, outcome, attempt, payload_hash, detail)
SELECT c.id, c.created_at + o.off * interval '1 second', o.outcome, o.attempt,
	CASE WHEN o.hash THEN c.payload_hash END, o.detail
FROM c CROSS JOIN (VALUES (0, 'received', 0, true, 'provider delivery'), (1, 'won', 1, true, NULL),
	(2, 'completed', 1, false, NULL), (3, 'dispatched', 1, false, 'HTTP 200')) o(off, outcome, attempt, hash, detail);

-- name: GenerateExpiredKeys :exec
-- Kept keys last changed 401 to 430 days ago.
WITH c AS (
	INSERT INTO claims (tenant, source, event_id, event_type, state, last_outcome, attempt, max_attempts, lease_policy,
	backoff_base, backoff_cap, claim_token, payload_hash, receipt_hash, result_ref, created_at, updated_at,
	claimed_at, completed_at, payload_purged_at)
	SELECT @tenant::text, @source::text, 'msg_' || substr(md5('e' || i), 1, 27), 'invoice.paid',
	'completed', 'won', 1, 5, 'reclaim', 30, 3600, gen_random_uuid(),
	encode(sha256(('pe' || i)::bytea), 'hex'), encode(sha256(('re' || i)::bytea), 'hex'),
	're_' || substr(md5('refe' || i), 1, 24), t - interval '3 seconds', t, t - interval '2 seconds', t, t + interval '30 days' FROM (SELECT i, now() - interval '401 days'
		- (i % 30) * interval '1 day' - (i % 86400) * interval '1 second' AS t
		FROM generate_series(@from_i::int, @to_i::int) i) g
	RETURNING id, payload_purged_at)
INSERT INTO claim_deliveries (claim_id, at, outcome, attempt, detail)
SELECT id, payload_purged_at, 'payload_purged', 1, 'removed 4 entries' FROM c;

-- name: VacuumLedger :exec
-- Vacuums and analyzes the ledger tables.
VACUUM (ANALYZE) claims, claim_deliveries, inbox_events, inbox_conflicts;
