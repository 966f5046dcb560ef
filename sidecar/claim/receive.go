package claim

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
)

// Receipt is the result of storing a provider event in the inbox.
type Receipt struct {
	Record
	// Inserted is true when this delivery created the inbox record; false
	// for a redelivery of a known key.
	Inserted bool
	// Adopted is true when this delivery adopted a record of its key that
	// had no inbox row and was not settled (made by a claim: an ingest door
	// in shadow, see Receive in sidecar/db/queries/claim.sql): the record is now received, as if this
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
// payload (Receipt.Adopted; see Receive in sidecar/db/queries/claim.sql): the caller stores it as for
// a new record.
// Errors: Invalid for a bad request, Unavailable, or internal.
func (l *Ledger) ReceiveTx(ctx context.Context, q DBTX, r Request) (Receipt, error) {
	if err := l.Validate(r); err != nil {
		return Receipt{}, err
	}
	row, err := queries.Receive(ctx, q, l.receiveParams(r))
	if err != nil {
		return Receipt{}, db.Error(err)
	}
	return receiptOf(row, r), nil
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
	queue := db.Queue(b)
	for _, i := range order {
		_, _ = queries.Receive(ctx, queue, l.receiveParams(reqs[i]))
	}
	out := make([]Receipt, len(reqs))
	results := db.Results(tx.SendBatch(ctx, b))
	for _, i := range order {
		row, err := queries.Receive(ctx, results, dbsqlc.ReceiveParams{})
		if err != nil {
			results.Close()
			return nil, db.Error(err)
		}
		out[i] = receiptOf(row, reqs[i])
	}
	if err := results.Close(); err != nil {
		return nil, db.Error(err)
	}
	return out, nil
}

// receiveParams are Receive's arguments for r.
func (l *Ledger) receiveParams(r Request) dbsqlc.ReceiveParams {
	p := l.Policy(r.Source)
	return dbsqlc.ReceiveParams{Tenant: r.Tenant, Source: r.Source, EventID: r.EventID,
		EventType: nullable(r.EventType), ReceiptHash: nullable(r.PayloadHash), ObjectID: nullable(r.ObjectID),
		ObjectVersion: r.ObjectVersion, MaxAttempts: int32(p.MaxAttempts), LeasePolicy: string(r.leasePolicy(p)),
		BackoffBaseSeconds: p.BackoffBase.Seconds(), BackoffCapSeconds: p.BackoffCap.Seconds(),
		Door: nullable(r.Door), Fingerprint: r.Fingerprint, Retry: nullable(r.RetrySignal)}
}

// receiptOf is the Receipt of the row Receive returned for r.
func receiptOf(row dbsqlc.ReceiveRow, r Request) Receipt {
	rec := recordOf(dbsqlc.RecordRow{ID: row.ID, Tenant: row.Tenant, Source: row.Source, EventID: row.EventID,
		Action: row.Action, EventType: row.EventType, State: row.State, LastOutcome: row.LastOutcome,
		Attempt: row.Attempt, MaxAttempts: row.MaxAttempts, LeasePolicy: row.LeasePolicy, LeaseUntil: row.LeaseUntil,
		NextAttemptAt: row.NextAttemptAt, PayloadHash: row.PayloadHash, ResultRef: row.ResultRef,
		LastError: row.LastError, ObjectID: row.ObjectID, ObjectVersion: row.ObjectVersion,
		ConflictCount: row.ConflictCount, CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt,
		ClaimedAt: row.ClaimedAt, CompletedAt: row.CompletedAt, ClaimToken: row.ClaimToken,
		ReceiptHash: row.ReceiptHash, Origin: row.Origin, Reconciler: row.Reconciler})
	rc := Receipt{Record: rec, Inserted: row.Inserted, Adopted: row.Adopted, Cause: Cause(row.Cause)}
	rc.Conflict = !rc.Inserted && !rc.Adopted && rc.ReceiptHash != "" && r.PayloadHash != "" && rc.ReceiptHash != r.PayloadHash
	return rc
}
