package claim_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

type bundle struct {
	pool   *pgxpool.Pool
	ledger *claim.Ledger
	ctx    context.Context
}

func setup(t *testing.T, ps claim.Policies) *bundle {
	t.Helper()
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 40 })
	l, err := claim.New(pool, claim.Config{Policies: ps, Jitter: func() float64 { return 1 }})
	require.NoError(t, err)
	return &bundle{pool: pool, ledger: l, ctx: context.Background()}
}

func req(tenant, event string) claim.Request {
	return claim.Request{Tenant: tenant, Key: claim.Key{Source: "stripe", EventID: event}}
}

// travel moves every time of a record back by d, as if d had passed.
func (b *bundle) travel(t *testing.T, id string, d time.Duration) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, `UPDATE claims SET lease_until = lease_until - make_interval(secs => $2),
		next_attempt_at = next_attempt_at - make_interval(secs => $2),
		updated_at = updated_at - make_interval(secs => $2) WHERE id = $1`, id, d.Seconds())
	require.NoError(t, err)
}

func TestClaimWonThenDuplicateWithResultRef(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	r, err := b.ledger.Claim(b.ctx, req("a", "evt_1"))
	require.NoError(t, err)
	require.Equal(t, claim.Won, r.Outcome)
	require.Equal(t, 1, r.Attempt)
	require.NotEmpty(t, r.Token)
	require.Equal(t, claim.StateProcessing, r.State)

	rec, err := b.ledger.Complete(b.ctx, "a", r.ID, r.Token, "inv_42")
	require.NoError(t, err)
	require.Equal(t, claim.StateCompleted, rec.State)

	for i := 0; i < 3; i++ {
		d, err := b.ledger.Claim(b.ctx, req("a", "evt_1"))
		require.NoError(t, err)
		require.Equal(t, claim.Duplicate, d.Outcome)
		require.Equal(t, "inv_42", d.ResultRef)
		require.Empty(t, d.Token)
		require.Equal(t, r.ID, d.ID)
	}
	got, err := b.ledger.Get(b.ctx, "a", r.ID)
	require.NoError(t, err)
	var outcomes []string
	for _, d := range got.Deliveries {
		outcomes = append(outcomes, d.Outcome)
	}
	require.Equal(t, []string{"won", "completed", "duplicate", "duplicate", "duplicate"}, outcomes)
}

func TestConcurrentClaimsOneWinner(t *testing.T) {
	t.Parallel()
	for _, n := range []int{20, 200} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			b := setup(t, claim.Policies{})
			start := make(chan struct{})
			results := make([]claim.Result, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					<-start
					results[i], errs[i] = b.ledger.Claim(b.ctx, req("a", "evt_storm"))
				}(i)
			}
			close(start)
			wg.Wait()
			won := 0
			for i := range results {
				require.NoError(t, errs[i])
				switch results[i].Outcome {
				case claim.Won:
					won++
				case claim.InProgress:
				default:
					t.Fatalf("unexpected outcome %s", results[i].Outcome)
				}
			}
			require.Equal(t, 1, won)
			var rows int
			require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM claims`).Scan(&rows))
			require.Equal(t, 1, rows)
			var logged int
			require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM claim_deliveries`).Scan(&logged))
			require.Equal(t, n, logged)
		})
	}
}

func TestConflictOnDifferentPayload(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	h1, err := claim.PayloadHash([]byte(`{"amount": 100, "currency": "eur"}`))
	require.NoError(t, err)
	h1b, err := claim.PayloadHash([]byte("{\"currency\":\"eur\",\n  \"amount\":100}"))
	require.NoError(t, err)
	require.Equal(t, h1, h1b, "key order and whitespace must not change the hash")
	h2, err := claim.PayloadHash([]byte(`{"amount": 999, "currency": "eur"}`))
	require.NoError(t, err)

	r := req("a", "evt_c")
	r.PayloadHash = h1
	won, err := b.ledger.Claim(b.ctx, r)
	require.NoError(t, err)
	require.Equal(t, claim.Won, won.Outcome)

	r.PayloadHash = h1b
	same, err := b.ledger.Claim(b.ctx, r)
	require.NoError(t, err)
	require.Equal(t, claim.InProgress, same.Outcome)

	_, err = b.ledger.Complete(b.ctx, "a", won.ID, won.Token, "")
	require.NoError(t, err)
	r.PayloadHash = h2
	c, err := b.ledger.Claim(b.ctx, r)
	require.NoError(t, err)
	require.Equal(t, claim.Conflict, c.Outcome)
	require.Equal(t, h1, c.PayloadHash, "the original hash is kept")
	require.Equal(t, claim.StateCompleted, c.State)
	require.Equal(t, 1, c.ConflictCount)
}

