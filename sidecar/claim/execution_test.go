package claim_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// failCounter is an Observer that counts Failed calls by source and kind.
type failCounter struct {
	mu     sync.Mutex
	failed map[string]int
}

func (*failCounter) Claimed(string, claim.Outcome, int) {}
func (*failCounter) Completed(string, time.Duration)    {}
func (f *failCounter) Failed(source string, k claim.FailKind) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed[source+" "+string(k)]++
}

func (f *failCounter) count(source string, k claim.FailKind) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed[source+" "+string(k)]
}

// setupFailCounted is setup with a failCounter as the ledger's Observer.
func setupFailCounted(t *testing.T, ps claim.Policies) (*bundle, *failCounter) {
	t.Helper()
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 40 })
	obs := &failCounter{failed: map[string]int{}}
	l, err := claim.New(pool, claim.Config{Policies: ps, Jitter: func() float64 { return 1 }, Observer: obs})
	require.NoError(t, err)
	return &bundle{pool: pool, ledger: l, ctx: context.Background()}, obs
}

// execReq is a claim of event in tenant and source by execution exec.
func execReq(tenant, source, event, exec string) claim.Request {
	return claim.Request{Tenant: tenant, Key: claim.Key{Source: source, EventID: event}, ExecutionID: exec}
}

func ids(recs []claim.Record) []string {
	out := make([]string, 0, len(recs))
	for _, r := range recs {
		out = append(out, r.ID)
	}
	return out
}

func (b *bundle) mustClaim(t *testing.T, r claim.Request, want claim.Outcome) claim.Result {
	t.Helper()
	res, err := b.ledger.Claim(b.ctx, r)
	require.NoError(t, err)
	require.Equal(t, want, res.Outcome, "%s/%s", r.Source, r.EventID)
	return res
}

