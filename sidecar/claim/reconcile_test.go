package claim_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// Time in these tests moves by SQL: a call comes due when its
// next_call_at is moved back (dueNow), a call passes its deadline when
// its call_deadline is (pastDeadline). Jitter is pinned to 1 (setup).

// reconcilePolicies configure reconciler crm (3 calls, backoff 30 s
// doubling to 1 h) as the default reconciler of source stripe.
func reconcilePolicies() claim.Policies {
	return claim.Policies{
		BySource:    map[string]claim.Policy{"stripe": {Reconciler: "crm"}},
		Reconcilers: map[string]claim.ReconcilerPolicy{"crm": {MaxCalls: 3}},
	}
}

// unknownClaim wins a claim of event and fails it unknown; it returns
// the claim's id and token.
func (b *bundle) unknownClaim(t *testing.T, tenant, event string) (string, string) {
	t.Helper()
	r, err := b.ledger.Claim(b.ctx, req(tenant, event))
	require.NoError(t, err)
	require.Equal(t, claim.Won, r.Outcome)
	_, err = b.ledger.Fail(b.ctx, tenant, r.ID, r.Token, claim.UnknownOutcome, "timeout")
	require.NoError(t, err)
	return r.ID, r.Token
}

// takeOne discovers and takes calls, and returns the one of claim id.
func (b *bundle) takeOne(t *testing.T, id string) claim.ReconcileCall {
	t.Helper()
	_, err := b.ledger.ReconcileDiscover(b.ctx, 100)
	require.NoError(t, err)
	calls, err := b.ledger.ReconcileTake(b.ctx, 100)
	require.NoError(t, err)
	for _, c := range calls {
		if c.ClaimID == id {
			return c
		}
	}
	t.Fatalf("no call taken for claim %s", id)
	return claim.ReconcileCall{}
}

// noCall requires that a Take returns no call for claim id.
func (b *bundle) noCall(t *testing.T, id string) {
	t.Helper()
	calls, err := b.ledger.ReconcileTake(b.ctx, 100)
	require.NoError(t, err)
	for _, c := range calls {
		require.NotEqual(t, id, c.ClaimID, "a second call was taken")
	}
}

// dueNow makes the next call of claim id due.
func (b *bundle) dueNow(t *testing.T, id string) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, `UPDATE reconciles SET next_call_at = now() - interval '1 second' WHERE claim_id = $1`, id)
	require.NoError(t, err)
}

// pastDeadline moves the call in flight of claim id past its deadline.
func (b *bundle) pastDeadline(t *testing.T, id string) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, `UPDATE reconciles SET call_deadline = now() - interval '1 second' WHERE claim_id = $1`, id)
	require.NoError(t, err)
}

func (b *bundle) reconcileOf(t *testing.T, tenant, id string) claim.ReconcileState {
	t.Helper()
	st, err := b.ledger.ReconcileOf(b.ctx, tenant, id)
	require.NoError(t, err)
	require.NotNil(t, st)
	return *st
}

