package ha

import "github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"

// queries runs the package's statements (sidecar/db/queries/ha.sql).
var queries = dbsqlc.New()

// Two statements stay here, not in sidecar/db/queries/ha.sql: they read
// the statistics views pg_stat_wal_receiver and pg_stat_replication,
// which sqlc's catalog does not have (it refuses a statement naming a
// relation it does not know). Each is one round trip.

// surveySQL reads a server's identity for the survey: dbsqlc.Fence's
// three columns, then, on a standby, the newest timeline it is known to
// follow (decimal; 0 when none can be read): the timeline its WAL
// receiver streams (pg_stat_wal_receiver, visible with pg_read_all_stats
// or pg_monitor), or that of its control file's last restartpoint or
// minimum recovery point (pg_control_checkpoint, pg_control_recovery),
// whichever is newest. A standby that follows a newer timeline than a
// primary of the list shows that primary is an old one, also while the
// promoted server itself does not answer.
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
