package claim

// Hourly numbers per tenant and source for the console's charts (migration
// 00016): RollupStats recomputes the last hours from the delivery log into
// stats_hourly and stats_causes_hourly; SourceStats and Savings read them.

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
)

// RollupWindow is how late a delivery-log row may commit after its "at"
// and still be counted: the maintenance loop recomputes from the start of
// the hour RollupWindow ago (the current hour, and the previous one too in
// the first RollupWindow of an hour). claimd's transactions that write the
// log are bounded by request, dispatch and statement timeouts far below
// it. The rollup's cost is one aggregate over the log of those hours
// (measured: about 2 s for 900,000 rows on a laptop), so a longer window
// costs every tick.
const RollupWindow = 15 * time.Minute

// MaxStatsRange is the longest span SourceStats and Savings read.
const MaxStatsRange = 31 * 24 * time.Hour

// rollupLockKey is the transaction advisory lock one rollup holds
// ("stats" in ASCII): replicas' maintenance loops take turns, and a tick
// that finds it held skips (the holder does the same work).
const rollupLockKey int64 = 0x7374617473

// HourStats is one hour of one source, as stats_hourly holds it.
type HourStats struct {
	// Hour is the hour's start, UTC.
	Hour time.Time
	// Deliveries counts the copies that reached claimd: provider
	// deliveries at /ingest, claims naming the door a copy came through
	// (a trigger's, a shadow ingest door's) and claims of records that
	// did not come through ingest.
	Deliveries int64
	// ShadowDeliveries counts those of Deliveries whose delivery-log
	// entry is marked shadow (observed only: they all ran); the others
	// were enforced.
	ShadowDeliveries int64
	// DuplicatesStopped counts the copies answered duplicate or
	// in_progress (at ingest or at a claim): effects not run again.
	DuplicatesStopped int64
	// Conflicts counts the copies with the same key and another payload:
	// held, never run.
	Conflicts int64
	// WouldDuplicates counts shadow mode's would-be duplicates: shadow
	// claims decided duplicate or in_progress (answered won, so they ran:
	// copies enforcement would have stopped). They are not in
	// DuplicatesStopped (nothing was stopped). WouldConflicts counts the
	// shadow claims decided conflict (they ran; enforcement would have
	// held them), not in Conflicts (nothing was held). The would-be rate
	// of shadow mode is WouldDuplicates / ShadowDeliveries.
	WouldDuplicates, WouldConflicts int64
	// Missed counts the events backfill found missing in the hour,
	// Backfilled those of them it recovered (both 0 until backfill's
	// tables exist).
	Missed, Backfilled int64
	// Dispatched counts the inbox events forwarded in the hour;
	// DispatchLagSumMs and DispatchLagMaxMs the sum and the largest of
	// their times from receipt to dispatch, in milliseconds.
	Dispatched                         int64
	DispatchLagSumMs, DispatchLagMaxMs float64
	// Causes splits DuplicatesStopped by cause ("" when the delivery log
	// names none).
	Causes map[string]int64
}

// DispatchLagAvgMs is the mean dispatch lag of the hour in milliseconds,
// 0 without a dispatch.
func (h HourStats) DispatchLagAvgMs() float64 {
	if h.Dispatched == 0 {
		return 0
	}
	return h.DispatchLagSumMs / float64(h.Dispatched)
}

// WouldPercent is h's would-be duplicates in whole percent (rounded) of
// its deliveries observed in shadow, 0 without any: shadow mode's rate,
// not diluted by the enforced deliveries of the same hours.
func WouldPercent(h HourStats) int64 {
	if h.ShadowDeliveries == 0 {
		return 0
	}
	return int64(math.Round(100 * float64(h.WouldDuplicates) / float64(h.ShadowDeliveries)))
}

// rollupFeatures says which optional columns and tables of other features
// the rollup can read in this database.
const rollupFeaturesSQL = `SELECT
	EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'claim_deliveries'::regclass
		AND attname = 'cause' AND NOT attisdropped),
	to_regclass('backfill_events') IS NOT NULL`

// hourExpr is the UTC hour of a time column, whatever the session's time
// zone.
func hourExpr(col string) string {
	return "date_trunc('hour', " + col + " AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"
}

// claimOutcomesSQL lists the outcomes the claim statement logs (one per
// claim attempt; won_replayed is the same request asking again, no new
// copy), as SQL literals.
var claimOutcomesSQL = func() string {
	q := make([]string, len(Outcomes))
	for i, o := range Outcomes {
		q[i] = "'" + string(o) + "'"
	}
	return strings.Join(q, ", ")
}()

