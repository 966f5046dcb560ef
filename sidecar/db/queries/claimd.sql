-- claimd's own statements (cmd/claimd).

-- name: SessionFacts :one
-- What decides, read in one round trip on one pooled session, whether
-- claimd can work on this database: the isolation and read-only state of
-- a fresh transaction (the session's defaults, or a standby), the
-- timeouts its statements run under (milliseconds), and what a commit
-- waits for.
SELECT current_setting('transaction_isolation')::text AS transaction_isolation,
	(current_setting('transaction_read_only') = 'on')::boolean AS read_only, pg_is_in_recovery() AS in_recovery,
	(extract(epoch FROM current_setting('statement_timeout')::interval) * 1000)::bigint AS statement_timeout_ms,
	(extract(epoch FROM current_setting('lock_timeout')::interval) * 1000)::bigint AS lock_timeout_ms,
	current_setting('synchronous_commit')::text AS synchronous_commit,
	(current_setting('synchronous_standby_names') <> '')::boolean AS synchronous_standby;
