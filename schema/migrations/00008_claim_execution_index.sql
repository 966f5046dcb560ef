-- +goose NO TRANSACTION
-- +goose Up

-- Which claims an n8n execution holds (GET /v1/claims/list?execution_id=E,
-- POST /v1/claims/fail/execution). A claim's execution_id is already kept
-- in its delivery-log entry, and the entry of a win ('won') records the
-- attempt it won; so "the current attempt of record c was won by execution
-- E" is: a 'won' entry of c with execution_id E and attempt = c.attempt
-- (attempt grows by one with every win, so each attempt has at most one
-- 'won' entry; a replay is logged 'won_replayed' and adds none). This
-- partial index finds those entries by execution. It is chosen over a
-- column on claims because the claim statement stays as it is and its cost
-- is one entry per win in an insert-only table, where a claims column
-- would add an index entry to every new version of a claims row (win,
-- complete, fail). The payload purge removes the entries with the rest of
-- a terminal record's delivery log; processing records are never purged.
--
-- CONCURRENTLY, outside a transaction: the delivery log is the largest
-- table, and a plain CREATE INDEX would block every claim while it builds.
-- A build that failed half-way leaves an invalid index, dropped first when
-- the migration runs again.
DROP INDEX CONCURRENTLY IF EXISTS claim_deliveries_won_execution_idx;
CREATE INDEX CONCURRENTLY claim_deliveries_won_execution_idx
    ON claim_deliveries (execution_id, claim_id, attempt)
    WHERE outcome = 'won' AND execution_id IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS claim_deliveries_won_execution_idx;
