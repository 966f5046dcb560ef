-- +goose Up
SET LOCAL lock_timeout = '5s';

-- Shadow mode (issue 27): a claim of a source in shadow (shadow: true in
-- the sources file) or one that asks for it (the Claim node's and the
-- trigger's "Shadow Mode (Observe Only)") is decided by the very same
-- statement on the very same records as any other claim, and answered
-- "proceed": its delivery-log entry records what claimd would have
-- decided (outcome, cause) and is marked shadow here. Because the records
-- are real, turning enforcement on decides the next copy against them.
--
-- Numbered 00017, not the 00015 first reserved: 00016 is applied before it
-- on databases migrated since, and goose refuses a lower version after a
-- higher one on an existing database.
--
-- A constant default: PostgreSQL 11 and later add the column without
-- rewriting the table.
ALTER TABLE claim_deliveries ADD COLUMN shadow boolean NOT NULL DEFAULT false;

-- +goose Down
SET LOCAL lock_timeout = '5s';
ALTER TABLE claim_deliveries DROP COLUMN shadow;
