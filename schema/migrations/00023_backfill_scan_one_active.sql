-- +goose Up
SET LOCAL lock_timeout = '5s';

-- One scan of a source at a time, kept by the scan rows themselves
-- (package sidecar/backfill): at most one row per tenant and source is
-- queued or running. A scan asked for while one is makes no row and
-- answers that one; a scan that finished frees its source at once.
--
-- Rows an older claimd may have left queued or running side by side are
-- ended first: per source the running row (else the newest queued one)
-- stays, the others end error.
UPDATE backfill_scans s SET result = 'error', finished_at = now(),
    error = 'the scan did not run: another scan of the source was queued or running'
FROM (SELECT id, row_number() OVER (PARTITION BY tenant, source
        ORDER BY (result = 'running') DESC, id DESC) AS n
      FROM backfill_scans WHERE result IN ('queued', 'running')) d
WHERE s.id = d.id AND d.n > 1;
CREATE UNIQUE INDEX backfill_scans_one_active_idx ON backfill_scans (tenant, source)
    WHERE result IN ('queued', 'running');

-- requested_at: when the scan was asked for (its row made); started_at:
-- when it started running, NULL while it is queued (and for a queued
-- scan that ended without running).
ALTER TABLE backfill_scans ADD COLUMN requested_at timestamptz;
UPDATE backfill_scans SET requested_at = started_at;
ALTER TABLE backfill_scans ALTER COLUMN requested_at SET DEFAULT now();
ALTER TABLE backfill_scans ALTER COLUMN requested_at SET NOT NULL;
ALTER TABLE backfill_scans ALTER COLUMN started_at DROP NOT NULL;
ALTER TABLE backfill_scans ALTER COLUMN started_at DROP DEFAULT;
UPDATE backfill_scans SET started_at = NULL WHERE result = 'queued';

-- +goose Down
SET LOCAL lock_timeout = '5s';
UPDATE backfill_scans SET started_at = requested_at WHERE started_at IS NULL;
ALTER TABLE backfill_scans ALTER COLUMN started_at SET DEFAULT now();
ALTER TABLE backfill_scans ALTER COLUMN started_at SET NOT NULL;
ALTER TABLE backfill_scans DROP COLUMN requested_at;
DROP INDEX backfill_scans_one_active_idx;
