-- +goose Up
SET LOCAL lock_timeout = '5s';

-- What a scan left unchecked (package sidecar/backfill), shown with it:
--   backlog_from, backlog_to – for a partial scan, the part of its range
--                              it did not reach, [from, to) in provider
--                              creation time (NULL otherwise);
--   notes                    – fixed sentences on what the scan could not
--                              cover that is no error of it (a backlog
--                              that left the provider's window unlisted,
--                              recorded misses too old to recover).
ALTER TABLE backfill_scans ADD COLUMN backlog_from timestamptz;
ALTER TABLE backfill_scans ADD COLUMN backlog_to timestamptz;
ALTER TABLE backfill_scans ADD COLUMN notes text;

-- +goose Down
SET LOCAL lock_timeout = '5s';
ALTER TABLE backfill_scans DROP COLUMN notes;
ALTER TABLE backfill_scans DROP COLUMN backlog_to;
ALTER TABLE backfill_scans DROP COLUMN backlog_from;
