-- +goose Up
SET LOCAL lock_timeout = '5s';

-- The web console (/ui, issue 12).
--
-- console_sessions: one row per signed-in browser. The cookie holds a
-- random 32-byte token; only its SHA-256 is stored (id), so a copy of the
-- table signs nobody in. Every request of the session checks, in the same
-- statement that reads it, that it has not expired (idle_until, moved on
-- by each request, and expires_at, fixed at sign-in) and, for a key from
-- the database (key_id), that the key is still active: a revoked key ends
-- its sessions at once, on every replica. A configured key (key_id NULL)
-- is checked by the replica against its configuration (key_hash, the
-- SHA-256 the configuration's key has, as api_keys stores it). The CSRF
-- token goes into the session's forms. Sign-out deletes the row.
CREATE TABLE console_sessions (
    id          bytea PRIMARY KEY CHECK (length(id) = 32),
    tenant      text NOT NULL CHECK (tenant <> ''),
    key_id      uuid REFERENCES api_keys (id) ON DELETE CASCADE,
    key_hash    bytea NOT NULL CHECK (length(key_hash) = 32),
    key_prefix  text NOT NULL,
    csrf_token  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    last_seen   timestamptz NOT NULL DEFAULT now(),
    idle_until  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);
-- Sign-in removes a bounded batch of expired sessions, oldest first.
CREATE INDEX console_sessions_expires_idx ON console_sessions (expires_at);
CREATE INDEX console_sessions_key_idx ON console_sessions (key_id) WHERE key_id IS NOT NULL;

-- Who did an operator action (resolve, release, replay): the API key's
-- prefix (never the key), NULL for entries no operator wrote. Nullable
-- without a default: adding it rewrites no row.
ALTER TABLE claim_deliveries ADD COLUMN actor text;

-- +goose Down
SET LOCAL lock_timeout = '5s';
ALTER TABLE claim_deliveries DROP COLUMN actor;
DROP TABLE console_sessions;