func TestRetryableFailBackoffThenWinAttemptTwo(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{Default: claim.Policy{BackoffBase: time.Minute, BackoffCap: time.Hour, MaxAttempts: 3}})
	first, err := b.ledger.Claim(b.ctx, req("a", "evt_r"))
	require.NoError(t, err)
	rec, err := b.ledger.Fail(b.ctx, "a", first.ID, first.Token, claim.Retryable, "smtp 451")
	require.NoError(t, err)
	require.Equal(t, claim.StateRetryableFailed, rec.State)
	require.NotNil(t, rec.NextAttemptAt)
	require.WithinDuration(t, rec.UpdatedAt.Add(time.Minute), *rec.NextAttemptAt, time.Second)

	later, err := b.ledger.Claim(b.ctx, req("a", "evt_r"))
	require.NoError(t, err)
	require.Equal(t, claim.RetryLater, later.Outcome)
	require.Empty(t, later.Token)

	b.travel(t, first.ID, 2*time.Minute)
	second, err := b.ledger.Claim(b.ctx, req("a", "evt_r"))
	require.NoError(t, err)
	require.Equal(t, claim.Won, second.Outcome)
	require.Equal(t, 2, second.Attempt)
	require.NotEqual(t, first.Token, second.Token)

	_, err = b.ledger.Complete(b.ctx, "a", first.ID, first.Token, "")
	require.Equal(t, apperr.LeaseLost, apperr.CodeOf(err))

	// Second failure backs off twice as long (full jitter pinned to 1).
	rec, err = b.ledger.Fail(b.ctx, "a", second.ID, second.Token, claim.Retryable, "smtp 451")
	require.NoError(t, err)
	require.WithinDuration(t, rec.UpdatedAt.Add(2*time.Minute), *rec.NextAttemptAt, time.Second)

	b.travel(t, first.ID, time.Hour)
	third, err := b.ledger.Claim(b.ctx, req("a", "evt_r"))
	require.NoError(t, err)
	require.Equal(t, claim.Won, third.Outcome)
	rec, err = b.ledger.Fail(b.ctx, "a", third.ID, third.Token, claim.Retryable, "smtp 451")
	require.NoError(t, err)
	require.Equal(t, claim.StateDeadLettered, rec.State, "attempt cap reached")
	dl, err := b.ledger.Claim(b.ctx, req("a", "evt_r"))
	require.NoError(t, err)
	require.Equal(t, claim.DeadLettered, dl.Outcome)
}

func TestPermanentAndUnknownFailures(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	p, err := b.ledger.Claim(b.ctx, req("a", "evt_p"))
	require.NoError(t, err)
	rec, err := b.ledger.Fail(b.ctx, "a", p.ID, p.Token, claim.Permanent, "422 invalid address")
	require.NoError(t, err)
	require.Equal(t, claim.StateDeadLettered, rec.State)

	u, err := b.ledger.Claim(b.ctx, req("a", "evt_u"))
	require.NoError(t, err)
	rec, err = b.ledger.Fail(b.ctx, "a", u.ID, u.Token, claim.UnknownOutcome, "timeout")
	require.NoError(t, err)
	require.Equal(t, claim.StateUnknown, rec.State)
	require.Nil(t, rec.NextAttemptAt, "unknown is never retried automatically")
	b.travel(t, u.ID, 48*time.Hour)
	again, err := b.ledger.Claim(b.ctx, req("a", "evt_u"))
	require.NoError(t, err)
	require.Equal(t, claim.Unknown, again.Outcome)

	// Operator reconciliation.
	res, err := b.ledger.Resolve(b.ctx, "a", u.ID, claim.ResolveRetry, "", "checked: not sent")
	require.NoError(t, err)
	require.Equal(t, claim.StateRetryableFailed, res.State)
	retry, err := b.ledger.Claim(b.ctx, req("a", "evt_u"))
	require.NoError(t, err)
	require.Equal(t, claim.Won, retry.Outcome)
	require.Equal(t, 2, retry.Attempt)

	res, err = b.ledger.Resolve(b.ctx, "a", p.ID, claim.ResolveCompleted, "manual_1", "sent by hand")
	require.NoError(t, err)
	require.Equal(t, claim.StateCompleted, res.State)
	d, err := b.ledger.Claim(b.ctx, req("a", "evt_p"))
	require.NoError(t, err)
	require.Equal(t, claim.Duplicate, d.Outcome)
	require.Equal(t, "manual_1", d.ResultRef)

	_, err = b.ledger.Resolve(b.ctx, "a", p.ID, claim.ResolveRetry, "", "")
	require.Equal(t, apperr.InvalidState, apperr.CodeOf(err))
}

