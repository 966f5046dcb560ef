package claim

// The ledger's write statements, for the tests that break a session at one
// of them.
var (
	ClaimSQL    = claimSQL
	CompleteSQL = completeSQL
	FailSQL     = failSQL
)
