-- +goose Up
SET LOCAL lock_timeout = '5s';

-- Scans that resume and scans that are asked for (package sidecar/backfill).
--
-- backfill_scans.result gains:
--   queued  – the scan was asked for (API, console, schedule) and its row
--             made with its queue job, so the caller has the scan's id at
--             once; it has not started yet (range_start/range_end are the
--             range it was asked for, or NULL for the source's default);
--   partial – the scan listed backfill.max_pages pages and stopped: the
--             part of the range it did not reach is kept in backfill_state
--             (backlog) and listed by the next scans.
ALTER TABLE backfill_scans DROP CONSTRAINT backfill_scans_result_check;
ALTER TABLE backfill_scans ADD CONSTRAINT backfill_scans_result_check
    CHECK (result IN ('queued', 'running', 'ok', 'partial', 'rate_limited', 'credential_refused', 'error'));
ALTER TABLE backfill_scans ALTER COLUMN range_start DROP NOT NULL;
ALTER TABLE backfill_scans ALTER COLUMN range_end DROP NOT NULL;

-- The part of a source's window no scan has listed yet because a scan
-- stopped at max_pages: [backlog_from, backlog_to) in provider creation
-- time, NULL when there is none. backlog_cursor is the provider's own
-- pagination cursor where the provider has no time filter (GitHub's
-- Link rel="next" URL path and query, never a credential), NULL elsewhere.
ALTER TABLE backfill_state ADD COLUMN backlog_from timestamptz;
ALTER TABLE backfill_state ADD COLUMN backlog_to timestamptz;
ALTER TABLE backfill_state ADD COLUMN backlog_cursor text;

-- +goose Down
SET LOCAL lock_timeout = '5s';
ALTER TABLE backfill_state DROP COLUMN backlog_cursor;
ALTER TABLE backfill_state DROP COLUMN backlog_to;
ALTER TABLE backfill_state DROP COLUMN backlog_from;
DELETE FROM backfill_scans WHERE result IN ('queued', 'partial');
ALTER TABLE backfill_scans ALTER COLUMN range_end SET NOT NULL;
ALTER TABLE backfill_scans ALTER COLUMN range_start SET NOT NULL;
ALTER TABLE backfill_scans DROP CONSTRAINT backfill_scans_result_check;
ALTER TABLE backfill_scans ADD CONSTRAINT backfill_scans_result_check
    CHECK (result IN ('running', 'ok', 'rate_limited', 'credential_refused', 'error'));