func TestListByExecution(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{BySource: map[string]claim.Policy{"idem": {LeasePolicy: claim.Reclaim}}})
	list := func(f claim.ListFilter) []string {
		t.Helper()
		recs, next, err := b.ledger.List(b.ctx, "a", f)
		require.NoError(t, err)
		require.Empty(t, next)
		return ids(recs)
	}

	done := b.mustClaim(t, execReq("a", "stripe", "e_done", "E"), claim.Won)
	_, err := b.ledger.Complete(b.ctx, "a", done.ID, done.Token, "ref")
	require.NoError(t, err)
	failed := b.mustClaim(t, execReq("a", "mail", "e_failed", "E"), claim.Won)
	_, err = b.ledger.Fail(b.ctx, "a", failed.ID, failed.Token, claim.Retryable, "503")
	require.NoError(t, err)
	held := b.mustClaim(t, execReq("a", "stripe", "e_held", "E"), claim.Won)
	// Won by E, then by F after E's lease ran out (reclaim): F's now.
	moved := b.mustClaim(t, execReq("a", "idem", "e_moved", "E"), claim.Won)
	b.travel(t, moved.ID, time.Hour)
	b.mustClaim(t, execReq("a", "idem", "e_moved", "F"), claim.Won)
	// E's claim that did not win (in_progress) ties nothing to E.
	other := b.mustClaim(t, execReq("a", "stripe", "e_other", "F"), claim.Won)
	b.mustClaim(t, execReq("a", "stripe", "e_other", "E"), claim.InProgress)
	// Another tenant's claim by an execution of the same id.
	b.mustClaim(t, execReq("b", "stripe", "e_b", "E"), claim.Won)
	// Stale: no win, no tie.
	v5 := b.mustClaim(t, claim.Request{Tenant: "a", Key: claim.Key{Source: "crm", EventID: "v5"}, ObjectID: "o",
		ObjectVersion: ptr(int64(5))}, claim.Won)
	_, err = b.ledger.Complete(b.ctx, "a", v5.ID, v5.Token, "")
	require.NoError(t, err)
	stale := b.mustClaim(t, claim.Request{Tenant: "a", Key: claim.Key{Source: "crm", EventID: "v3"}, ObjectID: "o",
		ObjectVersion: ptr(int64(3)), ExecutionID: "E"}, claim.Stale)
	_ = stale

	require.Equal(t, []string{done.ID, failed.ID, held.ID}, list(claim.ListFilter{ExecutionID: "E"}),
		"E's current attempts in every state, oldest change first")
	require.Equal(t, []string{moved.ID, other.ID}, list(claim.ListFilter{ExecutionID: "F"}))
	require.Equal(t, []string{done.ID}, list(claim.ListFilter{ExecutionID: "E", State: claim.StateCompleted}))
	require.Equal(t, []string{failed.ID}, list(claim.ListFilter{ExecutionID: "E", State: claim.StateRetryableFailed}))
	require.Equal(t, []string{held.ID}, list(claim.ListFilter{ExecutionID: "E", State: claim.StateProcessing}))
	require.Empty(t, list(claim.ListFilter{ExecutionID: "E", State: claim.StateStale}))
	require.Equal(t, []string{failed.ID}, list(claim.ListFilter{ExecutionID: "E", Source: "mail"}))
	require.Empty(t, list(claim.ListFilter{ExecutionID: "nobody"}))
	recs, _, err := b.ledger.List(b.ctx, "b", claim.ListFilter{ExecutionID: "E"})
	require.NoError(t, err)
	require.Len(t, recs, 1, "tenant b sees only its own")

	// Without an execution id: unchanged, a state is required and open.
	require.Equal(t, []string{held.ID, other.ID}, list(claim.ListFilter{State: claim.StateProcessing, Source: "stripe"}))

	// Paging with the cursor.
	var paged []string
	cursor := ""
	for range 4 {
		recs, next, err := b.ledger.List(b.ctx, "a", claim.ListFilter{ExecutionID: "E", Limit: 1, Cursor: cursor})
		require.NoError(t, err)
		paged = append(paged, ids(recs)...)
		if next == "" {
			break
		}
		cursor = next
	}
	require.Equal(t, []string{done.ID, failed.ID, held.ID}, paged)

	for _, c := range []struct {
		f     claim.ListFilter
		field string
	}{
		{claim.ListFilter{ExecutionID: strings.Repeat("x", claim.MaxExecIDLen+1)}, "execution_id"},
		{claim.ListFilter{ExecutionID: "bad\x00id"}, "execution_id"},
		{claim.ListFilter{ExecutionID: "\xff"}, "execution_id"},
		{claim.ListFilter{ExecutionID: "E", State: "done"}, "state"},
		{claim.ListFilter{ExecutionID: "E", Source: "bad source"}, "source"},
		{claim.ListFilter{ExecutionID: "E", Limit: claim.MaxListLimit + 1}, "limit"},
		{claim.ListFilter{ExecutionID: "E", Cursor: "nope"}, "cursor"},
		{claim.ListFilter{}, "state"},
		{claim.ListFilter{State: claim.StateCompleted}, "state"},
	} {
		_, _, err := b.ledger.List(b.ctx, "a", c.f)
		e := apperr.As(err)
		require.NotNil(t, e, "%+v", c.f)
		require.Equal(t, apperr.Invalid, e.Code, "%+v", c.f)
		require.Equal(t, c.field, e.Field, "%+v", c.f)
	}
	_, _, err = b.ledger.List(b.ctx, "a", claim.ListFilter{ExecutionID: strings.Repeat("x", claim.MaxExecIDLen)})
	require.NoError(t, err, "200 bytes is allowed")
}

func ptr[T any](v T) *T { return &v }

