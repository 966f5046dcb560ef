-- +goose Up
SET LOCAL lock_timeout = '5s';

-- Gap detection and backfill (package sidecar/backfill).
--
-- claims.origin: NULL for a record made by a delivery or a claim,
-- 'backfill' for an inbox record claimd made itself from the provider's
-- own list of events (a delivery that never arrived). A backfilled record
-- is stored without a receipt hash: the provider's API may render the
-- event otherwise than its delivery did (Stripe renders list data at the
-- event's api_version), so the late real delivery adopts its own receipt
-- hash and is a duplicate, never a conflict.
ALTER TABLE claims ADD COLUMN origin text CHECK (origin IN ('backfill'));

-- One scan of a source's provider event list.
CREATE TABLE backfill_scans (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant       text NOT NULL,
    source       text NOT NULL,
    trigger      text NOT NULL CHECK (trigger IN ('schedule', 'api', 'console')),
    actor        text,
    mode         text NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    range_start  timestamptz NOT NULL,
    range_end    timestamptz NOT NULL,
    pages        integer NOT NULL DEFAULT 0,
    listed       integer NOT NULL DEFAULT 0,
    missed       integer NOT NULL DEFAULT 0,
    backfilled   integer NOT NULL DEFAULT 0,
    redelivered  integer NOT NULL DEFAULT 0,
    result       text NOT NULL DEFAULT 'running'
                 CHECK (result IN ('running', 'ok', 'rate_limited', 'credential_refused', 'error')),
    error        text
);
CREATE INDEX backfill_scans_source_idx ON backfill_scans (tenant, source, id DESC);

-- The events a scan found at the provider and not in the ledger, keyed as
-- the ledger keys them (scope = the source's dedupe scope).
CREATE TABLE backfill_events (
    tenant              text NOT NULL,
    scope               text NOT NULL,
    event_id            text NOT NULL,
    source              text NOT NULL,
    provider_id         text NOT NULL,
    event_type          text,
    provider_created_at timestamptz,
    detected_at         timestamptz NOT NULL DEFAULT now(),
    scan_id             bigint NOT NULL REFERENCES backfill_scans (id) ON DELETE CASCADE,
    state               text NOT NULL
                        CHECK (state IN ('missed', 'fetched', 'redelivery_requested', 'arrived', 'late_real')),
    payload_hash        text,
    claim_id            uuid REFERENCES claims (id) ON DELETE SET NULL,
    updated_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, scope, event_id)
);
CREATE INDEX backfill_events_source_idx ON backfill_events (tenant, source, detected_at DESC);
CREATE INDEX backfill_events_claim_idx ON backfill_events (claim_id) WHERE claim_id IS NOT NULL;

-- Where a source's scans stand: listed up to scanned_until; the next
-- scheduled scan is due at next_scan_at.
CREATE TABLE backfill_state (
    tenant        text NOT NULL,
    source        text NOT NULL,
    scanned_until timestamptz,
    next_scan_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, source)
);

-- +goose Down
DROP TABLE backfill_state;
DROP TABLE backfill_events;
DROP TABLE backfill_scans;
ALTER TABLE claims DROP COLUMN origin;
