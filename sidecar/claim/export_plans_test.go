package claim

// The multi-row claim statement, for the tests that read its plan counts.
var ClaimManySQL = claimManySQL