// snapshot is what a refused answer must leave unchanged: the claim row
// and the reconcile row, as text, and the delivery-log length.
func (b *bundle) snapshot(t *testing.T, id string) [3]string {
	t.Helper()
	var c, r, n string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT (SELECT row_to_json(c)::text FROM claims c WHERE id = $1),
		COALESCE((SELECT row_to_json(r)::text FROM reconciles r WHERE claim_id = $1), ''),
		(SELECT count(*)::text FROM claim_deliveries WHERE claim_id = $1)`, id).Scan(&c, &r, &n))
	return [3]string{c, r, n}
}

func lastDelivery(t *testing.T, b *bundle, tenant, id string) claim.Delivery {
	t.Helper()
	got, err := b.ledger.Get(b.ctx, tenant, id)
	require.NoError(t, err)
	return got.Deliveries[len(got.Deliveries)-1]
}

// Discovery starts one reconcile per unknown episode: a claim is
// discovered once however often discovery runs, a claim without a
// reconciler never, and a claim that goes unknown again after a later
// win (a new episode) starts afresh.
func TestReconcileDiscoverOnePerEpisode(t *testing.T) {
	t.Parallel()
	ps := reconcilePolicies()
	ps.BySource["mail"] = claim.Policy{}
	b := setup(t, ps)
	id, _ := b.unknownClaim(t, "a", "evt_1")
	other, err := b.ledger.Claim(b.ctx, claim.Request{Tenant: "a", Key: claim.Key{Source: "mail", EventID: "m1"}})
	require.NoError(t, err)
	_, err = b.ledger.Fail(b.ctx, "a", other.ID, other.Token, claim.UnknownOutcome, "timeout")
	require.NoError(t, err)

	d, err := b.ledger.ReconcileDiscover(b.ctx, 100)
	require.NoError(t, err)
	require.Equal(t, claim.ReconcileDiscovered{Created: 1}, d)
	for range 3 {
		d, err = b.ledger.ReconcileDiscover(b.ctx, 100)
		require.NoError(t, err)
		require.Equal(t, claim.ReconcileDiscovered{}, d)
	}
	st := b.reconcileOf(t, "a", id)
	require.Equal(t, claim.ReconcileWaiting, st.State)
	require.Equal(t, "crm", st.Reconciler)
	require.Equal(t, 0, st.Calls)
	require.Equal(t, 3, st.MaxCalls)
	require.Equal(t, 1, st.EpisodeAttempt)
	none, err := b.ledger.ReconcileOf(b.ctx, "a", other.ID)
	require.NoError(t, err)
	require.Nil(t, none, "a claim without a reconciler has no reconcile")
	none, err = b.ledger.ReconcileOf(b.ctx, "b", id)
	require.NoError(t, err)
	require.Nil(t, none, "another tenant's reconcile is not shown")

	// Episode 1: two calls, then not_done; the claim wins again and goes
	// unknown again: episode 2 starts with no calls.
	c := b.takeOne(t, id)
	_, err = b.ledger.ReconcileAnswer(b.ctx, "a", id, c.Token, claim.ReconcileStillUnknown, "", "", nil)
	require.NoError(t, err)
	b.dueNow(t, id)
	c = b.takeOne(t, id)
	require.Equal(t, 2, c.Call)
	_, err = b.ledger.ReconcileAnswer(b.ctx, "a", id, c.Token, claim.ReconcileNotDone, "", "", nil)
	require.NoError(t, err)
	d, err = b.ledger.ReconcileDiscover(b.ctx, 100)
	require.NoError(t, err)
	require.Zero(t, d.Created, "a retryable_failed claim is not discovered")
	w, err := b.ledger.Claim(b.ctx, req("a", "evt_1"))
	require.NoError(t, err)
	require.Equal(t, claim.Won, w.Outcome)
	_, err = b.ledger.Fail(b.ctx, "a", id, w.Token, claim.UnknownOutcome, "timeout again")
	require.NoError(t, err)
	d, err = b.ledger.ReconcileDiscover(b.ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 1, d.Created)
	st = b.reconcileOf(t, "a", id)
	require.Equal(t, claim.ReconcileWaiting, st.State)
	require.Equal(t, 0, st.Calls)
	require.Equal(t, 2, st.EpisodeAttempt)
	require.Empty(t, st.Verdict)
	c = b.takeOne(t, id)
	require.Equal(t, 1, c.Call)
	require.Equal(t, 2, c.Attempt)
	require.Equal(t, "timeout again", c.LastError)
}

// A call taken is the one call in flight of its claim: no Take returns
// the claim again until the call is answered, failed or expired.
func TestReconcileOneCallInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t, reconcilePolicies())
	id, _ := b.unknownClaim(t, "a", "evt_1")
	c := b.takeOne(t, id)
	b.dueNow(t, id) // even with next_call_at in the past
	b.noCall(t, id)
	st := b.reconcileOf(t, "a", id)
	require.Equal(t, claim.ReconcileCalling, st.State)
	require.Equal(t, 1, st.Calls)
	require.NotNil(t, st.CallDeadline)
	require.True(t, st.CallDeadline.Equal(c.Deadline))
	// Deadline: call (30 s default) plus answer (0: the call's 30 s).
	require.WithinDuration(t, st.UpdatedAt.Add(60*time.Second), c.Deadline, time.Millisecond)
}

// Two replicas (two ledgers, two pools, one database) running the engine
// at once take every call once: no claim is taken twice.
func TestReconcileTwoReplicasTakeEachCallOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, reconcilePolicies())
	pool2, err := pgxpool.New(b.ctx, b.pool.Config().ConnString())
	require.NoError(t, err)
	t.Cleanup(pool2.Close)
	other, err := claim.New(pool2, claim.Config{Policies: reconcilePolicies()})
	require.NoError(t, err)
	const n = 60
	want := map[string]bool{}
	for i := range n {
		id, _ := b.unknownClaim(t, "a", "evt_"+uuid.NewString()[:8]+string(rune('a'+i%26)))
		want[id] = true
	}
	var mu sync.Mutex
	taken := map[string]int{}
	var wg sync.WaitGroup
	for _, l := range []*claim.Ledger{b.ledger, other, b.ledger, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				_, err := l.ReconcileDiscover(b.ctx, 7)
				if !assertNoError(t, err) {
					return
				}
				calls, err := l.ReconcileTake(b.ctx, 5)
				if !assertNoError(t, err) {
					return
				}
				mu.Lock()
				for _, c := range calls {
					taken[c.ClaimID]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, taken, n)
	for id, k := range taken {
		require.True(t, want[id])
		require.Equal(t, 1, k, "claim %s taken %d times", id, k)
	}
}

// done: the claim becomes completed with the result_ref the reconciler
// found, logged reconciled_done naming the reconciler and the call.
// Repeating the answer answers the same; another verdict is refused.
func TestReconcileDoneCompletesTheClaim(t *testing.T) {
	t.Parallel()
	b := setup(t, reconcilePolicies())
	id, _ := b.unknownClaim(t, "a", "evt_done")
	c := b.takeOne(t, id)
	require.Equal(t, "crm", c.Reconciler)
	require.Equal(t, 1, c.Call)
	require.Equal(t, 3, c.MaxCalls)
	require.Equal(t, "stripe", c.Source)
	require.Equal(t, claim.IdempotencyKey("a", claim.Key{Source: "stripe", EventID: "evt_done"}), c.IdempotencyKey)
	require.False(t, c.Ingested)
	res, err := b.ledger.ReconcileAnswer(b.ctx, "a", id, c.Token, claim.ReconcileDone, "inv_9", "found it", nil)
	require.NoError(t, err)
	require.Equal(t, claim.StateCompleted, res.Record.State)
	require.Equal(t, "inv_9", res.Record.ResultRef)
	require.Equal(t, claim.ReconcileAnswered, res.Reconcile.State)
	require.Equal(t, claim.ReconcileDone, res.Reconcile.Verdict)
	last := lastDelivery(t, b, "a", id)
	require.Equal(t, claim.DeliveryReconciledDone, last.Outcome)
	require.Equal(t, "reconciler:crm", last.Actor)
	require.Contains(t, last.Detail, "reconciler crm")
	require.Contains(t, last.Detail, "call 1 of 3")
	require.Contains(t, last.Detail, "found it")
	dup, err := b.ledger.Claim(b.ctx, req("a", "evt_done"))
	require.NoError(t, err)
	require.Equal(t, claim.Duplicate, dup.Outcome)
	require.Equal(t, "inv_9", dup.ResultRef)

	before := b.snapshot(t, id)
	again, err := b.ledger.ReconcileAnswer(b.ctx, "a", id, c.Token, claim.ReconcileDone, "inv_9", "found it", nil)
	require.NoError(t, err)
	require.Equal(t, res.Record.ResultRef, again.Record.ResultRef)
	require.Equal(t, res.Reconcile.State, again.Reconcile.State)
	_, err = b.ledger.ReconcileAnswer(b.ctx, "a", id, c.Token, claim.ReconcileNotDone, "", "", nil)
	require.Equal(t, apperr.InvalidState, apperr.CodeOf(err))
	require.Equal(t, before, b.snapshot(t, id), "a repeat or a refused answer writes nothing")
}

// not_done: the claim becomes retryable_failed, claimable at once with
// one more attempt, logged reconciled_not_done; the redispatch callback
// runs in the answer's transaction (its failure undoes the answer); a
// claim then wins the record, once.
func TestReconcileNotDoneMakesTheClaimRetryable(t *testing.T) {
	t.Parallel()
	b := setup(t, reconcilePolicies())
	id, _ := b.unknownClaim(t, "a", "evt_nd")
	// Attempt cap reached: not_done still allows one more attempt.
	_, err := b.pool.Exec(b.ctx, `UPDATE claims SET max_attempts = 1 WHERE id = $1`, id)
	require.NoError(t, err)
	c := b.takeOne(t, id)

	before := b.snapshot(t, id)
	boom := errors.New("redispatch failed")
	_, err = b.ledger.ReconcileAnswer(b.ctx, "a", id, c.Token, claim.ReconcileNotDone, "", "", func(context.Context, pgx.Tx, string, string) error {
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, before, b.snapshot(t, id), "a failed redispatch undoes the answer")

	var seenState, seenTenant, seenID string
	res, err := b.ledger.ReconcileAnswer(b.ctx, "a", id, c.Token, claim.ReconcileNotDone, "", "not in the CRM",
		func(ctx context.Context, tx pgx.Tx, tenant, claimID string) error {
			seenTenant, seenID = tenant, claimID
			return tx.QueryRow(ctx, `SELECT state FROM claims WHERE id = $1`, claimID).Scan(&seenState)
		})
	require.NoError(t, err)
	require.Equal(t, "a", seenTenant)
	require.Equal(t, id, seenID)
	require.Equal(t, "retryable_failed", seenState, "the callback runs in the answer's transaction")
	require.Equal(t, claim.StateRetryableFailed, res.Record.State)
	require.Equal(t, 2, res.Record.MaxAttempts)
	require.NotNil(t, res.Record.NextAttemptAt)
	last := lastDelivery(t, b, "a", id)
	require.Equal(t, claim.DeliveryReconciledNotDone, last.Outcome)
	require.Equal(t, "reconciler:crm", last.Actor)

	var wg sync.WaitGroup
	outcomes := make([]claim.Outcome, 8)
	for i := range outcomes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := b.ledger.Claim(b.ctx, req("a", "evt_nd"))
			if assertNoError(t, err) {
				outcomes[i] = r.Outcome
			}
		}()
	}
	wg.Wait()
	won := 0
	for _, o := range outcomes {
		if o == claim.Won {
			won++
		}
	}
	require.Equal(t, 1, won, "%v", outcomes)
}

// still_unknown: asked again after the backoff (base·2^(n-1), jitter 1
// here), at most max_calls calls; then the reconcile gives up, logged
// reconcile_gave_up, and the claim stays unknown.
func TestReconcileStillUnknownBacksOffThenGivesUp(t *testing.T) {
	t.Parallel()
	b := setup(t, reconcilePolicies())
	id, _ := b.unknownClaim(t, "a", "evt_su")
	for call := 1; call <= 3; call++ {
		c := b.takeOne(t, id)
		require.Equal(t, call, c.Call)
		res, err := b.ledger.ReconcileAnswer(b.ctx, "a", id, c.Token, claim.ReconcileStillUnknown, "", "not yet", nil)
		require.NoError(t, err)
		require.Equal(t, claim.StateUnknown, res.Record.State)
		again, err := b.ledger.ReconcileAnswer(b.ctx, "a", id, c.Token, claim.ReconcileStillUnknown, "", "not yet", nil)
		require.NoError(t, err, "the same answer again")
		require.Equal(t, res.Reconcile.State, again.Reconcile.State)
		st := res.Reconcile
		require.Equal(t, claim.ReconcileStillUnknown, st.Verdict)
		require.Equal(t, "not yet", st.Note)
		if call < 3 {
			require.Equal(t, claim.ReconcileWaiting, st.State)
			wait := 30 * time.Second << (call - 1)
			require.WithinDuration(t, st.UpdatedAt.Add(wait), st.NextCallAt, time.Millisecond)
			b.noCall(t, id) // not due yet
			b.dueNow(t, id)
			continue
		}
		require.Equal(t, claim.ReconcileGaveUp, st.State)
	}
	b.dueNow(t, id)
	b.noCall(t, id)
	d, err := b.ledger.ReconcileDiscover(b.ctx, 100)
	require.NoError(t, err)
	require.Zero(t, d.Created, "a reconcile that gave up is not started again in its episode")
	last := lastDelivery(t, b, "a", id)
	require.Equal(t, claim.DeliveryReconcileGaveUp, last.Outcome)
	require.Equal(t, "reconciler:crm", last.Actor)
	require.Contains(t, last.Detail, "3 calls")
	rec, err := b.ledger.Get(b.ctx, "a", id)
	require.NoError(t, err)
	require.Equal(t, claim.StateUnknown, rec.State)
}

// A failed call counts as a call with its error class; ReconcileExpire
// ends a call past its deadline as a timeout and schedules the next.
func TestReconcileFailedAndExpiredCalls(t *testing.T) {
	t.Parallel()
	b := setup(t, reconcilePolicies())
	id, _ := b.unknownClaim(t, "a", "evt_x")
	c := b.takeOne(t, id)
	_, err := b.ledger.ReconcileFail(b.ctx, id, c.Token, "boom")
	require.Equal(t, apperr.Invalid, apperr.CodeOf(err))
	st, err := b.ledger.ReconcileFail(b.ctx, id, c.Token, claim.ReconcileErrStatus5xx)
	require.NoError(t, err)
	require.Equal(t, claim.ReconcileWaiting, st.State)
	require.Equal(t, claim.ReconcileErrStatus5xx, st.LastError)
	require.Equal(t, 1, st.Calls)
	_, err = b.ledger.ReconcileFail(b.ctx, id, c.Token, claim.ReconcileErrStatus5xx)
	require.Equal(t, claim.ReconcileTokenStale, apperr.CodeOf(err))

	b.dueNow(t, id)
	c = b.takeOne(t, id)
	expired, err := b.ledger.ReconcileExpire(b.ctx, 100)
	require.NoError(t, err)
	require.Empty(t, expired, "a call before its deadline is not expired")
	b.pastDeadline(t, id)
	expired, err = b.ledger.ReconcileExpire(b.ctx, 100)
	require.NoError(t, err)
	require.Len(t, expired, 1)
	require.Equal(t, claim.ReconcileWaiting, expired[0].State)
	require.Equal(t, claim.ReconcileErrTimeout, expired[0].LastError)
	require.Equal(t, 2, expired[0].Calls)
	require.WithinDuration(t, expired[0].UpdatedAt.Add(60*time.Second), expired[0].NextCallAt, time.Millisecond)
	_, err = b.ledger.ReconcileAnswer(b.ctx, "a", id, c.Token, claim.ReconcileDone, "", "", nil)
	require.Equal(t, claim.ReconcileTokenStale, apperr.CodeOf(err), "an answer after its call expired")

	// The last call expires too: gave up.
	b.dueNow(t, id)
	c = b.takeOne(t, id)
	b.pastDeadline(t, id)
	before := b.snapshot(t, id)
	_, err = b.ledger.ReconcileAnswer(b.ctx, "a", id, c.Token, claim.ReconcileDone, "", "", nil)
	require.Equal(t, claim.ReconcileTokenStale, apperr.CodeOf(err), "an answer after its deadline")
	require.Equal(t, before, b.snapshot(t, id))
	expired, err = b.ledger.ReconcileExpire(b.ctx, 100)
	require.NoError(t, err)
	require.Len(t, expired, 1)
	require.Equal(t, claim.ReconcileGaveUp, expired[0].State)
	require.Equal(t, claim.DeliveryReconcileGaveUp, lastDelivery(t, b, "a", id).Outcome)
}

// Fenced: an answer with a token that is not the call in flight (made
// up, or an earlier call's) is refused and writes nothing; so is one for
// another tenant's claim.
func TestReconcileStaleTokenWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, reconcilePolicies())
	id, _ := b.unknownClaim(t, "a", "evt_f")
	first := b.takeOne(t, id)
	_, err := b.ledger.ReconcileFail(b.ctx, id, first.Token, claim.ReconcileErrUnreachable)
	require.NoError(t, err)
	b.dueNow(t, id)
	b.takeOne(t, id)
	before := b.snapshot(t, id)
	for _, tok := range []string{uuid.NewString(), first.Token} {
		_, err = b.ledger.ReconcileAnswer(b.ctx, "a", id, tok, claim.ReconcileDone, "x", "", nil)
		e := apperr.As(err)
		require.NotNil(t, e)
		require.Equal(t, claim.ReconcileTokenStale, e.Code)
		require.NotContains(t, e.Message, tok)
	}
	_, err = b.ledger.ReconcileAnswer(b.ctx, "b", id, first.Token, claim.ReconcileDone, "x", "", nil)
	require.Equal(t, apperr.NotFound, apperr.CodeOf(err))
	_, err = b.ledger.ReconcileAnswer(b.ctx, "a", id, "not-a-token", claim.ReconcileDone, "", "", nil)
	require.Equal(t, "reconcile_token", apperr.As(err).Field)
	_, err = b.ledger.ReconcileAnswer(b.ctx, "a", id, first.Token, "maybe", "", "", nil)
	require.Equal(t, "verdict", apperr.As(err).Field)
	require.NotContains(t, err.Error(), "maybe")
	require.Equal(t, before, b.snapshot(t, id))
}

// Operator first: a Resolve before the answer wins; the answer writes
// nothing to the claim, is refused as settled, and the reconcile is
// dropped.
func TestReconcileOperatorResolveFirst(t *testing.T) {
	t.Parallel()
	b := setup(t, reconcilePolicies())
	id, _ := b.unknownClaim(t, "a", "evt_op")
	c := b.takeOne(t, id)
	_, err := b.ledger.Resolve(b.ctx, "a", id, claim.ResolveCompleted, "by_hand", "checked")
	require.NoError(t, err)
	_, err = b.ledger.ReconcileAnswer(b.ctx, "a", id, c.Token, claim.ReconcileNotDone, "", "", nil)
	require.Equal(t, apperr.InvalidState, apperr.CodeOf(err))
	rec, err := b.ledger.Get(b.ctx, "a", id)
	require.NoError(t, err)
	require.Equal(t, claim.StateCompleted, rec.State)
	require.Equal(t, "by_hand", rec.ResultRef)
	require.Equal(t, "resolved_completed", rec.Deliveries[len(rec.Deliveries)-1].Outcome)
	require.Equal(t, claim.ReconcileDropped, b.reconcileOf(t, "a", id).State)
}

// The holder's late Complete during the call wins: the claim is completed
// with the holder's result_ref and the answer writes nothing.
func TestReconcileLateCompleteDuringCall(t *testing.T) {
	t.Parallel()
	b := setup(t, reconcilePolicies())
	id, token := b.unknownClaim(t, "a", "evt_lc")
	c := b.takeOne(t, id)
	rec, err := b.ledger.Complete(b.ctx, "a", id, token, "holder_ref")
	require.NoError(t, err)
	require.Equal(t, claim.StateCompleted, rec.State)
	_, err = b.ledger.ReconcileAnswer(b.ctx, "a", id, c.Token, claim.ReconcileDone, "reconciler_ref", "", nil)
	require.Equal(t, apperr.InvalidState, apperr.CodeOf(err))
	rec, err = b.ledger.Get(b.ctx, "a", id)
	require.NoError(t, err)
	require.Equal(t, "holder_ref", rec.ResultRef)
	require.Equal(t, "completed", rec.Deliveries[len(rec.Deliveries)-1].Outcome)
	require.Equal(t, claim.ReconcileDropped, b.reconcileOf(t, "a", id).State)
}

// After a not_done answer the holder's late Complete (its token
// unchanged: nobody claimed since) still lands, alone and in a batch;
// once a claim has won the record again it is lease_lost.
func TestReconcileLateCompleteAfterNotDone(t *testing.T) {
	t.Parallel()
	b := setup(t, reconcilePolicies())
	notDone := func(event string) (string, string) {
		id, token := b.unknownClaim(t, "a", event)
		c := b.takeOne(t, id)
		_, err := b.ledger.ReconcileAnswer(b.ctx, "a", id, c.Token, claim.ReconcileNotDone, "", "", nil)
		require.NoError(t, err)
		return id, token
	}

	id, token := notDone("evt_alone")
	rec, err := b.ledger.Complete(b.ctx, "a", id, token, "holder_ref")
	require.NoError(t, err)
	require.Equal(t, claim.StateCompleted, rec.State)
	require.Equal(t, "holder_ref", rec.ResultRef)
	rec, err = b.ledger.Complete(b.ctx, "a", id, token, "holder_ref")
	require.NoError(t, err, "the same Complete again")
	require.Equal(t, claim.StateCompleted, rec.State)

	id1, tok1 := notDone("evt_batch1")
	id2, tok2 := notDone("evt_batch2")
	out, err := b.ledger.CompleteBatch(b.ctx, "a", []claim.Completion{{ID: id1, Token: tok1, ResultRef: "r1"},
		{ID: id2, Token: tok2, ResultRef: "r2"}})
	require.NoError(t, err)
	for i, s := range out {
		require.NoError(t, s.Err)
		require.Equal(t, claim.StateCompleted, s.Record.State, "item %d", i)
	}

	id, token = notDone("evt_reclaimed")
	w, err := b.ledger.Claim(b.ctx, req("a", "evt_reclaimed"))
	require.NoError(t, err)
	require.Equal(t, claim.Won, w.Outcome)
	_, err = b.ledger.Complete(b.ctx, "a", id, token, "holder_ref")
	require.Equal(t, apperr.LeaseLost, apperr.CodeOf(err))
	out, err = b.ledger.CompleteBatch(b.ctx, "a", []claim.Completion{{ID: id, Token: token}, {ID: id1, Token: tok1, ResultRef: "r1"}})
	require.NoError(t, err)
	require.Equal(t, apperr.LeaseLost, apperr.CodeOf(out[0].Err))
	require.NoError(t, out[1].Err)

	// A Fail of the former holder is not taken either: only Complete.
	id, token = notDone("evt_fail")
	_, err = b.ledger.Fail(b.ctx, "a", id, token, claim.Retryable, "x")
	require.Equal(t, apperr.LeaseLost, apperr.CodeOf(err))
}

// A Complete with the token of a record its holder failed retryable (no
// reconciler involved) is still lease_lost: only a reconciler's not_done
// lets a late Complete land on retryable_failed.
func TestReconcileRetryableFailedByHolderStaysFenced(t *testing.T) {
	t.Parallel()
	b := setup(t, reconcilePolicies())
	r, err := b.ledger.Claim(b.ctx, req("a", "evt_r"))
	require.NoError(t, err)
	_, err = b.ledger.Fail(b.ctx, "a", r.ID, r.Token, claim.Retryable, "503")
	require.NoError(t, err)
	_, err = b.ledger.Complete(b.ctx, "a", r.ID, r.Token, "x")
	require.Equal(t, apperr.LeaseLost, apperr.CodeOf(err))
}

// A claim whose own reconciler is no longer configured (the sources
// file reloaded without it) is skipped and counted, not failed;
// configured again, it is discovered.
func TestReconcileUnconfiguredReconcilerSkipped(t *testing.T) {
	t.Parallel()
	withERP := reconcilePolicies()
	withERP.Reconcilers["erp"] = claim.ReconcilerPolicy{MaxCalls: 1}
	b := setup(t, withERP)
	r := req("a", "evt_gone")
	r.Reconciler = "erp"
	w, err := b.ledger.Claim(b.ctx, r)
	require.NoError(t, err)
	_, err = b.ledger.Fail(b.ctx, "a", w.ID, w.Token, claim.UnknownOutcome, "timeout")
	require.NoError(t, err)
	require.NoError(t, b.ledger.SetPolicies(reconcilePolicies()))
	d, err := b.ledger.ReconcileDiscover(b.ctx, 100)
	require.NoError(t, err)
	require.Equal(t, claim.ReconcileDiscovered{Skipped: 1}, d)
	none, err := b.ledger.ReconcileOf(b.ctx, "a", w.ID)
	require.NoError(t, err)
	require.Nil(t, none)

	require.NoError(t, b.ledger.SetPolicies(withERP))
	c := b.takeOne(t, w.ID)
	require.Equal(t, "erp", c.Reconciler)
	require.Equal(t, 1, c.MaxCalls)
}

// A claim may name its own reconciler: it must be configured (Invalid
// naming reconciler, the name not repeated), a win stores it (alone and
// in a batch), later outcomes other than a win leave it, a win without
// one clears it (the source's default then applies), and the reconcile
// of the claim uses it.
func TestClaimNamesItsReconciler(t *testing.T) {
	t.Parallel()
	ps := reconcilePolicies()
	ps.Reconcilers["erp"] = claim.ReconcilerPolicy{}
	b := setup(t, ps)
	bad := req("a", "evt_bad")
	bad.Reconciler = "https://evil.example/hook"
	_, err := b.ledger.Claim(b.ctx, bad)
	e := apperr.As(err)
	require.NotNil(t, e)
	require.Equal(t, apperr.Invalid, e.Code)
	require.Equal(t, "reconciler", e.Field)
	require.NotContains(t, e.Error(), "evil")

	r := req("a", "evt_own")
	r.Reconciler = "erp"
	w, err := b.ledger.Claim(b.ctx, r)
	require.NoError(t, err)
	require.Equal(t, "erp", w.Record.Reconciler)
	other := req("a", "evt_own")
	other.Reconciler = "crm"
	ip, err := b.ledger.Claim(b.ctx, other)
	require.NoError(t, err)
	require.Equal(t, claim.InProgress, ip.Outcome)
	require.Equal(t, "erp", ip.Record.Reconciler, "a claim that does not win leaves the record's reconciler")
	_, err = b.ledger.Fail(b.ctx, "a", w.ID, w.Token, claim.UnknownOutcome, "timeout")
	require.NoError(t, err)
	c := b.takeOne(t, w.ID)
	require.Equal(t, "erp", c.Reconciler, "the claim's own, not the source's crm")
	_, err = b.ledger.ReconcileAnswer(b.ctx, "a", w.ID, c.Token, claim.ReconcileNotDone, "", "", nil)
	require.NoError(t, err)
	again, err := b.ledger.Claim(b.ctx, req("a", "evt_own"))
	require.NoError(t, err)
	require.Equal(t, claim.Won, again.Outcome)
	require.Empty(t, again.Record.Reconciler, "a win without one clears it")

	b1, b2 := req("a", "evt_b1"), req("a", "evt_b2")
	b1.Reconciler = "erp"
	res, err := b.ledger.ClaimBatch(b.ctx, []claim.Request{b1, b2})
	require.NoError(t, err)
	require.Equal(t, "erp", res[0].Record.Reconciler)
	require.Empty(t, res[1].Record.Reconciler)
}

// The sources' reconciler settings are checked: a source's reconciler
// must be configured, and a reconciler's limits in range.
func TestReconcilerPoliciesValidated(t *testing.T) {
	t.Parallel()
	ps := reconcilePolicies()
	ps.BySource["mail"] = claim.Policy{Reconciler: "nope"}
	require.ErrorContains(t, ps.WithDefaults().Validate(), "reconciler must name a configured reconciler")
	ps = reconcilePolicies()
	ps.Reconcilers["crm"] = claim.ReconcilerPolicy{MaxCalls: 101}
	require.ErrorContains(t, ps.WithDefaults().Validate(), "max_calls")
	p := claim.ReconcilerPolicy{}.WithDefaults()
	require.Equal(t, claim.ReconcilerPolicy{MaxCalls: 6, BackoffBase: 30 * time.Second, BackoffCap: time.Hour,
		Call: 30 * time.Second, Answer: 30 * time.Second}, p)
}

// Concurrent answers to one call (two replicas relaying, or a repeat
// racing the first) apply one verdict: the same verdict is answered as
// applied, another is refused, and the delivery log has one entry.
func TestReconcileConcurrentAnswersApplyOneVerdict(t *testing.T) {
	t.Parallel()
	b := setup(t, reconcilePolicies())
	id, _ := b.unknownClaim(t, "a", "evt_cc")
	c := b.takeOne(t, id)
	verdicts := []claim.ReconcileVerdict{claim.ReconcileDone, claim.ReconcileNotDone, claim.ReconcileDone,
		claim.ReconcileNotDone, claim.ReconcileDone, claim.ReconcileNotDone}
	errs := make([]error, len(verdicts))
	var wg sync.WaitGroup
	for i, v := range verdicts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = b.ledger.ReconcileAnswer(b.ctx, "a", id, c.Token, v, "", "", nil)
		}()
	}
	wg.Wait()
	applied := b.reconcileOf(t, "a", id).Verdict
	for i, err := range errs {
		if verdicts[i] == applied {
			require.NoError(t, err)
		} else {
			require.Equal(t, apperr.InvalidState, apperr.CodeOf(err))
		}
	}
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM claim_deliveries WHERE claim_id = $1
		AND outcome IN ('reconciled_done', 'reconciled_not_done')`, id).Scan(&n))
	require.Equal(t, 1, n)
}

