package claim

import "github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"

// The statements of an execution's claims, for the test that checks their
// plans.
const (
	ListExecutionSQL = dbsqlc.ListByExecution
	ExecutionHeldSQL = dbsqlc.ExecutionHeld
)
