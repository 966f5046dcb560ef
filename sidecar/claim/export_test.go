package claim

// The purge statements, for the tests that check their plans.
const (
	PurgeKeysSQL      = purgeKeysSQL
	PurgePayloadsSQL  = purgePayloadsSQL
	PurgeConflictsSQL = purgeConflictsSQL
)

// Queued returns how many claim and settle calls wait for a group.
func (l *Ledger) Queued() (claims, settles int) {
	if l.claims != nil {
		l.claims.mu.Lock()
		claims = len(l.claims.queue)
		l.claims.mu.Unlock()
	}
	if l.settles != nil {
		l.settles.mu.Lock()
		settles = len(l.settles.queue)
		l.settles.mu.Unlock()
	}
	return claims, settles
}
