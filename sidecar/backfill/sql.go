package backfill

// Two statements stay here, not in sidecar/db/queries/backfill.sql: they
// read River's job table (river_job), which River's own migrations make
// and sqlc's schema (the goose migrations) does not have. The rest of the
// package's statements are sqlc queries (queries).

// expireQueuedSQL ends, result $4 with error $3, the queued ($5) scans of
// tenant $1's source $2 (every source when $1 is empty) whose job (kind $6)
// is no longer queued or running.
const expireQueuedSQL = `UPDATE backfill_scans s SET result = $4, error = $3, finished_at = now()
		WHERE s.result = $5 AND ($1 = '' OR (s.tenant = $1 AND s.source = $2))
		AND NOT EXISTS (SELECT 1 FROM river_job j WHERE j.kind = $6
			AND j.args->>'scan_id' = s.id::text
			AND j.state IN ('available', 'pending', 'running', 'retryable', 'scheduled'))`

// expireRunningSQL ends, result $4 with error $3, the running ($5) scans
// of tenant $1's source $2 (every source when $1 is empty) whose job (kind
// $6) no longer runs.
const expireRunningSQL = `UPDATE backfill_scans s SET result = $4, error = $3, finished_at = now()
		WHERE s.result = $5 AND ($1 = '' OR (s.tenant = $1 AND s.source = $2))
		AND NOT EXISTS (SELECT 1 FROM river_job j WHERE j.kind = $6 AND j.state = 'running'
			AND j.args->>'scan_id' = s.id::text)`
