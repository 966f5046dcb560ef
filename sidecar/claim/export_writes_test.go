package claim

import "github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"

// The ledger's write statements, for the tests that break a session at one
// of them.
const (
	ClaimSQL    = dbsqlc.ClaimOne
	CompleteSQL = dbsqlc.Complete
	FailSQL     = dbsqlc.Fail
)
