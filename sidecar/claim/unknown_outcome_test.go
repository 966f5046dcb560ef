package claim_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgfault"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// proxied is a ledger whose pool reaches PostgreSQL through a pgfault
// proxy, and a pool of its own (direct) to look at what was committed.
type proxied struct {
	*bundle
	proxy  *pgfault.Proxy
	direct *pgxpool.Pool
}

func setupProxied(t *testing.T) *proxied {
	t.Helper()
	var proxy *pgfault.Proxy
	var direct string
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) {
		direct = c.ConnString()
		proxy = pgfault.New(t, direct)
		pc, err := pgxpool.ParseConfig(proxy.URL(direct))
		require.NoError(t, err)
		c.ConnConfig.Host, c.ConnConfig.Port, c.ConnConfig.Fallbacks = pc.ConnConfig.Host, pc.ConnConfig.Port, nil
	})
	dp, err := pgxpool.New(t.Context(), direct)
	require.NoError(t, err)
	t.Cleanup(dp.Close)
	l, err := claim.New(pool, claim.Config{Jitter: func() float64 { return 1 }})
	require.NoError(t, err)
	return &proxied{bundle: &bundle{pool: pool, ledger: l, ctx: t.Context()}, proxy: proxy, direct: dp}
}

// cut arms the proxy to break the session at the statement sql (exactly),
// and returns a check that it fired.
func (p *proxied) cut(t *testing.T, sql string, cut pgfault.Cut) func() {
	fired := p.proxy.Arm(func(s string) bool { return s == sql }, cut, false)
	return func() { t.Helper(); requireFired(t, fired) }
}

// state is the committed state and result_ref of record id.
func (p *proxied) state(t *testing.T, id string) (claim.State, string) {
	t.Helper()
	var st claim.State
	var ref *string
	require.NoError(t, p.direct.QueryRow(p.ctx, `SELECT state, result_ref FROM claims WHERE id = $1`, id).Scan(&st, &ref))
	if ref == nil {
		return st, ""
	}
	return st, *ref
}

// requireUnknown requires err to be the answer to an unknown outcome: 503
// unavailable, saying to retry the same request.
func requireUnknown(t *testing.T, err error) {
	t.Helper()
	e := apperr.As(err)
	require.NotNil(t, e, "%v", err)
	require.Equal(t, apperr.Unavailable, e.Code, "%v", err)
	require.Contains(t, e.Message, "outcome is unknown")
	require.Contains(t, e.Message, db.RetrySameRequest)
}

