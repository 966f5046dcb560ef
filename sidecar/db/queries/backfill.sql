-- The backfill scans' statements (package backfill): scans
-- (backfill_scans), their findings (backfill_events) and where each
-- source's scans stand (backfill_state). A statement that returns a scan
-- selects the columns of Scan (GetScan), in its order, so that its row
-- converts to dbsqlc.GetScanRow (backfill's scanOf reads that). The
-- states written as literals are backfill's State constants.

-- name: GetScan :one
-- Scan id of tenant's source.
SELECT id, source, trigger, COALESCE(actor, '') AS actor, mode, requested_at, started_at, finished_at, range_start,
	range_end, pages, listed, missed, backfilled, redelivered, result, COALESCE(error, '') AS error, backlog_from, backlog_to,
	COALESCE(notes, '') AS notes FROM backfill_scans
WHERE tenant = @tenant AND source = @source AND id = @id;

-- name: ListScans :many
-- A page of a source's scans, newest first: those of an id below before
-- (any when before <= 0), at most max_rows.
SELECT id, source, trigger, COALESCE(actor, '') AS actor, mode, requested_at, started_at, finished_at, range_start,
	range_end, pages, listed, missed, backfilled, redelivered, result, COALESCE(error, '') AS error, backlog_from, backlog_to,
	COALESCE(notes, '') AS notes FROM backfill_scans
WHERE tenant = @tenant AND source = @source AND (@before::bigint <= 0 OR id < @before) ORDER BY id DESC LIMIT @max_rows;

-- name: QueueScan :one
-- Makes a source's queued scan row; no row when the source has a queued
-- or running scan (backfill_scans_one_active_idx).
INSERT INTO backfill_scans (tenant, source, trigger, actor, mode, result,
	range_start, range_end) VALUES (@tenant, @source, @trigger, sqlc.narg(actor), @mode, @result, sqlc.narg(range_start), sqlc.narg(range_end))
ON CONFLICT DO NOTHING
RETURNING id, source, trigger, COALESCE(actor, '') AS actor, mode, requested_at, started_at, finished_at, range_start,
	range_end, pages, listed, missed, backfilled, redelivered, result, COALESCE(error, '') AS error, backlog_from, backlog_to,
	COALESCE(notes, '') AS notes;

-- name: ActiveScan :one
-- A source's scan whose result is one of queued and running.
SELECT id, source, trigger, COALESCE(actor, '') AS actor, mode, requested_at, started_at, finished_at, range_start,
	range_end, pages, listed, missed, backfilled, redelivered, result, COALESCE(error, '') AS error, backlog_from, backlog_to,
	COALESCE(notes, '') AS notes FROM backfill_scans
WHERE tenant = @tenant AND source = @source AND result IN (@queued, @running);

-- name: EndQueuedScan :exec
-- Ends queued scan id with result and error, if it is still queued.
UPDATE backfill_scans SET result = @result, error = @error,
	finished_at = now() WHERE id = @id AND result = @queued;

-- name: ScanDue :one
-- Whether a source's next scheduled scan is due at now (true when it
-- was never scanned).
SELECT COALESCE((SELECT next_scan_at <= @now FROM backfill_state
	WHERE tenant = @tenant AND source = @source), true)::boolean AS due;

-- name: PurgeScans :execrows
-- Deletes a batch of the scans that finished before before, with their
-- findings.
DELETE FROM backfill_scans WHERE id IN (SELECT id FROM backfill_scans
	WHERE finished_at < @before::timestamptz ORDER BY id LIMIT 1000);

-- name: StartScan :one
-- Starts queued scan id of tenant's source: result running, started at
-- started_at in mode; no row when it is not queued.
UPDATE backfill_scans SET result = @running, started_at = @started_at, mode = @mode
WHERE id = @id AND tenant = @tenant AND source = @source AND result = @queued RETURNING id, requested_at;

-- name: FindingsArrived :exec
-- Findings of a source settled since: a missed event or a requested
-- redelivery whose key the ledger now holds has arrived.
UPDATE backfill_events e SET state = 'arrived', claim_id = c.id, updated_at = now()
	FROM claims c WHERE e.tenant = @tenant AND e.source = @source AND e.state IN ('redelivery_requested', 'missed')
	AND c.tenant = e.tenant AND c.source = e.scope AND c.event_id = e.event_id AND c.action = '';

-- name: FindingsLateReal :exec
-- Findings of a source settled since: a fetched event whose record now
-- has a receipt hash got its real delivery late.
UPDATE backfill_events e SET state = 'late_real', updated_at = now()
	FROM claims c WHERE e.tenant = @tenant AND e.source = @source AND e.state = 'fetched' AND c.id = e.claim_id
	AND c.receipt_hash IS NOT NULL;

-- name: SetScanRange :exec
-- Records the range scan id lists.
UPDATE backfill_scans SET range_start = @range_start, range_end = @range_end WHERE id = @id;

-- name: InsertRunningScan :one
-- Makes a source's running scan row, requested and started at now; no
-- row when the source has a queued or running scan.
INSERT INTO backfill_scans (tenant, source, trigger, actor, mode, result, requested_at,
	started_at, range_start, range_end) VALUES (@tenant, @source, @trigger, sqlc.narg(actor), @mode, @result, @now, @now, @range_start, @range_end)
ON CONFLICT DO NOTHING RETURNING id;

