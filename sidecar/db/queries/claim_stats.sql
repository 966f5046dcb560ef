-- name: TryRollupLock :one
-- Takes the transaction advisory lock of a rollup, lock_key, when no
-- other transaction holds it; false when one does.
SELECT pg_try_advisory_xact_lock(@lock_key::bigint) AS locked;

-- name: RollupHourly :execrows
-- Recomputes the hourly numbers of every tenant and source from hour
-- from_hour on and keeps for each number the larger of the stored and the
-- recomputed value: the counts of the delivery log (joined to claims for
-- tenant and source) and of backfill_events (keyed by the hour an event
-- was detected; scope is claims.source).
--
-- A record claimd made itself from a provider's event list (origin
-- 'backfill', logged 'received' with a detail starting "backfilled ",
-- sidecar/backfill) is no delivery: backfill_events counts it. Neither is
-- the workflow's claim of an ingested or backfilled record (it has a
-- receipt hash or an origin): the claim statement's outcomes (claim.Outcomes,
-- listed; won_replayed is the same request asking again, no new copy)
-- count as deliveries only for records that came through neither door, or
-- when the entry names the door the copy came through
-- (claim_deliveries.door, migration 00014: a trigger's claim, an ingest
-- door's in shadow mode, whose records keep the receipt hash an enforcing
-- door compares with). shadow_deliveries, would_duplicates,
-- would_conflicts: the shadow rows of the delivery log (migration 00017,
-- shadow mode; the columns are migration 00022's). Hours are UTC,
-- whatever the session's time zone.
INSERT INTO stats_hourly (tenant, source, hour, deliveries, shadow_deliveries, duplicates_stopped, conflicts,
		would_duplicates, would_conflicts, missed, backfilled, dispatched, dispatch_lag_ms_sum, dispatch_lag_ms_max)
	SELECT tenant, source, hour, sum(deliveries), sum(shadow_deliveries), sum(duplicates_stopped), sum(conflicts),
		sum(would_duplicates), sum(would_conflicts), sum(missed), sum(backfilled), sum(dispatched), sum(lag_sum), max(lag_max)
	FROM (SELECT c.tenant, c.source, date_trunc('hour', d.at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS hour,
		count(*) FILTER (WHERE ((d.outcome IN ('received', 'ingest_duplicate', 'ingest_conflict')
				AND COALESCE(d.detail, '') NOT LIKE 'backfilled %')
			OR (d.outcome IN ('won', 'duplicate', 'in_progress', 'retry_later', 'conflict', 'stale', 'dead_lettered', 'unknown') AND ((c.receipt_hash IS NULL AND c.origin IS NULL) OR d.door IS NOT NULL)))) AS deliveries,
		count(*) FILTER (WHERE ((d.outcome IN ('received', 'ingest_duplicate', 'ingest_conflict')
				AND COALESCE(d.detail, '') NOT LIKE 'backfilled %')
			OR (d.outcome IN ('won', 'duplicate', 'in_progress', 'retry_later', 'conflict', 'stale', 'dead_lettered', 'unknown') AND ((c.receipt_hash IS NULL AND c.origin IS NULL) OR d.door IS NOT NULL))) AND d.shadow) AS shadow_deliveries,
		count(*) FILTER (WHERE d.outcome IN ('ingest_duplicate', 'duplicate', 'in_progress') AND NOT d.shadow) AS duplicates_stopped,
		count(*) FILTER (WHERE d.outcome IN ('ingest_conflict', 'conflict') AND NOT d.shadow) AS conflicts,
		count(*) FILTER (WHERE d.outcome IN ('duplicate', 'in_progress') AND d.shadow) AS would_duplicates,
		count(*) FILTER (WHERE d.outcome IN ('ingest_conflict', 'conflict') AND d.shadow) AS would_conflicts,
		0::bigint AS missed, 0::bigint AS backfilled,
		count(*) FILTER (WHERE d.outcome = 'dispatched') AS dispatched,
		COALESCE(sum(EXTRACT(EPOCH FROM d.at - c.created_at) * 1000) FILTER (WHERE d.outcome = 'dispatched'), 0)::float8 AS lag_sum,
		COALESCE(max(EXTRACT(EPOCH FROM d.at - c.created_at) * 1000) FILTER (WHERE d.outcome = 'dispatched'), 0)::float8 AS lag_max
	FROM claim_deliveries d JOIN claims c ON c.id = d.claim_id
	WHERE d.at >= @from_hour::timestamptz
	GROUP BY 1, 2, 3
	UNION ALL
	SELECT tenant, scope, date_trunc('hour', detected_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', 0, 0, 0, 0, 0, 0,
		count(*), count(*) FILTER (WHERE state IN ('fetched', 'arrived', 'late_real')), 0, 0, 0
	FROM backfill_events WHERE detected_at >= @from_hour::timestamptz
	GROUP BY 1, 2, 3) r
	GROUP BY 1, 2, 3
	ON CONFLICT (tenant, source, hour) DO UPDATE SET
		deliveries          = GREATEST(stats_hourly.deliveries, excluded.deliveries),
		shadow_deliveries   = GREATEST(stats_hourly.shadow_deliveries, excluded.shadow_deliveries),
		duplicates_stopped  = GREATEST(stats_hourly.duplicates_stopped, excluded.duplicates_stopped),
		conflicts           = GREATEST(stats_hourly.conflicts, excluded.conflicts),
		would_duplicates    = GREATEST(stats_hourly.would_duplicates, excluded.would_duplicates),
		would_conflicts     = GREATEST(stats_hourly.would_conflicts, excluded.would_conflicts),
		missed              = GREATEST(stats_hourly.missed, excluded.missed),
		backfilled          = GREATEST(stats_hourly.backfilled, excluded.backfilled),
		dispatched          = GREATEST(stats_hourly.dispatched, excluded.dispatched),
		dispatch_lag_ms_sum = GREATEST(stats_hourly.dispatch_lag_ms_sum, excluded.dispatch_lag_ms_sum),
		dispatch_lag_ms_max = GREATEST(stats_hourly.dispatch_lag_ms_max, excluded.dispatch_lag_ms_max);

-- name: RollupCauses :exec
-- Recomputes, as RollupHourly, the copies stopped per hour and cause.
INSERT INTO stats_causes_hourly (tenant, source, hour, cause, n)
	SELECT c.tenant, c.source, date_trunc('hour', d.at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', COALESCE(d.cause, ''), count(*)
	FROM claim_deliveries d JOIN claims c ON c.id = d.claim_id
	WHERE d.at >= @from_hour::timestamptz AND d.outcome IN ('ingest_duplicate', 'duplicate', 'in_progress') AND NOT d.shadow
	GROUP BY 1, 2, 3, 4
	ON CONFLICT (tenant, source, hour, cause) DO UPDATE SET n = GREATEST(stats_causes_hourly.n, excluded.n);

-- name: SourceHours :many
-- The hourly numbers of tenant's source for the hours [from_hour, to_hour).
SELECT hour, deliveries, shadow_deliveries, duplicates_stopped, conflicts,
	would_duplicates, would_conflicts, missed, backfilled, dispatched, dispatch_lag_ms_sum, dispatch_lag_ms_max
FROM stats_hourly WHERE tenant = @tenant AND source = @source AND hour >= @from_hour AND hour < @to_hour;

-- name: SourceHourCauses :many
-- The copies stopped per hour and cause of tenant's source for the hours
-- [from_hour, to_hour).
SELECT hour, cause, n FROM stats_causes_hourly
WHERE tenant = @tenant AND source = @source AND hour >= @from_hour AND hour < @to_hour;

-- name: SavingsTotals :one
-- The sums of tenant's hourly numbers over [from_hour, to_hour), of source
-- (NULL: all).
SELECT COALESCE(sum(duplicates_stopped), 0)::bigint AS duplicates_stopped, COALESCE(sum(conflicts), 0)::bigint AS conflicts,
	COALESCE(sum(missed), 0)::bigint AS missed, COALESCE(sum(backfilled), 0)::bigint AS backfilled
FROM stats_hourly
WHERE tenant = @tenant AND (sqlc.narg(source)::text IS NULL OR source = sqlc.narg(source)::text)
  AND hour >= @from_hour AND hour < @to_hour;

-- name: SavingsCauses :many
-- The copies stopped per cause of tenant over [from_hour, to_hour), of
-- source (NULL: all).
SELECT cause, sum(n)::bigint AS n FROM stats_causes_hourly
WHERE tenant = @tenant AND (sqlc.narg(source)::text IS NULL OR source = sqlc.narg(source)::text)
  AND hour >= @from_hour AND hour < @to_hour
GROUP BY cause;

-- name: SourceKnown :one
-- Whether tenant has a record or hourly numbers under source.
SELECT (EXISTS (SELECT 1 FROM claims c WHERE c.tenant = @tenant::text AND c.source = @source::text)
	OR EXISTS (SELECT 1 FROM stats_hourly h WHERE h.tenant = @tenant::text AND h.source = @source::text))::boolean AS known;

-- name: StatsSources :many
-- The sources of tenant with hourly numbers from hour from_hour on, sorted.
SELECT DISTINCT source FROM stats_hourly WHERE tenant = @tenant AND hour >= @from_hour ORDER BY 1;
