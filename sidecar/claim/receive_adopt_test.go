package claim_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// receiptHash is a receipt hash (the door's view) for the tests.
const receiptHash = "1111111111111111111111111111111111111111111111111111111111111111"

// receive runs ReceiveTx for event in a transaction of its own.
func (b *bundle) receive(t *testing.T, event, hash string) claim.Receipt {
	t.Helper()
	r := req("a", event)
	r.PayloadHash = hash
	var rc claim.Receipt
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		rc, err = b.ledger.ReceiveTx(b.ctx, tx, r)
		return err
	}))
	return rc
}

// TestReceiveAdoptsRecordsWithoutInboxRow: a record a claim made (no
// inbox row) is adopted by a provider delivery of its payload when it is
// retryable_failed, dead_lettered, or processing under reclaim with its
// lease ended; it becomes received with a fresh budget, no token, lease or
// claims' payload hash. Completed, stale-free live processing, processing
// under review, unknown and payload-purged records are not adopted, nor is
// a delivery of another payload (a conflict). Of 20 concurrent deliveries
// exactly one adopts.
func TestReceiveAdoptsRecordsWithoutInboxRow(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{Default: claim.Policy{MaxAttempts: 3}})
	ctx := b.ctx
	won := func(event string, p claim.LeasePolicy) claim.Result {
		r := req("a", event)
		r.PayloadHash = "2222222222222222222222222222222222222222222222222222222222222222"
		r.LeasePolicy = p
		res, err := b.ledger.Claim(ctx, r)
		require.NoError(t, err)
		require.Equal(t, claim.Won, res.Outcome)
		return res
	}
	failed := won("evt_failed", "")
	_, err := b.ledger.Fail(ctx, "a", failed.ID, failed.Token, claim.Retryable, "forward: HTTP 500")
	require.NoError(t, err)
	dead := won("evt_dead", "")
	_, err = b.pool.Exec(ctx, `UPDATE claims SET max_attempts = 1 WHERE id = $1`, dead.ID)
	require.NoError(t, err)
	rec, err := b.ledger.Fail(ctx, "a", dead.ID, dead.Token, claim.Retryable, "forward: HTTP 500")
	require.NoError(t, err)
	require.Equal(t, claim.StateDeadLettered, rec.State)
	expired := won("evt_expired", claim.Reclaim)
	b.travel(t, expired.ID, time.Hour)
	review := won("evt_review", claim.Review)
	b.travel(t, review.ID, time.Hour)
	live := won("evt_live", claim.Reclaim)
	done := won("evt_done", "")
	_, err = b.ledger.Complete(ctx, "a", done.ID, done.Token, "ref")
	require.NoError(t, err)
	purged := won("evt_purged", "")
	_, err = b.pool.Exec(ctx, `UPDATE claims SET state = 'dead_lettered', payload_purged_at = now() WHERE id = $1`, purged.ID)
	require.NoError(t, err)
	// Unknown, then resolved: failed is final, retry adoptable.
	for _, o := range []claim.ResolveOutcome{claim.ResolveFailed, claim.ResolveRetry} {
		res := won("evt_resolved_"+string(o), "")
		_, err = b.ledger.Release(ctx, "a", res.ID, "stuck", "op")
		require.NoError(t, err)
		unknown := b.receive(t, "evt_resolved_"+string(o), receiptHash)
		require.False(t, unknown.Adopted, "unknown: an operator decides")
		_, err = b.ledger.Resolve(ctx, "a", res.ID, o, "", "decided")
		require.NoError(t, err)
	}
	require.False(t, b.receive(t, "evt_resolved_failed", receiptHash).Adopted, "resolved failed: not to run")
	require.True(t, b.receive(t, "evt_resolved_retry", receiptHash).Adopted, "resolved retry: adopted")
	conflict := won("evt_conflict", "")
	_, err = b.pool.Exec(ctx, `UPDATE claims SET receipt_hash = '33' WHERE id = $1`, conflict.ID)
	require.NoError(t, err)
	_, err = b.ledger.Fail(ctx, "a", conflict.ID, conflict.Token, claim.Retryable, "x")
	require.NoError(t, err)

	for _, ev := range []string{"evt_failed", "evt_dead", "evt_expired"} {
		rc := b.receive(t, ev, receiptHash)
		require.True(t, rc.Adopted, ev)
		require.False(t, rc.Inserted || rc.Conflict, ev)
		require.Equal(t, claim.StateReceived, rc.State, ev)
		require.Equal(t, rc.Attempt+3, rc.MaxAttempts, "%s: a fresh budget", ev)
		require.Nil(t, rc.LeaseUntil, ev)
		require.Nil(t, rc.NextAttemptAt, ev)
		require.Empty(t, rc.PayloadHash, "%s: the workflow's claim sets its own view", ev)
		require.Equal(t, receiptHash, rc.ReceiptHash, ev)
		again := b.receive(t, ev, receiptHash)
		require.False(t, again.Adopted || again.Inserted, "%s: adopted once", ev)
	}
	// The former holder's settle is fenced: its token no longer holds.
	_, err = b.ledger.Complete(ctx, "a", expired.ID, expired.Token, "late")
	require.Error(t, err)
	require.Equal(t, claim.StateReceived, mustGet(t, b, expired.ID).State)

	for _, ev := range []string{"evt_review", "evt_live", "evt_done", "evt_purged", "evt_conflict"} {
		rc := b.receive(t, ev, receiptHash)
		require.False(t, rc.Adopted || rc.Inserted, ev)
		require.NotEqual(t, claim.StateReceived, rc.State, ev)
	}
	require.True(t, b.receive(t, "evt_conflict", "4444444444444444444444444444444444444444444444444444444444444444").Conflict)
	_, err = b.ledger.Complete(ctx, "a", live.ID, live.Token, "ok")
	require.NoError(t, err, "a live holder is untouched")

	// 20 concurrent deliveries of a failed record: one adopts.
	race := won("evt_race", "")
	_, err = b.ledger.Fail(ctx, "a", race.ID, race.Token, claim.Retryable, "forward: HTTP 500")
	require.NoError(t, err)
	var mu sync.Mutex
	adopted := 0
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := req("a", "evt_race")
			r.PayloadHash = receiptHash
			_ = pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
				rc, err := b.ledger.ReceiveTx(context.Background(), tx, r)
				if err == nil && rc.Adopted {
					mu.Lock()
					adopted++
					mu.Unlock()
				}
				return err
			})
		}()
	}
	wg.Wait()
	require.Equal(t, 1, adopted)
}

