package claim

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
)

// Gap detection and backfill (package backfill) ask the ledger which of
// the events a provider lists it holds, and store the missed ones.

// KnownKeys returns the subset of ids that the tenant's source (a dedupe
// scope) holds a record of, whatever its state. Errors as db.Error maps
// them.
func (l *Ledger) KnownKeys(ctx context.Context, tenant, source string, ids []string) (map[string]bool, error) {
	out := make(map[string]bool, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	known, err := queries.KnownEventIDs(ctx, l.pool, dbsqlc.KnownEventIDsParams{Tenant: tenant, Source: source, EventIDs: ids})
	if err != nil {
		return nil, db.Error(err)
	}
	for _, id := range known {
		out[id] = true
	}
	return out, nil
}

// ReceiveBackfilledTx stores r as an inbox record of origin backfill on
// tx (the caller's transaction, which inserts its inbox row and dispatch
// job), logging it 'received' with detail. It returns the record's id and
// true, or "" and false when the key exists already (nothing written).
// r.PayloadHash is the copy's hash, kept in the log only. Errors: Invalid
// for a bad request, else db.Error's.
func (l *Ledger) ReceiveBackfilledTx(ctx context.Context, tx DBTX, r Request, detail string) (string, bool, error) {
	if err := l.Validate(r); err != nil {
		return "", false, err
	}
	p := l.Policy(r.Source)
	id, err := queries.ReceiveBackfilled(ctx, tx, dbsqlc.ReceiveBackfilledParams{Tenant: r.Tenant, Source: r.Source,
		EventID: r.EventID, EventType: nullable(r.EventType), PayloadHash: nullable(r.PayloadHash),
		ObjectID: nullable(r.ObjectID), ObjectVersion: r.ObjectVersion, MaxAttempts: int32(p.MaxAttempts),
		LeasePolicy: string(r.leasePolicy(p)), BackoffBaseSeconds: p.BackoffBase.Seconds(),
		BackoffCapSeconds: p.BackoffCap.Seconds(), Detail: detail})
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, db.Error(err)
	}
	return id, true, nil
}