// The connection to PostgreSQL is lost after the server committed a
// request and before its answer arrived (a failover, a crash, a network
// fault): the request is answered Unavailable (503) with "outcome unknown,
// retry the same request", and the same request again is answered as what
// happened: a claim with the same request id gets its own win back (same
// token, same attempt), a Complete with the same token the completed record
// with its result_ref, a Fail with the same token, kind and error the
// record as that Fail left it. Single and batch alike.
func TestUnknownOutcomeRetryIsAnsweredAsWhatHappened(t *testing.T) {
	t.Parallel()
	p := setupProxied(t)

	// Claim: committed as won, answer lost.
	r := req("a", "evt_claim")
	r.RequestID = "exec-1:node:0:0"
	fired := p.cut(t, claim.ClaimSQL, pgfault.AfterReply)
	_, err := p.ledger.Claim(p.ctx, r)
	fired()
	requireUnknown(t, err)
	won, err := p.ledger.Claim(p.ctx, r)
	require.NoError(t, err)
	require.Equal(t, claim.Won, won.Outcome, "the retry gets its own win back")
	require.Equal(t, 1, won.Attempt)
	var token string
	require.NoError(t, p.direct.QueryRow(p.ctx, `SELECT claim_token::text FROM claims WHERE id = $1`, won.ID).Scan(&token))
	require.Equal(t, token, won.Token, "the token the lost answer carried")
	other := req("a", "evt_claim")
	other.RequestID = "exec-2:node:0:0"
	dup, err := p.ledger.Claim(p.ctx, other)
	require.NoError(t, err)
	require.Equal(t, claim.InProgress, dup.Outcome, "another request is still a duplicate")

	// Complete: committed, answer lost.
	fired = p.cut(t, claim.CompleteSQL, pgfault.AfterReply)
	_, err = p.ledger.Complete(p.ctx, "a", won.ID, won.Token, "inv_1")
	fired()
	requireUnknown(t, err)
	st, ref := p.state(t, won.ID)
	require.Equal(t, claim.StateCompleted, st, "the server committed the Complete")
	require.Equal(t, "inv_1", ref)
	rec, err := p.ledger.Complete(p.ctx, "a", won.ID, won.Token, "inv_1")
	require.NoError(t, err)
	require.Equal(t, claim.StateCompleted, rec.State)
	require.Equal(t, "inv_1", rec.ResultRef)

	// Fail: committed, answer lost; the same Fail is answered, another is not.
	f := p.won(t, "a", "evt_fail")
	fired = p.cut(t, claim.FailSQL, pgfault.AfterReply)
	_, err = p.ledger.Fail(p.ctx, "a", f.ID, f.Token, claim.Retryable, "smtp 451")
	fired()
	requireUnknown(t, err)
	rec, err = p.ledger.Fail(p.ctx, "a", f.ID, f.Token, claim.Retryable, "smtp 451")
	require.NoError(t, err)
	require.Equal(t, claim.StateRetryableFailed, rec.State)
	_, err = p.ledger.Fail(p.ctx, "a", f.ID, f.Token, claim.Permanent, "smtp 451")
	require.Equal(t, apperr.LeaseLost, apperr.CodeOf(err), "a different report is not a repeat")

	// Complete cut before it reached the server: the retry does it.
	c := p.won(t, "a", "evt_before")
	fired = p.cut(t, claim.CompleteSQL, pgfault.BeforeSend)
	_, err = p.ledger.Complete(p.ctx, "a", c.ID, c.Token, "inv_2")
	fired()
	requireUnknown(t, err)
	st, _ = p.state(t, c.ID)
	require.Equal(t, claim.StateProcessing, st)
	rec, err = p.ledger.Complete(p.ctx, "a", c.ID, c.Token, "inv_2")
	require.NoError(t, err)
	require.Equal(t, "inv_2", rec.ResultRef)

	// ClaimBatch: the commit's answer lost.
	reqs := []claim.Request{req("a", "evt_b1"), req("a", "evt_b2")}
	reqs[0].RequestID, reqs[1].RequestID = "exec-3:n:0:0", "exec-3:n:0:1"
	fired = p.cut(t, "commit", pgfault.AfterReply)
	_, err = p.ledger.ClaimBatch(p.ctx, reqs)
	fired()
	requireUnknown(t, err)
	results, err := p.ledger.ClaimBatch(p.ctx, reqs)
	require.NoError(t, err)
	for i, res := range results {
		require.Equal(t, claim.Won, res.Outcome, i)
		require.NoError(t, p.direct.QueryRow(p.ctx, `SELECT claim_token::text FROM claims WHERE id = $1`, res.ID).Scan(&token))
		require.Equal(t, token, res.Token, i)
	}

	// CompleteBatch: the commit's answer lost.
	items := []claim.Completion{{ID: results[0].ID, Token: results[0].Token, ResultRef: "ref_b1"},
		{ID: results[1].ID, Token: results[1].Token, ResultRef: "ref_b2"}}
	fired = p.cut(t, "commit", pgfault.AfterReply)
	_, err = p.ledger.CompleteBatch(p.ctx, "a", items)
	fired()
	requireUnknown(t, err)
	settled, err := p.ledger.CompleteBatch(p.ctx, "a", items)
	require.NoError(t, err)
	for i, s := range settled {
		require.NoError(t, s.Err, i)
		require.Equal(t, claim.StateCompleted, s.Record.State, i)
		require.Equal(t, items[i].ResultRef, s.Record.ResultRef, i)
	}

	// FailBatch: the commit's answer lost.
	f1, f2 := p.won(t, "a", "evt_fb1"), p.won(t, "a", "evt_fb2")
	failures := []claim.Failure{{ID: f1.ID, Token: f1.Token, Kind: claim.Permanent, Error: "400 bad address"},
		{ID: f2.ID, Token: f2.Token, Kind: claim.UnknownOutcome, Error: "timeout"}}
	fired = p.cut(t, "commit", pgfault.AfterReply)
	_, err = p.ledger.FailBatch(p.ctx, "a", failures)
	fired()
	requireUnknown(t, err)
	settled, err = p.ledger.FailBatch(p.ctx, "a", failures)
	require.NoError(t, err)
	require.NoError(t, settled[0].Err)
	require.Equal(t, claim.StateDeadLettered, settled[0].Record.State)
	require.NoError(t, settled[1].Err)
	require.Equal(t, claim.StateUnknown, settled[1].Record.State)
}

func requireFired(t *testing.T, fired <-chan struct{}) {
	t.Helper()
	select {
	case <-fired:
	default:
		t.Fatal("the proxy's trap did not fire")
	}
}