// FailExecution moves each record exactly as a Fail of its token would: the
// same states, backoff and last_error as twin records failed by token.
func TestFailExecutionMovesLikeFail(t *testing.T) {
	t.Parallel()
	b, obs := setupFailCounted(t, claim.Policies{BySource: map[string]claim.Policy{"once": {MaxAttempts: 1}}})
	for _, c := range []struct {
		kind   claim.FailKind
		source string
		want   claim.State
	}{
		{claim.Retryable, "stripe", claim.StateRetryableFailed},
		{claim.Retryable, "once", claim.StateDeadLettered}, // the attempt cap
		{claim.Permanent, "stripe", claim.StateDeadLettered},
		{claim.UnknownOutcome, "stripe", claim.StateUnknown},
	} {
		t.Run(string(c.kind)+"/"+c.source, func(t *testing.T) {
			exec := "exec-" + string(c.kind) + "-" + c.source
			held := b.mustClaim(t, execReq("a", c.source, exec+"-1", exec), claim.Won)
			twin := b.mustClaim(t, execReq("a", c.source, exec+"-2", "other"), claim.Won)
			byToken, err := b.ledger.Fail(b.ctx, "a", twin.ID, twin.Token, c.kind, "the execution crashed")
			require.NoError(t, err)
			before := obs.count(c.source, c.kind)

			res, err := b.ledger.FailExecution(b.ctx, "a", claim.ExecutionFailure{ExecutionID: exec, Kind: c.kind,
				Error: "the execution crashed"})
			require.NoError(t, err)
			require.False(t, res.More)
			require.Equal(t, []string{held.ID}, ids(res.Records))
			got := res.Records[0]
			require.Equal(t, c.want, got.State)
			require.Equal(t, byToken.State, got.State)
			require.Equal(t, byToken.Attempt, got.Attempt)
			require.Equal(t, "the execution crashed", got.LastError)
			require.Nil(t, got.LeaseUntil)
			require.Equal(t, byToken.NextAttemptAt == nil, got.NextAttemptAt == nil)
			if got.NextAttemptAt != nil {
				// Jitter is pinned to 1: the full backoff (30 s) from each one's fail.
				require.WithinDuration(t, got.UpdatedAt.Add(30*time.Second), *got.NextAttemptAt, time.Second)
			}
			require.Equal(t, before+1, obs.count(c.source, c.kind), "counted like a Fail")

			// The delivery log: the fail, with the execution that failed it.
			rec, err := b.ledger.Get(b.ctx, "a", held.ID)
			require.NoError(t, err)
			last := rec.Deliveries[len(rec.Deliveries)-1]
			require.Equal(t, "failed_"+string(c.kind), last.Outcome)
			require.Equal(t, exec, last.ExecutionID)
			require.Equal(t, "the execution crashed", last.Detail)
			require.Equal(t, 1, last.Attempt)

			// The holder's own late report is refused like after any Fail.
			_, err = b.ledger.Complete(b.ctx, "a", held.ID, held.Token, "late")
			if c.want == claim.StateUnknown {
				require.NoError(t, err, "unknown may still be completed with the same token, as after a Fail")
			} else {
				require.Equal(t, apperr.LeaseLost, apperr.CodeOf(err))
			}

			// Twice is safe: nothing is held any more.
			again, err := b.ledger.FailExecution(b.ctx, "a", claim.ExecutionFailure{ExecutionID: exec, Kind: c.kind,
				Error: "the execution crashed"})
			require.NoError(t, err)
			require.Empty(t, again.Records)
			require.False(t, again.More)
		})
	}
}

