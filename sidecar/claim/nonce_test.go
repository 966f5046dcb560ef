package claim_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// A signed one-time value (verify.Result.Nonce) is bound to the delivery
// it first came with: the same delivery again passes, another is a
// replay; per tenant and scope; expired rows are bound anew and purged in
// bounded batches, live ones kept.
func TestRecordNonce(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	first := []claim.Request{{Key: claim.Key{Source: "mg", EventID: "e1"}, PayloadHash: "h1"}}
	other := []claim.Request{{Key: claim.Key{Source: "mg", EventID: "e2"}, PayloadHash: "h2"}}
	n := claim.NewNonce("t1", "mg", "token-1", time.Hour, first)

	require.NoError(t, b.ledger.RecordNonce(b.ctx, n))
	require.NoError(t, b.ledger.RecordNonce(b.ctx, n), "the same delivery again")
	require.ErrorIs(t, b.ledger.RecordNonce(b.ctx, claim.NewNonce("t1", "mg", "token-1", time.Hour, other)), claim.ErrNonceReplayed)
	// Same events, another payload hash: another delivery.
	changed := []claim.Request{{Key: claim.Key{Source: "mg", EventID: "e1"}, PayloadHash: "h1x"}}
	require.ErrorIs(t, b.ledger.RecordNonce(b.ctx, claim.NewNonce("t1", "mg", "token-1", time.Hour, changed)), claim.ErrNonceReplayed)
	require.NoError(t, b.ledger.RecordNonce(b.ctx, claim.NewNonce("t2", "mg", "token-1", time.Hour, other)), "another tenant")
	require.NoError(t, b.ledger.RecordNonce(b.ctx, claim.NewNonce("t1", "mg2", "token-1", time.Hour, other)), "another scope")

	// Expired, not purged: bound anew to the next delivery.
	_, err := b.pool.Exec(b.ctx, `UPDATE delivery_nonces SET expires_at = now() - interval '1 second'`)
	require.NoError(t, err)
	require.NoError(t, b.ledger.RecordNonce(b.ctx, claim.NewNonce("t1", "mg", "token-1", time.Hour, other)))
	require.ErrorIs(t, b.ledger.RecordNonce(b.ctx, n), claim.ErrNonceReplayed)

	// Five expired rows and one live: purged two at a time, the live kept.
	_, err = b.pool.Exec(b.ctx, `DELETE FROM delivery_nonces`)
	require.NoError(t, err)
	for i := range 6 {
		require.NoError(t, b.ledger.RecordNonce(b.ctx, claim.NewNonce("t1", "mg", fmt.Sprint("tok-", i), time.Hour, first)))
	}
	_, err = b.pool.Exec(b.ctx, `UPDATE delivery_nonces SET expires_at = now() - interval '1 minute'
		WHERE nonce_hash <> (SELECT nonce_hash FROM delivery_nonces ORDER BY nonce_hash LIMIT 1)`)
	require.NoError(t, err)
	res, err := b.ledger.Purge(b.ctx, 2)
	require.NoError(t, err)
	require.Equal(t, 5, res.NoncesPurged)
	var left int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM delivery_nonces WHERE expires_at > now()`).Scan(&left))
	require.Equal(t, 1, left)
	var all int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM delivery_nonces`).Scan(&all))
	require.Equal(t, 1, all)
}
