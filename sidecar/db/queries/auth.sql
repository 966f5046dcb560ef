-- The API keys and console sessions (package auth).

-- name: KeyByHash :one
-- The active key whose SHA-256 is key_hash.
SELECT tenant, key_hash, id::text AS id, key_prefix FROM api_keys WHERE key_hash = @key_hash AND revoked_at IS NULL;

-- name: CreateKey :one
-- Stores a new key (its hash only).
INSERT INTO api_keys (tenant, name, key_hash, key_prefix) VALUES (@tenant, @name, @key_hash, @key_prefix)
RETURNING id::text AS id, created_at;

-- name: RevokeKeys :many
-- Revokes the active keys whose id or prefix is id_or_prefix.
UPDATE api_keys SET revoked_at = now()
WHERE revoked_at IS NULL AND (id::text = @id_or_prefix OR key_prefix = @id_or_prefix)
RETURNING id::text AS id, tenant, name, key_prefix, created_at, revoked_at;

-- name: ActiveKeys :one
-- How many stored keys are not revoked.
SELECT count(*) FROM api_keys WHERE revoked_at IS NULL;

-- name: Keys :many
-- Every stored key, newest first.
SELECT id::text AS id, tenant, name, key_prefix, created_at, revoked_at
FROM api_keys ORDER BY created_at DESC;

-- name: PurgeSessions :exec
-- Removes a bounded batch of sessions past their absolute end (those idle
-- too long are refused meanwhile).
DELETE FROM console_sessions WHERE id IN (
	SELECT id FROM console_sessions WHERE expires_at < statement_timestamp() ORDER BY expires_at LIMIT 100);

-- name: CreateSession :one
-- Stores a new session: id (SHA-256 of the token), key_id NULL for a
-- configured key, idle and absolute lifetimes in seconds.
INSERT INTO console_sessions (id, tenant, key_id, key_hash, key_prefix, csrf_token,
	created_at, last_seen, idle_until, expires_at)
	VALUES (@id, @tenant, sqlc.narg(key_id)::uuid, @key_hash, @key_prefix, @csrf_token, statement_timestamp(), statement_timestamp(),
		statement_timestamp() + make_interval(secs => LEAST(@idle_seconds::float8, @absolute_seconds::float8)), statement_timestamp() + make_interval(secs => @absolute_seconds::float8))
	RETURNING created_at, expires_at;

-- name: LookupSession :one
-- Reads the live session id and moves its idle end on by idle_seconds
-- (never past its absolute end), in one statement: no row when it is
-- unknown, idle or past its end, or its database key was revoked.
UPDATE console_sessions s SET last_seen = statement_timestamp(),
	idle_until = LEAST(s.expires_at, statement_timestamp() + make_interval(secs => @idle_seconds::float8))
	WHERE s.id = @id AND s.idle_until > statement_timestamp() AND s.expires_at > statement_timestamp()
	  AND (s.key_id IS NULL OR EXISTS (SELECT 1 FROM api_keys k WHERE k.id = s.key_id AND k.revoked_at IS NULL))
	RETURNING s.tenant, COALESCE(s.key_id::text, '')::text AS key_id, s.key_hash, s.key_prefix, s.csrf_token, s.created_at, s.expires_at;

-- name: EndSession :exec
-- Deletes the session id (sign-out).
DELETE FROM console_sessions WHERE id = @id;
