package claim_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// startWaiter runs a Waiter over b's ledger until the test ends and returns
// it once its listener is connected.
func startWaiter(t *testing.T, b *bundle) *claim.Waiter {
	t.Helper()
	w := claim.NewWaiter(b.ledger, claim.WaiterConfig{ConnConfig: b.pool.Config().ConnConfig,
		StepTimeout: 5 * time.Second, Logger: zerolog.Nop()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	require.Eventually(t, w.Listening, 10*time.Second, 5*time.Millisecond, "the waiter's listener never connected")
	return w
}

// marked waits until a claim waits on record id: the waiter has marked it.
func (b *bundle) marked(t *testing.T, id string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var on bool
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT wait_notify FROM claims WHERE id = $1`, id).Scan(&on))
		return on
	}, 10*time.Second, 5*time.Millisecond, "no claim started waiting on %s", id)
}

type waited struct {
	res     claim.Result
	err     error
	elapsed time.Duration
}

// waitFor runs w.Claim(r, wait) in the background.
func waitFor(w *claim.Waiter, r claim.Request, wait time.Duration) <-chan waited {
	out := make(chan waited, 1)
	go func() {
		start := time.Now()
		res, err := w.Claim(context.Background(), r, wait)
		out <- waited{res, err, time.Since(start)}
	}()
	return out
}

func TestWaitEndsWhenTheHolderSettles(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	w := startWaiter(t, b)

	t.Run("complete: duplicate with the holder's result", func(t *testing.T) {
		h, err := b.ledger.Claim(b.ctx, req("a", "evt_c"))
		require.NoError(t, err)
		ch := waitFor(w, req("a", "evt_c"), 20*time.Second)
		b.marked(t, h.ID)
		_, err = b.ledger.Complete(b.ctx, "a", h.ID, h.Token, "inv_7")
		require.NoError(t, err)
		got := <-ch
		require.NoError(t, got.err)
		require.Equal(t, claim.Duplicate, got.res.Outcome)
		require.Equal(t, "inv_7", got.res.ResultRef)
		require.Less(t, got.elapsed, 10*time.Second)
	})

	t.Run("retryable fail: retry_later", func(t *testing.T) {
		h, err := b.ledger.Claim(b.ctx, req("a", "evt_f"))
		require.NoError(t, err)
		ch := waitFor(w, req("a", "evt_f"), 20*time.Second)
		b.marked(t, h.ID)
		_, err = b.ledger.Fail(b.ctx, "a", h.ID, h.Token, claim.Retryable, "503 from the API")
		require.NoError(t, err)
		got := <-ch
		require.NoError(t, got.err)
		require.Equal(t, claim.RetryLater, got.res.Outcome)
		require.Less(t, got.elapsed, 10*time.Second)
	})

	t.Run("unknown outcome: unknown", func(t *testing.T) {
		h, err := b.ledger.Claim(b.ctx, req("a", "evt_u"))
		require.NoError(t, err)
		ch := waitFor(w, req("a", "evt_u"), 20*time.Second)
		b.marked(t, h.ID)
		_, err = b.ledger.Fail(b.ctx, "a", h.ID, h.Token, claim.UnknownOutcome, "timeout")
		require.NoError(t, err)
		got := <-ch
		require.NoError(t, got.err)
		require.Equal(t, claim.Unknown, got.res.Outcome)
	})

	t.Run("bound: in_progress", func(t *testing.T) {
		h, err := b.ledger.Claim(b.ctx, req("a", "evt_b"))
		require.NoError(t, err)
		got := <-waitFor(w, req("a", "evt_b"), time.Second)
		require.NoError(t, got.err)
		require.Equal(t, claim.InProgress, got.res.Outcome)
		require.Equal(t, h.ID, got.res.ID)
		require.GreaterOrEqual(t, got.elapsed, time.Second)
		require.Less(t, got.elapsed, 5*time.Second)
	})

	t.Run("no wait asked: in_progress at once", func(t *testing.T) {
		_, err := b.ledger.Claim(b.ctx, req("a", "evt_n"))
		require.NoError(t, err)
		got := <-waitFor(w, req("a", "evt_n"), 0)
		require.NoError(t, got.err)
		require.Equal(t, claim.InProgress, got.res.Outcome)
		var on bool
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT wait_notify FROM claims WHERE id = $1`, got.res.ID).Scan(&on))
		require.False(t, on, "a claim that does not wait marks nothing")
	})
}

func TestWaitEndsWhenTheLeaseRunsOut(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy claim.LeasePolicy
		want   claim.Outcome
	}{{claim.Reclaim, claim.Won}, {claim.Review, claim.Unknown}} {
		t.Run(string(tc.policy), func(t *testing.T) {
			t.Parallel()
			b := setup(t, claim.Policies{Default: claim.Policy{LeasePolicy: tc.policy}})
			w := startWaiter(t, b)
			r := req("a", "evt_l")
			r.Lease = time.Second
			_, err := b.ledger.Claim(b.ctx, r)
			require.NoError(t, err)
			got := <-waitFor(w, req("a", "evt_l"), 20*time.Second)
			require.NoError(t, got.err)
			require.Equal(t, tc.want, got.res.Outcome, "no notification: the waiter wakes at the lease's end")
			require.Less(t, got.elapsed, 10*time.Second)
		})
	}
}

func TestWaitBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	w := startWaiter(t, b)
	other, err := b.ledger.Claim(b.ctx, req("a", "evt_held"))
	require.NoError(t, err)

	// Item 0 wins k, item 1 (same key) is in progress behind item 0 and
	// must not wait for it; item 2 waits for another holder.
	reqs := []claim.Request{req("a", "evt_k"), req("a", "evt_k"), req("a", "evt_held")}
	type out struct {
		res []claim.Result
		err error
	}
	ch := make(chan out, 1)
	go func() {
		res, err := w.ClaimBatch(context.Background(), reqs, []time.Duration{10 * time.Second, 10 * time.Second, 10 * time.Second})
		ch <- out{res, err}
	}()
	b.marked(t, other.ID)
	_, err = b.ledger.Complete(b.ctx, "a", other.ID, other.Token, "ref_held")
	require.NoError(t, err)
	got := <-ch
	require.NoError(t, got.err)
	require.Equal(t, claim.Won, got.res[0].Outcome)
	require.Equal(t, claim.InProgress, got.res[1].Outcome)
	require.Equal(t, claim.Duplicate, got.res[2].Outcome)
	require.Equal(t, "ref_held", got.res[2].ResultRef)

	// A batch whose only in-progress item is held by the batch itself is
	// answered at once.
	start := time.Now()
	res, err := w.ClaimBatch(b.ctx, []claim.Request{req("a", "evt_m"), req("a", "evt_m")}, []time.Duration{10 * time.Second, 10 * time.Second})
	require.NoError(t, err)
	require.Equal(t, []claim.Outcome{claim.Won, claim.InProgress}, []claim.Outcome{res[0].Outcome, res[1].Outcome})
	require.Less(t, time.Since(start), 5*time.Second)
}

func TestNoWaitWithoutListenerAndCloseEndsWaits(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	_, err := b.ledger.Claim(b.ctx, req("a", "evt_1"))
	require.NoError(t, err)

	idle := claim.NewWaiter(b.ledger, claim.WaiterConfig{ConnConfig: b.pool.Config().ConnConfig})
	got := <-waitFor(idle, req("a", "evt_1"), 20*time.Second)
	require.NoError(t, got.err)
	require.Equal(t, claim.InProgress, got.res.Outcome)
	require.Less(t, got.elapsed, 5*time.Second, "no listener: answered at once")

	w := startWaiter(t, b)
	ch := waitFor(w, req("a", "evt_1"), 20*time.Second)
	b.marked(t, got.res.ID)
	w.Close()
	got = <-ch
	require.NoError(t, got.err)
	require.Equal(t, claim.InProgress, got.res.Outcome)
	require.Less(t, got.elapsed, 10*time.Second, "Close ends the wait")
	require.False(t, w.Listening())
}

// TestOnlyWaitedOnSettlesNotify: a settle notifies only when a claim waits
// on the record, so ordinary completions never take PostgreSQL's commit
// lock for notifications.
func TestOnlyWaitedOnSettlesNotify(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	w := startWaiter(t, b)
	conn, err := pgx.ConnectConfig(b.ctx, b.pool.Config().ConnConfig)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(b.ctx, "LISTEN "+claim.NotifyChannel)
	require.NoError(t, err)

	plain, err := b.ledger.Claim(b.ctx, req("a", "evt_plain"))
	require.NoError(t, err)
	_, err = b.ledger.Complete(b.ctx, "a", plain.ID, plain.Token, "")
	require.NoError(t, err)
	failed, err := b.ledger.Claim(b.ctx, req("a", "evt_failed"))
	require.NoError(t, err)
	_, err = b.ledger.Fail(b.ctx, "a", failed.ID, failed.Token, claim.Retryable, "x")
	require.NoError(t, err)

	waitedOn, err := b.ledger.Claim(b.ctx, req("a", "evt_waited"))
	require.NoError(t, err)
	ch := waitFor(w, req("a", "evt_waited"), 20*time.Second)
	b.marked(t, waitedOn.ID)
	_, err = b.ledger.Complete(b.ctx, "a", waitedOn.ID, waitedOn.Token, "")
	require.NoError(t, err)
	require.Equal(t, claim.Duplicate, (<-ch).res.Outcome)

	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	n, err := conn.WaitForNotification(ctx)
	require.NoError(t, err)
	require.Equal(t, waitedOn.ID, n.Payload, "the first notification is the waited-on record's: the others sent none")
}

// TestWaitSurvivesListenerReconnect: the listener's connection is
// terminated while a claim waits; the listener connects again, and the
// holder's later completion still wakes the claim.
func TestWaitSurvivesListenerReconnect(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	w := startWaiter(t, b)
	h, err := b.ledger.Claim(b.ctx, req("a", "evt_r"))
	require.NoError(t, err)
	ch := waitFor(w, req("a", "evt_r"), 20*time.Second)
	b.marked(t, h.ID)

	listenerPID := func() int32 {
		var pid int32
		err := b.pool.QueryRow(b.ctx, `SELECT COALESCE(max(pid), 0) FROM pg_stat_activity
			WHERE datname = current_database() AND query = 'LISTEN '||$1::text`, claim.NotifyChannel).Scan(&pid)
		require.NoError(t, err)
		return pid
	}
	var old atomic.Int32
	require.Eventually(t, func() bool { old.Store(listenerPID()); return old.Load() != 0 }, 10*time.Second, 5*time.Millisecond)
	_, err = b.pool.Exec(b.ctx, `SELECT pg_terminate_backend($1)`, old.Load())
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		pid := listenerPID()
		return pid != 0 && pid != old.Load() && w.Listening()
	}, 10*time.Second, 5*time.Millisecond, "the listener did not reconnect")

	_, err = b.ledger.Complete(b.ctx, "a", h.ID, h.Token, "after_reconnect")
	require.NoError(t, err)
	got := <-ch
	require.NoError(t, got.err)
	require.Equal(t, claim.Duplicate, got.res.Outcome)
	require.Equal(t, "after_reconnect", got.res.ResultRef)
}
