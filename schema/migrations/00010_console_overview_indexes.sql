-- +goose NO TRANSACTION
-- +goose Up

-- The console's overview counts, per tenant and source, the records that
-- ever saw a conflicting payload and the inbox events whose dispatch was
-- dead-lettered. Both are rare, so these partial indexes stay small and
-- cost the claim and ingest paths no index entry for an ordinary row.
--
-- CONCURRENTLY, outside a transaction (as 00008): claims and inbox_events
-- are large, and a plain CREATE INDEX would block every claim and every
-- ingest delivery while it scans them. A build that failed half-way
-- leaves an invalid index, dropped first when the migration runs again.
DROP INDEX CONCURRENTLY IF EXISTS claims_conflicts_idx;
CREATE INDEX CONCURRENTLY claims_conflicts_idx ON claims (tenant, source) WHERE conflict_count > 0;
DROP INDEX CONCURRENTLY IF EXISTS inbox_events_dispatch_dead_idx;
CREATE INDEX CONCURRENTLY inbox_events_dispatch_dead_idx ON inbox_events (tenant) WHERE dispatch_state = 'dead_lettered';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS inbox_events_dispatch_dead_idx;
DROP INDEX CONCURRENTLY IF EXISTS claims_conflicts_idx;
