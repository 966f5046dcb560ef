-- +goose Up
SET LOCAL lock_timeout = '5s';

-- inbox_events.armed_attempt: the claim's attempt when the event's
-- dispatch was armed again (an operator's replay, a provider's
-- redelivery after a dead letter, a reconciler's not_done); NULL: armed
-- only at ingest. Under forward.require_claim a 2xx counts as delivered
-- only once the workflow has claimed the event since the dispatch was
-- armed: the claim has left received and, when it is retryable_failed,
-- a claim has won it since (its attempt passed armed_attempt). Without
-- it, a re-armed dispatch of a claim already retryable_failed took any
-- 2xx (n8n answers 200 "n8n is starting up" and runs nothing) for a
-- run. Nullable without a default: adding it rewrites no row.
ALTER TABLE inbox_events ADD COLUMN armed_attempt integer;

-- +goose Down
SET LOCAL lock_timeout = '5s';
ALTER TABLE inbox_events DROP COLUMN armed_attempt;