func TestLeaseExpiryPolicies(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{BySource: map[string]claim.Policy{"mail": {LeasePolicy: claim.Review},
		"stripe": {LeasePolicy: claim.Reclaim}}})
	// reclaim (source stripe)
	first, err := b.ledger.Claim(b.ctx, req("a", "evt_l"))
	require.NoError(t, err)
	held, err := b.ledger.Claim(b.ctx, req("a", "evt_l"))
	require.NoError(t, err)
	require.Equal(t, claim.InProgress, held.Outcome)
	b.travel(t, first.ID, time.Hour)
	second, err := b.ledger.Claim(b.ctx, req("a", "evt_l"))
	require.NoError(t, err)
	require.Equal(t, claim.Won, second.Outcome)
	require.Equal(t, 2, second.Attempt)
	_, err = b.ledger.Complete(b.ctx, "a", first.ID, first.Token, "late")
	require.Equal(t, apperr.LeaseLost, apperr.CodeOf(err))
	_, err = b.ledger.Fail(b.ctx, "a", first.ID, first.Token, claim.Retryable, "late")
	require.Equal(t, apperr.LeaseLost, apperr.CodeOf(err))
	_, err = b.ledger.Complete(b.ctx, "a", second.ID, second.Token, "ok")
	require.NoError(t, err)

	// review
	mr := claim.Request{Tenant: "a", Key: claim.Key{Source: "mail", EventID: "evt_m"}}
	m, err := b.ledger.Claim(b.ctx, mr)
	require.NoError(t, err)
	b.travel(t, m.ID, time.Hour)
	rv, err := b.ledger.Claim(b.ctx, mr)
	require.NoError(t, err)
	require.Equal(t, claim.Unknown, rv.Outcome)
	require.Equal(t, claim.StateUnknown, rv.State)
	// The original holder may still report success: its token was never superseded.
	done, err := b.ledger.Complete(b.ctx, "a", m.ID, m.Token, "msg_1")
	require.NoError(t, err)
	require.Equal(t, claim.StateCompleted, done.State)
}

func TestSweepMovesExpiredReviewLeasesToUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{BySource: map[string]claim.Policy{"mail": {LeasePolicy: claim.Review},
		"stripe": {LeasePolicy: claim.Reclaim}}})
	m, err := b.ledger.Claim(b.ctx, claim.Request{Tenant: "a", Key: claim.Key{Source: "mail", EventID: "e"}})
	require.NoError(t, err)
	r, err := b.ledger.Claim(b.ctx, req("a", "e"))
	require.NoError(t, err)
	n, err := b.ledger.SweepExpiredLeases(b.ctx, 10)
	require.NoError(t, err)
	require.Zero(t, n)
	b.travel(t, m.ID, time.Hour)
	b.travel(t, r.ID, time.Hour)
	n, err = b.ledger.SweepExpiredLeases(b.ctx, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n, "only the review-policy record moves")
	got, err := b.ledger.Get(b.ctx, "a", m.ID)
	require.NoError(t, err)
	require.Equal(t, claim.StateUnknown, got.State)
}

func TestExtendKeepsLease(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	r := req("a", "evt_x")
	r.Lease = 10 * time.Second
	w, err := b.ledger.Claim(b.ctx, r)
	require.NoError(t, err)
	b.travel(t, w.ID, 9*time.Second)
	ext, err := b.ledger.Extend(b.ctx, "a", w.ID, w.Token, time.Hour)
	require.NoError(t, err)
	require.True(t, ext.LeaseUntil.After(time.Now().Add(50*time.Minute)))
	b.travel(t, w.ID, 30*time.Second)
	again, err := b.ledger.Claim(b.ctx, r)
	require.NoError(t, err)
	require.Equal(t, claim.InProgress, again.Outcome)
	_, err = b.ledger.Extend(b.ctx, "a", w.ID, w.Token, 48*time.Hour)
	require.Equal(t, "lease_seconds", apperr.As(err).Field)
	_, err = b.ledger.Extend(b.ctx, "a", w.ID, "00000000-0000-4000-8000-000000000000", time.Hour)
	require.Equal(t, apperr.LeaseLost, apperr.CodeOf(err))
}