// rollupSQL builds the statements of one rollup from hour $1 on: the
// counts of the delivery log (joined to claims for tenant and source) and,
// when backfill's table exists, of backfill_events (keyed by the hour an
// event was detected; scope is claims.source).
//
// A record claimd made itself from a provider's event list (origin
// 'backfill', logged 'received' with a detail starting "backfilled ",
// sidecar/backfill) is no delivery: backfill_events counts it. Neither is
// the workflow's claim of an ingested or backfilled record (it has a
// receipt hash or an origin): the claim statement's outcomes count as
// deliveries only for records that came through neither door, or when
// the entry names the door the copy came through (claim_deliveries.door,
// migration 00014: a trigger's claim, an ingest door's in shadow mode,
// whose records keep the receipt hash an enforcing door compares with).
func rollupSQL(withCause, withBackfill bool) (hourly, causes string) {
	cause, viaDoor := "''", ""
	if withCause {
		cause = "COALESCE(d.cause, '')"
		viaDoor = " OR d.door IS NOT NULL"
	}
	delivery := `((d.outcome IN ('received', 'ingest_duplicate', 'ingest_conflict')
				AND COALESCE(d.detail, '') NOT LIKE 'backfilled %')
			OR (d.outcome IN (` + claimOutcomesSQL + `) AND ((c.receipt_hash IS NULL AND c.origin IS NULL)` + viaDoor + `)))`
	logRows := `SELECT c.tenant, c.source, ` + hourExpr("d.at") + ` AS hour,
		count(*) FILTER (WHERE ` + delivery + `) AS deliveries,
		count(*) FILTER (WHERE ` + delivery + ` AND d.shadow) AS shadow_deliveries,
		count(*) FILTER (WHERE d.outcome IN ('ingest_duplicate', 'duplicate', 'in_progress') AND NOT d.shadow) AS duplicates_stopped,
		count(*) FILTER (WHERE d.outcome IN ('ingest_conflict', 'conflict') AND NOT d.shadow) AS conflicts,
		count(*) FILTER (WHERE d.outcome IN ('duplicate', 'in_progress') AND d.shadow) AS would_duplicates,
		count(*) FILTER (WHERE d.outcome IN ('ingest_conflict', 'conflict') AND d.shadow) AS would_conflicts,
		0::bigint AS missed, 0::bigint AS backfilled,
		count(*) FILTER (WHERE d.outcome = 'dispatched') AS dispatched,
		COALESCE(sum(EXTRACT(EPOCH FROM d.at - c.created_at) * 1000) FILTER (WHERE d.outcome = 'dispatched'), 0)::float8 AS lag_sum,
		COALESCE(max(EXTRACT(EPOCH FROM d.at - c.created_at) * 1000) FILTER (WHERE d.outcome = 'dispatched'), 0)::float8 AS lag_max
	FROM claim_deliveries d JOIN claims c ON c.id = d.claim_id
	WHERE d.at >= $1
	GROUP BY 1, 2, 3`
	if withBackfill {
		logRows += `
	UNION ALL
	SELECT tenant, scope, ` + hourExpr("detected_at") + `, 0, 0, 0, 0, 0, 0,
		count(*), count(*) FILTER (WHERE state IN ('fetched', 'arrived', 'late_real')), 0, 0, 0
	FROM backfill_events WHERE detected_at >= $1
	GROUP BY 1, 2, 3`
	}
	// shadow_deliveries, would_duplicates, would_conflicts: the shadow
	// rows of the delivery log (migration 00017, shadow mode; the columns
	// are migration 00022's).
	hourly = `INSERT INTO stats_hourly (tenant, source, hour, deliveries, shadow_deliveries, duplicates_stopped, conflicts,
		would_duplicates, would_conflicts, missed, backfilled, dispatched, dispatch_lag_ms_sum, dispatch_lag_ms_max)
	SELECT tenant, source, hour, sum(deliveries), sum(shadow_deliveries), sum(duplicates_stopped), sum(conflicts),
		sum(would_duplicates), sum(would_conflicts), sum(missed), sum(backfilled), sum(dispatched), sum(lag_sum), max(lag_max)
	FROM (` + logRows + `) r
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
		dispatch_lag_ms_max = GREATEST(stats_hourly.dispatch_lag_ms_max, excluded.dispatch_lag_ms_max)`
	causes = `INSERT INTO stats_causes_hourly (tenant, source, hour, cause, n)
	SELECT c.tenant, c.source, ` + hourExpr("d.at") + `, ` + cause + `, count(*)
	FROM claim_deliveries d JOIN claims c ON c.id = d.claim_id
	WHERE d.at >= $1 AND d.outcome IN ('ingest_duplicate', 'duplicate', 'in_progress') AND NOT d.shadow
	GROUP BY 1, 2, 3, 4
	ON CONFLICT (tenant, source, hour, cause) DO UPDATE SET n = GREATEST(stats_causes_hourly.n, excluded.n)`
	return hourly, causes
}