func mustGet(t *testing.T, b *bundle, id string) claim.Record {
	t.Helper()
	rec, err := b.ledger.Get(b.ctx, "a", id)
	require.NoError(t, err)
	return rec
}

// TestReceivePlainDuplicateCost: a plain redelivery of a completed or a
// received record (one with its inbox row) is decided by the statement's
// snapshot read alone, as before adoption: the plan reads claims once and
// never runs the adopt lookup or an inbox_events probe.
func TestReceivePlainDuplicateCost(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	ctx := b.ctx
	// A received record (made by the door) and a completed one.
	received := b.receive(t, "evt_received", receiptHash)
	require.True(t, received.Inserted)
	done := b.receive(t, "evt_done", receiptHash)
	r := req("a", "evt_done")
	res, err := b.ledger.Claim(ctx, r)
	require.NoError(t, err)
	require.Equal(t, claim.Won, res.Outcome)
	_, err = b.ledger.Complete(ctx, "a", done.ID, res.Token, "ref")
	require.NoError(t, err)

	for _, ev := range []string{"evt_received", "evt_done"} {
		r := req("a", ev)
		r.PayloadHash = receiptHash
		var plan []byte
		err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF, FORMAT JSON) "+claim.ReceiveSQL,
				b.ledger.ReceiveArgs(r)...).Scan(&plan); err != nil {
				return err
			}
			return errRollback // EXPLAIN ANALYZE ran it: leave nothing behind
		})
		require.ErrorIs(t, err, errRollback)
		var doc []struct{ Plan planNode }
		require.NoError(t, json.Unmarshal(plan, &doc))
		scans := map[string]float64{}
		doc[0].Plan.walk(func(n planNode) {
			if n.Relation != "" && n.Operation == "" {
				scans[n.Relation] += n.Loops
			}
		})
		require.Equal(t, 1.0, scans["claims"], "%s: claims read once (the snapshot's record): %s", ev, plan)
		require.Zero(t, scans["inbox_events"], "%s: no inbox_events probe: %s", ev, plan)
	}
}

var errRollback = errors.New("rolled back")

// planNode is a node of EXPLAIN (FORMAT JSON).
type planNode struct {
	Relation  string     `json:"Relation Name"`
	Operation string     `json:"Operation"`
	Loops     float64    `json:"Actual Loops"`
	Plans     []planNode `json:"Plans"`
}

func (n planNode) walk(f func(planNode)) {
	f(n)
	for _, c := range n.Plans {
		c.walk(f)
	}
}