// Only what the execution still holds is failed: not a record another
// execution won since, not another tenant's, not a completed one.
func TestFailExecutionFencing(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{BySource: map[string]claim.Policy{"idem": {LeasePolicy: claim.Reclaim}}})
	held := b.mustClaim(t, execReq("a", "stripe", "held", "E"), claim.Won)
	heldMail := b.mustClaim(t, execReq("a", "mail", "held_mail", "E"), claim.Won)
	// Re-won by F after E's lease ran out under reclaim.
	lost := b.mustClaim(t, execReq("a", "idem", "lost", "E"), claim.Won)
	b.travel(t, lost.ID, time.Hour)
	f := b.mustClaim(t, execReq("a", "idem", "lost", "F"), claim.Won)
	// Re-won by F after E's retryable fail.
	retried := b.mustClaim(t, execReq("a", "stripe", "retried", "E"), claim.Won)
	_, err := b.ledger.Fail(b.ctx, "a", retried.ID, retried.Token, claim.Retryable, "503")
	require.NoError(t, err)
	b.travel(t, retried.ID, time.Hour)
	fr := b.mustClaim(t, execReq("a", "stripe", "retried", "F"), claim.Won)
	// Completed by E.
	done := b.mustClaim(t, execReq("a", "stripe", "done", "E"), claim.Won)
	_, err = b.ledger.Complete(b.ctx, "a", done.ID, done.Token, "ref")
	require.NoError(t, err)
	// Tenant b, same execution id.
	other := b.mustClaim(t, execReq("b", "stripe", "held", "E"), claim.Won)
	// A claim without an execution id.
	anon := b.mustClaim(t, req("a", "anon"), claim.Won)

	snapshot := func(tenant, id string) claim.Record {
		rec, err := b.ledger.Get(b.ctx, tenant, id)
		require.NoError(t, err)
		rec.Deliveries = nil
		return rec
	}
	untouched := map[string]claim.Record{f.ID: snapshot("a", f.ID), fr.ID: snapshot("a", fr.ID),
		done.ID: snapshot("a", done.ID), anon.ID: snapshot("a", anon.ID)}
	otherBefore := snapshot("b", other.ID)

	// Narrowed to a source first.
	res, err := b.ledger.FailExecution(b.ctx, "a", claim.ExecutionFailure{ExecutionID: "E", Source: "mail",
		Kind: claim.UnknownOutcome, Error: "crashed"})
	require.NoError(t, err)
	require.Equal(t, []string{heldMail.ID}, ids(res.Records))
	res, err = b.ledger.FailExecution(b.ctx, "a", claim.ExecutionFailure{ExecutionID: "E", Kind: claim.UnknownOutcome,
		Error: "crashed"})
	require.NoError(t, err)
	require.Equal(t, []string{held.ID}, ids(res.Records))
	require.Equal(t, claim.StateUnknown, res.Records[0].State)

	for id, before := range untouched {
		require.Equal(t, before, snapshot("a", id), "record %s is not E's to fail", id)
	}
	require.Equal(t, otherBefore, snapshot("b", other.ID), "another tenant's record is untouched")
	// F still holds its claims and can finish them.
	_, err = b.ledger.Complete(b.ctx, "a", f.ID, f.Token, "ok")
	require.NoError(t, err)
	_, err = b.ledger.Complete(b.ctx, "a", fr.ID, fr.Token, "ok")
	require.NoError(t, err)
	// Tenant b's own call fails its own.
	res, err = b.ledger.FailExecution(b.ctx, "b", claim.ExecutionFailure{ExecutionID: "E", Kind: claim.Permanent, Error: "x"})
	require.NoError(t, err)
	require.Equal(t, []string{other.ID}, ids(res.Records))
}

// The fence holds while claims race the fail: of records whose lease E lost
// (expired under reclaim), each ends either failed at E's attempt or won
// by F, never F's attempt failed.
func TestFailExecutionRacesReclaims(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{BySource: map[string]claim.Policy{"idem": {LeasePolicy: claim.Reclaim}}})
	const n = 100
	reqs := make([]claim.Request, n)
	for i := range reqs {
		reqs[i] = execReq("a", "idem", fmt.Sprintf("race_%03d", i), "E")
	}
	won, err := b.ledger.ClaimBatch(b.ctx, reqs)
	require.NoError(t, err)
	for _, w := range won {
		require.Equal(t, claim.Won, w.Outcome)
	}
	_, err = b.pool.Exec(b.ctx, `UPDATE claims SET lease_until = statement_timestamp() - interval '1 second'`)
	require.NoError(t, err)

	var wg sync.WaitGroup
	reclaimed := make([]claim.Result, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := reqs[i]
			r.ExecutionID = "F"
			var err error
			reclaimed[i], err = b.ledger.Claim(b.ctx, r)
			require.NoError(t, err)
		}()
	}
	var failed claim.ExecutionFailed
	wg.Add(1)
	go func() {
		defer wg.Done()
		var err error
		failed, err = b.ledger.FailExecution(b.ctx, "a", claim.ExecutionFailure{ExecutionID: "E",
			Kind: claim.UnknownOutcome, Error: "crashed"})
		require.NoError(t, err)
	}()
	wg.Wait()

	byID := map[string]bool{}
	for _, r := range failed.Records {
		byID[r.ID] = true
		require.Equal(t, 1, r.Attempt)
		require.Equal(t, claim.StateUnknown, r.State)
	}
	for i, w := range won {
		rec, err := b.ledger.Get(b.ctx, "a", w.ID)
		require.NoError(t, err)
		switch reclaimed[i].Outcome {
		case claim.Won: // F won first: E's fail must not have touched it
			require.False(t, byID[w.ID], "%s: F's attempt was failed", w.EventID)
			require.Equal(t, claim.StateProcessing, rec.State)
			require.Equal(t, 2, rec.Attempt)
		case claim.Unknown: // E's fail came first
			require.True(t, byID[w.ID], "%s", w.EventID)
			require.Equal(t, claim.StateUnknown, rec.State)
			require.Equal(t, 1, rec.Attempt)
		default:
			t.Fatalf("%s: unexpected outcome %s", w.EventID, reclaimed[i].Outcome)
		}
		for _, d := range rec.Deliveries {
			if strings.HasPrefix(d.Outcome, "failed_") {
				require.Equal(t, 1, d.Attempt, "only E's attempt is ever failed")
			}
		}
	}
}