// RollupStats recomputes the hourly numbers of every tenant and source
// from the start of from's hour (UTC) on, in one transaction under an
// advisory lock, and keeps for each number the larger of the stored and
// the recomputed value. The delivery log only grows until a purge removes
// a record's rows, so a count can only grow by rows committed since the
// last run (a row committed late, its "at" taken before its commit, is
// counted now), and never shrinks because the purge removed rows it
// counted (payload retention may be as short as an hour, less than the
// window). Running it again changes nothing. Hours before from are left
// as they are. The maintenance loop calls it every tick with now −
// RollupWindow. It returns the hours written and skipped=true when
// another rollup held the lock. Errors: Unavailable.
func (l *Ledger) RollupStats(ctx context.Context, from time.Time) (rows int64, skipped bool, err error) {
	from = from.UTC().Truncate(time.Hour)
	err = db.RunTx(ctx, l.pool, func(tx pgx.Tx) error {
		rows, skipped = 0, false
		var locked bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, rollupLockKey).Scan(&locked); err != nil {
			return err
		}
		if !locked {
			skipped = true
			return nil
		}
		var withCause, withBackfill bool
		if err := tx.QueryRow(ctx, rollupFeaturesSQL).Scan(&withCause, &withBackfill); err != nil {
			return err
		}
		hourly, causes := rollupSQL(withCause, withBackfill)
		tag, err := tx.Exec(ctx, hourly, from)
		if err != nil {
			return err
		}
		rows = tag.RowsAffected()
		_, err = tx.Exec(ctx, causes, from)
		return err
	})
	if err != nil {
		return 0, false, db.Error(err)
	}
	return rows, skipped, nil
}

func checkRange(from, to time.Time) error {
	if !from.Before(to) {
		return apperr.Field("from", "must be before to")
	}
	if to.Sub(from) > MaxStatsRange {
		return apperr.Field("from", "must be at most %d days before to", int(MaxStatsRange/(24*time.Hour)))
	}
	return nil
}

// SourceStats returns tenant's hourly numbers of source for the hours
// [from, to) (both truncated to the hour, UTC), oldest first, one entry per
// hour (zeros where nothing happened). Errors: Invalid (from not before
// to, or more than MaxStatsRange), Unavailable.
func (l *Ledger) SourceStats(ctx context.Context, tenant, source string, from, to time.Time) ([]HourStats, error) {
	from, to = from.UTC().Truncate(time.Hour), to.UTC().Truncate(time.Hour)
	if err := checkRange(from, to); err != nil {
		return nil, err
	}
	out := make([]HourStats, 0, int(to.Sub(from)/time.Hour))
	at := map[time.Time]int{}
	for h := from; h.Before(to); h = h.Add(time.Hour) {
		at[h] = len(out)
		out = append(out, HourStats{Hour: h, Causes: map[string]int64{}})
	}
	rows, err := l.pool.Query(ctx, `SELECT hour, deliveries, shadow_deliveries, duplicates_stopped, conflicts,
		would_duplicates, would_conflicts, missed, backfilled, dispatched, dispatch_lag_ms_sum, dispatch_lag_ms_max
		FROM stats_hourly WHERE tenant = $1 AND source = $2 AND hour >= $3 AND hour < $4`, tenant, source, from, to)
	if err != nil {
		return nil, db.Error(err)
	}
	var h HourStats
	if _, err := pgx.ForEachRow(rows, []any{&h.Hour, &h.Deliveries, &h.ShadowDeliveries, &h.DuplicatesStopped, &h.Conflicts,
		&h.WouldDuplicates, &h.WouldConflicts, &h.Missed, &h.Backfilled, &h.Dispatched, &h.DispatchLagSumMs, &h.DispatchLagMaxMs}, func() error {
		i, ok := at[h.Hour.UTC()]
		if !ok {
			return fmt.Errorf("claim: stats hour %s outside the range read", h.Hour)
		}
		h.Hour, h.Causes = h.Hour.UTC(), out[i].Causes
		out[i] = h
		return nil
	}); err != nil {
		return nil, db.Error(err)
	}
	rows, err = l.pool.Query(ctx, `SELECT hour, cause, n FROM stats_causes_hourly
		WHERE tenant = $1 AND source = $2 AND hour >= $3 AND hour < $4`, tenant, source, from, to)
	if err != nil {
		return nil, db.Error(err)
	}
	var hour time.Time
	var cause string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&hour, &cause, &n}, func() error {
		if i, ok := at[hour.UTC()]; ok {
			out[i].Causes[cause] = n
		}
		return nil
	}); err != nil {
		return nil, db.Error(err)
	}
	return out, nil
}

