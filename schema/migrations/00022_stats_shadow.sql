-- +goose Up
SET LOCAL lock_timeout = '5s';

-- Shadow mode's own numbers in the hourly rollup (claim.Ledger.RollupStats):
--
--   shadow_deliveries  the deliveries of the hour whose delivery-log entry
--                      is marked shadow (observed only, all of them ran):
--                      the denominator of the would-be duplicate rate, so
--                      that a range mixing shadow and enforced hours does
--                      not divide shadow's would-be duplicates by enforced
--                      deliveries too
--   would_conflicts    shadow claims decided conflict (same key, another
--                      payload): they ran, enforcement would have held them
--
-- Constant defaults: PostgreSQL 11 and later add the columns without
-- rewriting the table.
ALTER TABLE stats_hourly
    ADD COLUMN shadow_deliveries bigint NOT NULL DEFAULT 0,
    ADD COLUMN would_conflicts   bigint NOT NULL DEFAULT 0;

-- Hours already rolled up get the two numbers from the delivery-log rows
-- still kept (one pass over the shadow rows, counted as the rollup
-- counts them); hours whose rows were purged keep 0.
UPDATE stats_hourly s SET shadow_deliveries = r.shadow_deliveries, would_conflicts = r.would_conflicts
FROM (
    SELECT c.tenant, c.source,
        date_trunc('hour', d.at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS hour,
        count(*) FILTER (WHERE d.door IS NOT NULL OR (c.receipt_hash IS NULL AND c.origin IS NULL)) AS shadow_deliveries,
        count(*) FILTER (WHERE d.outcome = 'conflict') AS would_conflicts
    FROM claim_deliveries d JOIN claims c ON c.id = d.claim_id
    WHERE d.shadow AND d.outcome IN ('won', 'duplicate', 'in_progress', 'retry_later', 'conflict', 'stale',
        'dead_lettered', 'unknown')
    GROUP BY 1, 2, 3
) r
WHERE s.tenant = r.tenant AND s.source = r.source AND s.hour = r.hour;

-- +goose Down
SET LOCAL lock_timeout = '5s';
ALTER TABLE stats_hourly DROP COLUMN shadow_deliveries, DROP COLUMN would_conflicts;
