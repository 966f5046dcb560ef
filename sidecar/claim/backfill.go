package claim

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
)

// Gap detection and backfill (package backfill) ask the ledger which of
// the events a provider lists it holds, and store the missed ones.

// knownKeysSQL returns the event ids among $3 that tenant $1 holds in
// source (scope) $2, through the key's unique index.
const knownKeysSQL = `SELECT event_id FROM claims
	WHERE tenant = $1 AND source = $2 AND event_id = ANY($3::text[]) AND action = ''`

// KnownKeys returns the subset of ids that the tenant's source (a dedupe
// scope) holds a record of, whatever its state. Errors as db.Error maps
// them.
func (l *Ledger) KnownKeys(ctx context.Context, tenant, source string, ids []string) (map[string]bool, error) {
	out := make(map[string]bool, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := l.pool.Query(ctx, knownKeysSQL, tenant, source, ids)
	if err != nil {
		return nil, db.Error(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, db.Error(err)
		}
		out[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, db.Error(err)
	}
	return out, nil
}

// receiveBackfilledSQL stores an inbox record claimd made from the
// provider's own copy of an event (origin 'backfill'), unless the key
// exists (the real delivery came first: nothing is written). The record
// has no receipt hash: the provider's API may render the event otherwise
// than its delivery (Stripe renders list data at the event's api_version),
// so the late real delivery adopts its own receipt hash in receiveSQL
// (COALESCE) and is a duplicate, never a conflict. The copy's hash is in
// the delivery log's received row.
//
// $1 … $11 as receiveSQL's first eleven, $12 the delivery-log detail.
const receiveBackfilledSQL = `
WITH c AS (
	INSERT INTO claims (tenant, source, event_id, action, event_type, state, last_outcome,
		attempt, max_attempts, lease_policy, backoff_base, backoff_cap, receipt_hash, object_id, object_version, origin)
	VALUES ($1::text, $2::text, $3::text, '', $4::text, 'received', 'received', 0, $8::int, $9::text,
		$10::float8, $11::float8, NULL, $6::text, $7::bigint, 'backfill')
	ON CONFLICT (tenant, source, event_id, action) DO NOTHING
	RETURNING id, attempt
), log AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, payload_hash, detail)
	SELECT id, 'received', attempt, $5::text, $12::text FROM c
)
SELECT id::text FROM c`

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
	args := []any{r.Tenant, r.Source, r.EventID, nullable(r.EventType),
		nullable(r.PayloadHash), nullable(r.ObjectID), r.ObjectVersion, p.MaxAttempts,
		string(r.leasePolicy(p)), p.BackoffBase.Seconds(), p.BackoffCap.Seconds(), detail}
	var id string
	err := tx.QueryRow(ctx, receiveBackfilledSQL, args...).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, db.Error(err)
	}
	return id, true, nil
}
