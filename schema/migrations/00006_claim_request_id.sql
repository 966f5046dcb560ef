-- +goose Up
SET LOCAL lock_timeout = '5s';

-- The caller's id of the claim request that won the current lease (issue
-- B19: a lost answer to a claim is retried safely). A claim of a record in
-- processing, with the lease still valid and the same request id, is the
-- holder asking again after its answer was lost (a connection aborted after
-- the commit, n8n's Retry On Fail): it is answered won again with the same
-- claim token and attempt, and logged as won_replayed. Set by every winning
-- claim (NULL when it carried none, so a claim without a request id is
-- never replayed); other outcomes leave it. Not part of the key.
-- Nullable without a default: adding it rewrites no row.
ALTER TABLE claims ADD COLUMN request_id text;

-- +goose Down
SET LOCAL lock_timeout = '5s';
ALTER TABLE claims DROP COLUMN request_id;
