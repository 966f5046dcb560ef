package claim_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// A group of settles is one multi-row statement per round of distinct
// records: every kind of report in one statement, a record reported twice
// decided twice (the second on what the first left), object versions of
// one object completed together recorded at their highest, and each
// report's delivery-log entry as alone.
func TestGroupedSettlesInOneStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 20 })
	sizes := newGroupSizes()
	l := groupLedger(t, pool, sizes, claim.GroupConfig{Workers: 1, MaxItems: 64})
	win := func(event string, version int64) claim.Result {
		r := req("a", event)
		if version > 0 {
			r.ObjectID, r.ObjectVersion = "cus_1", &version
		}
		res, err := l.Claim(ctx, r)
		require.NoError(t, err)
		require.Equal(t, claim.Won, res.Outcome)
		return res
	}
	held := win("evt_held", 0)
	retry, unknown, twice, both := win("evt_retry", 0), win("evt_unknown", 0), win("evt_twice", 0), win("evt_both", 0)
	v3, v5 := win("evt_v3", 3), win("evt_v5", 5)

	// Hold the settle worker on a row lock of the test.
	lockerPID, unlock := pgtest.LockClaim(t, ctx, pool, held.ID)
	complete := func(r claim.Result, ref string) chan settleAnswer {
		return settleAsync(func() (claim.Record, error) { return l.Complete(ctx, "a", r.ID, r.Token, ref) })
	}
	fail := func(r claim.Result, kind claim.FailKind, msg string) chan settleAnswer {
		return settleAsync(func() (claim.Record, error) { return l.Fail(ctx, "a", r.ID, r.Token, kind, msg) })
	}
	heldDone := complete(held, "inv_held")
	pgtest.WaitBlockedBy(t, ctx, pool, lockerPID, "the held complete")
	chRetry := fail(retry, claim.Retryable, "timeout")
	chUnknown := fail(unknown, claim.UnknownOutcome, "crashed mid-call")
	chTwice1, chTwice2 := complete(twice, "inv_t"), complete(twice, "inv_t")
	chBothC, chBothF := complete(both, "inv_b"), fail(both, claim.Permanent, "550")
	ch3, ch5 := complete(v5, "inv_5"), complete(v3, "inv_3")
	pgtest.WaitUntil(t, "the settles to queue", func() bool { _, n := l.Queued(); return n == 8 })
	unlock()
	require.NoError(t, (<-heldDone).err)

	a := <-chRetry
	require.NoError(t, a.err)
	require.Equal(t, claim.StateRetryableFailed, a.rec.State)
	require.Equal(t, "timeout", a.rec.LastError)
	require.NotNil(t, a.rec.NextAttemptAt)
	// Jitter 1: the whole backoff of attempt 1, the policy's base (30 s by default).
	require.WithinDuration(t, a.rec.UpdatedAt.Add(l.Policy("stripe").BackoffBase), *a.rec.NextAttemptAt, time.Millisecond)
	a = <-chUnknown
	require.NoError(t, a.err)
	require.Equal(t, claim.StateUnknown, a.rec.State)

	t1, t2 := <-chTwice1, <-chTwice2
	require.NoError(t, t1.err)
	require.NoError(t, t2.err, "the same report twice: the second answers the completed record")
	require.Equal(t, "inv_t", t2.rec.ResultRef)

	bc, bf := <-chBothC, <-chBothF
	if bc.err == nil {
		require.Equal(t, claim.StateCompleted, bc.rec.State)
		require.Equal(t, apperr.LeaseLost, apperr.As(bf.err).Code, "the fail after the complete")
	} else {
		require.Equal(t, apperr.LeaseLost, apperr.As(bc.err).Code, "the complete after the fail")
		require.NoError(t, bf.err)
		require.Equal(t, claim.StateDeadLettered, bf.rec.State)
	}
	require.NoError(t, (<-ch3).err)
	require.NoError(t, (<-ch5).err)
	require.Contains(t, sizes.of("settle"), 8, "the queued settles went as one group")

	var last int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT last_version FROM object_versions
		WHERE tenant = 'a' AND object_id = 'cus_1'`).Scan(&last))
	require.Equal(t, int64(5), last, "two versions of one object completed in one statement: the highest")

	logOf := func(id string) []string {
		rec, err := l.Get(ctx, "a", id)
		require.NoError(t, err)
		var out []string
		for _, d := range rec.Deliveries {
			out = append(out, fmt.Sprintf("%s/%d/%s", d.Outcome, d.Attempt, d.Detail))
		}
		return out
	}
	require.Equal(t, []string{"won/1/", "failed_retryable/1/timeout"}, logOf(retry.ID))
	require.Equal(t, []string{"won/1/", "failed_unknown/1/crashed mid-call"}, logOf(unknown.ID))
	require.Equal(t, []string{"won/1/", "completed/1/"}, logOf(twice.ID), "a repeat writes nothing")
	require.Len(t, logOf(both.ID), 2, "one of the two reports moved the record")
}
