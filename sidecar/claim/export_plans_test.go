package claim

import "github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"

// The multi-row statements, for the tests that read their plan counts.
const (
	ClaimManySQL  = dbsqlc.ClaimMany
	SettleManySQL = dbsqlc.SettleMany
)

// ReceiveSQL is the ingest door's statement, for the test that reads its
// plan.
var ReceiveSQL = receiveSQL

// ReceiveArgs are ReceiveSQL's arguments for r.
func (l *Ledger) ReceiveArgs(r Request) []any { return l.receiveArgs(r) }

// ReconcileDiscoverStatement is discovery's statement and arguments under
// the ledger's policies; ok false when no reconciler is configured.
func (l *Ledger) ReconcileDiscoverStatement(limit int) (sql string, args []any, ok bool) {
	return l.reconcileDiscoverArgs(limit)
}
