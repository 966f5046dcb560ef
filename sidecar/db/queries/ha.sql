-- The failover fence's, the sync-replication guard's and the start-up
-- gate's statements (package ha), each one round trip. The survey's and
-- the replication report's read views sqlc does not know (see ha/sql.go).

-- name: Fence :one
-- A server's identity: whether it is a standby, its system identifier,
-- and, on a primary, the timeline it writes WAL on now (8 hex digits;
-- empty on a standby). It runs on a connection being validated (pgconn,
-- simple protocol): package ha sends its text (dbsqlc.Fence) and reads
-- the text columns itself.
SELECT pg_is_in_recovery() AS standby, (SELECT system_identifier FROM pg_control_system())::text AS system,
	(CASE WHEN pg_is_in_recovery() THEN '' ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END)::text AS timeline;

-- name: SyncCommit :one
-- Whether a commit of this session waits for a connected synchronous
-- standby; when not, it makes the session's transactions read-only.
SELECT ok::boolean AS ok, (CASE WHEN ok THEN '' ELSE set_config('default_transaction_read_only', 'on', false) END)::text AS set
	FROM (SELECT current_setting('synchronous_commit') IN ('on', 'remote_write', 'remote_apply')
		AND current_setting('synchronous_standby_names') <> ''
		AND EXISTS (SELECT 1 FROM pg_stat_get_wal_senders() WHERE sync_state IN ('sync', 'quorum')) AS ok) c;

-- name: RestoreReadOnly :exec
-- Puts back the session's own default_transaction_read_only after
-- SyncCommit set it.
RESET default_transaction_read_only;

-- name: VersionTableExists :one
-- Whether the migrations' version table exists.
SELECT (to_regclass(@version_table) IS NOT NULL)::boolean AS present;
