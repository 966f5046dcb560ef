package inbox_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// Tests of the dispatch attempt's reservation: a dispatch job run again
// while an earlier run's POST may still be in flight (River rescued it)
// never posts beside it, and an attempt whose worker is gone is never
// lost. Real PostgreSQL, real River, a real HTTP target.

// rescue does to the event's running dispatch job what River's rescuer
// does to a job running past sources.RescueStuckAfter (JobRescueMany: an error
// appended, the job made retryable), but due at once and available, so
// that a dispatcher fetches it again now. River's own rescuer runs every
// 30 s on the leader and leaves a job alone until its worker Timeout has
// passed; the test stands in for it instead of waiting.
func (b *retryBundle) rescue(t *testing.T, id string) {
	t.Helper()
	tag, err := b.pool.Exec(b.ctx, `UPDATE river_job SET state = 'available', scheduled_at = now(),
		errors = array_append(errors, jsonb_build_object('at', now(), 'attempt', attempt, 'error', 'Stuck job rescued by JobRescuer'))
		WHERE args->>'claim_id' = $1 AND state = 'running'`, id)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected(), "the job was running")
}

// jobState is the state of the event's one dispatch job.
func (b *retryBundle) jobState(t *testing.T, id string) string {
	t.Helper()
	var s string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT state::text FROM river_job WHERE args->>'claim_id' = $1`, id).Scan(&s))
	return s
}

// waitJobState waits until the event's dispatch job is in state want
// (polling the database: River gives no signal for it).
func (b *retryBundle) waitJobState(t *testing.T, id, want string) {
	t.Helper()
	deadline := time.Now().Add(retryWait)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for b.jobState(t, id) != want {
		if time.Now().After(deadline) {
			t.Fatalf("job of %s not %s within %s (it is %s)", id, want, retryWait, b.jobState(t, id))
		}
		<-tick.C
	}
}

// next waits for the next dispatch result and returns it.
func (b *retryBundle) next(t *testing.T) string {
	t.Helper()
	select {
	case r := <-b.results:
		return r
	case <-time.After(retryWait):
		t.Fatalf("no dispatch result within %s (%d target hits)", retryWait, b.hits.Load())
	}
	return ""
}

// TestDispatchRescuedWhileInFlightPostsOnce: a target that does not claim
// (require_claim: false) holds the first POST; meanwhile the job is
// rescued and a second replica runs it. The second run finds the attempt
// reserved with a live lease and snoozes without posting; the held POST
// then answers 200 and the event is dispatched once. The snoozed run,
// made due, finds it dispatched and completes the job. Exactly one POST.
func TestDispatchRescuedWhileInFlightPostsOnce(t *testing.T) {
	t.Parallel()
	b, arrived, releaseHeld := heldFirstPost(t)
	id := b.receive(t, "evt-held")

	select {
	case <-arrived:
	case <-time.After(retryWait):
		t.Fatal("the first POST never arrived")
	}
	v := b.row(t, id)
	require.Equal(t, "pending", v.state)
	require.Equal(t, 1, v.attempts, "the attempt was reserved (counted) before its POST")
	var held bool
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT dispatch_holder IS NOT NULL AND dispatch_lease_until > now() + interval '60 seconds'
		FROM inbox_events WHERE claim_id = $1`, id).Scan(&held))
	require.True(t, held, "the lease covers the 60 s timeout and its grace")

	b.rescue(t, id)
	require.Equal(t, "in_flight", b.next(t), "the rescued run sees the attempt in flight")
	b.waitJobState(t, id, "scheduled") // and snoozes until its lease ends
	require.EqualValues(t, 1, b.hits.Load(), "without posting")

	releaseHeld()
	require.Equal(t, "dispatched", b.next(t))
	// The snoozed run, due now, finds the event dispatched.
	_, err := b.pool.Exec(b.ctx, `UPDATE river_job SET state = 'available', scheduled_at = now()
		WHERE args->>'claim_id' = $1 AND state = 'scheduled'`, id)
	require.NoError(t, err)
	b.waitJobState(t, id, "completed")

	require.EqualValues(t, 1, b.hits.Load(), "exactly one POST")
	v = b.row(t, id)
	require.Equal(t, "dispatched", v.state)
	require.Equal(t, 1, v.attempts)
	require.Equal(t, []logEntry{{"dispatched", 1, "HTTP 200"}}, b.dispatchLog(t, id))
	select {
	case r := <-b.results:
		t.Fatalf("unexpected dispatch result %q", r)
	default:
	}
}

