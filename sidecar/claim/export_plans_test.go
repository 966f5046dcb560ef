package claim

// The multi-row statements, for the tests that read their plan counts.
var (
	ClaimManySQL  = claimManySQL
	SettleManySQL = settleManySQL
)

// ReceiveSQL is the ingest door's statement, for the test that reads its
// plan.
var ReceiveSQL = receiveSQL

// ReceiveArgs are ReceiveSQL's arguments for r.
func (l *Ledger) ReceiveArgs(r Request) []any { return l.receiveArgs(r) }
