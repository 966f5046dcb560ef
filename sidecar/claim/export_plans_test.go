package claim

// The multi-row statements, for the tests that read their plan counts.
var (
	ClaimManySQL  = claimManySQL
	SettleManySQL = settleManySQL
)
