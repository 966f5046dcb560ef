-- +goose Up
SET LOCAL lock_timeout = '5s';

-- The durable receipt boundary: the verified provider payload of an inbox
-- record (claims row in state received), kept for dispatch to n8n. The
-- dispatch job itself is a River job inserted in the same transaction
-- (transactional outbox).
CREATE TABLE inbox_events (
    claim_id             uuid PRIMARY KEY REFERENCES claims (id) ON DELETE CASCADE,
    tenant               text NOT NULL,
    source               text NOT NULL,
    body                 bytea NOT NULL,
    content_type         text NOT NULL DEFAULT '',
    -- Provider headers worth forwarding (event type, delivery id…); never
    -- signatures, authorization or cookies.
    headers              jsonb NOT NULL DEFAULT '{}',
    received_at          timestamptz NOT NULL DEFAULT now(),
    dispatch_state       text NOT NULL DEFAULT 'pending'
                         CHECK (dispatch_state IN ('pending', 'dispatched', 'dead_lettered')),
    dispatch_attempts    integer NOT NULL DEFAULT 0,
    last_dispatch_status integer,
    last_dispatch_error  text,
    dispatched_at        timestamptz
);
CREATE INDEX inbox_events_pending_idx ON inbox_events (received_at) WHERE dispatch_state = 'pending';

-- Deliveries that reused a known key with a different payload: kept for
-- review, never dispatched.
CREATE TABLE inbox_conflicts (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    claim_id     uuid NOT NULL REFERENCES claims (id) ON DELETE CASCADE,
    body         bytea NOT NULL,
    payload_hash text NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX inbox_conflicts_claim_idx ON inbox_conflicts (claim_id);

-- +goose Down
DROP TABLE inbox_conflicts;
DROP TABLE inbox_events;
