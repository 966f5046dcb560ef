package claim

import "github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"

// The purge statements, for the tests that check their plans.
const (
	PurgeKeysSQL      = dbsqlc.PurgeKeys
	PurgePayloadsSQL  = dbsqlc.PurgePayloads
	PurgeConflictsSQL = dbsqlc.PurgeConflicts
)

// Queued returns how many claim and settle calls wait for a group.
func (l *Ledger) Queued() (claims, settles int) {
	if l.claims != nil {
		claims = l.claims.Queued()
	}
	if l.settles != nil {
		settles = l.settles.Queued()
	}
	return claims, settles
}
