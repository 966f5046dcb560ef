package claim_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// statementCounter counts the statements a pool sends.
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (*statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// With no reconciler configured, discovery, Take and Expire send no
// statement: claimd without reconcilers does not read the unknown claims
// on every tick.
func TestReconcileNothingConfiguredSendsNoStatement(t *testing.T) {
	t.Parallel()
	counter := &statementCounter{}
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = counter })
	l, err := claim.New(pool, claim.Config{Policies: claim.Policies{BySource: map[string]claim.Policy{"stripe": {}}}})
	require.NoError(t, err)
	ctx := context.Background()
	r, err := l.Claim(ctx, req("a", "evt_1"))
	require.NoError(t, err)
	_, err = l.Fail(ctx, "a", r.ID, r.Token, claim.UnknownOutcome, "timeout")
	require.NoError(t, err)

	before := counter.n.Load()
	d, err := l.ReconcileDiscover(ctx, 100)
	require.NoError(t, err)
	require.Zero(t, d)
	calls, err := l.ReconcileTake(ctx, 100)
	require.NoError(t, err)
	require.Empty(t, calls)
	expired, err := l.ReconcileExpire(ctx, 100)
	require.NoError(t, err)
	require.Empty(t, expired)
	require.Equal(t, before, counter.n.Load(), "no statement sent")

	// Configured: discovery runs and finds nothing for a source without
	// a default reconciler.
	require.NoError(t, l.SetPolicies(claim.Policies{BySource: map[string]claim.Policy{"stripe": {}},
		Reconcilers: map[string]claim.ReconcilerPolicy{"crm": {}}}))
	d, err = l.ReconcileDiscover(ctx, 100)
	require.NoError(t, err)
	require.Zero(t, d)
	require.Greater(t, counter.n.Load(), before)
}

// claimsRowsRead sums, over the plan nodes of EXPLAIN (ANALYZE, FORMAT
// JSON) that read table claims, the rows they returned and the rows
// their filters removed.
func claimsRowsRead(node map[string]any) float64 {
	var n float64
	if node["Relation Name"] == "claims" {
		loops, _ := node["Actual Loops"].(float64)
		rows, _ := node["Actual Rows"].(float64)
		removed, _ := node["Rows Removed by Filter"].(float64)
		recheck, _ := node["Rows Removed by Index Recheck"].(float64)
		n += rows*loops + removed + recheck
	}
	for _, key := range []string{"Plans"} {
		if subs, ok := node[key].([]any); ok {
			for _, s := range subs {
				if m, ok := s.(map[string]any); ok {
					n += claimsRowsRead(m)
				}
			}
		}
	}
	return n
}

// Discovery reads only the unknown claims that can be reconciled: on a
// table with many unknown claims of a source without a reconciler (and
// many of a source with one, already discovered), the statement that
// discovers the two new ones reads a few claims rows, not thousands. Rows
// counted from the executed plan, not timed.
func TestReconcileDiscoverReadsOnlyReconcilableClaims(t *testing.T) {
	t.Parallel()
	ps := reconcilePolicies()
	ps.BySource["mail"] = claim.Policy{}
	b := setup(t, ps)
	_, err := b.pool.Exec(b.ctx, `INSERT INTO claims (tenant, source, event_id, state, last_outcome, attempt,
		max_attempts, lease_policy, backoff_base, backoff_cap, claim_token, claimed_at)
		SELECT 'seed', 'mail', 'evt_seed_' || g, 'unknown', 'unknown', 1, 5, 'review', 1, 60, gen_random_uuid(), now()
		FROM generate_series(1, 5000) g`)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `INSERT INTO claims (tenant, source, event_id, state, last_outcome, attempt,
		max_attempts, lease_policy, backoff_base, backoff_cap, claim_token, claimed_at)
		SELECT 'seed', 'other', 'evt_seed_' || g, 'unknown', 'unknown', 1, 5, 'review', 1, 60, gen_random_uuid(), now()
		FROM generate_series(1, 5000) g`)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `ANALYZE claims`)
	require.NoError(t, err)
	own := req("a", "evt_own")
	own.Reconciler = "crm"
	for _, r := range []claim.Request{req("a", "evt_default"), own} {
		w, err := b.ledger.Claim(b.ctx, r)
		require.NoError(t, err)
		_, err = b.ledger.Fail(b.ctx, "a", w.ID, w.Token, claim.UnknownOutcome, "timeout")
		require.NoError(t, err)
	}

	sql, args, ok := b.ledger.ReconcileDiscoverStatement(100)
	require.True(t, ok)
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	var plan []map[string]any
	var raw []byte
	require.NoError(t, tx.QueryRow(b.ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args...).Scan(&raw))
	require.NoError(t, json.Unmarshal(raw, &plan))
	read := claimsRowsRead(plan[0]["Plan"].(map[string]any))
	require.LessOrEqual(t, read, 10.0, "claims rows read by discovery: %s", raw)
	require.NoError(t, tx.Rollback(b.ctx))

	d, err := b.ledger.ReconcileDiscover(b.ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 2, d.Created)
}
