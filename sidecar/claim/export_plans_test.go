package claim

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
)

// The multi-row statements, for the tests that read their plan counts.
const (
	ClaimManySQL  = dbsqlc.ClaimMany
	SettleManySQL = dbsqlc.SettleMany
)

// ReceiveSQL is the ingest door's statement, for the test that reads its
// plan.
const ReceiveSQL = dbsqlc.Receive

// ReceiveArgs are ReceiveSQL's arguments for r, in its parameters' order.
func (l *Ledger) ReceiveArgs(r Request) []any {
	b := &pgx.Batch{}
	_, _ = queries.Receive(context.Background(), db.Queue(b), l.receiveParams(r))
	return b.QueuedQueries[0].Arguments
}

// ReconcileDiscoverStatement is discovery's statement and arguments under
// the ledger's policies; ok false when no reconciler is configured.
func (l *Ledger) ReconcileDiscoverStatement(limit int) (sql string, args []any, ok bool) {
	discover, ok := l.reconcileDiscovery(limit)
	if !ok {
		return "", nil, false
	}
	b := &pgx.Batch{}
	_, _ = discover(context.Background(), db.Queue(b))
	return b.QueuedQueries[0].SQL, b.QueuedQueries[0].Arguments, true
}