// Every way into unknown starts a reconcile: a Fail unknown (above), a
// lease expiry under review (the sweep, or a claim finding it), an
// operator's Release.
func TestReconcileEveryWayIntoUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t, reconcilePolicies())
	swept, err := b.ledger.Claim(b.ctx, req("a", "evt_sweep"))
	require.NoError(t, err)
	b.travel(t, swept.ID, time.Hour)
	n, err := b.ledger.SweepExpiredLeases(b.ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	found, err := b.ledger.Claim(b.ctx, req("a", "evt_found"))
	require.NoError(t, err)
	b.travel(t, found.ID, time.Hour)
	again, err := b.ledger.Claim(b.ctx, req("a", "evt_found"))
	require.NoError(t, err)
	require.Equal(t, claim.Unknown, again.Outcome)
	released, err := b.ledger.Claim(b.ctx, req("a", "evt_released"))
	require.NoError(t, err)
	_, err = b.ledger.Release(b.ctx, "a", released.ID, "stuck", "op_1")
	require.NoError(t, err)
	d, err := b.ledger.ReconcileDiscover(b.ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 3, d.Created)
	for _, id := range []string{swept.ID, found.ID, released.ID} {
		require.Equal(t, claim.ReconcileWaiting, b.reconcileOf(t, "a", id).State)
	}
}

