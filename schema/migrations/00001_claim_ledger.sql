-- +goose Up
SET LOCAL lock_timeout = '5s';

-- API keys. Only the SHA-256 of a key is stored; keys are 256-bit random
-- strings, so a fast hash is sufficient (no password stretching needed).
CREATE TABLE api_keys (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant      text NOT NULL CHECK (tenant <> ''),
    name        text NOT NULL DEFAULT '',
    key_hash    bytea NOT NULL UNIQUE CHECK (length(key_hash) = 32),
    key_prefix  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);

-- The inbox and the action ledger: one row per idempotency key.
-- action = '' is the event-level claim; any other action is an action-ledger
-- claim for (event, action).
CREATE TABLE claims (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant          text NOT NULL,
    source          text NOT NULL,
    event_id        text NOT NULL,
    action          text NOT NULL DEFAULT '',
    event_type      text,
    state           text NOT NULL CHECK (state IN
                        ('received', 'processing', 'completed', 'retryable_failed',
                         'dead_lettered', 'unknown', 'stale')),
    last_outcome    text NOT NULL,
    attempt         integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts    integer NOT NULL CHECK (max_attempts > 0),
    lease_policy    text NOT NULL CHECK (lease_policy IN ('reclaim', 'review')),
    -- Retry backoff of the source policy the record was created under (seconds).
    backoff_base    double precision NOT NULL CHECK (backoff_base >= 0),
    backoff_cap     double precision NOT NULL CHECK (backoff_cap >= backoff_base),
    claim_token     uuid,
    lease_until     timestamptz,
    next_attempt_at timestamptz,
    payload_hash    text,
    result_ref      text,
    last_error      text,
    object_id       text,
    object_version  bigint,
    conflict_count  integer NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    claimed_at      timestamptz,
    completed_at    timestamptz
);

-- The arbiter of every claim: at most one row per idempotency key.
CREATE UNIQUE INDEX claims_key_uniq ON claims (tenant, source, event_id, action);
-- Retention purge of terminal records and metrics over open ones.
CREATE INDEX claims_terminal_updated_idx ON claims (updated_at)
    WHERE state IN ('completed', 'dead_lettered', 'stale');
CREATE INDEX claims_open_state_idx ON claims (state, lease_until)
    WHERE state IN ('received', 'processing', 'retryable_failed', 'unknown', 'dead_lettered');

-- Delivery log: every claim attempt and every transition, one business record's trail.
CREATE TABLE claim_deliveries (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    claim_id      uuid NOT NULL REFERENCES claims (id) ON DELETE CASCADE,
    at            timestamptz NOT NULL DEFAULT clock_timestamp(),
    outcome       text NOT NULL,
    attempt       integer NOT NULL,
    payload_hash  text,
    execution_id  text,
    detail        text
);
CREATE INDEX claim_deliveries_claim_idx ON claim_deliveries (claim_id, id);

-- Out-of-order protection: the newest completed version per object, per
-- action (each action of the action ledger is its own stream of effects).
CREATE TABLE object_versions (
    tenant        text NOT NULL,
    source        text NOT NULL,
    action        text NOT NULL DEFAULT '',
    object_id     text NOT NULL,
    last_version  bigint NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, source, action, object_id)
);

-- claim_outcome decides what a claim of an EXISTING record means. It is used
-- inside the ON CONFLICT DO UPDATE of the claim statement, where the row is
-- locked, so the decision and the write are one atomic step.
CREATE FUNCTION claim_outcome(
    cur_state text, cur_hash text, cur_lease_until timestamptz,
    cur_next_attempt_at timestamptz, cur_attempt integer, cur_max_attempts integer,
    cur_lease_policy text, req_hash text, req_stale boolean, at timestamptz)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        -- A received (ingested) record's hash is the provider payload's, already
        -- judged at ingest; the workflow's claim may hash a different view of it.
        WHEN cur_state <> 'received' AND cur_hash IS NOT NULL AND req_hash IS NOT NULL
             AND cur_hash <> req_hash THEN 'conflict'
        WHEN cur_state = 'completed' THEN 'duplicate'
        WHEN cur_state = 'stale' THEN 'stale'
        WHEN cur_state = 'dead_lettered' THEN 'dead_lettered'
        WHEN cur_state = 'unknown' THEN 'unknown'
        WHEN cur_state = 'processing' AND cur_lease_until > at THEN 'in_progress'
        WHEN cur_state = 'processing' AND cur_lease_policy = 'review' THEN 'unknown'
        WHEN cur_state = 'retryable_failed' AND cur_next_attempt_at > at THEN 'retry_later'
        WHEN cur_attempt >= cur_max_attempts THEN 'dead_lettered'
        WHEN req_stale THEN 'stale'
        ELSE 'won'
    END
$$;

-- +goose Down
DROP FUNCTION claim_outcome;
DROP TABLE object_versions;
DROP TABLE claim_deliveries;
DROP TABLE claims;
DROP TABLE api_keys;
