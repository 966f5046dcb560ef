package claim_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

func hashN(n int) string { return fmt.Sprintf("%064x", n) }

// statsRows is stats_hourly and stats_causes_hourly as text, to compare
// two rollups.
func statsRows(t *testing.T, b *bundle) []string {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT format('%s|%s|%s|%s|%s|%s|%s|%s|%s', tenant, source, hour, deliveries,
		duplicates_stopped, conflicts, missed, backfilled, dispatched) FROM stats_hourly
		UNION ALL SELECT format('cause|%s|%s|%s|%s|%s', tenant, source, hour, cause, n) FROM stats_causes_hourly ORDER BY 1`)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// TestRollupStatsCountsIdempotentAndLate seeds claims and ingest deliveries
// of two tenants, rolls up twice (same rows), then commits a delivery
// whose log row was written before the previous rollup ran (a late
// commit): the next rollup counts it. The numbers outlive the delivery log.
func TestRollupStatsCountsIdempotentAndLate(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	ctx := b.ctx
	claimOf := func(tenant, source, event string, hash int) claim.Result {
		r, err := b.ledger.Claim(ctx, claim.Request{Tenant: tenant, Key: claim.Key{Source: source, EventID: event},
			PayloadHash: hashN(hash)})
		require.NoError(t, err)
		return r
	}
	// Tenant a, source stripe: 3 events won, each completed; 2 duplicates
	// of the first, 1 conflict on the second, 1 in_progress copy of an open
	// fourth.
	for i := 1; i <= 3; i++ {
		r := claimOf("a", "stripe", fmt.Sprintf("e%d", i), i)
		require.Equal(t, claim.Won, r.Outcome)
		_, err := b.ledger.Complete(ctx, "a", r.ID, r.Token, "")
		require.NoError(t, err)
	}
	require.Equal(t, claim.Duplicate, claimOf("a", "stripe", "e1", 1).Outcome)
	require.Equal(t, claim.Duplicate, claimOf("a", "stripe", "e1", 1).Outcome)
	require.Equal(t, claim.Conflict, claimOf("a", "stripe", "e2", 99).Outcome)
	require.Equal(t, claim.Won, claimOf("a", "stripe", "e4", 4).Outcome)
	require.Equal(t, claim.InProgress, claimOf("a", "stripe", "e4", 4).Outcome)
	// Tenant a, source forms: ingest deliveries: 2 new, 1 redelivery, 1
	// conflicting redelivery; the workflow's claim of one is no delivery.
	receive := func(event string, hash int) claim.Receipt {
		rc, err := b.ledger.ReceiveTx(ctx, b.pool, claim.Request{Tenant: "a", Key: claim.Key{Source: "forms", EventID: event},
			PayloadHash: hashN(hash)})
		require.NoError(t, err)
		return rc
	}
	receive("f1", 1)
	receive("f2", 2)
	receive("f1", 1)
	require.True(t, receive("f2", 3).Conflict)
	require.Equal(t, claim.Won, claimOf("a", "forms", "f1", 1).Outcome)
	// Tenant b: one claim, kept apart.
	claimOf("b", "stripe", "e1", 1)

	from := time.Now().Add(-claim.RollupWindow)
	n, skipped, err := b.ledger.RollupStats(ctx, from)
	require.NoError(t, err)
	require.False(t, skipped)
	require.GreaterOrEqual(t, n, int64(3), "one row per tenant, source and hour at least")
	first := statsRows(t, b)
	_, _, err = b.ledger.RollupStats(ctx, from)
	require.NoError(t, err)
	require.Equal(t, first, statsRows(t, b), "a second rollup changes nothing")

	now := time.Now()
	span := func(tenant, source string) claim.HourStats {
		hs, err := b.ledger.SourceStats(ctx, tenant, source, now.Add(-3*time.Hour), now.Add(time.Hour))
		require.NoError(t, err)
		require.Len(t, hs, 4)
		var sum claim.HourStats
		sum.Causes = map[string]int64{}
		for _, h := range hs {
			sum.Deliveries += h.Deliveries
			sum.DuplicatesStopped += h.DuplicatesStopped
			sum.Conflicts += h.Conflicts
			sum.Missed += h.Missed
			sum.Backfilled += h.Backfilled
			for c, n := range h.Causes {
				sum.Causes[c] += n
			}
		}
		return sum
	}
	st := span("a", "stripe")
	// 4 won + 2 duplicate + 1 conflict + 1 in_progress claims.
	require.Equal(t, int64(8), st.Deliveries)
	require.Equal(t, int64(3), st.DuplicatesStopped)
	require.Equal(t, int64(1), st.Conflicts)
	var causes int64
	for _, n := range st.Causes {
		causes += n
	}
	require.Equal(t, st.DuplicatesStopped, causes, "the causes split the duplicates stopped")
	fm := span("a", "forms")
	require.Equal(t, int64(4), fm.Deliveries, "the workflow's claim of an ingested event is not a delivery")
	require.Equal(t, int64(1), fm.DuplicatesStopped)
	require.Equal(t, int64(1), fm.Conflicts)
	require.Equal(t, int64(1), span("b", "stripe").Deliveries)

	sv, err := b.ledger.Savings(ctx, "a", "", now.Add(-7*24*time.Hour), now.Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, int64(4), sv.DuplicatesStopped)
	require.Equal(t, int64(2), sv.Conflicts)

	// A late commit: the delivery's log row is written (its "at" taken)
	// before the rollup runs, and committed after it.
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = b.ledger.ReceiveTx(ctx, tx, claim.Request{Tenant: "a", Key: claim.Key{Source: "forms", EventID: "f9"},
		PayloadHash: hashN(9)})
	require.NoError(t, err)
	_, _, err = b.ledger.RollupStats(ctx, from)
	require.NoError(t, err)
	require.Equal(t, int64(4), span("a", "forms").Deliveries, "not committed yet")
	require.NoError(t, tx.Commit(ctx))
	_, _, err = b.ledger.RollupStats(ctx, from)
	require.NoError(t, err)
	require.Equal(t, int64(5), span("a", "forms").Deliveries, "the late commit is counted by the next rollup")

	// The numbers outlive the delivery log: a purge that removes the rows
	// of an hour in the window lowers nothing.
	_, err = b.pool.Exec(ctx, `DELETE FROM claims WHERE tenant = 'b'`)
	require.NoError(t, err)
	_, _, err = b.ledger.RollupStats(ctx, from)
	require.NoError(t, err)
	require.Equal(t, int64(1), span("b", "stripe").Deliveries, "the count survives its records' purge")
	known, err := b.ledger.SourceKnown(ctx, "b", "stripe")
	require.NoError(t, err)
	require.True(t, known)
	known, err = b.ledger.SourceKnown(ctx, "b", "forms")
	require.NoError(t, err)
	require.False(t, known, "another tenant's source")
}

// TestRollupStatsLockSkips: a rollup that finds another one running skips.
func TestRollupStatsLockSkips(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	_, err = tx.Exec(b.ctx, `SELECT pg_advisory_xact_lock($1)`, int64(0x7374617473))
	require.NoError(t, err)
	_, skipped, err := b.ledger.RollupStats(b.ctx, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.True(t, skipped)
}

func TestSourceStatsRange(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	now := time.Now()
	_, err := b.ledger.SourceStats(b.ctx, "a", "s", now, now.Add(-time.Hour))
	require.Error(t, err)
	_, err = b.ledger.SourceStats(b.ctx, "a", "s", now.Add(-40*24*time.Hour), now)
	require.Error(t, err)
}

// TestRollupStatsReadsCausesAndBackfill: when the delivery log has a cause
// column (migration 00014) and backfill's events table exists (00013), the
// rollup splits the duplicates by cause and counts the missed and
// recovered events by the hour they were detected. The test brings its own
// minimal backfill_events in a schema ahead of public on the search path,
// so it does not depend on backfill's migration being there or not.
func TestRollupStatsReadsCausesAndBackfill(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["search_path"] = "wp5bf, public" })
	l, err := claim.New(pool, claim.Config{Jitter: func() float64 { return 1 }})
	require.NoError(t, err)
	ctx := context.Background()
	for _, q := range []string{
		`ALTER TABLE claim_deliveries ADD COLUMN IF NOT EXISTS cause text`,
		`CREATE SCHEMA wp5bf`,
		`CREATE TABLE wp5bf.backfill_events (tenant text NOT NULL, scope text NOT NULL, event_id text NOT NULL,
			detected_at timestamptz NOT NULL DEFAULT now(), state text NOT NULL)`,
		`INSERT INTO wp5bf.backfill_events (tenant, scope, event_id, state) VALUES
			('a', 'stripe', 'm1', 'missed'), ('a', 'stripe', 'm2', 'fetched'), ('a', 'stripe', 'm3', 'arrived'),
			('a', 'stripe', 'm4', 'redelivery_requested'), ('b', 'stripe', 'm1', 'fetched')`,
	} {
		_, err := pool.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	r, err := l.Claim(ctx, claim.Request{Tenant: "a", Key: claim.Key{Source: "stripe", EventID: "e1"}, PayloadHash: hashN(1)})
	require.NoError(t, err)
	_, err = l.Complete(ctx, "a", r.ID, r.Token, "")
	require.NoError(t, err)
	for range 3 {
		d, err := l.Claim(ctx, claim.Request{Tenant: "a", Key: claim.Key{Source: "stripe", EventID: "e1"}, PayloadHash: hashN(1)})
		require.NoError(t, err)
		require.Equal(t, claim.Duplicate, d.Outcome)
	}
	// The claim statement logs each duplicate's cause (upstream_repeat
	// here: nothing dispatched it); two of the three get another.
	_, err = pool.Exec(ctx, `UPDATE claim_deliveries SET cause = 'provider_retry' WHERE id IN
		(SELECT id FROM claim_deliveries WHERE outcome = 'duplicate' ORDER BY id LIMIT 2)`)
	require.NoError(t, err)
	_, _, err = l.RollupStats(ctx, time.Now().Add(-claim.RollupWindow))
	require.NoError(t, err)
	now := time.Now()
	sv, err := l.Savings(ctx, "a", "stripe", now.Add(-time.Hour), now.Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, int64(3), sv.DuplicatesStopped)
	require.Equal(t, map[string]int64{"provider_retry": 2, "upstream_repeat": 1}, sv.ByCause)
	require.Equal(t, int64(4), sv.Missed, "every event backfill found missing")
	require.Equal(t, int64(2), sv.Backfilled, "fetched and arrived; a requested redelivery is not yet recovered")
	hs, err := l.SourceStats(ctx, "a", "stripe", now.Add(-time.Hour), now.Add(time.Hour))
	require.NoError(t, err)
	var deliveries int64
	for _, h := range hs {
		deliveries += h.Deliveries
	}
	require.Equal(t, int64(4), deliveries, "the backfill rows add no delivery")
}

// TestRollupStatsBackfilledIsNoDelivery: a record backfill stored from
// the provider's list, and the workflow's claim of it, add no delivery;
// the late real delivery is one, and a duplicate stopped.
func TestRollupStatsBackfilledIsNoDelivery(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	ctx := b.ctx
	key := claim.Key{Source: "stripe", EventID: "evt_lost"}
	_, stored, err := b.ledger.ReceiveBackfilledTx(ctx, b.pool, claim.Request{Tenant: "a", Key: key, PayloadHash: hashN(1)},
		"backfilled from provider event list (scan 1)")
	require.NoError(t, err)
	require.True(t, stored)
	r, err := b.ledger.Claim(ctx, claim.Request{Tenant: "a", Key: key, PayloadHash: hashN(1)})
	require.NoError(t, err)
	require.Equal(t, claim.Won, r.Outcome)
	deliveries := func() (n, dups int64) {
		_, _, err := b.ledger.RollupStats(ctx, time.Now().Add(-claim.RollupWindow))
		require.NoError(t, err)
		now := time.Now()
		hs, err := b.ledger.SourceStats(ctx, "a", "stripe", now.Add(-time.Hour), now.Add(time.Hour))
		require.NoError(t, err)
		for _, h := range hs {
			n += h.Deliveries
			dups += h.DuplicatesStopped
		}
		return n, dups
	}
	n, dups := deliveries()
	require.Zero(t, n, "a backfilled record and its workflow claim are no delivery")
	require.Zero(t, dups)
	_, err = b.ledger.ReceiveTx(ctx, b.pool, claim.Request{Tenant: "a", Key: key, PayloadHash: hashN(2)})
	require.NoError(t, err)
	n, dups = deliveries()
	require.Equal(t, int64(1), n, "the late real delivery")
	require.Equal(t, int64(1), dups)
}

// TestRollupStatsWouldDuplicates: shadow claims (observe only) of one
// source: the copies decided duplicate or in_progress are would-be
// duplicates, not duplicates stopped (nothing was stopped), a shadow
// conflict is no conflict held; every shadow claim is a delivery. After
// enforcement is on, a copy is a duplicate stopped again.
func TestRollupStatsWouldDuplicates(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{BySource: map[string]claim.Policy{"obs": {Shadow: true}}})
	ctx := b.ctx
	claimOf := func(event string, hash int) claim.Result {
		r, err := b.ledger.Claim(ctx, claim.Request{Tenant: "a", Key: claim.Key{Source: "obs", EventID: event},
			PayloadHash: hashN(hash)})
		require.NoError(t, err)
		require.Equal(t, claim.Won, r.Outcome, "a shadow claim proceeds")
		return r
	}
	first := claimOf("e1", 1)
	require.Equal(t, claim.Won, first.WouldBe)
	require.NotEmpty(t, first.Token)
	require.Equal(t, claim.InProgress, claimOf("e1", 1).WouldBe)
	_, err := b.ledger.Complete(ctx, "a", first.ID, first.Token, "")
	require.NoError(t, err)
	for range 2 {
		d := claimOf("e1", 1)
		require.Equal(t, claim.Duplicate, d.WouldBe)
		require.Empty(t, d.Token, "a copy holds nothing")
	}
	require.Equal(t, claim.Conflict, claimOf("e1", 2).WouldBe)

	_, _, err = b.ledger.RollupStats(ctx, time.Now().Add(-claim.RollupWindow))
	require.NoError(t, err)
	now := time.Now()
	sum := func() claim.HourStats {
		hs, err := b.ledger.SourceStats(ctx, "a", "obs", now.Add(-time.Hour), now.Add(time.Hour))
		require.NoError(t, err)
		var s claim.HourStats
		for _, h := range hs {
			s.Deliveries += h.Deliveries
			s.DuplicatesStopped += h.DuplicatesStopped
			s.Conflicts += h.Conflicts
			s.WouldDuplicates += h.WouldDuplicates
			s.ShadowDeliveries += h.ShadowDeliveries
			s.WouldConflicts += h.WouldConflicts
		}
		return s
	}
	st := sum()
	require.Equal(t, int64(5), st.Deliveries)
	require.Equal(t, int64(5), st.ShadowDeliveries, "all of them observed in shadow")
	require.Equal(t, int64(3), st.WouldDuplicates, "one in_progress and two duplicate copies")
	require.Equal(t, int64(1), st.WouldConflicts, "the copy with another payload")
	require.Zero(t, st.DuplicatesStopped)
	require.Zero(t, st.Conflicts)

	require.NoError(t, b.ledger.SetPolicies(claim.Policies{}))
	d, err := b.ledger.Claim(ctx, claim.Request{Tenant: "a", Key: claim.Key{Source: "obs", EventID: "e1"}, PayloadHash: hashN(1)})
	require.NoError(t, err)
	require.Equal(t, claim.Duplicate, d.Outcome, "enforced at once, against the shadow record")
	require.Empty(t, d.WouldBe)
	_, _, err = b.ledger.RollupStats(ctx, time.Now().Add(-claim.RollupWindow))
	require.NoError(t, err)
	c, err := b.ledger.Claim(ctx, claim.Request{Tenant: "a", Key: claim.Key{Source: "obs", EventID: "e1"}, PayloadHash: hashN(3)})
	require.NoError(t, err)
	require.Equal(t, claim.Conflict, c.Outcome)
	_, _, err = b.ledger.RollupStats(ctx, time.Now().Add(-claim.RollupWindow))
	require.NoError(t, err)
	st = sum()
	require.Equal(t, int64(7), st.Deliveries)
	require.Equal(t, int64(5), st.ShadowDeliveries, "the enforced copies are no shadow deliveries")
	require.Equal(t, int64(1), st.DuplicatesStopped)
	require.Equal(t, int64(1), st.Conflicts)
	require.Equal(t, int64(3), st.WouldDuplicates)
	require.Equal(t, int64(1), st.WouldConflicts)
}