func TestStaleObjectVersion(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	v := func(n int64) *int64 { return &n }
	r5 := req("a", "evt_v5")
	r5.ObjectID, r5.ObjectVersion = "cus_1", v(5)
	w, err := b.ledger.Claim(b.ctx, r5)
	require.NoError(t, err)
	_, err = b.ledger.Complete(b.ctx, "a", w.ID, w.Token, "")
	require.NoError(t, err)

	for _, tc := range []struct {
		event string
		ver   int64
		want  claim.Outcome
	}{{"evt_v3", 3, claim.Stale}, {"evt_v5b", 5, claim.Stale}, {"evt_v6", 6, claim.Won}} {
		r := req("a", tc.event)
		r.ObjectID, r.ObjectVersion = "cus_1", v(tc.ver)
		got, err := b.ledger.Claim(b.ctx, r)
		require.NoError(t, err)
		require.Equal(t, tc.want, got.Outcome, tc.event)
	}
	// Another object is unaffected.
	o := req("a", "evt_o1")
	o.ObjectID, o.ObjectVersion = "cus_2", v(1)
	got, err := b.ledger.Claim(b.ctx, o)
	require.NoError(t, err)
	require.Equal(t, claim.Won, got.Outcome)
	// A stale event stays stale on redelivery.
	r3 := req("a", "evt_v3")
	r3.ObjectID, r3.ObjectVersion = "cus_1", v(3)
	got, err = b.ledger.Claim(b.ctx, r3)
	require.NoError(t, err)
	require.Equal(t, claim.Stale, got.Outcome)
}

func TestActionLedgerIndependent(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	ev, err := b.ledger.Claim(b.ctx, req("a", "evt_a"))
	require.NoError(t, err)
	mail := req("a", "evt_a")
	mail.Action = "send-email"
	inv := req("a", "evt_a")
	inv.Action = "create-invoice"
	m, err := b.ledger.Claim(b.ctx, mail)
	require.NoError(t, err)
	i, err := b.ledger.Claim(b.ctx, inv)
	require.NoError(t, err)
	require.Equal(t, []claim.Outcome{claim.Won, claim.Won, claim.Won}, []claim.Outcome{ev.Outcome, m.Outcome, i.Outcome})
	require.NotEqual(t, m.ID, i.ID)
	require.NotEqual(t, m.IdempotencyKey, i.IdempotencyKey)
	_, err = b.ledger.Complete(b.ctx, "a", m.ID, m.Token, "msg_1")
	require.NoError(t, err)
	m2, err := b.ledger.Claim(b.ctx, mail)
	require.NoError(t, err)
	require.Equal(t, claim.Duplicate, m2.Outcome)
	i2, err := b.ledger.Claim(b.ctx, inv)
	require.NoError(t, err)
	require.Equal(t, claim.InProgress, i2.Outcome)
	e2, err := b.ledger.Claim(b.ctx, req("a", "evt_a"))
	require.NoError(t, err)
	require.Equal(t, claim.InProgress, e2.Outcome)
}

func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	a, err := b.ledger.Claim(b.ctx, req("tenant-a", "evt_t"))
	require.NoError(t, err)
	// Same key in another tenant is another record.
	other, err := b.ledger.Claim(b.ctx, req("tenant-b", "evt_t"))
	require.NoError(t, err)
	require.Equal(t, claim.Won, other.Outcome)

	_, err = b.ledger.Get(b.ctx, "tenant-b", a.ID)
	require.Equal(t, apperr.NotFound, apperr.CodeOf(err))
	_, err = b.ledger.Complete(b.ctx, "tenant-b", a.ID, a.Token, "")
	require.Equal(t, apperr.NotFound, apperr.CodeOf(err))
	_, err = b.ledger.Fail(b.ctx, "tenant-b", a.ID, a.Token, claim.Permanent, "")
	require.Equal(t, apperr.NotFound, apperr.CodeOf(err))
	_, err = b.ledger.Extend(b.ctx, "tenant-b", a.ID, a.Token, time.Minute)
	require.Equal(t, apperr.NotFound, apperr.CodeOf(err))
	_, err = b.ledger.Resolve(b.ctx, "tenant-b", a.ID, claim.ResolveCompleted, "", "")
	require.Equal(t, apperr.NotFound, apperr.CodeOf(err))
	_, err = b.ledger.Find(b.ctx, "tenant-b", claim.Key{Source: "stripe", EventID: "missing"})
	require.Equal(t, apperr.NotFound, apperr.CodeOf(err))

	got, err := b.ledger.Get(b.ctx, "tenant-a", a.ID)
	require.NoError(t, err)
	require.Equal(t, claim.StateProcessing, got.State, "untouched by tenant-b")
}

