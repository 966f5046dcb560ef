package claim_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// Safe by default: a source that sets no lease policy (a configured source
// without lease_policy, or one not configured at all) gets review, and an
// expired lease goes to unknown: no claim, however many arrive, becomes a
// second winner.
func TestDefaultLeasePolicyIsReview(t *testing.T) {
	t.Parallel()
	require.Equal(t, claim.Review, claim.Policy{}.WithDefaults().LeasePolicy)
	ps := claim.Policies{BySource: map[string]claim.Policy{"orders": {MaxAttempts: 3}}}.WithDefaults()
	require.Equal(t, claim.Review, ps.For("orders").LeasePolicy, "a source without lease_policy inherits the default")
	require.Equal(t, claim.Review, ps.For("unconfigured").LeasePolicy)

	b := setup(t, claim.Policies{BySource: map[string]claim.Policy{"orders": {MaxAttempts: 3}}})
	for _, source := range []string{"orders", "unconfigured"} {
		t.Run(source, func(t *testing.T) {
			r := claim.Request{Tenant: "a", Key: claim.Key{Source: source, EventID: "evt_1"}}
			first, err := b.ledger.Claim(b.ctx, r)
			require.NoError(t, err)
			require.Equal(t, claim.Won, first.Outcome)
			require.Equal(t, claim.Review, first.LeasePolicy)
			b.travel(t, first.ID, time.Hour)

			// A storm of redeliveries after the lease ran out: not one wins.
			const n = 20
			results := make([]claim.Result, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					results[i], errs[i] = b.ledger.Claim(b.ctx, r)
				}()
			}
			wg.Wait()
			for i := range n {
				require.NoError(t, errs[i])
				require.Equal(t, claim.Unknown, results[i].Outcome, "claim %d", i)
				require.Empty(t, results[i].Token)
			}
			got, err := b.ledger.Get(b.ctx, "a", first.ID)
			require.NoError(t, err)
			require.Equal(t, claim.StateUnknown, got.State)
			require.Equal(t, 1, got.Attempt, "no second attempt")
			require.Equal(t, "lease expired under lease policy review", got.LastError)
			for _, d := range got.Deliveries {
				if d.Outcome == string(claim.Won) {
					require.Equal(t, 1, d.Attempt, "the only win is the first")
				}
			}
			// The holder that ran the effect may still report it.
			done, err := b.ledger.Complete(b.ctx, "a", first.ID, first.Token, "ref_1")
			require.NoError(t, err)
			require.Equal(t, claim.StateCompleted, done.State)
		})
	}

	// The sweep moves an expired default-policy lease to unknown without
	// any claim.
	s, err := b.ledger.Claim(b.ctx, claim.Request{Tenant: "a", Key: claim.Key{Source: "orders", EventID: "evt_sweep"}})
	require.NoError(t, err)
	b.travel(t, s.ID, time.Hour)
	n, err := b.ledger.SweepExpiredLeases(b.ctx, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	again, err := b.ledger.Claim(b.ctx, claim.Request{Tenant: "a", Key: claim.Key{Source: "orders", EventID: "evt_sweep"}})
	require.NoError(t, err)
	require.Equal(t, claim.Unknown, again.Outcome)
}

