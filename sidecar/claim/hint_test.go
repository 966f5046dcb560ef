package claim_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// completeIn makes one completed record of (tenant a, source, event) whose
// claim-to-complete time was d.
func (b *bundle) completeIn(t *testing.T, source, event string, d time.Duration) {
	t.Helper()
	r, err := b.ledger.Claim(b.ctx, claim.Request{Tenant: "a", Key: claim.Key{Source: source, EventID: event}})
	require.NoError(t, err)
	require.Equal(t, claim.Won, r.Outcome)
	_, err = b.ledger.Complete(b.ctx, "a", r.ID, r.Token, "")
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `UPDATE claims SET claimed_at = completed_at - make_interval(secs => $2) WHERE id = $1`,
		r.ID, d.Seconds())
	require.NoError(t, err)
}

// inProgress claims (a, source, event) twice and returns the second answer:
// in_progress behind the first, whose claim is moved back by elapsed.
func (b *bundle) inProgress(t *testing.T, source, event string, lease, elapsed time.Duration) claim.Result {
	t.Helper()
	r := claim.Request{Tenant: "a", Key: claim.Key{Source: source, EventID: event}, Lease: lease}
	w, err := b.ledger.Claim(b.ctx, r)
	require.NoError(t, err)
	require.Equal(t, claim.Won, w.Outcome)
	_, err = b.pool.Exec(b.ctx, `UPDATE claims SET claimed_at = claimed_at - make_interval(secs => $2) WHERE id = $1`,
		w.ID, elapsed.Seconds())
	require.NoError(t, err)
	ip, err := b.ledger.Claim(b.ctx, r)
	require.NoError(t, err)
	require.Equal(t, claim.InProgress, ip.Outcome)
	return ip
}

func TestRetryAfterInProgressFollowsObservedDurations(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	hint := func(res claim.Result) time.Duration {
		t.Helper()
		d, ok := b.ledger.RetryAfter(b.ctx, res, time.Now())
		require.True(t, ok)
		return d
	}

	// No completion yet: the documented default, not the 300 s lease.
	require.Equal(t, claim.RetryHintNoHistory, hint(b.inProgress(t, "fresh", "e1", 0, 0)))

	// Effects of 0.2 s: come back in a second (the floor).
	for i := range 20 {
		b.completeIn(t, "fast", "f"+string(rune('a'+i)), 200*time.Millisecond)
	}
	require.Equal(t, claim.MinRetryHint, hint(b.inProgress(t, "fast", "e1", 0, 0)))

	// Effects of 8 s (one in ten of 60 s): the 90th percentile is 8 s; a
	// holder that claimed 3 s ago probably needs 5 s more.
	for i := range 18 {
		b.completeIn(t, "slow", "s"+string(rune('a'+i)), 8*time.Second)
	}
	b.completeIn(t, "slow", "s-outlier", 60*time.Second)
	got := hint(b.inProgress(t, "slow", "e1", 0, 3*time.Second))
	require.InDelta(t, (5 * time.Second).Seconds(), got.Seconds(), 0.5, "got %s", got)

	// A holder running past the estimate: the estimate again.
	got = hint(b.inProgress(t, "slow", "e2", 0, 20*time.Second))
	require.InDelta(t, (8 * time.Second).Seconds(), got.Seconds(), 0.5, "got %s", got)

	// Never beyond the holder's lease.
	got = hint(b.inProgress(t, "slow", "e3", 2*time.Second, 0))
	require.LessOrEqual(t, got, 2*time.Second)
	require.GreaterOrEqual(t, got, claim.MinRetryHint)

	// Per (tenant, source, action): another action of the slow source has
	// no history, and neither has the same source for another tenant.
	r := claim.Request{Tenant: "a", Key: claim.Key{Source: "slow", EventID: "e4", Action: "send-email"}}
	_, err := b.ledger.Claim(b.ctx, r)
	require.NoError(t, err)
	ip, err := b.ledger.Claim(b.ctx, r)
	require.NoError(t, err)
	require.Equal(t, claim.RetryHintNoHistory, hint(ip))
	r = claim.Request{Tenant: "b", Key: claim.Key{Source: "slow", EventID: "e5"}}
	_, err = b.ledger.Claim(b.ctx, r)
	require.NoError(t, err)
	ip, err = b.ledger.Claim(b.ctx, r)
	require.NoError(t, err)
	require.Equal(t, claim.RetryHintNoHistory, hint(ip))
}

func TestRetryAfterIsCachedPerSource(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	b.completeIn(t, "cached", "c1", 4*time.Second)
	first, _ := b.ledger.RetryAfter(b.ctx, b.inProgress(t, "cached", "e1", 0, 0), time.Now())
	require.InDelta(t, 4, first.Seconds(), 0.5)
	// Much slower completions within the cache's lifetime do not change it.
	for i := range 10 {
		b.completeIn(t, "cached", "d"+string(rune('a'+i)), 40*time.Second)
	}
	again, _ := b.ledger.RetryAfter(b.ctx, b.inProgress(t, "cached", "e2", 0, 0), time.Now())
	require.InDelta(t, 4, again.Seconds(), 0.5)
}

func TestRetryAfterOtherOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	now := time.Now()
	next := now.Add(42 * time.Second)
	d, ok := b.ledger.RetryAfter(b.ctx, claim.Result{Outcome: claim.RetryLater, Record: claim.Record{NextAttemptAt: &next}}, now)
	require.True(t, ok)
	require.Equal(t, 42*time.Second, d)
	past := now.Add(-time.Second)
	d, ok = b.ledger.RetryAfter(b.ctx, claim.Result{Outcome: claim.RetryLater, Record: claim.Record{NextAttemptAt: &past}}, now)
	require.True(t, ok)
	require.Equal(t, claim.MinRetryHint, d)
	for _, o := range []claim.Outcome{claim.Won, claim.Duplicate, claim.Conflict, claim.Stale, claim.DeadLettered, claim.Unknown} {
		_, ok := b.ledger.RetryAfter(b.ctx, claim.Result{Outcome: o}, now)
		require.False(t, ok, o)
	}
}

// TestRetryHintReadsTheIndex: the estimate reads the latest completions of
// one source through claims_completed_idx, not the table.
func TestRetryHintReadsTheIndex(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	_, err := b.pool.Exec(b.ctx, `INSERT INTO claims (tenant, source, event_id, state, last_outcome, attempt,
		max_attempts, lease_policy, backoff_base, backoff_cap, claimed_at, completed_at)
		SELECT 'a', 'src' || (g % 50), 'e' || g, 'completed', 'won', 1, 5, 'reclaim', 30, 3600,
			now() - interval '2 seconds', now()
		FROM generate_series(1, 20000) g`)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `ANALYZE claims`)
	require.NoError(t, err)
	var plan string
	// The statement's arguments: quantile, tenant, source, action, max_entries.
	rows, err := b.pool.Query(b.ctx, `EXPLAIN `+claim.RetryHintSQL, claim.RetryHintQuantile, "a", "src7", "", claim.RetryHintSample)
	require.NoError(t, err)
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan += line + "\n"
	}
	require.NoError(t, rows.Err())
	require.Contains(t, plan, "claims_completed_idx", plan)
	require.NotContains(t, plan, "Seq Scan", plan)
}
