-- The failover fence's and survey's, the replication report's, the
-- sync-replication guard's and the start-up gate's statements (package
-- ha), each one round trip. The statistics views are named with their
-- schema (pg_catalog.pg_stat_replication): sqlc's catalog knows them
-- only so; PostgreSQL resolves the bare name there first all the same.

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

-- name: Survey :one
-- A server's identity for the survey: Fence's three columns, then, on a
-- standby, the newest timeline it is known to follow (decimal; 0 when
-- none can be read): the timeline its WAL receiver streams
-- (pg_stat_wal_receiver, visible with pg_read_all_stats or pg_monitor),
-- or that of its control file's last restartpoint or minimum recovery
-- point (pg_control_checkpoint, pg_control_recovery), whichever is
-- newest. A standby that follows a newer timeline than a primary of the
-- list shows that primary is an old one, also while the promoted server
-- itself does not answer. Sent as text, as Fence.
SELECT pg_is_in_recovery() AS standby, (SELECT system_identifier FROM pg_control_system())::text AS system,
	(CASE WHEN pg_is_in_recovery() THEN '' ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END)::text AS timeline,
	(CASE WHEN pg_is_in_recovery() THEN greatest(coalesce((SELECT received_tli FROM pg_catalog.pg_stat_wal_receiver), 0),
		(SELECT timeline_id FROM pg_control_checkpoint()),
		(SELECT min_recovery_end_timeline FROM pg_control_recovery()))::text ELSE '0' END)::text AS standby_timeline;

-- name: Replication :one
-- What the commits of this session wait for. pg_stat_replication lists
-- every walsender; without pg_monitor (or pg_read_all_stats, or
-- superuser) its rows show only the process id, and sync_state reads
-- NULL ("" here). Base backups in progress are not standbys.
SELECT current_setting('synchronous_commit')::text AS synchronous_commit,
	current_setting('synchronous_standby_names')::text AS synchronous_standby_names,
	pg_is_in_recovery() AS in_recovery,
	coalesce((SELECT array_agg(coalesce(sync_state, '')) FROM pg_catalog.pg_stat_replication
		WHERE state IS DISTINCT FROM 'backup'), '{}')::text[] AS sync_states;