// Savings is what the layer saved a tenant over a span: the effects not
// run again, the conflicts held and the missed events recovered.
type Savings struct {
	// DuplicatesStopped counts the copies stopped, ByCause splits them
	// ("" when the delivery log names no cause).
	DuplicatesStopped  int64
	ByCause            map[string]int64
	Conflicts          int64
	Missed, Backfilled int64
}

// CauseCount is one cause of Savings.ByCause, for ordered display.
type CauseCount struct {
	Cause string
	N     int64
}

// Causes returns ByCause largest first (ties by name).
func (s Savings) Causes() []CauseCount {
	out := make([]CauseCount, 0, len(s.ByCause))
	for c, n := range s.ByCause {
		out = append(out, CauseCount{c, n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].N != out[j].N {
			return out[i].N > out[j].N
		}
		return out[i].Cause < out[j].Cause
	})
	return out
}

// Savings sums tenant's hourly numbers over [from, to) (hours, UTC), of
// one source or, with source "", of all. Errors: Invalid, Unavailable.
func (l *Ledger) Savings(ctx context.Context, tenant, source string, from, to time.Time) (Savings, error) {
	from, to = from.UTC().Truncate(time.Hour), to.UTC().Truncate(time.Hour)
	if err := checkRange(from, to); err != nil {
		return Savings{}, err
	}
	s := Savings{ByCause: map[string]int64{}}
	src := any(nil)
	if source != "" {
		src = source
	}
	if err := l.pool.QueryRow(ctx, `SELECT COALESCE(sum(duplicates_stopped), 0)::bigint, COALESCE(sum(conflicts), 0)::bigint,
		COALESCE(sum(missed), 0)::bigint, COALESCE(sum(backfilled), 0)::bigint
		FROM stats_hourly WHERE tenant = $1 AND ($2::text IS NULL OR source = $2) AND hour >= $3 AND hour < $4`,
		tenant, src, from, to).Scan(&s.DuplicatesStopped, &s.Conflicts, &s.Missed, &s.Backfilled); err != nil {
		return Savings{}, db.Error(err)
	}
	rows, err := l.pool.Query(ctx, `SELECT cause, sum(n)::bigint FROM stats_causes_hourly
		WHERE tenant = $1 AND ($2::text IS NULL OR source = $2) AND hour >= $3 AND hour < $4 GROUP BY cause`,
		tenant, src, from, to)
	if err != nil {
		return Savings{}, db.Error(err)
	}
	var cause string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&cause, &n}, func() error {
		s.ByCause[cause] = n
		return nil
	}); err != nil {
		return Savings{}, db.Error(err)
	}
	return s, nil
}

// SourceKnown reports whether tenant has a record or hourly numbers under
// source (the console's source page is 404 for any other name).
// Errors: Unavailable.
func (l *Ledger) SourceKnown(ctx context.Context, tenant, source string) (bool, error) {
	if strings.TrimSpace(source) == "" {
		return false, nil
	}
	var ok bool
	err := l.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM claims WHERE tenant = $1 AND source = $2)
		OR EXISTS (SELECT 1 FROM stats_hourly WHERE tenant = $1 AND source = $2)`, tenant, source).Scan(&ok)
	if err != nil {
		return false, db.Error(err)
	}
	return ok, nil
}

// StatsSources returns the sources of tenant with hourly numbers from
// hour from on, sorted. Errors: Unavailable.
func (l *Ledger) StatsSources(ctx context.Context, tenant string, from time.Time) ([]string, error) {
	rows, err := l.pool.Query(ctx, `SELECT DISTINCT source FROM stats_hourly WHERE tenant = $1 AND hour >= $2 ORDER BY 1`,
		tenant, from.UTC().Truncate(time.Hour))
	if err != nil {
		return nil, db.Error(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, db.Error(err)
	}
	return out, nil
}