// One call fails at most MaxExecutionFail records and says when more remain.
func TestFailExecutionIsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	const n = claim.MaxExecutionFail + 5
	reqs := make([]claim.Request, n)
	for i := range reqs {
		reqs[i] = execReq("a", "stripe", fmt.Sprintf("bulk_%04d", i), "E")
	}
	_, err := b.ledger.ClaimBatch(b.ctx, reqs)
	require.NoError(t, err)
	f := claim.ExecutionFailure{ExecutionID: "E", Kind: claim.UnknownOutcome, Error: "crashed"}
	first, err := b.ledger.FailExecution(b.ctx, "a", f)
	require.NoError(t, err)
	require.Len(t, first.Records, claim.MaxExecutionFail)
	require.True(t, first.More)
	second, err := b.ledger.FailExecution(b.ctx, "a", f)
	require.NoError(t, err)
	require.Len(t, second.Records, 5)
	require.False(t, second.More)
	third, err := b.ledger.FailExecution(b.ctx, "a", f)
	require.NoError(t, err)
	require.Empty(t, third.Records)
	require.False(t, third.More)
	seen := map[string]bool{}
	for _, r := range append(first.Records, second.Records...) {
		require.False(t, seen[r.ID])
		seen[r.ID] = true
	}
	require.Len(t, seen, n)
}

func TestFailExecutionRefusesBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	held := b.mustClaim(t, execReq("a", "stripe", "held", "E"), claim.Won)
	for _, c := range []struct {
		f     claim.ExecutionFailure
		field string
	}{
		{claim.ExecutionFailure{Kind: claim.UnknownOutcome}, "execution_id"},
		{claim.ExecutionFailure{ExecutionID: strings.Repeat("E", claim.MaxExecIDLen+1), Kind: claim.UnknownOutcome}, "execution_id"},
		{claim.ExecutionFailure{ExecutionID: "E\x00", Kind: claim.UnknownOutcome}, "execution_id"},
		{claim.ExecutionFailure{ExecutionID: "E", Kind: "maybe"}, "retry"},
		{claim.ExecutionFailure{ExecutionID: "E", Kind: ""}, "retry"},
		{claim.ExecutionFailure{ExecutionID: "E", Source: "no spaces", Kind: claim.UnknownOutcome}, "source"},
	} {
		_, err := b.ledger.FailExecution(b.ctx, "a", c.f)
		e := apperr.As(err)
		require.NotNil(t, e, "%+v", c.f)
		require.Equal(t, apperr.Invalid, e.Code)
		require.Equal(t, c.field, e.Field)
	}
	_, err := b.ledger.FailExecution(b.ctx, "", claim.ExecutionFailure{ExecutionID: "E", Kind: claim.UnknownOutcome})
	require.Equal(t, apperr.Unauthorized, apperr.CodeOf(err))
	rec, err := b.ledger.Get(b.ctx, "a", held.ID)
	require.NoError(t, err)
	require.Equal(t, claim.StateProcessing, rec.State, "nothing was failed")
	require.Len(t, rec.Deliveries, 1)
}