-- name: FinishScan :exec
-- Records a scan's end: its counts, result, error, the backlog it left
-- and its notes.
UPDATE backfill_scans SET finished_at = @finished_at, pages = @pages, listed = @listed, missed = @missed,
	backfilled = @backfilled, redelivered = @redelivered, result = @result, error = sqlc.narg(error), backlog_from = sqlc.narg(backlog_from),
	backlog_to = sqlc.narg(backlog_to), notes = sqlc.narg(notes)
WHERE id = @id;

-- name: SaveScanState :exec
-- Where a source's scans stand after a scan: listed up to scanned_until
-- (never moved back; NULL keeps it), the next scheduled scan at
-- next_scan_at and, with set_backlog, the backlog left (NULL: none).
INSERT INTO backfill_state (tenant, source, scanned_until, next_scan_at, backlog_from, backlog_to, backlog_cursor)
VALUES (@tenant, @source, sqlc.narg(scanned_until), @next_scan_at, sqlc.narg(backlog_from), sqlc.narg(backlog_to), sqlc.narg(backlog_cursor))
ON CONFLICT (tenant, source) DO UPDATE SET
scanned_until = COALESCE(GREATEST(excluded.scanned_until, backfill_state.scanned_until), backfill_state.scanned_until),
next_scan_at = excluded.next_scan_at,
backlog_from = CASE WHEN @set_backlog::boolean THEN excluded.backlog_from ELSE backfill_state.backlog_from END,
backlog_to = CASE WHEN @set_backlog THEN excluded.backlog_to ELSE backfill_state.backlog_to END,
backlog_cursor = CASE WHEN @set_backlog THEN excluded.backlog_cursor ELSE backfill_state.backlog_cursor END;

-- name: ScanState :one
-- Where a source's scans stand.
SELECT scanned_until, backlog_from, backlog_to, backlog_cursor FROM backfill_state
WHERE tenant = @tenant AND source = @source;

-- name: RecordedMisses :one
-- The creation time of a source's oldest event recorded missed at or
-- after from_at (NULL: none), and how many recorded missed were created
-- before from_at.
SELECT min(provider_created_at) FILTER (WHERE provider_created_at >= sqlc.arg(from_at)) AS oldest,
	count(*) FILTER (WHERE provider_created_at < sqlc.arg(from_at)) AS gone FROM backfill_events
WHERE tenant = @tenant AND source = @source AND state = 'missed';

-- name: FindingStates :many
-- The stored states of findings event_ids of a dedupe scope.
SELECT event_id, state FROM backfill_events WHERE tenant = @tenant AND scope = @scope AND event_id = ANY(@event_ids::text[]);

-- name: FindingArrived :exec
-- A missed finding (or a requested redelivery) whose key the ledger now
-- holds has arrived: with that record's id.
UPDATE backfill_events SET state = 'arrived', updated_at = now(),
	claim_id = (SELECT id FROM claims WHERE tenant = @tenant::text AND source = @scope::text AND event_id = @event_id::text AND action = '')
WHERE tenant = @tenant AND scope = @scope AND event_id = @event_id;

-- name: RecordFinding :exec
-- Records (or updates) a finding of scan scan_id in state.
INSERT INTO backfill_events (tenant, scope, event_id, source, provider_id, event_type,
	provider_created_at, scan_id, state, payload_hash, claim_id)
VALUES (@tenant, @scope, @event_id, @source, @provider_id, sqlc.narg(event_type), sqlc.narg(provider_created_at), @scan_id, @state,
	sqlc.narg(payload_hash), sqlc.narg(claim_id)::uuid)
ON CONFLICT (tenant, scope, event_id) DO UPDATE SET state = excluded.state, scan_id = excluded.scan_id,
	payload_hash = COALESCE(excluded.payload_hash, backfill_events.payload_hash),
	claim_id = COALESCE(excluded.claim_id, backfill_events.claim_id), updated_at = now();

-- name: Findings :many
-- A page of a source's findings with their state now, newest first: a
-- stored state is what the last scan saw, and the ledger may have moved
-- since: a fetched event whose record now has a receipt hash got its real
-- delivery after the backfill (late_real); a missed event, or one whose
-- redelivery was requested, whose key the ledger now holds has arrived
-- (with that record's id). The next scan persists the same states.
-- Filtered on state ('' any), after the finding (before_at,
-- after_event_id) when before_at is not NULL, at most max_rows.
SELECT event_id, provider_id, event_type, provider_created_at, detected_at, scan_id, state::text AS state, claim_id::text AS claim_id FROM (
	SELECT e.event_id, e.provider_id, COALESCE(e.event_type, '') AS event_type, e.provider_created_at, e.detected_at, e.scan_id,
		CASE WHEN e.state = 'fetched' AND cf.receipt_hash IS NOT NULL THEN 'late_real'
			WHEN e.state IN ('missed', 'redelivery_requested') AND ck.id IS NOT NULL THEN 'arrived'
			ELSE e.state END AS state,
		COALESCE(e.claim_id::text, ck.id::text, '') AS claim_id
	FROM backfill_events e
	LEFT JOIN claims cf ON cf.id = e.claim_id AND cf.tenant = e.tenant
	LEFT JOIN claims ck ON e.state IN ('missed', 'redelivery_requested') AND ck.tenant = e.tenant
		AND ck.source = e.scope AND ck.event_id = e.event_id AND ck.action = ''
	WHERE e.tenant = @tenant AND e.source = @source
		AND (sqlc.narg(before_at)::timestamptz IS NULL OR e.detected_at < sqlc.narg(before_at) OR (e.detected_at = sqlc.narg(before_at) AND e.event_id > @after_event_id))
	) f
WHERE (@state::text = '' OR state = @state)
ORDER BY detected_at DESC, event_id LIMIT @max_rows;
