package claim_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// A plain duplicate of a completed record (claimTemplate's fast path) is
// answered without rewriting the record: its delivery is logged, the row
// keeps its version (xmin), and the answer is the one a locked decision
// gives. Anything the claim would change on the record (a conflict, an
// event type or object the record lacks) takes the locked path.

// Payload hashes of the tests (SHA-256 shaped).
var (
	h1 = strings.Repeat("1", 64)
	h2 = strings.Repeat("2", 64)
	h9 = strings.Repeat("9", 64)
)

// rowVersion is the record's xmin: it changes with every rewrite of the row.
func rowVersion(t *testing.T, b *bundle, id string) string {
	t.Helper()
	var v string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT xmin::text FROM claims WHERE id = $1`, id).Scan(&v))
	return v
}

func completed(t *testing.T, b *bundle, r claim.Request) claim.Result {
	t.Helper()
	won, err := b.ledger.Claim(b.ctx, r)
	require.NoError(t, err)
	require.Equal(t, claim.Won, won.Outcome)
	_, err = b.ledger.Complete(b.ctx, r.Tenant, won.ID, won.Token, "ref-1")
	require.NoError(t, err)
	return won
}

func TestPlainDuplicatesDoNotRewriteTheRecord(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	r := req("a", "evt_dup")
	r.PayloadHash = h1
	won := completed(t, b, r)
	v := rowVersion(t, b, won.ID)
	completedAt, err := b.ledger.Get(b.ctx, "a", won.ID)
	require.NoError(t, err)

	r.ExecutionID = "exec-1"
	first, err := b.ledger.Claim(b.ctx, r)
	require.NoError(t, err)
	require.Equal(t, claim.Duplicate, first.Outcome)
	require.Empty(t, first.Token, "a duplicate carries no claim token")
	require.Equal(t, "ref-1", first.ResultRef)
	require.Equal(t, completedAt.UpdatedAt, first.UpdatedAt)
	require.Equal(t, v, rowVersion(t, b, won.ID), "the first duplicate leaves the row as it is too")

	for i, hash := range []string{h1, ""} { // the same hash, and none
		d := req("a", "evt_dup")
		d.PayloadHash, d.ExecutionID, d.RequestID = hash, fmt.Sprintf("exec-%d", i+2), fmt.Sprintf("rq-%d", i+2)
		res, err := b.ledger.Claim(b.ctx, d)
		require.NoError(t, err)
		require.Equal(t, claim.Duplicate, res.Outcome)
		require.Empty(t, res.Token)
		require.Equal(t, "ref-1", res.ResultRef, "the stored result is replayed")
		require.Equal(t, claim.StateCompleted, res.State)
		require.Equal(t, first.UpdatedAt, res.UpdatedAt)
		require.Equal(t, v, rowVersion(t, b, won.ID), "a plain duplicate leaves the row as it is")
	}

	rec, err := b.ledger.Get(b.ctx, "a", won.ID)
	require.NoError(t, err)
	var dups []claim.Delivery
	for _, d := range rec.Deliveries {
		if d.Outcome == "duplicate" {
			dups = append(dups, d)
		}
	}
	require.Len(t, dups, 3, "every duplicate delivery is logged")
	require.Equal(t, "exec-2", dups[1].ExecutionID)
	require.Equal(t, h1, dups[1].PayloadHash)
	require.Equal(t, "request_id=rq-2", dups[1].Detail)
	require.Equal(t, "exec-3", dups[2].ExecutionID)
	require.Empty(t, dups[2].PayloadHash)
	require.Equal(t, 1, dups[2].Attempt)
}

func TestDuplicatesThatChangeTheRecordAreDecidedOnTheLockedRow(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	r := req("a", "evt_changes")
	r.PayloadHash = h1
	won := completed(t, b, r)

	// Another payload under the key: a conflict, counted on the record.
	c := r
	c.PayloadHash = h2
	res, err := b.ledger.Claim(b.ctx, c)
	require.NoError(t, err)
	require.Equal(t, claim.Conflict, res.Outcome)
	require.Equal(t, 1, res.ConflictCount)

	// An event type the record lacks is stored by the duplicate.
	e := r
	e.EventType = "invoice.paid"
	res, err = b.ledger.Claim(b.ctx, e)
	require.NoError(t, err)
	require.Equal(t, claim.Duplicate, res.Outcome)
	require.Equal(t, "invoice.paid", res.EventType)

	// An object the record lacks, too.
	o := r
	ver := int64(7)
	o.ObjectID, o.ObjectVersion = "cus_1", &ver
	res, err = b.ledger.Claim(b.ctx, o)
	require.NoError(t, err)
	require.Equal(t, claim.Duplicate, res.Outcome)
	require.Equal(t, "cus_1", res.ObjectID)

	// A record without a payload hash takes the first hash a claim brings.
	n := req("a", "evt_nohash")
	nw := completed(t, b, n)
	n.PayloadHash = h9
	res, err = b.ledger.Claim(b.ctx, n)
	require.NoError(t, err)
	require.Equal(t, claim.Duplicate, res.Outcome)
	require.Equal(t, h9, res.PayloadHash)
	rec, err := b.ledger.Get(b.ctx, "a", nw.ID)
	require.NoError(t, err)
	require.Equal(t, h9, rec.PayloadHash)
	_ = won
}

// Plain duplicates, fresh keys, conflicts and several copies of one key in
// the same groups: every call gets the answer it would get alone, and the
// delivery log holds one entry per call.
func TestGroupsMixingDuplicatesAndFreshClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 20 })
	sizes := newGroupSizes()
	l := groupLedger(t, pool, sizes, claim.GroupConfig{Workers: 1, MaxItems: 64})
	b := &bundle{pool: pool, ledger: l, ctx: ctx}
	const done = 10
	ids := make([]string, done)
	for i := range done {
		r := req("a", fmt.Sprintf("evt_done_%d", i))
		r.PayloadHash = h1
		ids[i] = completed(t, b, r).ID
	}
	h := holdTheWorker(t, ctx, pool, l)

	type call struct {
		r    claim.Request
		want claim.Outcome
	}
	var calls []call
	for i := range done {
		d := req("a", fmt.Sprintf("evt_done_%d", i))
		d.PayloadHash = h1
		calls = append(calls, call{d, claim.Duplicate}, call{d, claim.Duplicate}) // twice in the group
		if i%3 == 0 {
			c := d
			c.PayloadHash = h2
			calls = append(calls, call{c, claim.Conflict})
		}
	}
	for i := range 5 {
		calls = append(calls, call{req("a", fmt.Sprintf("evt_fresh_%d", i)), claim.Won})
	}
	// Three copies of one new key: one winner, then in progress twice.
	for range 3 {
		calls = append(calls, call{req("a", "evt_triple"), ""})
	}
	got := make([]claim.Result, len(calls))
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Add(1)
		go func() { defer wg.Done(); got[i], errs[i] = l.Claim(ctx, c.r) }()
	}
	pgtest.WaitUntil(t, "every call to queue", func() bool { n, _ := l.Queued(); return n == len(calls) })
	require.Equal(t, claim.InProgress, h.release().Outcome)
	wg.Wait()
	require.Contains(t, sizes.of("claim"), len(calls), "the queued calls went as one group")

	var triple []claim.Outcome
	for i, c := range calls {
		require.NoError(t, errs[i], "call %d", i)
		if c.want == "" {
			triple = append(triple, got[i].Outcome)
			continue
		}
		require.Equal(t, c.want, got[i].Outcome, "call %d (%s)", i, c.r.EventID)
		if c.want == claim.Duplicate {
			require.Equal(t, "ref-1", got[i].ResultRef)
		}
	}
	require.ElementsMatch(t, []claim.Outcome{claim.Won, claim.InProgress, claim.InProgress}, triple)

	for i, id := range ids {
		rec, err := l.Get(ctx, "a", id)
		require.NoError(t, err)
		var n, conflicts int
		for _, d := range rec.Deliveries {
			switch d.Outcome {
			case "duplicate":
				n++
			case "conflict":
				conflicts++
			}
		}
		require.Equal(t, 2, n, "both duplicates of evt_done_%d logged", i)
		want := 0
		if i%3 == 0 {
			want = 1
		}
		require.Equal(t, want, conflicts)
		require.Equal(t, want, rec.ConflictCount)
	}
}

// A plain redelivery of an ingested event (the receipt hash the record
// has) neither locks nor rewrites the record; its delivery is logged. A
// redelivery with another payload still counts a conflict, and a record a
// claim created adopts the first receipt hash (a rewrite), as before.
func TestPlainRedeliveriesDoNotRewriteTheRecord(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	r := req("a", "evt_ingested")
	r.PayloadHash = h1
	first, err := b.ledger.ReceiveTx(b.ctx, b.pool, r)
	require.NoError(t, err)
	require.True(t, first.Inserted)
	v := rowVersion(t, b, first.ID)
	for range 2 {
		rc, err := b.ledger.ReceiveTx(b.ctx, b.pool, r)
		require.NoError(t, err)
		require.False(t, rc.Inserted)
		require.False(t, rc.Conflict)
		require.Equal(t, first.ID, rc.ID)
		require.Equal(t, claim.StateReceived, rc.State)
		require.Equal(t, v, rowVersion(t, b, first.ID), "a plain redelivery leaves the row as it is")
	}
	// A record being written does not hold a plain redelivery up: it is
	// answered while the test holds the row lock an update takes (FOR NO
	// KEY UPDATE; the delivery log's foreign key check takes FOR KEY SHARE,
	// which does not wait for it).
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, `SELECT 1 FROM claims WHERE id = $1 FOR NO KEY UPDATE`, first.ID)
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(b.ctx, 10*time.Second) // a wait for the lock fails the test
	rc, err := b.ledger.ReceiveTx(wctx, b.pool, r)
	cancel()
	require.NoError(t, err, "not held up by the row lock")
	require.False(t, rc.Inserted)
	require.NoError(t, tx.Rollback(b.ctx))

	c := r
	c.PayloadHash = h2
	rc, err = b.ledger.ReceiveTx(b.ctx, b.pool, c)
	require.NoError(t, err)
	require.True(t, rc.Conflict)
	require.Equal(t, 1, rc.ConflictCount)

	rec, err := b.ledger.Get(b.ctx, "a", first.ID)
	require.NoError(t, err)
	var outcomes []string
	for _, d := range rec.Deliveries {
		outcomes = append(outcomes, d.Outcome)
	}
	require.Equal(t, []string{"received", "ingest_duplicate", "ingest_duplicate", "ingest_duplicate", "ingest_conflict"}, outcomes)

	// Claimed first (no receipt hash yet): the first delivery stores it.
	w := req("a", "evt_claimed_first")
	won, err := b.ledger.Claim(b.ctx, w)
	require.NoError(t, err)
	w.PayloadHash = h9
	rc, err = b.ledger.ReceiveTx(b.ctx, b.pool, w)
	require.NoError(t, err)
	require.False(t, rc.Inserted)
	require.False(t, rc.Conflict)
	require.Equal(t, h9, rc.ReceiptHash)
	require.Equal(t, won.ID, rc.ID)
}