// A claim waiting for the holder (Waiter) is woken when the holder's
// execution is failed, and answered as it is then.
func TestFailExecutionWakesWaiters(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	w := startWaiter(t, b)
	for _, c := range []struct {
		kind claim.FailKind
		want claim.Outcome
	}{{claim.UnknownOutcome, claim.Unknown}, {claim.Retryable, claim.RetryLater}, {claim.Permanent, claim.DeadLettered}} {
		t.Run(string(c.kind), func(t *testing.T) {
			exec := "exec-" + string(c.kind)
			h := b.mustClaim(t, execReq("a", "stripe", exec, exec), claim.Won)
			ch := waitFor(w, req("a", exec), 20*time.Second)
			b.marked(t, h.ID)
			res, err := b.ledger.FailExecution(b.ctx, "a", claim.ExecutionFailure{ExecutionID: exec, Kind: c.kind,
				Error: "crashed"})
			require.NoError(t, err)
			require.Len(t, res.Records, 1)
			got := <-ch
			require.NoError(t, got.err)
			require.Equal(t, c.want, got.res.Outcome)
			require.Less(t, got.elapsed, 10*time.Second, "woken by the notification, not by the wait's bound")
		})
	}
}

// The statements of an execution's claims read the partial index of won
// delivery-log entries, never a table whole.
func TestExecutionStatementsUseTheIndex(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	_, err := b.pool.Exec(b.ctx, `INSERT INTO claims (tenant, source, event_id, state, last_outcome, attempt,
		max_attempts, lease_policy, backoff_base, backoff_cap, claim_token, lease_until, claimed_at)
		SELECT 't' || (g % 7), 'src', 'e' || g, 'processing', 'won', 1, 5, 'review', 30, 3600,
			gen_random_uuid(), now() + interval '5 minutes', now()
		FROM generate_series(1, 20000) g`)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `INSERT INTO claim_deliveries (claim_id, outcome, attempt, execution_id)
		SELECT id, o, 1, 'x' || (row_number() OVER () % 5000)
		FROM claims, unnest(ARRAY['won', 'completed', 'in_progress']) o`)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `ANALYZE claims; ANALYZE claim_deliveries`)
	require.NoError(t, err)
	for name, c := range map[string]struct {
		sql  string
		args string // EXECUTE arguments
	}{
		// In the statements' parameters' order: tenant, state, source,
		// after_at, after_id, max_rows, execution_id; tenant, source,
		// max_rows, execution_id.
		"list":      {claim.ListExecutionSQL, `'t1', NULL, NULL, NULL, NULL, 101, 'x42'`},
		"list page": {claim.ListExecutionSQL, `'t1', 'completed', 'src', now(), '00000000-0000-4000-8000-000000000000', 101, 'x42'`},
		"held":      {claim.ExecutionHeldSQL, fmt.Sprintf(`'t1', NULL, %d, 'x42'`, claim.MaxExecutionFail+1)},
	} {
		// A custom plan (for these values) and the generic plan, which
		// PostgreSQL may switch to for a statement pgx prepared.
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			p := explainPrepared(t, b, mode, c.sql, c.args)
			require.NotContains(t, p, "Seq Scan", "%s (%s):\n%s", name, mode, p)
			require.Contains(t, p, "claim_deliveries_won_execution_idx", "%s (%s):\n%s", name, mode, p)
		}
	}
}

// explainPrepared returns the plan of sql, prepared, executed with args
// (SQL literals) under plan_cache_mode mode, on a connection of its own.
func explainPrepared(t *testing.T, b *bundle, mode, sql, args string) string {
	t.Helper()
	conn, err := b.pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer conn.Release()
	simple := pgx.QueryExecModeSimpleProtocol
	_, err = conn.Exec(b.ctx, "SET plan_cache_mode = "+mode, simple)
	require.NoError(t, err)
	defer conn.Exec(b.ctx, "DEALLOCATE explained; RESET plan_cache_mode", simple) //nolint:errcheck
	_, err = conn.Exec(b.ctx, "PREPARE explained AS "+sql, simple)
	require.NoError(t, err)
	rows, err := conn.Query(b.ctx, "EXPLAIN EXECUTE explained("+args+")", simple)
	require.NoError(t, err)
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return strings.Join(plan, "\n")
}
