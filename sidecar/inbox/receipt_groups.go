package inbox

import (
	"cmp"
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/group"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// Group commit of receipts.
//
// A delivery alone is one transaction of several round trips and one WAL
// flush, so that a provider posting at once through many connections
// would be capped well below what the database can store. Concurrent
// Receive calls of an Inbox therefore share transactions, as the claim
// ledger's claims and settles do (package group, the ledger's
// GroupConfig: at most Workers groups in flight, at most MaxItems
// deliveries and MaxItems events each; a group closes when it is full or
// when nothing else waits, never on a timer). A group's transaction is
// five round trips whatever its size: begin, the inbox records (one
// pipelined batch, claim.Ledger.ReceiveBatchTx), the inbox_events,
// conflict and re-arm rows (a second batch; an adopted record's inbox
// row as a new one's), the dispatch jobs (River's
// InsertManyTx, one statement) and the commit (one WAL flush). Each delivery still gets exactly the receipts it would get
// alone, and its 2xx only after the commit:
//
//   - requests are hashed and validated before they join (a refused one
//     is answered at once and never reaches a group);
//   - the rows of a group are written in key order (claim.KeyOrder) across
//     all its deliveries, so that overlapping groups, here or on other
//     replicas, lock rows in one order and never deadlock; two deliveries
//     of one event in a group are decided one after the other, in the
//     order they joined, as two transactions would be (the second is a
//     duplicate, or a conflict);
//   - a serialization failure or deadlock runs the whole group again
//     (db.RunTx); a database error that means "try again" for the whole
//     group (db.Retryable) is every delivery's answer, as it would
//     have been alone; any other error, which one delivery's rows may have
//     caused, stores each delivery again in a transaction of its own, so
//     that it fails alone and its neighbours are stored;
//   - a delivery whose context ends before its group starts is left out;
//     once started, a group of several is decided whatever one caller
//     does, and a caller whose context ends is answered as a statement cut
//     by its context (db.Error: Unavailable, outcome unknown): its
//     redelivery is a duplicate if the group committed.

// delivery is one Receive call's work: its events' requests, payloads and
// content types, in the delivery's order.
type delivery struct {
	src      *sources.Source
	reqs     []claim.Request
	payloads [][]byte
	cts      []string
	hdrJSON  []byte
	// nonce is the delivery's signed one-time value, or nil (Store).
	nonce *claim.Nonce
}

// newGroupers sets the groupers of receipts (and of the dispatcher's
// statements, dispatch_statement_groups.go) for gc; none when grouping is
// off (gc.Workers 0).
func (in *Inbox) newGroupers(gc claim.GroupConfig) {
	if gc.Workers <= 0 {
		return
	}
	d := claim.DefaultGroupConfig()
	cfg := group.Config{Workers: gc.Workers, MaxItems: cmp.Or(gc.MaxItems, d.MaxItems), Timeout: cmp.Or(gc.Timeout, d.Timeout)}
	in.newDispatchGroupers(cfg)
	cfg.MaxWeight = cfg.MaxItems // events, as many as deliveries of one event each
	var observe func(int)
	if o, ok := in.obs.(claim.GroupObserver); ok {
		observe = func(n int) { o.Grouped("ingest", n) }
	}
	in.receipts = group.New(cfg, in.runReceipts, db.Error, observe)
}

// runReceipts stores a group of deliveries (the group.Grouper's run).
func (in *Inbox) runReceipts(ctx context.Context, calls []*group.Call[*delivery, []Receipt]) {
	if len(calls) == 1 {
		calls[0].Finish(in.storeAlone(ctx, calls[0].Item))
		return
	}
	ds := make([]*delivery, len(calls))
	for i, c := range calls {
		ds[i] = c.Item
	}
	out, err := in.store(ctx, ds)
	switch {
	case err == nil:
		for i, c := range calls {
			c.Finish(out[i], nil)
		}
	case db.Retryable(err):
		for _, c := range calls {
			c.Finish(nil, err)
		}
	default:
		// Perhaps one delivery's rows: each alone, so that it fails alone.
		for _, c := range calls {
			c.Finish(in.storeAlone(ctx, c.Item))
		}
	}
}

// storeAlone stores one delivery in a transaction of its own.
func (in *Inbox) storeAlone(ctx context.Context, d *delivery) ([]Receipt, error) {
	out, err := in.store(ctx, []*delivery{d})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// receiptRow is one event of a group: delivery d, event k of it.
type receiptRow struct{ d, k int }

// store writes the events of ds in ONE READ COMMITTED transaction, run
// again on a serialization failure or deadlock (db.RunTx: every
// receipt is rewritten per run), and returns each delivery's receipts in
// its events' order. Errors are the database's (wrapped), for runReceipts
// and storeError to judge.
func (in *Inbox) store(ctx context.Context, ds []*delivery) ([][]Receipt, error) {
	var rows []receiptRow
	var reqs []claim.Request
	out := make([][]Receipt, len(ds))
	for di, d := range ds {
		out[di] = make([]Receipt, len(d.reqs))
		for k, r := range d.reqs {
			rows = append(rows, receiptRow{di, k})
			reqs = append(reqs, r)
		}
	}
	order := claim.KeyOrder(reqs) // the order ReceiveBatchTx locks rows in
	var nonces []claim.Nonce
	for _, d := range ds {
		if d.nonce != nil {
			nonces = append(nonces, *d.nonce)
		}
	}
	err := db.RunTx(ctx, in.pool, func(tx pgx.Tx) error {
		if len(nonces) > 0 {
			// Before any claims row, so that transactions lock nonces
			// and records in one order. A replayed nonce fails the whole
			// transaction: alone, the delivery is refused with nothing
			// stored; in a group, runReceipts stores each delivery
			// again alone, so only the replay is refused.
			replayed, err := claim.RecordNoncesTx(ctx, tx, nonces)
			if err != nil {
				return err
			}
			if len(replayed) > 0 {
				return claim.ErrNonceReplayed
			}
		}
		rcs, err := in.ledger.ReceiveBatchTx(ctx, tx, reqs)
		if err != nil {
			return err
		}
		// The rows that hang off each record, in the same key order: a
		// new event's inbox row, a conflict's kept body, a redelivery's
		// re-arm of a dead-lettered dispatch.
		b := &pgx.Batch{}
		queue := db.Queue(b)
		for _, i := range order {
			d, k, rc := ds[rows[i].d], rows[i].k, rcs[i]
			e := in.ledger.KeyExpiry(rc.Record)
			rcpt := Receipt{EventID: reqs[i].EventID, ClaimID: rc.ID, Status: Duplicate, KeyExpiresAt: e.At, KeyExpiry: e.Kind()}
			switch {
			case rc.Inserted, rc.Adopted:
				// A new record, or one a claim made without an inbox row
				// that this delivery adopted (claim.Receipt.Adopted: an
				// event seen by the door in shadow whose forward did not
				// complete it): stored and queued as new.
				rcpt.Status = Accepted
				_ = queries.InsertInboxEvent(ctx, queue, dbsqlc.InsertInboxEventParams{ClaimID: rc.ID, Tenant: d.src.Tenant,
					Source: d.src.Name, Body: d.payloads[k], ContentType: d.cts[k], Headers: d.hdrJSON})
			case rc.Conflict:
				rcpt.Status = Conflict
				_ = queries.InsertInboxConflict(ctx, queue, dbsqlc.InsertInboxConflictParams{ClaimID: rc.ID,
					Body: d.payloads[k], PayloadHash: reqs[i].PayloadHash})
			default:
				// A provider's redelivery: no actor, and the record is
				// the one the group found under the source's tenant.
				_, _ = queries.RearmDeadLettered(ctx, queue, dbsqlc.RearmDeadLetteredParams{ClaimID: rc.ID,
					Detail: "provider redelivery after a dead-lettered dispatch"})
			}
			rcpt.Cause = rc.Cause
			out[rows[i].d][k] = rcpt
		}
		var jobs []river.InsertManyParams
		results := db.Results(tx.SendBatch(ctx, b))
		for _, i := range order {
			d, k, rc := ds[rows[i].d], rows[i].k, rcs[i]
			stored := rc.Inserted || rc.Adopted
			var err error
			switch {
			case stored:
				err = queries.InsertInboxEvent(ctx, results, dbsqlc.InsertInboxEventParams{})
			case rc.Conflict:
				err = queries.InsertInboxConflict(ctx, results, dbsqlc.InsertInboxConflictParams{})
			default:
				var rearmed bool
				rearmed, err = queries.RearmDeadLettered(ctx, results, dbsqlc.RearmDeadLetteredParams{})
				if err == nil {
					if !rearmed {
						continue
					}
					out[rows[i].d][k].Status = Accepted
				}
			}
			if err != nil {
				results.Close()
				return err
			}
			if stored || !rc.Conflict {
				jobs = append(jobs, river.InsertManyParams{Args: DispatchArgs{ClaimID: rc.ID, Source: d.src.Name},
					InsertOpts: &river.InsertOpts{Queue: sources.QueueName(d.src.Name), MaxAttempts: riverMaxAttempts}})
			}
		}
		if err := results.Close(); err != nil {
			return err
		}
		if len(jobs) == 0 {
			return nil
		}
		if _, err := in.river.InsertManyTx(ctx, tx, jobs); err != nil {
			return fmt.Errorf("enqueue dispatch: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
