package claim

// The statements of an execution's claims, for the test that checks their
// plans.
const (
	ListExecutionSQL = listExecutionSQL
	ExecutionHeldSQL = executionHeldSQL
)
