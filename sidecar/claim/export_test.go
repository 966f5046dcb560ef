package claim

// The purge statements, for the tests that check their plans.
const (
	PurgeKeysSQL      = purgeKeysSQL
	PurgePayloadsSQL  = purgePayloadsSQL
	PurgeConflictsSQL = purgeConflictsSQL
)