func TestBatchDecidesEachItem(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	done, err := b.ledger.Claim(b.ctx, req("a", "evt_done"))
	require.NoError(t, err)
	_, err = b.ledger.Complete(b.ctx, "a", done.ID, done.Token, "ref")
	require.NoError(t, err)
	rs, err := b.ledger.ClaimBatch(b.ctx, []claim.Request{
		req("a", "evt_z"), req("a", "evt_done"), req("a", "evt_b"), req("a", "evt_z"),
	})
	require.NoError(t, err)
	got := []claim.Outcome{rs[0].Outcome, rs[1].Outcome, rs[2].Outcome, rs[3].Outcome}
	require.Equal(t, []claim.Outcome{claim.Won, claim.Duplicate, claim.Won, claim.InProgress}, got)
	require.Equal(t, "evt_z", rs[0].EventID)
	require.Equal(t, "ref", rs[1].ResultRef)
	require.NotEmpty(t, rs[0].Token)
	require.Empty(t, rs[3].Token)
}

func TestConcurrentBatchesOneWinnerPerKey(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	const workers, keys = 20, 10
	start := make(chan struct{})
	var mu sync.Mutex
	won := map[string]int{}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var reqs []claim.Request
			for k := 0; k < keys; k++ { // each worker in a different order
				reqs = append(reqs, req("a", fmt.Sprintf("evt_%d", (k+w)%keys)))
			}
			<-start
			rs, err := b.ledger.ClaimBatch(b.ctx, reqs)
			if !assertNoError(t, err) {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, r := range rs {
				if r.Outcome == claim.Won {
					won[r.EventID]++
				}
			}
		}(w)
	}
	close(start)
	wg.Wait()
	require.Len(t, won, keys)
	for k, n := range won {
		require.Equal(t, 1, n, k)
	}
}

func assertNoError(t *testing.T, err error) bool {
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}

