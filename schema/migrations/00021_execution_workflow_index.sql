-- +goose NO TRANSACTION
-- +goose Up

-- An execution's workflow version, reported after the claims were made
-- (POST /v1/executions/workflow: n8n's settle hook reads the version an
-- execution ran, which n8n gives no node). claimd records it on that
-- execution's claim entries that name none, so this partial index finds
-- those entries by execution: the claim outcomes that carry the claiming
-- execution, while their workflow_version is not known. An entry leaves
-- the index once its version is recorded, and a claim that named its
-- version never enters it.
--
-- CONCURRENTLY, outside a transaction, as migration 00008: the delivery
-- log is the largest table. A build that failed half-way leaves an
-- invalid index, dropped first when the migration runs again.
DROP INDEX CONCURRENTLY IF EXISTS claim_deliveries_unversioned_execution_idx;
CREATE INDEX CONCURRENTLY claim_deliveries_unversioned_execution_idx
    ON claim_deliveries (execution_id, claim_id)
    WHERE execution_id IS NOT NULL AND workflow_version IS NULL
      AND outcome IN ('won', 'duplicate', 'in_progress', 'conflict');

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS claim_deliveries_unversioned_execution_idx;
