-- +goose NO TRANSACTION
-- +goose Up

-- Hourly numbers per tenant and source (claims.source: a source's dedupe
-- scope or a claim's source), drawn by the console's source page. claimd's
-- maintenance loop recomputes the last hours from the delivery log and
-- replaces them (claim.Ledger.RollupStats), so a delivery-log row
-- committed late (its "at" is taken before its transaction commits) is
-- counted by a later tick, and running the rollup twice changes nothing.
-- The rows stay when the payload and key purges remove the delivery log
-- they were computed from: they hold counts only, no key, no payload.
--
--   deliveries          copies that reached claimd: provider deliveries at
--                       /ingest (received, ingest_duplicate, ingest_conflict)
--                       and claims of records that did not come through
--                       ingest (the workflow's own claim of an ingested event
--                       is not a second delivery)
--   duplicates_stopped  copies answered duplicate or in_progress (the effect
--                       was not run again), at ingest or at a claim
--   conflicts           same key, other payload: held, never run
--   would_duplicates    shadow mode's would-be duplicates (0 until shadow
--                       mode exists)
--   missed, backfilled  events found missing by backfill and recovered by it
--                       (0 until the backfill tables exist)
--   dispatched          inbox events forwarded to n8n; dispatch_lag_ms_* the
--                       time from the record's creation (its receipt) to
--                       that dispatch, summed and the largest, milliseconds
CREATE TABLE IF NOT EXISTS stats_hourly (
    tenant              text NOT NULL,
    source              text NOT NULL,
    hour                timestamptz NOT NULL,
    deliveries          bigint NOT NULL DEFAULT 0,
    duplicates_stopped  bigint NOT NULL DEFAULT 0,
    conflicts           bigint NOT NULL DEFAULT 0,
    would_duplicates    bigint NOT NULL DEFAULT 0,
    missed              bigint NOT NULL DEFAULT 0,
    backfilled          bigint NOT NULL DEFAULT 0,
    dispatched          bigint NOT NULL DEFAULT 0,
    dispatch_lag_ms_sum double precision NOT NULL DEFAULT 0,
    dispatch_lag_ms_max double precision NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, source, hour)
);

-- Duplicates stopped per hour by their cause (the delivery log's cause
-- column when it exists; '' for a duplicate without one).
CREATE TABLE IF NOT EXISTS stats_causes_hourly (
    tenant text NOT NULL,
    source text NOT NULL,
    hour   timestamptz NOT NULL,
    cause  text NOT NULL,
    n      bigint NOT NULL,
    PRIMARY KEY (tenant, source, hour, cause)
);

-- The rollup reads the delivery log of its last hours by time.
-- CONCURRENTLY, outside a transaction (as 00008): the delivery log is the
-- largest table, and a plain CREATE INDEX would block every claim while it
-- builds. A build that failed half-way leaves an invalid index, dropped
-- first when the migration runs again.
DROP INDEX CONCURRENTLY IF EXISTS claim_deliveries_at_idx;
CREATE INDEX CONCURRENTLY claim_deliveries_at_idx ON claim_deliveries (at);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS claim_deliveries_at_idx;
DROP TABLE IF EXISTS stats_causes_hourly;
DROP TABLE IF EXISTS stats_hourly;