// A claim may carry its own lease policy. It is stored when the claim wins
// and governs the lease it won; any other outcome leaves the stored policy.
func TestClaimLeasePolicy(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{BySource: map[string]claim.Policy{"idem": {LeasePolicy: claim.Reclaim}}})
	with := func(event string, p claim.LeasePolicy) claim.Request {
		r := req("a", event)
		r.LeasePolicy = p
		return r
	}

	t.Run("absent: the source's", func(t *testing.T) {
		w, err := b.ledger.Claim(b.ctx, with("evt_src", ""))
		require.NoError(t, err)
		require.Equal(t, claim.Review, w.LeasePolicy, "stripe has no policy: the default")
		r := claim.Request{Tenant: "a", Key: claim.Key{Source: "idem", EventID: "evt_src"}}
		w, err = b.ledger.Claim(b.ctx, r)
		require.NoError(t, err)
		require.Equal(t, claim.Reclaim, w.LeasePolicy)
		w, err = b.ledger.Claim(b.ctx, claim.Request{Tenant: "a", Key: claim.Key{Source: "idem", EventID: "evt_own"},
			LeasePolicy: claim.Review})
		require.NoError(t, err)
		require.Equal(t, claim.Review, w.LeasePolicy, "the claim's own wins over the source's")
	})

	t.Run("reclaim on a review source: an expired lease is won again", func(t *testing.T) {
		first, err := b.ledger.Claim(b.ctx, with("evt_r", claim.Reclaim))
		require.NoError(t, err)
		require.Equal(t, claim.Won, first.Outcome)
		require.Equal(t, claim.Reclaim, first.LeasePolicy)
		// in_progress and a replay change nothing.
		ip, err := b.ledger.Claim(b.ctx, with("evt_r", claim.Review))
		require.NoError(t, err)
		require.Equal(t, claim.InProgress, ip.Outcome)
		require.Equal(t, claim.Reclaim, ip.LeasePolicy, "in_progress leaves the stored policy")
		b.travel(t, first.ID, time.Hour)
		// The expired lease is judged by its holder's policy (reclaim); the
		// new winner stores its own (absent: the source's, review).
		second, err := b.ledger.Claim(b.ctx, with("evt_r", ""))
		require.NoError(t, err)
		require.Equal(t, claim.Won, second.Outcome)
		require.Equal(t, 2, second.Attempt)
		require.Equal(t, claim.Review, second.LeasePolicy)
		_, err = b.ledger.Complete(b.ctx, "a", first.ID, first.Token, "late")
		require.Equal(t, apperr.LeaseLost, apperr.CodeOf(err))
		b.travel(t, first.ID, time.Hour)
		// Now the holder won under review: a reclaim claim cannot win it.
		third, err := b.ledger.Claim(b.ctx, with("evt_r", claim.Reclaim))
		require.NoError(t, err)
		require.Equal(t, claim.Unknown, third.Outcome)
		require.Equal(t, claim.Review, third.LeasePolicy)
		require.Equal(t, 2, third.Attempt)
	})

	t.Run("review on a reclaim source: an expired lease goes to unknown", func(t *testing.T) {
		r := claim.Request{Tenant: "a", Key: claim.Key{Source: "idem", EventID: "evt_v"}, LeasePolicy: claim.Review}
		first, err := b.ledger.Claim(b.ctx, r)
		require.NoError(t, err)
		require.Equal(t, claim.Review, first.LeasePolicy)
		b.travel(t, first.ID, time.Hour)
		r.LeasePolicy = claim.Reclaim
		u, err := b.ledger.Claim(b.ctx, r)
		require.NoError(t, err)
		require.Equal(t, claim.Unknown, u.Outcome)
		require.Equal(t, claim.Review, u.LeasePolicy)
	})

	t.Run("a retry after a failure stores the new winner's policy", func(t *testing.T) {
		first, err := b.ledger.Claim(b.ctx, with("evt_f", claim.Review))
		require.NoError(t, err)
		_, err = b.ledger.Fail(b.ctx, "a", first.ID, first.Token, claim.Retryable, "503")
		require.NoError(t, err)
		rl, err := b.ledger.Claim(b.ctx, with("evt_f", claim.Reclaim))
		require.NoError(t, err)
		require.Equal(t, claim.RetryLater, rl.Outcome)
		require.Equal(t, claim.Review, rl.LeasePolicy, "retry_later leaves the stored policy")
		b.travel(t, first.ID, time.Hour)
		second, err := b.ledger.Claim(b.ctx, with("evt_f", claim.Reclaim))
		require.NoError(t, err)
		require.Equal(t, claim.Won, second.Outcome)
		require.Equal(t, claim.Reclaim, second.LeasePolicy)
		// …and its expiry follows it.
		b.travel(t, first.ID, time.Hour)
		third, err := b.ledger.Claim(b.ctx, with("evt_f", claim.Review))
		require.NoError(t, err)
		require.Equal(t, claim.Won, third.Outcome)
		require.Equal(t, 3, third.Attempt)
		require.Equal(t, claim.Review, third.LeasePolicy)
	})

	t.Run("duplicate and replay leave the stored policy", func(t *testing.T) {
		r := with("evt_d", claim.Reclaim)
		r.RequestID = "exec_1:Claim:0:0"
		w, err := b.ledger.Claim(b.ctx, r)
		require.NoError(t, err)
		r.LeasePolicy = claim.Review
		replay, err := b.ledger.Claim(b.ctx, r)
		require.NoError(t, err)
		require.Equal(t, claim.Won, replay.Outcome)
		require.Equal(t, w.Token, replay.Token)
		require.Equal(t, claim.Reclaim, replay.LeasePolicy, "a replay is the same claim")
		_, err = b.ledger.Complete(b.ctx, "a", w.ID, w.Token, "ref")
		require.NoError(t, err)
		d, err := b.ledger.Claim(b.ctx, with("evt_d", claim.Review))
		require.NoError(t, err)
		require.Equal(t, claim.Duplicate, d.Outcome)
		require.Equal(t, claim.Reclaim, d.LeasePolicy)
	})

	t.Run("a received record takes the winning claim's", func(t *testing.T) {
		rc, err := b.ledger.ReceiveTx(b.ctx, b.pool, req("a", "evt_in"))
		require.NoError(t, err)
		require.Equal(t, claim.Review, rc.LeasePolicy)
		w, err := b.ledger.Claim(b.ctx, with("evt_in", claim.Reclaim))
		require.NoError(t, err)
		require.Equal(t, claim.Won, w.Outcome)
		require.Equal(t, claim.Reclaim, w.LeasePolicy)
	})

	t.Run("batch: each item its own", func(t *testing.T) {
		res, err := b.ledger.ClaimBatch(b.ctx, []claim.Request{with("evt_b1", claim.Reclaim), with("evt_b2", ""),
			with("evt_b3", claim.Review), with("evt_b1", claim.Review)})
		require.NoError(t, err)
		require.Equal(t, claim.Reclaim, res[0].LeasePolicy)
		require.Equal(t, claim.Review, res[1].LeasePolicy)
		require.Equal(t, claim.Review, res[2].LeasePolicy)
		require.Equal(t, claim.InProgress, res[3].Outcome)
		require.Equal(t, claim.Reclaim, res[3].LeasePolicy, "the second claim of evt_b1 did not win")
	})

	t.Run("any other value is invalid and writes nothing", func(t *testing.T) {
		var before int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM claims`).Scan(&before))
		for _, p := range []claim.LeasePolicy{"Reclaim", "REVIEW", "sometimes", " review"} {
			_, err := b.ledger.Claim(b.ctx, with("evt_bad", p))
			e := apperr.As(err)
			require.NotNil(t, e, "%q", p)
			require.Equal(t, apperr.Invalid, e.Code)
			require.Equal(t, "lease_policy", e.Field)
			_, err = b.ledger.ReceiveTx(b.ctx, b.pool, with("evt_bad", p))
			require.Equal(t, apperr.Invalid, apperr.CodeOf(err))
		}
		var after int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM claims`).Scan(&after))
		require.Equal(t, before, after)
	})
}
