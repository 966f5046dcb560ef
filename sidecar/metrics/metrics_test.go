package metrics_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/metrics"
)

// The counters and gauges follow real ledger activity.
func TestMetricsFollowLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var l *claim.Ledger
	m := metrics.New(func(ctx context.Context) (claim.Stats, error) { return l.Stats(ctx) })
	l, err := claim.New(pool, claim.Config{Observer: m, Jitter: func() float64 { return 1 }})
	require.NoError(t, err)

	req := func(ev, hash string) claim.Request {
		return claim.Request{Tenant: "t", Key: claim.Key{Source: "s", EventID: ev}, PayloadHash: hash}
	}
	h1, h2 := strings.Repeat("a", 64), strings.Repeat("b", 64)
	w, err := l.Claim(ctx, req("e1", h1))
	require.NoError(t, err)
	_, err = l.Claim(ctx, req("e1", h1)) // in_progress
	require.NoError(t, err)
	_, err = l.Complete(ctx, "t", w.ID, w.Token, "ref")
	require.NoError(t, err)
	_, err = l.Claim(ctx, req("e1", h1)) // duplicate
	require.NoError(t, err)
	_, err = l.Claim(ctx, req("e1", h2)) // conflict
	require.NoError(t, err)
	u, err := l.Claim(ctx, req("e2", ""))
	require.NoError(t, err)
	_, err = l.Fail(ctx, "t", u.ID, u.Token, claim.UnknownOutcome, "timeout")
	require.NoError(t, err)
	r, err := l.Claim(ctx, req("e3", ""))
	require.NoError(t, err)
	_, err = l.Fail(ctx, "t", r.ID, r.Token, claim.Retryable, "503")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE claims SET next_attempt_at = now() - interval '1 second' WHERE id = $1`, r.ID)
	require.NoError(t, err)
	_, err = l.Claim(ctx, req("e3", "")) // won again: a retry
	require.NoError(t, err)
	m.Received("stripe", inbox.Accepted)
	m.Received("stripe", inbox.Conflict)
	for i, state := range []string{"pending", "dead_lettered", "dead_lettered", "dispatched"} {
		rc, err := l.ReceiveTx(ctx, pool, req(fmt.Sprintf("in%d", i), h1))
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO inbox_events (claim_id, tenant, source, body, dispatch_state)
			VALUES ($1, 't', 's', '{}', $2)`, rc.ID, state)
		require.NoError(t, err)
	}
	m.Dispatched("stripe", "dispatched", 20*time.Millisecond)

	expect := `
# HELP claimd_claims_total Claim attempts by outcome.
# TYPE claimd_claims_total counter
claimd_claims_total{outcome="conflict"} 1
claimd_claims_total{outcome="dead_lettered"} 0
claimd_claims_total{outcome="duplicate"} 1
claimd_claims_total{outcome="in_progress"} 1
claimd_claims_total{outcome="retry_later"} 0
claimd_claims_total{outcome="stale"} 0
claimd_claims_total{outcome="unknown"} 0
claimd_claims_total{outcome="won"} 4
# HELP claimd_conflicts_total Claims and ingested deliveries of a known key with a different payload hash.
# TYPE claimd_conflicts_total counter
claimd_conflicts_total 2
# HELP claimd_retries_total Won claims that were not the first attempt (retry after failure, reclaimed lease or operator retry).
# TYPE claimd_retries_total counter
claimd_retries_total 1
# HELP claimd_failures_total Failed attempts reported by kind (retryable, permanent, unknown).
# TYPE claimd_failures_total counter
claimd_failures_total{kind="permanent"} 0
claimd_failures_total{kind="retryable"} 1
claimd_failures_total{kind="unknown"} 1
# HELP claimd_records_open Records not in a terminal state, by state (all tenants).
# TYPE claimd_records_open gauge
claimd_records_open{state="dead_lettered"} 0
claimd_records_open{state="processing"} 1
claimd_records_open{state="received"} 4
claimd_records_open{state="retryable_failed"} 0
claimd_records_open{state="unknown"} 1
# HELP claimd_ingest_deliveries_total Provider deliveries by configured source and result (accepted, duplicate, conflict, handshake, body_too_large, or the verification error code).
# TYPE claimd_ingest_deliveries_total counter
claimd_ingest_deliveries_total{result="accepted",source="stripe"} 1
claimd_ingest_deliveries_total{result="conflict",source="stripe"} 1
# HELP claimd_inbox_dispatch_open Inbox events by dispatch state: pending (waiting or retrying) and dead_lettered (needs a replay).
# TYPE claimd_inbox_dispatch_open gauge
claimd_inbox_dispatch_open{state="dead_lettered"} 2
claimd_inbox_dispatch_open{state="pending"} 1
`
	require.NoError(t, testutil.GatherAndCompare(m.Registry, strings.NewReader(expect),
		"claimd_claims_total", "claimd_conflicts_total", "claimd_retries_total", "claimd_failures_total",
		"claimd_records_open", "claimd_ingest_deliveries_total", "claimd_inbox_dispatch_open"))
	require.Equal(t, 1, testutil.CollectAndCount(m.Registry, "claimd_claim_to_complete_seconds"))
	n, err := testutil.GatherAndCount(m.Registry, "claimd_oldest_processing_seconds", "claimd_dispatch_latency_seconds",
		"claimd_inbox_dispatch_open")
	require.NoError(t, err)
	require.Equal(t, 4, n)
}