// reserveAsDeadWorker sets the event's dispatch as a worker leaves it
// that reserved attempt 1 and was gone before recording an answer (killed
// before or during its POST), with its lease ending after lease (negative:
// already ended).
func (b *retryBundle) reserveAsDeadWorker(t *testing.T, id string, lease time.Duration) {
	t.Helper()
	tag, err := b.pool.Exec(b.ctx, `UPDATE inbox_events SET dispatch_attempts = dispatch_attempts + 1,
		dispatch_holder = gen_random_uuid(), dispatch_lease_until = now() + $2 * interval '1 millisecond'
		WHERE claim_id = $1 AND dispatch_state = 'pending' AND dispatch_holder IS NULL`, id, lease.Milliseconds())
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
}

// TestDispatchAttemptOfGoneWorker: the worker that reserved attempt 1 is
// gone (crashed after reserving; whether before or after sending, nobody
// knows). Once its lease has ended, the attempt's outcome is unknown: it
// is logged as such and, for a target that does not claim, posted again
// as attempt 2 (the event is never lost); with require_claim and the
// event already claimed, it is dispatched without a POST; at the attempt
// cap, dead-lettered with the reason.
func TestDispatchAttemptOfGoneWorker(t *testing.T) {
	t.Parallel()
	unknown := "attempt 1's outcome is unknown: its dispatcher stopped before recording an answer " +
		"(a crash, or a stall past its lease); the target may have received it"
	ok := func(*retryBundle, int, *http.Request) (int, string) { return http.StatusOK, `{}` }

	for _, tc := range []struct {
		name  string
		lease time.Duration
	}{{"lease ended", -time.Second}, {"lease still live", time.Second}} {
		t.Run("posted again, "+tc.name, func(t *testing.T) {
			t.Parallel()
			b := newDispatchBundle(t, "/webhook/plain", ", require_claim: false", ok)
			b.inbox = b.startInbox(t, false) // ingest only: nothing runs the job yet
			id := b.receive(t, "evt-gone")
			b.reserveAsDeadWorker(t, id, tc.lease)
			b.startInbox(t, true)
			if tc.lease > 0 {
				require.Equal(t, "in_flight", b.next(t), "a live lease is waited for")
			}
			require.Equal(t, "retry", b.next(t), "attempt 1 counts as failed")
			require.Equal(t, "dispatched", b.next(t))
			require.EqualValues(t, 1, b.hits.Load(), "one POST: attempt 2")
			v := b.row(t, id)
			require.Equal(t, "dispatched", v.state)
			require.Equal(t, 2, v.attempts)
			require.Equal(t, []logEntry{{"dispatch_failed", 1, unknown}, {"dispatched", 2, "HTTP 200"}}, b.dispatchLog(t, id))
		})
	}

	t.Run("claimed by the workflow", func(t *testing.T) {
		t.Parallel()
		b := newDispatchBundle(t, "/webhook/claims", "", ok)
		b.inbox = b.startInbox(t, false)
		id := b.receive(t, "evt-gone-claimed")
		b.reserveAsDeadWorker(t, id, -time.Second)
		// The gone attempt did reach the workflow, which claimed the event.
		res, err := b.ledger.Claim(b.ctx, claim.Request{Tenant: "acme", Key: claim.Key{Source: b.src.Scope, EventID: "evt-gone-claimed"}})
		require.NoError(t, err)
		require.Equal(t, claim.Won, res.Outcome)
		b.startInbox(t, true)
		require.Equal(t, "dispatched", b.next(t))
		require.Zero(t, b.hits.Load(), "no second POST")
		v := b.row(t, id)
		require.Equal(t, "dispatched", v.state)
		require.Equal(t, 1, v.attempts)
		require.Equal(t, []logEntry{{"dispatched", 1, "attempt's outcome unknown, but the workflow has claimed the event: it was received"}},
			b.dispatchLog(t, id))
	})

	t.Run("attempt cap", func(t *testing.T) {
		t.Parallel()
		b := newDispatchBundle(t, "/webhook/plain", ", require_claim: false, max_attempts: 1", ok)
		b.inbox = b.startInbox(t, false)
		id := b.receive(t, "evt-gone-cap")
		b.reserveAsDeadWorker(t, id, -time.Second)
		b.startInbox(t, true)
		require.Equal(t, "dead_lettered", b.next(t))
		require.Zero(t, b.hits.Load())
		v := b.row(t, id)
		require.Equal(t, "dead_lettered", v.state)
		require.Equal(t, 1, v.attempts)
		require.Nil(t, v.lastStatus)
		require.Equal(t, unknown+"; attempt cap 1 reached", v.lastError)
		require.Equal(t, []logEntry{{"dispatch_dead_lettered", 1, unknown + "; attempt cap 1 reached"}}, b.dispatchLog(t, id))
		var holder *string
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT dispatch_holder::text FROM inbox_events WHERE claim_id = $1`, id).Scan(&holder))
		require.Nil(t, holder, "a dead letter holds no reservation: a replay can reserve again")
	})
}

// TestDispatchLeaseOutlastsThePost: the reservation's lease (forward
// timeout plus sources.DispatchLeaseGrace) and the job's Timeout fit below River's
// sources.RescueStuckAfter for the longest forward timeout accepted, and a source
// cannot set a longer one.
func TestDispatchLeaseOutlastsThePost(t *testing.T) {
	t.Parallel()
	require.Less(t, sources.MaxForwardTimeout+sources.DispatchLeaseGrace, sources.RescueStuckAfter)
	_, err := sources.Parse([]byte(fmt.Sprintf("sources:\n  gh: {tenant: acme, provider: github, secrets: [s], forward: {url: \"http://n8n/x\", timeout_seconds: %d}}\n",
		int((sources.MaxForwardTimeout+time.Second)/time.Second))), envOf(nil))
	require.ErrorContains(t, err, fmt.Sprintf("forward.timeout_seconds must be at most %d", int(sources.MaxForwardTimeout/time.Second)))
}

// TestDispatchAnswerAfterLeaseIsFenced: a POST held past its lease (a
// process stalled mid-attempt) loses the event to the next run, which
// logs attempt 1 as of unknown outcome and posts attempt 2. When the
// stalled attempt's 200 finally comes back, its answer is not recorded
// over attempt 2's: the record and the log keep attempt 2's outcome.
func TestDispatchAnswerAfterLeaseIsFenced(t *testing.T) {
	t.Parallel()
	b, arrived, releaseHeld := heldFirstPost(t)
	id := b.receive(t, "evt-stalled")
	select {
	case <-arrived:
	case <-time.After(retryWait):
		t.Fatal("the first POST never arrived")
	}
	// The stall outlasts the lease: as if its 65 s had passed.
	_, err := b.pool.Exec(b.ctx, `UPDATE inbox_events SET dispatch_lease_until = now() - interval '1 second' WHERE claim_id = $1`, id)
	require.NoError(t, err)
	b.rescue(t, id)
	require.Equal(t, "retry", b.next(t), "attempt 1's outcome is unknown")
	require.Equal(t, "dispatched", b.next(t), "attempt 2 delivered")
	releaseHeld()
	require.Equal(t, "reservation_lost", b.next(t), "attempt 1's late 200 is not recorded")

	require.EqualValues(t, 2, b.hits.Load())
	v := b.row(t, id)
	require.Equal(t, "dispatched", v.state)
	require.Equal(t, 2, v.attempts)
	require.Equal(t, []logEntry{
		{"dispatch_failed", 1, "attempt 1's outcome is unknown: its dispatcher stopped before recording an answer " +
			"(a crash, or a stall past its lease); the target may have received it"},
		{"dispatched", 2, "HTTP 200"},
	}, b.dispatchLog(t, id))
}

// heldFirstPost starts two inbox replicas dispatching to a target that
// does not claim (require_claim: false) and holds the first POST until
// releaseHeld is called; arrived is closed when that POST reaches it.
// releaseHeld is also registered as a cleanup that runs before the inboxes
// stop and the target closes, so a failed test never leaves the POST held.
func heldFirstPost(t *testing.T) (b *retryBundle, arrived chan struct{}, releaseHeld func()) {
	t.Helper()
	arrived, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	releaseHeld = func() { releaseOnce.Do(func() { close(release) }) }
	b = newDispatchBundle(t, "/webhook/plain", ", require_claim: false, timeout_seconds: 60",
		func(_ *retryBundle, n int, _ *http.Request) (int, string) {
			if n == 1 {
				close(arrived)
				<-release
			}
			return http.StatusOK, `{}`
		})
	b.inbox = b.startInbox(t, true)
	b.startInbox(t, true) // a second replica
	t.Cleanup(releaseHeld)
	return b, arrived, releaseHeld
}
