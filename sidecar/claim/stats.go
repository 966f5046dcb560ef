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
	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
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
		locked, err := queries.TryRollupLock(ctx, tx, rollupLockKey)
		if err != nil {
			return err
		}
		if !locked {
			skipped = true
			return nil
		}
		if rows, err = queries.RollupHourly(ctx, tx, from); err != nil {
			return err
		}
		return queries.RollupCauses(ctx, tx, from)
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
	hours, err := queries.SourceHours(ctx, l.pool, dbsqlc.SourceHoursParams{Tenant: tenant, Source: source,
		FromHour: from, ToHour: to})
	if err != nil {
		return nil, db.Error(err)
	}
	for _, r := range hours {
		i, ok := at[r.Hour.UTC()]
		if !ok {
			return nil, db.Error(fmt.Errorf("claim: stats hour %s outside the range read", r.Hour))
		}
		out[i] = HourStats{Hour: r.Hour.UTC(), Deliveries: r.Deliveries, ShadowDeliveries: r.ShadowDeliveries,
			DuplicatesStopped: r.DuplicatesStopped, Conflicts: r.Conflicts, WouldDuplicates: r.WouldDuplicates,
			WouldConflicts: r.WouldConflicts, Missed: r.Missed, Backfilled: r.Backfilled, Dispatched: r.Dispatched,
			DispatchLagSumMs: r.DispatchLagMsSum, DispatchLagMaxMs: r.DispatchLagMsMax, Causes: out[i].Causes}
	}
	causes, err := queries.SourceHourCauses(ctx, l.pool, dbsqlc.SourceHourCausesParams{Tenant: tenant, Source: source,
		FromHour: from, ToHour: to})
	if err != nil {
		return nil, db.Error(err)
	}
	for _, r := range causes {
		if i, ok := at[r.Hour.UTC()]; ok {
			out[i].Causes[r.Cause] = r.N
		}
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
	t, err := queries.SavingsTotals(ctx, l.pool, dbsqlc.SavingsTotalsParams{Tenant: tenant, Source: nullable(source),
		FromHour: from, ToHour: to})
	if err != nil {
		return Savings{}, db.Error(err)
	}
	s.DuplicatesStopped, s.Conflicts, s.Missed, s.Backfilled = t.DuplicatesStopped, t.Conflicts, t.Missed, t.Backfilled
	causes, err := queries.SavingsCauses(ctx, l.pool, dbsqlc.SavingsCausesParams{Tenant: tenant, Source: nullable(source),
		FromHour: from, ToHour: to})
	if err != nil {
		return Savings{}, db.Error(err)
	}
	for _, r := range causes {
		s.ByCause[r.Cause] = r.N
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
	ok, err := queries.SourceKnown(ctx, l.pool, dbsqlc.SourceKnownParams{Tenant: tenant, Source: source})
	if err != nil {
		return false, db.Error(err)
	}
	return ok, nil
}

// StatsSources returns the sources of tenant with hourly numbers from
// hour from on, sorted. Errors: Unavailable.
func (l *Ledger) StatsSources(ctx context.Context, tenant string, from time.Time) ([]string, error) {
	out, err := queries.StatsSources(ctx, l.pool, dbsqlc.StatsSourcesParams{Tenant: tenant,
		FromHour: from.UTC().Truncate(time.Hour)})
	if err != nil {
		return nil, db.Error(err)
	}
	return out, nil
}
