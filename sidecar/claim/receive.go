package claim

import "context"

// Receipt is the result of storing a provider event in the inbox.
type Receipt struct {
	Record
	// Inserted is true when this delivery created the inbox record; false
	// for a redelivery of a known key.
	Inserted bool
	// Conflict is true when the key was known with a different payload hash.
	Conflict bool
}

// ReceiveTx stores a verified provider event as an inbox record in state
// received, on db (the caller's transaction, so the dispatch job can be
// inserted atomically with it: a transactional outbox). A known key is
// reported, not changed, except that a differing payload hash counts a
// conflict (r.PayloadHash is compared with the record's ReceiptHash, the
// provider view, never with the claims' view); every delivery is written to the delivery log. The record is
// claimed later by the n8n workflow with the same key (received → won).
// Errors: Invalid for a bad request, Unavailable, or internal.
func (l *Ledger) ReceiveTx(ctx context.Context, db DBTX, r Request) (Receipt, error) {
	if err := l.Validate(r); err != nil {
		return Receipt{}, err
	}
	p := l.Policy(r.Source)
	var rc Receipt
	row := db.QueryRow(ctx, receiveSQL, r.Tenant, r.Source, r.EventID, nullable(r.EventType),
		nullable(r.PayloadHash), nullable(r.ObjectID), r.ObjectVersion, p.MaxAttempts,
		string(r.leasePolicy(p)), p.BackoffBase.Seconds(), p.BackoffCap.Seconds())
	rec, err := scanRecord(row, &rc.Inserted)
	if err != nil {
		return Receipt{}, DBError(err)
	}
	rc.Record = rec
	rc.Conflict = !rc.Inserted && rc.ReceiptHash != "" && r.PayloadHash != "" && rc.ReceiptHash != r.PayloadHash
	return rc, nil
}
