-- +goose Up
SET LOCAL lock_timeout = '5s';

-- Two retentions per source (issue B21: a key must outlive its payload).
--   payload retention (retention_days): the purge removes what a terminal
--       record carried: its inbox body and headers, bodies of conflicting
--       deliveries, its delivery log (one payload_purged entry replaces it)
--       and last_error; the record stays, with its key, payload and receipt
--       hashes, state, result_ref and times, so a provider's resend is still
--       a duplicate (or a conflict) and never a new event.
--   key retention (key_retention_days): the purge deletes the record.
-- payload_purged_at says when the first happened; NULL: payload kept.
ALTER TABLE claims ADD COLUMN payload_purged_at timestamptz;

-- The payload purge walks the terminal records whose payload is still
-- there, oldest change first; a purged record leaves this index, so the
-- kept keys never slow it down. (The key purge uses
-- claims_terminal_updated_idx.)
CREATE INDEX claims_payload_purge_idx ON claims (updated_at)
    WHERE state IN ('completed', 'dead_lettered', 'stale') AND payload_purged_at IS NULL;

-- A conflicting delivery that arrives after its record's payload purge
-- keeps its body for the payload retention too, counted from its arrival.
CREATE INDEX inbox_conflicts_received_idx ON inbox_conflicts (received_at);

-- +goose Down
SET LOCAL lock_timeout = '5s';
DROP INDEX inbox_conflicts_received_idx;
DROP INDEX claims_payload_purge_idx;
ALTER TABLE claims DROP COLUMN payload_purged_at;
