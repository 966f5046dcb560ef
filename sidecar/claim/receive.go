package claim

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
)

// Receipt is the result of storing a provider event in the inbox.
type Receipt struct {
	Record
	// Inserted is true when this delivery created the inbox record; false
	// for a redelivery of a known key.
	Inserted bool
	// Adopted is true when this delivery adopted a record of its key that
	// had no inbox row and was not settled (made by a claim: an ingest door
	// in shadow, see receiveSQL): the record is now received, as if this
	// delivery had created it, and the caller stores its inbox row and
	// dispatch job in the same transaction, as for Inserted.
	Adopted bool
	// Conflict is true when the key was known with a different payload hash.
	Conflict bool
	// Cause is why a duplicate delivery came (as logged with it), "" for
	// a new event or a conflict.
	Cause Cause
}

// ReceiveTx stores a verified provider event as an inbox record in state
// received, on q (the caller's transaction, so the dispatch job can be
// inserted atomically with it: a transactional outbox). A known key is
// reported, not changed, except that a differing payload hash counts a
// conflict (r.PayloadHash is compared with the record's ReceiptHash, the
// provider view, never with the claims' view); every delivery is written to the delivery log. The record is
// claimed later by the n8n workflow with the same key (received → won).
// A record of the key without an inbox row that is not settled (a claim
// made it: an ingest door in shadow) is adopted by a delivery of the same
// payload (Receipt.Adopted; see receiveSQL): the caller stores it as for
// a new record.
// Errors: Invalid for a bad request, Unavailable, or internal.
func (l *Ledger) ReceiveTx(ctx context.Context, q DBTX, r Request) (Receipt, error) {
	if err := l.Validate(r); err != nil {
		return Receipt{}, err
	}
	rc, err := scanReceipt(q.QueryRow(ctx, receiveSQL, l.receiveArgs(r)...), r)
	if err != nil {
		return Receipt{}, db.Error(err)
	}
	return rc, nil
}

// ReceiveBatchTx stores the verified provider events reqs as ReceiveTx
// does, on tx (the caller's transaction), as one pipelined batch (one
// round trip) sent in KeyOrder, and returns their receipts in reqs order.
// Two requests for one key are decided one after the other, in reqs
// order, as two transactions would be: the second sees the first's record
// (a duplicate, or a conflict for another payload hash). reqs must be
// valid (Validate). Errors: Unavailable, or internal (db.Error); after an
// error tx is aborted, and a serialization failure or deadlock
// (db.RetryableTx) means running the whole transaction again.
func (l *Ledger) ReceiveBatchTx(ctx context.Context, tx DBTX, reqs []Request) ([]Receipt, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	order := KeyOrder(reqs)
	b := &pgx.Batch{}
	for _, i := range order {
		b.Queue(receiveSQL, l.receiveArgs(reqs[i])...)
	}
	out := make([]Receipt, len(reqs))
	br := tx.SendBatch(ctx, b)
	for _, i := range order {
		rc, err := scanReceipt(br.QueryRow(), reqs[i])
		if err != nil {
			br.Close()
			return nil, db.Error(err)
		}
		out[i] = rc
	}
	if err := br.Close(); err != nil {
		return nil, db.Error(err)
	}
	return out, nil
}

// receiveArgs are receiveSQL's arguments for r.
func (l *Ledger) receiveArgs(r Request) []any {
	p := l.Policy(r.Source)
	return []any{r.Tenant, r.Source, r.EventID, nullable(r.EventType),
		nullable(r.PayloadHash), nullable(r.ObjectID), r.ObjectVersion, p.MaxAttempts,
		string(r.leasePolicy(p)), p.BackoffBase.Seconds(), p.BackoffCap.Seconds(),
		nullable(r.Door), r.Fingerprint, nullable(r.RetrySignal)}
}

// scanReceipt reads the row receiveSQL returned for r.
func scanReceipt(row pgx.Row, r Request) (Receipt, error) {
	var rc Receipt
	var cause string
	rec, err := scanRecord(row, &rc.Inserted, &rc.Adopted, &cause)
	if err != nil {
		return Receipt{}, err
	}
	rc.Record, rc.Cause = rec, Cause(cause)
	rc.Conflict = !rc.Inserted && !rc.Adopted && rc.ReceiptHash != "" && r.PayloadHash != "" && rc.ReceiptHash != r.PayloadHash
	return rc, nil
}