// A call whose claim was settled meanwhile (the holder's Complete) is
// dropped when it expires or fails, not counted; a due call of such a
// claim is dropped by Take.
func TestReconcileSettledMeanwhileIsDropped(t *testing.T) {
	t.Parallel()
	b := setup(t, reconcilePolicies())
	id, token := b.unknownClaim(t, "a", "evt_exp")
	b.takeOne(t, id)
	_, err := b.ledger.Complete(b.ctx, "a", id, token, "holder_ref")
	require.NoError(t, err)
	b.pastDeadline(t, id)
	expired, err := b.ledger.ReconcileExpire(b.ctx, 100)
	require.NoError(t, err)
	require.Len(t, expired, 1)
	require.Equal(t, claim.ReconcileDropped, expired[0].State)

	id, token = b.unknownClaim(t, "a", "evt_fail")
	c := b.takeOne(t, id)
	_, err = b.ledger.Complete(b.ctx, "a", id, token, "holder_ref")
	require.NoError(t, err)
	st, err := b.ledger.ReconcileFail(b.ctx, id, c.Token, claim.ReconcileErrUnreachable)
	require.NoError(t, err)
	require.Equal(t, claim.ReconcileDropped, st.State)

	id, token = b.unknownClaim(t, "a", "evt_due")
	_, err = b.ledger.ReconcileDiscover(b.ctx, 100)
	require.NoError(t, err)
	_, err = b.ledger.Complete(b.ctx, "a", id, token, "holder_ref")
	require.NoError(t, err)
	b.noCall(t, id)
	require.Equal(t, claim.ReconcileDropped, b.reconcileOf(t, "a", id).State)
	rec, err := b.ledger.Get(b.ctx, "a", id)
	require.NoError(t, err)
	require.Equal(t, "holder_ref", rec.ResultRef)
}