// claimd_db_synchronous_replication is 1 or 0 when known and absent when
// not; claimd_db_standbys has every sync_state; the refusal counter reads
// its function.
func TestReplicationMetrics(t *testing.T) {
	t.Parallel()
	m := metrics.New(nil)
	var cur metrics.Replication
	ok := false
	m.ObserveReplication(func(context.Context) (metrics.Replication, bool) { return cur, ok })
	refusals := int64(0)
	m.ObserveStaleServerRefusals(func() int64 { return refusals })

	count := func(name string) int {
		n, err := testutil.GatherAndCount(m.Registry, name)
		require.NoError(t, err)
		return n
	}
	require.Zero(t, count("claimd_db_synchronous_replication"), "nothing read yet")
	require.Zero(t, count("claimd_db_standbys"))

	cur, ok = metrics.Replication{Known: true, Synchronous: false, Standbys: map[string]int{"async": 2}}, true
	require.NoError(t, testutil.GatherAndCompare(m.Registry, strings.NewReader(`
# HELP claimd_db_standbys Standbys connected to the primary by sync_state (sync, quorum, potential, async; unknown without pg_monitor).
# TYPE claimd_db_standbys gauge
claimd_db_standbys{sync_state="async"} 2
claimd_db_standbys{sync_state="potential"} 0
claimd_db_standbys{sync_state="quorum"} 0
claimd_db_standbys{sync_state="sync"} 0
claimd_db_standbys{sync_state="unknown"} 0
`), "claimd_db_standbys"))
	v, err := gatherValue(m, "claimd_db_synchronous_replication")
	require.NoError(t, err)
	require.Zero(t, v)

	cur = metrics.Replication{Known: true, Synchronous: true, Standbys: map[string]int{"sync": 1}}
	v, err = gatherValue(m, "claimd_db_synchronous_replication")
	require.NoError(t, err)
	require.EqualValues(t, 1, v)

	cur = metrics.Replication{Standbys: map[string]int{"unknown": 1}}
	require.Zero(t, count("claimd_db_synchronous_replication"), "unknown: absent")
	require.Equal(t, 5, count("claimd_db_standbys"))

	refusals = 3
	v, err = gatherValue(m, "claimd_db_stale_server_refusals_total")
	require.NoError(t, err)
	require.EqualValues(t, 3, v)
}

// gatherValue returns the value of the one sample of metric name.
func gatherValue(m *metrics.Metrics, name string) (float64, error) {
	mfs, err := m.Registry.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) != 1 {
			continue
		}
		s := mf.GetMetric()[0]
		switch {
		case s.GetGauge() != nil:
			return s.GetGauge().GetValue(), nil
		case s.GetCounter() != nil:
			return s.GetCounter().GetValue(), nil
		}
	}
	return 0, fmt.Errorf("no single sample of %s", name)
}

// claimd_oldest_dispatch_pending_seconds is the age of the oldest inbox
// event whose dispatch is pending, read from the database on each scrape:
// it falls to the next one when that is dispatched and to 0 when none is
// pending (a dead-lettered dispatch waits for a replay, not for the
// dispatcher).
func TestOldestDispatchPending(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	l, err := claim.New(pool, claim.Config{})
	require.NoError(t, err)
	m := metrics.New(l.Stats)
	oldest := func() float64 {
		t.Helper()
		v, err := gatherValue(m, "claimd_oldest_dispatch_pending_seconds")
		require.NoError(t, err)
		return v
	}
	require.Zero(t, oldest(), "nothing stored")

	ids := map[string]string{}
	for ev, age := range map[string]string{"old": "1 hour", "young": "10 minutes"} {
		rc, err := l.ReceiveTx(ctx, pool, claim.Request{Tenant: "t", Key: claim.Key{Source: "s", EventID: ev}})
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO inbox_events (claim_id, tenant, source, body, received_at)
			VALUES ($1, 't', 's', '{}', now() - $2::interval)`, rc.ID, age)
		require.NoError(t, err)
		ids[ev] = rc.ID
	}
	require.InDelta(t, 3600, oldest(), 60)
	pending, err := stateGauge(m, "claimd_inbox_dispatch_open", "pending")
	require.NoError(t, err)
	require.EqualValues(t, 2, pending)

	_, err = pool.Exec(ctx, `UPDATE inbox_events SET dispatch_state = 'dispatched', dispatched_at = now() WHERE claim_id = $1`, ids["old"])
	require.NoError(t, err)
	require.InDelta(t, 600, oldest(), 60, "the next pending one")

	_, err = pool.Exec(ctx, `UPDATE inbox_events SET dispatch_state = 'dead_lettered' WHERE claim_id = $1`, ids["young"])
	require.NoError(t, err)
	require.Zero(t, oldest(), "none pending")
}

// stateGauge is the value of the gauge name{state=state}.
func stateGauge(m *metrics.Metrics, name, state string) (float64, error) {
	mfs, err := m.Registry.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "state" && l.GetValue() == state {
					return s.GetGauge().GetValue(), nil
				}
			}
		}
	}
	return 0, fmt.Errorf("no %s{state=%q}", name, state)
}
