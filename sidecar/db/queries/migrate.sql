-- The migrations' session advisory lock (package migrate); goose's and
-- River's own statements are theirs.

-- name: TryMigrationLock :one
-- Takes the session advisory lock key if it is free; whether it did.
SELECT pg_try_advisory_lock(@key) AS locked;

-- name: MigrationUnlock :exec
-- Releases the session advisory lock key.
SELECT pg_advisory_unlock(@key);