func TestValidationNamesField(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	v := int64(1)
	for _, tc := range []struct {
		mut   func(*claim.Request)
		field string
	}{
		{func(r *claim.Request) { r.Source = "" }, "source"},
		{func(r *claim.Request) { r.Source = "has space" }, "source"},
		{func(r *claim.Request) { r.EventID = "" }, "event_id"},
		{func(r *claim.Request) { r.PayloadHash = "xyz" }, "payload_hash"},
		{func(r *claim.Request) { r.Lease = 1000 * time.Hour }, "lease_seconds"},
		{func(r *claim.Request) { r.ObjectVersion = &v }, "object_id"},
		{func(r *claim.Request) { r.ObjectID = "o" }, "object_version"},
	} {
		r := req("a", "e")
		tc.mut(&r)
		_, err := b.ledger.Claim(b.ctx, r)
		e := apperr.As(err)
		require.NotNil(t, e, tc.field)
		require.Equal(t, apperr.Invalid, e.Code)
		require.Equal(t, tc.field, e.Field)
	}
	var rows int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM claims`).Scan(&rows))
	require.Zero(t, rows, "nothing written for invalid input")
}

// Out-of-order protection is per action: completing one effect of an event
// never makes the event's other effects stale.
func TestStaleIsPerAction(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	v5 := int64(5)
	withAction := func(action string) claim.Request {
		r := req("a", "evt_obj")
		r.Action, r.ObjectID, r.ObjectVersion = action, "cus_1", &v5
		return r
	}
	inv, err := b.ledger.Claim(b.ctx, withAction("create-invoice"))
	require.NoError(t, err)
	_, err = b.ledger.Complete(b.ctx, "a", inv.ID, inv.Token, "inv_1")
	require.NoError(t, err)
	for _, action := range []string{"send-email", ""} {
		got, err := b.ledger.Claim(b.ctx, withAction(action))
		require.NoError(t, err)
		require.Equal(t, claim.Won, got.Outcome, "action %q", action)
	}
	older := withAction("create-invoice")
	older.EventID = "evt_obj_old"
	v4 := int64(4)
	older.ObjectVersion = &v4
	got, err := b.ledger.Claim(b.ctx, older)
	require.NoError(t, err)
	require.Equal(t, claim.Stale, got.Outcome, "the same action of an older version is still stale")
}

// An ingested (received) record is claimed by the workflow even when the
// workflow hashes another view of the payload: conflicts were judged at
// ingest. Its stored object version guards it against staleness.
func TestClaimOfIngestedRecord(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	v := func(n int64) *int64 { return &n }
	rcv := func(event string, version int64) claim.Receipt {
		r := req("a", event)
		r.PayloadHash = strings.Repeat("a", 64)
		r.ObjectID, r.ObjectVersion = "cus_9", v(version)
		rc, err := b.ledger.ReceiveTx(b.ctx, b.pool, r)
		require.NoError(t, err)
		require.True(t, rc.Inserted)
		require.Equal(t, claim.StateReceived, rc.State)
		return rc
	}
	rcv("evt_new", 5)
	rcv("evt_old", 3)

	r := req("a", "evt_new")
	r.PayloadHash = strings.Repeat("b", 64) // the workflow's view of the body
	won, err := b.ledger.Claim(b.ctx, r)
	require.NoError(t, err)
	require.Equal(t, claim.Won, won.Outcome)
	require.Equal(t, strings.Repeat("a", 64), won.ReceiptHash, "the ingest hash stays the receipt hash")
	require.Equal(t, strings.Repeat("b", 64), won.PayloadHash, "the first claim's view is adopted for later claims")
	_, err = b.ledger.Complete(b.ctx, "a", won.ID, won.Token, "")
	require.NoError(t, err)

	old, err := b.ledger.Claim(b.ctx, req("a", "evt_old")) // no object in the request
	require.NoError(t, err)
	require.Equal(t, claim.Stale, old.Outcome, "the object version stored at ingest is checked")

	r.PayloadHash = strings.Repeat("c", 64)
	c, err := b.ledger.Claim(b.ctx, r)
	require.NoError(t, err)
	require.Equal(t, claim.Conflict, c.Outcome, "once claimed, a different payload is a conflict again")

	// A redelivery of the provider compares the receipt view, never the
	// workflow's: the same provider payload is a duplicate, another one a
	// conflict.
	again := req("a", "evt_new")
	again.PayloadHash = strings.Repeat("a", 64)
	rc, err := b.ledger.ReceiveTx(b.ctx, b.pool, again)
	require.NoError(t, err)
	require.False(t, rc.Inserted)
	require.False(t, rc.Conflict, "the provider's same payload after the workflow's claim is no conflict")
	again.PayloadHash = strings.Repeat("d", 64)
	rc, err = b.ledger.ReceiveTx(b.ctx, b.pool, again)
	require.NoError(t, err)
	require.True(t, rc.Conflict)
	require.Equal(t, strings.Repeat("a", 64), rc.ReceiptHash, "the first receipt hash is kept")
}

// B01 (issue: retries of events with volatile fields stay retries): an
// ingested record claimed, failed retryably and claimed again with the same
// workflow view wins again; the ingest view (volatile fields stripped) never
// meets the workflow's view (the whole body).
func TestRetryOfIngestedRecordComparesLikeWithLike(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{Default: claim.Policy{BackoffBase: time.Nanosecond, BackoffCap: time.Nanosecond}})
	r := req("a", "evt_retry")
	r.PayloadHash = strings.Repeat("a", 64) // ingest: body without /createdAt
	_, err := b.ledger.ReceiveTx(b.ctx, b.pool, r)
	require.NoError(t, err)
	w := req("a", "evt_retry")
	w.PayloadHash = strings.Repeat("b", 64) // workflow: the whole stored body
	first, err := b.ledger.Claim(b.ctx, w)
	require.NoError(t, err)
	require.Equal(t, claim.Won, first.Outcome)
	_, err = b.ledger.Fail(b.ctx, "a", first.ID, first.Token, claim.Retryable, "smtp 451")
	require.NoError(t, err)
	second, err := b.ledger.Claim(b.ctx, w)
	require.NoError(t, err)
	require.Equal(t, claim.Won, second.Outcome, "a retry of the same event is a retry, not a conflict")
	require.Equal(t, 2, second.Attempt)
	require.Equal(t, 0, second.ConflictCount)
}

// Text PostgreSQL cannot store is a 422 naming the field, never a 500; a
// failure message is cut on a UTF-8 boundary.
func TestUnstorableTextIsInvalidNotInternal(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	for field, mut := range map[string]func(*claim.Request){
		"event_id":     func(r *claim.Request) { r.EventID = "a\x00b" },
		"action":       func(r *claim.Request) { r.Action = "\xff" },
		"event_type":   func(r *claim.Request) { r.EventType = "x\x00" },
		"execution_id": func(r *claim.Request) { r.ExecutionID = "\x00" },
	} {
		r := req("a", "e_text")
		mut(&r)
		_, err := b.ledger.Claim(b.ctx, r)
		e := apperr.As(err)
		require.NotNil(t, e, field)
		require.Equal(t, apperr.Invalid, e.Code, field)
		require.Equal(t, field, e.Field)
	}
	w, err := b.ledger.Claim(b.ctx, req("a", "e_text"))
	require.NoError(t, err)
	_, err = b.ledger.Complete(b.ctx, "a", w.ID, w.Token, "ref\x00")
	require.Equal(t, "result_ref", apperr.As(err).Field)
	rec, err := b.ledger.Fail(b.ctx, "a", w.ID, w.Token, claim.Retryable, strings.Repeat("€", 1334)+"\x00")
	require.NoError(t, err)
	require.LessOrEqual(t, len(rec.LastError), claim.MaxErrorLen)
	require.True(t, strings.HasPrefix(rec.LastError, "€€"))
}

func TestListOpenRecordsByStatePaged(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	open := func(tenant, source, event string, kind claim.FailKind) claim.Record {
		t.Helper()
		r := req(tenant, event)
		r.Source = source
		w, err := b.ledger.Claim(b.ctx, r)
		require.NoError(t, err)
		require.Equal(t, claim.Won, w.Outcome)
		if kind == "" {
			return w.Record
		}
		rec, err := b.ledger.Fail(b.ctx, tenant, w.ID, w.Token, kind, "boom")
		require.NoError(t, err)
		return rec
	}
	var unknown []claim.Record // tenant a, state unknown, any source
	for i := 0; i < 4; i++ {
		unknown = append(unknown, open("a", "stripe", fmt.Sprint("evt_u", i), claim.UnknownOutcome))
	}
	unknown = append(unknown, open("a", "github", "evt_gh", claim.UnknownOutcome))
	dead := open("a", "stripe", "evt_dead", claim.Permanent)
	processing := open("a", "stripe", "evt_proc", "")
	done, err := b.ledger.Claim(b.ctx, req("a", "evt_done"))
	require.NoError(t, err)
	_, err = b.ledger.Complete(b.ctx, "a", done.ID, done.Token, "")
	require.NoError(t, err)
	open("b", "stripe", "evt_u0", claim.UnknownOutcome)
	open("b", "stripe", "evt_b", claim.UnknownOutcome)

	// Order is by (updated_at, id), not by creation: the last record moves
	// before the fourth, and the first three share one (older) updated_at,
	// so the id breaks a tie that spans a page boundary.
	b.travel(t, unknown[4].ID, time.Hour)
	_, err = b.pool.Exec(b.ctx, `UPDATE claims SET updated_at = '2020-01-01T00:00:00.123456Z' WHERE id = ANY($1::uuid[])`,
		[]string{unknown[0].ID, unknown[1].ID, unknown[2].ID})
	require.NoError(t, err)
	want := func(source string) []string {
		var recs []claim.Record
		for _, r := range unknown {
			got, err := b.ledger.Get(b.ctx, "a", r.ID)
			require.NoError(t, err)
			if source == "" || got.Source == source {
				recs = append(recs, got)
			}
		}
		sort.Slice(recs, func(i, j int) bool {
			if !recs[i].UpdatedAt.Equal(recs[j].UpdatedAt) {
				return recs[i].UpdatedAt.Before(recs[j].UpdatedAt)
			}
			return recs[i].ID < recs[j].ID
		})
		var ids []string
		for _, r := range recs {
			ids = append(ids, r.ID)
		}
		return ids
	}
	walk := func(tenant string, f claim.ListFilter) ([]string, int) {
		t.Helper()
		var ids []string
		pages := 0
		for {
			recs, next, err := b.ledger.List(b.ctx, tenant, f)
			require.NoError(t, err)
			pages++
			for _, r := range recs {
				require.Equal(t, tenant, r.Tenant)
				require.Equal(t, f.State, r.State)
				require.Empty(t, r.Deliveries)
				ids = append(ids, r.ID)
			}
			if next == "" {
				return ids, pages
			}
			require.Len(t, recs, f.Limit, "a short page ends the list")
			require.Less(t, pages, 10)
			f.Cursor = next
		}
	}

	all := want("")
	require.Len(t, all, 5)
	ids, pages := walk("a", claim.ListFilter{State: claim.StateUnknown, Limit: 2})
	require.Equal(t, all, ids, "every record exactly once, oldest first")
	require.Equal(t, 3, pages)
	ids, pages = walk("a", claim.ListFilter{State: claim.StateUnknown, Limit: 5})
	require.Equal(t, all, ids)
	require.Equal(t, 1, pages, "no next cursor when the page holds the rest exactly")
	ids, _ = walk("a", claim.ListFilter{State: claim.StateUnknown})
	require.Equal(t, all, ids, "default limit")
	ids, _ = walk("a", claim.ListFilter{State: claim.StateUnknown, Source: "stripe", Limit: 2})
	require.Equal(t, want("stripe"), ids)
	require.Len(t, ids, 4)
	ids, _ = walk("a", claim.ListFilter{State: claim.StateUnknown, Source: "github", Limit: 2})
	require.Equal(t, []string{unknown[4].ID}, ids)
	ids, _ = walk("a", claim.ListFilter{State: claim.StateDeadLettered, Limit: 2})
	require.Equal(t, []string{dead.ID}, ids)
	ids, _ = walk("a", claim.ListFilter{State: claim.StateProcessing, Limit: 2})
	require.Equal(t, []string{processing.ID}, ids)
	ids, _ = walk("a", claim.ListFilter{State: claim.StateRetryableFailed, Limit: 2})
	require.Empty(t, ids)
	ids, _ = walk("a", claim.ListFilter{State: claim.StateUnknown, Source: "nope", Limit: 2})
	require.Empty(t, ids)

	// Tenant b sees only its own two records, even with tenant a's cursor.
	ids, _ = walk("b", claim.ListFilter{State: claim.StateUnknown, Limit: 1})
	require.Len(t, ids, 2)
	for _, id := range ids {
		require.NotContains(t, all, id)
	}
	_, next, err := b.ledger.List(b.ctx, "a", claim.ListFilter{State: claim.StateUnknown, Limit: 1})
	require.NoError(t, err)
	recs, _, err := b.ledger.List(b.ctx, "b", claim.ListFilter{State: claim.StateUnknown, Limit: 5, Cursor: next})
	require.NoError(t, err)
	for _, r := range recs {
		require.Equal(t, "b", r.Tenant)
	}
}

func TestListValidationNamesField(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	cursor := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, tc := range []struct {
		f     claim.ListFilter
		field string
	}{
		{claim.ListFilter{}, "state"},
		{claim.ListFilter{State: claim.StateCompleted}, "state"},
		{claim.ListFilter{State: claim.StateStale}, "state"},
		{claim.ListFilter{State: "bogus"}, "state"},
		{claim.ListFilter{State: claim.StateUnknown, Source: "-bad"}, "source"},
		{claim.ListFilter{State: claim.StateUnknown, Source: strings.Repeat("s", claim.MaxSourceLen+1)}, "source"},
		{claim.ListFilter{State: claim.StateUnknown, Limit: -1}, "limit"},
		{claim.ListFilter{State: claim.StateUnknown, Limit: claim.MaxListLimit + 1}, "limit"},
		{claim.ListFilter{State: claim.StateUnknown, Cursor: "%%%"}, "cursor"},
		{claim.ListFilter{State: claim.StateUnknown, Cursor: cursor("no separator")}, "cursor"},
		{claim.ListFilter{State: claim.StateUnknown, Cursor: cursor("yesterday|00000000-0000-4000-8000-000000000000")}, "cursor"},
		{claim.ListFilter{State: claim.StateUnknown, Cursor: cursor("2024-01-01T00:00:00Z|not-a-uuid")}, "cursor"},
	} {
		_, _, err := b.ledger.List(b.ctx, "a", tc.f)
		e := apperr.As(err)
		require.NotNil(t, e, "%+v: %v", tc.f, err)
		require.Equal(t, apperr.Invalid, e.Code, "%+v", tc.f)
		require.Equal(t, tc.field, e.Field, "%+v", tc.f)
	}
	_, _, err := b.ledger.List(b.ctx, "a", claim.ListFilter{State: claim.StateUnknown,
		Cursor: cursor("2024-01-01T00:00:00.5Z|00000000-0000-4000-8000-000000000000")})
	require.NoError(t, err, "a well-formed cursor")
}
