package ha

// The SQL of the package, each statement one round trip.

// fenceSQL reads a server's identity (Fence): whether it is a standby, its
// system identifier, and, on a primary, the timeline it writes WAL on now
// (8 hex digits; empty on a standby).
const fenceSQL = `SELECT pg_is_in_recovery(), (SELECT system_identifier FROM pg_control_system())::text,
	CASE WHEN pg_is_in_recovery() THEN '' ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END`

// surveySQL reads a server's identity for the survey: fenceSQL's three
// columns, then, on a standby, the newest timeline it is known to follow
// (decimal; 0 when none can be read): the timeline its WAL receiver
// streams (pg_stat_wal_receiver, visible with pg_read_all_stats or
// pg_monitor), or that of its control file's last restartpoint or minimum
// recovery point (pg_control_checkpoint, pg_control_recovery), whichever
// is newest. A standby that follows a newer timeline than a primary of the
// list shows that primary is an old one, also while the promoted server
// itself does not answer.
const surveySQL = `SELECT pg_is_in_recovery(), (SELECT system_identifier FROM pg_control_system())::text,
	CASE WHEN pg_is_in_recovery() THEN '' ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END,
	CASE WHEN pg_is_in_recovery() THEN greatest(coalesce((SELECT received_tli FROM pg_stat_wal_receiver), 0),
		(SELECT timeline_id FROM pg_control_checkpoint()),
		(SELECT min_recovery_end_timeline FROM pg_control_recovery()))::text ELSE '0' END`

// replicationSQL reads, on one of claimd's sessions, what its commits wait
// for. pg_stat_replication lists every walsender; without pg_monitor (or
// pg_read_all_stats, or superuser) its rows show only the process id, and
// sync_state reads NULL ("" here). Base backups in progress are not
// standbys.
const replicationSQL = `SELECT current_setting('synchronous_commit'), current_setting('synchronous_standby_names'),
	pg_is_in_recovery(),
	coalesce((SELECT array_agg(coalesce(sync_state, '')) FROM pg_stat_replication
		WHERE state IS DISTINCT FROM 'backup'), '{}')`

// syncCommitSQL checks that a commit of this session waits for a
// connected synchronous standby; when not, it makes the session's
// transactions read-only (SyncGuard).
const syncCommitSQL = `SELECT ok, CASE WHEN ok THEN '' ELSE set_config('default_transaction_read_only', 'on', false) END
	FROM (SELECT current_setting('synchronous_commit') IN ('on', 'remote_write', 'remote_apply')
		AND current_setting('synchronous_standby_names') <> ''
		AND EXISTS (SELECT 1 FROM pg_stat_get_wal_senders() WHERE sync_state IN ('sync', 'quorum')) AS ok) c`

// restoreReadOnlySQL puts back the session's own
// default_transaction_read_only after syncCommitSQL set it.
const restoreReadOnlySQL = "RESET default_transaction_read_only"

// versionTableSQL reports whether the migrations' version table ($1)
// exists (SchemaPending).
const versionTableSQL = "SELECT to_regclass($1) IS NOT NULL"
