package claim_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// Plan caching. The ledger's statements are prepared once per pooled
// connection (pgx's statement cache), and PostgreSQL counts, per prepared
// statement of a session, the runs on a custom plan (planned for those
// very arguments) and on the cached generic plan (pg_prepared_statements).
// The tests run the ledger on a pool of ONE connection, so that session
// is the ledger's, and read those counts through it.

// planBundle is a ledger on a one-connection pool (one), next to a pool
// of the same database for the test's own work (direct).
type planBundle struct {
	ctx    context.Context
	direct *pgxpool.Pool
	one    *pgxpool.Pool
	ledger *claim.Ledger
	sizes  *groupSizes
}

func setupPlans(t *testing.T, gc claim.GroupConfig) *planBundle {
	t.Helper()
	ctx := context.Background()
	direct := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 4 })
	cfg, err := pgxpool.ParseConfig(direct.Config().ConnString())
	require.NoError(t, err)
	cfg.MaxConns = 1
	claim.ConfigurePool(cfg)
	one, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(one.Close)
	sizes := newGroupSizes()
	return &planBundle{ctx: ctx, direct: direct, one: one, ledger: groupLedger(t, one, sizes, gc), sizes: sizes}
}

// plans returns how many runs of the prepared statement sql the ledger's
// session planned for their arguments (custom) and ran on the cached
// generic plan (generic); prepared is false when the session never
// prepared it.
func (b *planBundle) plans(t *testing.T, sql string) (generic, custom int64, prepared bool) {
	t.Helper()
	err := b.one.QueryRow(b.ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements
		WHERE statement = $1`, sql).Scan(&generic, &custom)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, false
	}
	require.NoError(t, err)
	return generic, custom, true
}

// A one-item batch (what the n8n node sends for one item) is decided by
// the single-claim statement, which PostgreSQL plans for its arguments
// only on its first runs (five, while it compares) and then runs on its
// generic plan; the multi-row statement is never sent. Its answers are
// the batch's: won, the same request again won with the same token, a
// duplicate after the completion.
func TestOneItemBatchIsTheSingleClaim(t *testing.T) {
	t.Parallel()
	b := setupPlans(t, claim.DefaultGroupConfig())
	const n = 12
	for i := range n {
		r := req("a", fmt.Sprintf("evt_%d", i))
		r.RequestID = fmt.Sprintf("exec-1:claim:0:%d", i)
		rs, err := b.ledger.ClaimBatch(b.ctx, []claim.Request{r})
		require.NoError(t, err)
		require.Len(t, rs, 1)
		won := rs[0]
		require.Equal(t, claim.Won, won.Outcome)
		require.NotEmpty(t, won.Token)

		rs, err = b.ledger.ClaimBatch(b.ctx, []claim.Request{r})
		require.NoError(t, err)
		require.Equal(t, claim.Won, rs[0].Outcome, "the same request again: its win")
		require.Equal(t, won.Token, rs[0].Token)

		_, err = b.ledger.Complete(b.ctx, "a", won.ID, won.Token, "ref")
		require.NoError(t, err)
		rs, err = b.ledger.ClaimBatch(b.ctx, []claim.Request{r})
		require.NoError(t, err)
		require.Equal(t, claim.Duplicate, rs[0].Outcome)
		require.Equal(t, "ref", rs[0].ResultRef)
	}
	got, err := b.ledger.Get(b.ctx, "a", mustFind(t, b, "evt_0").ID)
	require.NoError(t, err)
	var outcomes []string
	for _, d := range got.Deliveries {
		outcomes = append(outcomes, d.Outcome)
	}
	require.Equal(t, []string{"won", claim.DeliveryWonReplayed, "completed", "duplicate"}, outcomes)

	_, _, prepared := b.plans(t, claim.ClaimManySQL)
	require.False(t, prepared, "a one-item batch never sends the multi-row statement")
	generic, custom, prepared := b.plans(t, claim.ClaimSQL)
	require.True(t, prepared)
	require.LessOrEqual(t, custom, int64(5), "planned for its arguments only while PostgreSQL compares the plans")
	require.GreaterOrEqual(t, generic, int64(3*n-5), "every later run on the cached generic plan")
}

func mustFind(t *testing.T, b *planBundle, event string) claim.Record {
	t.Helper()
	rec, err := b.ledger.Find(b.ctx, "a", claim.Key{Source: "stripe", EventID: event})
	require.NoError(t, err)
	return rec
}
