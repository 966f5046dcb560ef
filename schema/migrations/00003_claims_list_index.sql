-- +goose Up
SET LOCAL lock_timeout = '5s';

-- GET /v1/claims/list: a tenant's open records in one state, oldest first by
-- (updated_at, id), paged by keyset.
CREATE INDEX claims_list_idx ON claims (tenant, state, updated_at, id)
    WHERE state IN ('received', 'processing', 'retryable_failed', 'dead_lettered', 'unknown');

-- +goose Down
SET LOCAL lock_timeout = '5s';
DROP INDEX claims_list_idx;
