-- +goose Up
SET LOCAL lock_timeout = '5s';

-- Two views of one event, each compared only with itself (like with like):
--   receipt_hash: the provider payload's hash as ingest computed it (the
--                 source's view: CloudEvents data, volatile fields left
--                 out, raw bytes for form bodies); provider redeliveries
--                 are compared with it.
--   payload_hash: the hash the claims present (the workflow's view, which
--                 may select other fields); set by the first claim that
--                 carries one and compared with every later claim.
-- Before this migration an ingested record kept its ingest hash in
-- payload_hash, so the second claim of a retried event compared the
-- workflow's view with the ingest view and answered conflict. Move those
-- hashes; the next claim of such a record adopts its own view.
ALTER TABLE claims ADD COLUMN receipt_hash text;
UPDATE claims c SET receipt_hash = c.payload_hash, payload_hash = NULL
FROM inbox_events e WHERE e.claim_id = c.id;

-- +goose Down
SET LOCAL lock_timeout = '5s';
UPDATE claims SET payload_hash = COALESCE(payload_hash, receipt_hash) WHERE receipt_hash IS NOT NULL;
ALTER TABLE claims DROP COLUMN receipt_hash;
