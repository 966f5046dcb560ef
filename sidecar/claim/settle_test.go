package claim_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// countingObserver counts completions and failures per source.
type countingObserver struct {
	mu        sync.Mutex
	completed map[string]int
	failed    map[claim.FailKind]int
}

func (o *countingObserver) Claimed(string, claim.Outcome, int) {}
func (o *countingObserver) Completed(source string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.completed[source]++
}
func (o *countingObserver) Failed(_ string, kind claim.FailKind) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failed[kind]++
}

func setupObserved(t *testing.T) (*bundle, *countingObserver) {
	t.Helper()
	obs := &countingObserver{completed: map[string]int{}, failed: map[claim.FailKind]int{}}
	pool := pgtest.NewPool(t)
	l, err := claim.New(pool, claim.Config{Observer: obs, Jitter: func() float64 { return 1 }})
	require.NoError(t, err)
	return &bundle{pool: pool, ledger: l, ctx: t.Context()}, obs
}

func (b *bundle) won(t *testing.T, tenant, event string) claim.Result {
	t.Helper()
	r, err := b.ledger.Claim(b.ctx, req(tenant, event))
	require.NoError(t, err)
	require.Equal(t, claim.Won, r.Outcome)
	return r
}

func code(err error) apperr.Code {
	if e := apperr.As(err); e != nil {
		return e.Code
	}
	return ""
}

func TestCompleteBatchPerItemResultsAndObserver(t *testing.T) {
	t.Parallel()
	b, obs := setupObserved(t)
	r1, r2 := b.won(t, "a", "evt_1"), b.won(t, "a", "evt_2")
	foreign := b.won(t, "b", "evt_3")
	items := []claim.Completion{
		{ID: r2.ID, Token: r2.Token, ResultRef: "ref_2"},
		{ID: foreign.ID, Token: foreign.Token},
		{ID: r1.ID, Token: r2.Token},
		{ID: r1.ID, Token: r1.Token, ResultRef: "ref_1"},
		{ID: "not-a-uuid", Token: r1.Token},
		{ID: r1.ID, Token: r1.Token, ResultRef: "bad\x00ref"},
	}
	out, err := b.ledger.CompleteBatch(b.ctx, "a", items)
	require.NoError(t, err)
	require.Len(t, out, len(items))
	require.NoError(t, out[0].Err)
	require.Equal(t, claim.StateCompleted, out[0].Record.State)
	require.Equal(t, "ref_2", out[0].Record.ResultRef)
	require.Equal(t, apperr.NotFound, code(out[1].Err), "another tenant's record")
	require.Equal(t, apperr.LeaseLost, code(out[2].Err), "a token of another record")
	require.NoError(t, out[3].Err)
	require.Equal(t, "ref_1", out[3].Record.ResultRef)
	require.Equal(t, apperr.NotFound, code(out[4].Err))
	require.Equal(t, apperr.Invalid, code(out[5].Err))
	require.Equal(t, 2, obs.completed["stripe"])

	// Again: answered as completed, not counted again.
	again, err := b.ledger.CompleteBatch(b.ctx, "a", items[:4])
	require.NoError(t, err)
	require.NoError(t, again[0].Err)
	require.NoError(t, again[3].Err)
	require.Equal(t, claim.StateCompleted, again[3].Record.State)
	require.Equal(t, 2, obs.completed["stripe"])

	rec, err := b.ledger.Get(b.ctx, "b", foreign.ID)
	require.NoError(t, err)
	require.Equal(t, claim.StateProcessing, rec.State)
}

