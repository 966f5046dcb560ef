-- +goose Up
SET LOCAL lock_timeout = '5s';

-- Waiting for a concurrent holder (POST /v1/claims with wait_seconds): a
-- claim answered in_progress may wait, without holding a database
-- connection, until the holder's record leaves processing (Complete, Fail,
-- an expired lease moved to unknown), then be decided again, so a concurrent
-- duplicate can answer with the holder's result instead of "retry later".
--
-- wait_notify marks a processing record that a claim waits on. The waiter
-- sets it (ClaimWaitArm in the claim package) after it subscribed in its own
-- process and before it waits; every transition of a marked record out of
-- processing then sends pg_notify('claimd_claim_settled', id), delivered at
-- commit to the LISTEN connection of every sidecar replica. Only marked
-- records notify: a transaction that notifies takes a database-wide lock at
-- commit that serialises it with every other notifying commit, a cost paid
-- here only by the rare settles someone waits for, never by ordinary
-- completions. The mark stays set once set (a later transition of the same
-- record out of processing notifies again: harmless, and only for keys that
-- were contended). A constant default: adding the column rewrites no row.
ALTER TABLE claims ADD COLUMN wait_notify boolean NOT NULL DEFAULT false;

-- +goose StatementBegin
CREATE FUNCTION claims_notify_settled() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('claimd_claim_settled', NEW.id::text);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- An AFTER ROW trigger whose WHEN clause is false queues nothing: for every
-- other update (each claim of a contended key is one) the cost is this
-- comparison. The trigger covers every statement that settles a record,
-- present or future (complete, fail, the lease sweep, a claim that finds
-- an expired lease under policy review), not only the ones written today.
CREATE TRIGGER claims_settled_notify AFTER UPDATE ON claims FOR EACH ROW
    WHEN (OLD.wait_notify AND OLD.state = 'processing' AND NEW.state <> 'processing')
    EXECUTE FUNCTION claims_notify_settled();

-- The retry hint of an in_progress answer comes from how long the source's
-- effects take: the claim-to-complete times of the latest completions of
-- (tenant, source, action), read newest first through this index (see
-- retryHintSQL in the claim package). A completion adds one entry.
CREATE INDEX claims_completed_idx ON claims (tenant, source, action, completed_at)
    WHERE state = 'completed';

-- +goose Down
SET LOCAL lock_timeout = '5s';
DROP INDEX claims_completed_idx;
DROP TRIGGER claims_settled_notify ON claims;
DROP FUNCTION claims_notify_settled();
ALTER TABLE claims DROP COLUMN wait_notify;