// The holder's late Complete racing the reconciler's done answer: for
// every claim exactly one of them settles it (one completed or
// reconciled_done entry), the other is answered (the Complete as a
// repeat of the completed record, the answer as settled already), and
// nothing fails otherwise.
func TestReconcileAnswerRacesLateComplete(t *testing.T) {
	t.Parallel()
	b := setup(t, reconcilePolicies())
	type race struct{ id, token, call string }
	var races []race
	for i := range 20 {
		id, token := b.unknownClaim(t, "a", "evt_race_"+string(rune('a'+i)))
		races = append(races, race{id: id, token: token})
	}
	_, err := b.ledger.ReconcileDiscover(b.ctx, 100)
	require.NoError(t, err)
	calls, err := b.ledger.ReconcileTake(b.ctx, 100)
	require.NoError(t, err)
	require.Len(t, calls, len(races))
	byID := map[string]string{}
	for _, c := range calls {
		byID[c.ClaimID] = c.Token
	}
	var wg sync.WaitGroup
	for i := range races {
		races[i].call = byID[races[i].id]
		r := races[i]
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, err := b.ledger.ReconcileAnswer(b.ctx, "a", r.id, r.call, claim.ReconcileDone, "reconciler_ref", "", nil)
			if err != nil && apperr.CodeOf(err) != apperr.InvalidState {
				t.Errorf("answer: %v", err)
			}
		}()
		go func() {
			defer wg.Done()
			rec, err := b.ledger.Complete(b.ctx, "a", r.id, r.token, "holder_ref")
			if assertNoError(t, err) && rec.State != claim.StateCompleted {
				t.Errorf("Complete left %s", rec.State)
			}
		}()
	}
	wg.Wait()
	for _, r := range races {
		var n int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM claim_deliveries WHERE claim_id = $1
			AND outcome IN ('completed', 'reconciled_done')`, r.id).Scan(&n))
		require.Equal(t, 1, n, "claim %s settled %d times", r.id, n)
	}
}

// A copy after a reconciler's verdict is explained reconciled, the note
// naming the verdict and the reconciler (not operator_replay "by
// operator reconciler:crm"); an operator's later act explains the next
// copy as operator_replay: the latest act decides.
func TestReconcileDuplicateCause(t *testing.T) {
	t.Parallel()
	b := setup(t, reconcilePolicies())
	copyOf := func(event string) claim.Delivery {
		t.Helper()
		dup, err := b.ledger.Claim(b.ctx, req("a", event))
		require.NoError(t, err)
		require.Equal(t, claim.Duplicate, dup.Outcome)
		require.Equal(t, claim.CauseReconciled, dup.Cause)
		return lastDelivery(t, b, "a", dup.ID)
	}

	// done: the claim completed by the reconciler, then a copy.
	id, _ := b.unknownClaim(t, "a", "evt_done")
	c := b.takeOne(t, id)
	_, err := b.ledger.ReconcileAnswer(b.ctx, "a", id, c.Token, claim.ReconcileDone, "inv_1", "", nil)
	require.NoError(t, err)
	d := copyOf("evt_done")
	require.Equal(t, claim.CauseReconciled, d.Cause)
	require.Equal(t, "after reconciled_done by reconciler crm", d.CauseNote)

	// not_done: a claim wins the record again and completes it, then a copy.
	id, _ = b.unknownClaim(t, "a", "evt_not_done")
	c = b.takeOne(t, id)
	_, err = b.ledger.ReconcileAnswer(b.ctx, "a", id, c.Token, claim.ReconcileNotDone, "", "", nil)
	require.NoError(t, err)
	won, err := b.ledger.Claim(b.ctx, req("a", "evt_not_done"))
	require.NoError(t, err)
	require.Equal(t, claim.Won, won.Outcome)
	_, err = b.ledger.Complete(b.ctx, "a", id, won.Token, "inv_2")
	require.NoError(t, err)
	d = copyOf("evt_not_done")
	require.Equal(t, "after reconciled_not_done by reconciler crm", d.CauseNote)

	// An operator acts after the reconciler: the next copy is the operator's.
	id, _ = b.unknownClaim(t, "a", "evt_operator")
	c = b.takeOne(t, id)
	_, err = b.ledger.ReconcileAnswer(b.ctx, "a", id, c.Token, claim.ReconcileNotDone, "", "", nil)
	require.NoError(t, err)
	won, err = b.ledger.Claim(b.ctx, req("a", "evt_operator"))
	require.NoError(t, err)
	require.Equal(t, claim.Won, won.Outcome)
	_, err = b.ledger.Fail(b.ctx, "a", id, won.Token, claim.UnknownOutcome, "timeout again")
	require.NoError(t, err)
	_, err = b.ledger.ResolveAs(b.ctx, "a", id, claim.ResolveCompleted, "inv_3", "done by hand", "ick_ops")
	require.NoError(t, err)
	dup, err := b.ledger.Claim(b.ctx, req("a", "evt_operator"))
	require.NoError(t, err)
	require.Equal(t, claim.Duplicate, dup.Outcome)
	require.Equal(t, claim.CauseOperatorReplay, dup.Cause)
	require.Contains(t, lastDelivery(t, b, "a", id).CauseNote, "by operator ick_ops")
}