func TestFailBatchPerItemResultsAndObserver(t *testing.T) {
	t.Parallel()
	b, obs := setupObserved(t)
	r, p := b.won(t, "a", "evt_r"), b.won(t, "a", "evt_p")
	items := []claim.Failure{
		{ID: r.ID, Token: r.Token, Kind: claim.Retryable, Error: "smtp 451"},
		{ID: p.ID, Token: p.Token, Kind: claim.Permanent, Error: "bad\x00address"},
		{ID: p.ID, Token: p.Token, Kind: "maybe", Error: "x"},
	}
	out, err := b.ledger.FailBatch(b.ctx, "a", items)
	require.NoError(t, err)
	require.Equal(t, claim.StateRetryableFailed, out[0].Record.State)
	require.NotNil(t, out[0].Record.NextAttemptAt)
	require.Equal(t, claim.StateDeadLettered, out[1].Record.State)
	require.Equal(t, "badaddress", out[1].Record.LastError, "stored as Fail stores it")
	require.Equal(t, apperr.Invalid, code(out[2].Err))
	require.Equal(t, map[claim.FailKind]int{claim.Retryable: 1, claim.Permanent: 1}, obs.failed)

	again, err := b.ledger.FailBatch(b.ctx, "a", items[:2])
	require.NoError(t, err)
	require.NoError(t, again[0].Err)
	require.NoError(t, again[1].Err, "the same report again, NUL and all, is a repeat")
	require.Equal(t, map[claim.FailKind]int{claim.Retryable: 1, claim.Permanent: 1}, obs.failed)

	// The single Fail agrees that the batch's report is its own repeat.
	rec, err := b.ledger.Fail(b.ctx, "a", r.ID, r.Token, claim.Retryable, "smtp 451")
	require.NoError(t, err)
	require.Equal(t, claim.StateRetryableFailed, rec.State)
}

// A batch is one transaction: when the database fails one item, no item of
// the batch is kept, and the caller may send it again.
func TestCompleteBatchKeepsNothingOnError(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	r1, r2 := b.won(t, "a", "evt_1"), b.won(t, "a", "evt_2")
	_, err := b.pool.Exec(b.ctx, `
		CREATE FUNCTION refuse_boom() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.result_ref = 'boom' THEN RAISE EXCEPTION 'refused by test'; END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER refuse_boom BEFORE UPDATE ON claims FOR EACH ROW EXECUTE FUNCTION refuse_boom();`)
	require.NoError(t, err)
	_, err = b.ledger.CompleteBatch(b.ctx, "a", []claim.Completion{
		{ID: r1.ID, Token: r1.Token, ResultRef: "fine"},
		{ID: r2.ID, Token: r2.Token, ResultRef: "boom"},
	})
	require.Error(t, err)
	for _, id := range []string{r1.ID, r2.ID} {
		rec, err := b.ledger.Get(b.ctx, "a", id)
		require.NoError(t, err)
		require.Equal(t, claim.StateProcessing, rec.State)
	}
	out, err := b.ledger.CompleteBatch(b.ctx, "a", []claim.Completion{
		{ID: r1.ID, Token: r1.Token, ResultRef: "fine"},
		{ID: r2.ID, Token: r2.Token, ResultRef: "fine too"},
	})
	require.NoError(t, err)
	require.NoError(t, out[0].Err)
	require.NoError(t, out[1].Err)
}

// Batches that complete the same records in opposite orders, next to
// single completions, neither deadlock nor complete anything twice.
func TestConcurrentCompleteBatches(t *testing.T) {
	t.Parallel()
	b, obs := setupObserved(t)
	const n = 20
	var fwd, rev []claim.Completion
	for i := 0; i < n; i++ {
		r := b.won(t, "a", "evt_"+string(rune('a'+i)))
		fwd = append(fwd, claim.Completion{ID: r.ID, Token: r.Token})
	}
	for i := n - 1; i >= 0; i-- {
		rev = append(rev, fwd[i])
	}
	var wg sync.WaitGroup
	errs := make(chan error, 9*n)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			items := fwd
			if i%2 == 1 {
				items = rev
			}
			out, err := b.ledger.CompleteBatch(b.ctx, "a", items)
			if err != nil {
				errs <- err
				return
			}
			for _, o := range out {
				if o.Err != nil {
					errs <- o.Err
				}
			}
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := fwd[i]
			if _, err := b.ledger.Complete(b.ctx, "a", c.ID, c.Token, ""); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, n, obs.completed["stripe"], "each record completed once")
}
