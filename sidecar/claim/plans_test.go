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
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// Plan caching: no claim, complete or fail pays for a fresh plan. The
// ledger's statements are prepared once per pooled connection (pgx's
// statement cache), and PostgreSQL counts, per prepared statement of a
// session, the runs on a custom plan (planned for those very arguments)
// and on the cached generic plan (pg_prepared_statements).
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
	db.ConfigurePool(cfg)
	one, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(one.Close)
	sizes := newGroupSizes()
	return &planBundle{ctx: ctx, direct: direct, one: one, ledger: groupLedger(t, one, sizes, gc), sizes: sizes}
}

// seedOpen gives the claims table the shape of a busy ledger, n open
// (processing) records of another tenant, and fresh statistics. On a
// near-empty table the planner may find a scan of the few open records as
// cheap as one lookup per row, and the settle statement's generic plan
// would win for that reason alone: no test of the plan choice.
func (b *planBundle) seedOpen(t *testing.T, n int) {
	t.Helper()
	_, err := b.direct.Exec(b.ctx, `INSERT INTO claims (tenant, source, event_id, state, last_outcome, attempt,
		max_attempts, lease_policy, backoff_base, backoff_cap, claim_token, lease_until, claimed_at)
		SELECT 'seed', 'stripe', 'evt_seed_' || g, 'processing', 'won', 1, 5, 'review', 1, 60, gen_random_uuid(),
			now() + interval '1 hour', now()
		FROM generate_series(1, $1::int) g`, n)
	require.NoError(t, err)
	_, err = b.direct.Exec(b.ctx, `ANALYZE claims`)
	require.NoError(t, err)
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

// The multi-row statements, claims (batches and groups) and settles
// (complete and fail batches and groups), run on their generic plan every
// time, whatever the number of rows: PostgreSQL would plan each run for
// its arguments (a custom plan knows the arrays' lengths, the generic one
// assumes ten rows and so always looks dearer for a few), so the ledger
// asks for the generic plan in their transaction, and not even the first
// runs are planned afresh.
func TestMultiRowStatementsRunOnTheGenericPlan(t *testing.T) {
	t.Parallel()
	b := setupPlans(t, claim.GroupConfig{Workers: 1, MaxItems: 64})
	b.seedOpen(t, 20000)

	claimStatements, settleStatements := 0, 0
	var held []claim.Result
	for i := range 12 {
		n := 2 + i%4
		var reqs []claim.Request
		for k := range n {
			reqs = append(reqs, req("a", fmt.Sprintf("evt_%d_%d", i, k)))
		}
		rounds := 1
		if i == 5 {
			reqs = append(reqs, reqs[0]) // one key twice: two statements in one pipeline
			rounds = 2
		}
		rs, err := b.ledger.ClaimBatch(b.ctx, reqs)
		require.NoError(t, err)
		claimStatements += rounds
		for _, r := range rs {
			if r.Outcome == claim.Won {
				held = append(held, r)
			}
		}
	}
	for i := 0; i+4 <= len(held); i += 4 {
		four := held[i : i+4]
		if i%8 == 0 {
			items := make([]claim.Completion, len(four))
			for k, r := range four {
				items[k] = claim.Completion{ID: r.ID, Token: r.Token, ResultRef: "ref"}
			}
			out, err := b.ledger.CompleteBatch(b.ctx, "a", items)
			require.NoError(t, err)
			for _, s := range out {
				require.NoError(t, s.Err)
				require.Equal(t, claim.StateCompleted, s.Record.State)
			}
		} else {
			items := make([]claim.Failure, len(four))
			for k, r := range four {
				items[k] = claim.Failure{ID: r.ID, Token: r.Token, Kind: claim.Retryable, Error: "timeout"}
			}
			out, err := b.ledger.FailBatch(b.ctx, "a", items)
			require.NoError(t, err)
			for _, s := range out {
				require.NoError(t, s.Err)
				require.Equal(t, claim.StateRetryableFailed, s.Record.State)
			}
		}
		settleStatements++
	}

	// The groups: claims run on the pool (PostgreSQL's implicit
	// transaction of one pipeline), settles in a transaction.
	h := holdTheWorker(t, b.ctx, b.direct, b.ledger)
	claimed := make(chan claim.Result, 6)
	for i := range cap(claimed) {
		go func() {
			r, err := b.ledger.Claim(b.ctx, req("a", fmt.Sprintf("evt_group_%d", i)))
			if err != nil {
				r.Outcome = claim.Outcome("error: " + err.Error())
			}
			claimed <- r
		}()
	}
	pgtest.WaitUntil(t, "the claims to queue", func() bool { n, _ := b.ledger.Queued(); return n == cap(claimed) })
	h.release()
	var group []claim.Result
	for range cap(claimed) {
		r := <-claimed
		require.Equal(t, claim.Won, r.Outcome)
		group = append(group, r)
	}
	claimStatements++
	require.Contains(t, b.sizes.of("claim"), cap(claimed), "the queued claims went as one group")

	lockerPID, unlock := pgtest.LockClaim(t, b.ctx, b.direct, group[0].ID)
	first := settleAsync(func() (claim.Record, error) {
		return b.ledger.Complete(b.ctx, "a", group[0].ID, group[0].Token, "ref")
	})
	pgtest.WaitBlockedBy(t, b.ctx, b.direct, lockerPID, "the held complete")
	var rest []chan settleAnswer
	for _, r := range group[1:] {
		rest = append(rest, settleAsync(func() (claim.Record, error) {
			return b.ledger.Complete(b.ctx, "a", r.ID, r.Token, "ref")
		}))
	}
	pgtest.WaitUntil(t, "the completes to queue", func() bool { _, n := b.ledger.Queued(); return n == len(rest) })
	unlock()
	require.NoError(t, (<-first).err)
	for _, ch := range rest {
		a := <-ch
		require.NoError(t, a.err)
		require.Equal(t, claim.StateCompleted, a.rec.State)
	}
	settleStatements++
	require.Contains(t, b.sizes.of("settle"), len(rest), "the queued completes went as one group")

	for _, c := range []struct {
		name string
		sql  string
		runs int
	}{{"claims", claim.ClaimManySQL, claimStatements}, {"settles", claim.SettleManySQL, settleStatements}} {
		generic, custom, prepared := b.plans(t, c.sql)
		require.True(t, prepared, c.name)
		require.Zero(t, custom, "%s: no run planned for its arguments", c.name)
		require.GreaterOrEqual(t, generic, int64(c.runs), "%s: every run on the generic plan", c.name)
	}
}
