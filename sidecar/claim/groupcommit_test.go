package claim_test

import (
	"context"
	"fmt"
	"math/rand/v2"
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

// Group commit (groupcommit.go): concurrent calls share transactions, and each
// still gets exactly the answer it would get alone.

// groupSizes is an Observer that records the size of every group.
type groupSizes struct {
	mu    sync.Mutex
	sizes map[string][]int
}

func (g *groupSizes) Claimed(string, claim.Outcome, int) {}
func (g *groupSizes) Completed(string, time.Duration)    {}
func (g *groupSizes) Failed(string, claim.FailKind)      {}
func (g *groupSizes) Grouped(kind string, n int) {
	g.mu.Lock()
	g.sizes[kind] = append(g.sizes[kind], n)
	g.mu.Unlock()
}
func (g *groupSizes) of(kind string) []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int(nil), g.sizes[kind]...)
}
func newGroupSizes() *groupSizes { return &groupSizes{sizes: map[string][]int{}} }
func groupLedger(t *testing.T, pool *pgxpool.Pool, o claim.Observer, gc claim.GroupConfig) *claim.Ledger {
	t.Helper()
	l, err := claim.New(pool, claim.Config{Jitter: func() float64 { return 1 }, Observer: o, Group: &gc})
	require.NoError(t, err)
	return l
}

// held blocks the ledger's only group worker: a claim of key evt_held
// waits for a row lock the test holds, so every call made meanwhile
// queues, and the next group takes them all. release lets it go and
// returns the held claim's answer.
type held struct {
	release func() claim.Result
}

func holdTheWorker(t *testing.T, ctx context.Context, pool *pgxpool.Pool, l *claim.Ledger) held {
	t.Helper()
	first, err := l.Claim(ctx, req("a", "evt_held"))
	require.NoError(t, err)
	lockerPID, unlock := pgtest.LockClaim(t, ctx, pool, first.ID)
	answer := make(chan claim.Result, 1)
	go func() {
		r, err := l.Claim(ctx, req("a", "evt_held"))
		if err != nil {
			r.Outcome = claim.Outcome("error: " + err.Error())
		}
		answer <- r
	}()
	pgtest.WaitBlockedBy(t, ctx, pool, lockerPID, "the held claim")
	return held{release: func() claim.Result {
		unlock()
		return <-answer
	}}
}

// settleAnswer is what a Complete or Fail run by settleAsync answered.
type settleAnswer struct {
	rec claim.Record
	err error
}

// settleAsync runs f (a Complete or Fail) in a goroutine of its own.
func settleAsync(f func() (claim.Record, error)) chan settleAnswer {
	ch := make(chan settleAnswer, 1)
	go func() { rec, err := f(); ch <- settleAnswer{rec, err} }()
	return ch
}

// poison makes the database refuse any claim of event id "poison" (a
// trigger): a failure no validation foresees, met inside a group.
func poison(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(ctx, `CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.event_id = 'poison' THEN RAISE EXCEPTION 'poisoned claim'; END IF; RETURN NEW; END $$;
		CREATE TRIGGER poison BEFORE INSERT OR UPDATE ON claims FOR EACH ROW EXECUTE FUNCTION poison()`)
	require.NoError(t, err)
}

// One group of mixed calls: new keys, two copies of one key, the same
// request twice (request id), an invalid claim, a claim the database
// refuses, a claim whose caller went away. Each gets its own answer; the
// invalid one never joins, the refused one fails alone, the abandoned one
// is left out.
func TestGroupedClaimsEachGetTheirOwnAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 20 })
	poison(t, ctx, pool)
	sizes := newGroupSizes()
	l := groupLedger(t, pool, sizes, claim.GroupConfig{Workers: 1, MaxItems: 64})
	h := holdTheWorker(t, ctx, pool, l)

	type answer struct {
		res claim.Result
		err error
	}
	calls := map[string]claim.Request{}
	for i := range 5 {
		calls[fmt.Sprintf("new-%d", i)] = req("a", fmt.Sprintf("evt_new_%d", i))
	}
	calls["twin-1"], calls["twin-2"] = req("a", "evt_twin"), req("a", "evt_twin")
	replay := req("a", "evt_replay")
	replay.RequestID = "exec-7:node:0:0"
	calls["replay-1"], calls["replay-2"] = replay, replay
	calls["other-tenant"] = req("b", "evt_twin")
	calls["poison"] = req("a", "poison")
	answers := map[string]*answer{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, r := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := l.Claim(ctx, r)
			mu.Lock()
			answers[name] = &answer{res, err}
			mu.Unlock()
		}()
	}
	// An invalid claim is answered at once: it never waits for a group.
	_, err := l.Claim(ctx, claim.Request{Tenant: "a", Key: claim.Key{Source: "stripe"}})
	require.Equal(t, apperr.Invalid, apperr.As(err).Code)
	// A caller that goes away before its group is sent is left out.
	gone, cancel := context.WithCancel(ctx)
	goneErr := make(chan error, 1)
	go func() { _, err := l.Claim(gone, req("a", "evt_gone")); goneErr <- err }()
	pgtest.WaitUntil(t, "every call to queue", func() bool { n, _ := l.Queued(); return n == len(calls)+1 })
	cancel()
	err = <-goneErr
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, apperr.Unavailable, apperr.As(err).Code, "answered as a statement cut by its context: 503, retry")

	held := h.release()
	require.Equal(t, claim.InProgress, held.Outcome)
	wg.Wait()

	for i := range 5 {
		a := answers[fmt.Sprintf("new-%d", i)]
		require.NoError(t, a.err)
		require.Equal(t, claim.Won, a.res.Outcome)
		require.NotEmpty(t, a.res.Token)
	}
	t1, t2 := answers["twin-1"], answers["twin-2"]
	require.NoError(t, t1.err)
	require.NoError(t, t2.err)
	require.ElementsMatch(t, []claim.Outcome{claim.Won, claim.InProgress}, []claim.Outcome{t1.res.Outcome, t2.res.Outcome},
		"two copies of one key in a group: one winner")
	r1, r2 := answers["replay-1"], answers["replay-2"]
	require.NoError(t, r1.err)
	require.NoError(t, r2.err)
	require.Equal(t, claim.Won, r1.res.Outcome)
	require.Equal(t, claim.Won, r2.res.Outcome, "the same request twice gets its win twice")
	require.Equal(t, r1.res.Token, r2.res.Token)
	require.Equal(t, claim.Won, answers["other-tenant"].res.Outcome, "another tenant's key is another key")
	p := answers["poison"]
	require.Error(t, p.err, "the refused claim fails")
	require.Nil(t, apperr.As(p.err), "as an internal error, as it would alone")

	var goneRows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM claims WHERE event_id = 'evt_gone'`).Scan(&goneRows))
	require.Zero(t, goneRows, "the abandoned claim was never sent")
	var wins int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM claims WHERE state = 'processing'`).Scan(&wins))
	require.Equal(t, 5+1+1+1+1, wins, "held, 5 new, twin, replay, other tenant")
	require.Contains(t, sizes.of("claim"), len(calls), "the queued calls went as one group")
}

// Groups on several workers claim overlapping keys in every order: no
// deadlock (PostgreSQL counts none for the database), no error, one
// winner per key.
func TestOverlappingGroupsNeverDeadlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 20 })
	sizes := newGroupSizes()
	l := groupLedger(t, pool, sizes, claim.GroupConfig{Workers: 4, MaxItems: 8})
	const keys, callers = 40, 32
	results, errs := storm(callers, func(i int) ([]claim.Result, error) {
		order := rand.Perm(keys)
		out := make([]claim.Result, 0, keys)
		for _, k := range order {
			r, err := l.Claim(ctx, req("a", fmt.Sprintf("evt_%02d", k)))
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
		return out, nil
	})
	requireNoErrors(t, errs)
	won := map[string]int{}
	for _, rs := range results {
		for _, r := range rs {
			if r.Outcome == claim.Won {
				won[r.EventID]++
			} else {
				require.Equal(t, claim.InProgress, r.Outcome)
			}
		}
	}
	require.Len(t, won, keys)
	for k, n := range won {
		require.Equal(t, 1, n, "key %s", k)
	}
	var deadlocks int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&deadlocks))
	require.Zero(t, deadlocks)
	grouped := 0
	for _, n := range sizes.of("claim") {
		require.LessOrEqual(t, n, 8, "MaxItems bounds a group")
		if n > 1 {
			grouped++
		}
	}
	t.Logf("%d groups, %d of them with more than one call", len(sizes.of("claim")), grouped)
}

// Completes and fails of one group: each answered as alone (done, a
// repeat, a superseded token, an unknown id, a fail), the refused one
// alone failing.
func TestGroupedSettlesEachGetTheirOwnAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 20 })
	sizes := newGroupSizes()
	l := groupLedger(t, pool, sizes, claim.GroupConfig{Workers: 1, MaxItems: 64})
	var wins []claim.Result
	for i := range 4 {
		r, err := l.Claim(ctx, req("a", fmt.Sprintf("evt_s%d", i)))
		require.NoError(t, err)
		wins = append(wins, r)
	}
	done, err := l.Complete(ctx, "a", wins[3].ID, wins[3].Token, "inv_3")
	require.NoError(t, err)
	require.Equal(t, claim.StateCompleted, done.State)

	// Hold the settle worker: a Complete waits for the test's row lock.
	lockerPID, unlock := pgtest.LockClaim(t, ctx, pool, wins[0].ID)
	heldA := settleAsync(func() (claim.Record, error) { return l.Complete(ctx, "a", wins[0].ID, wins[0].Token, "inv_0") })
	pgtest.WaitBlockedBy(t, ctx, pool, lockerPID, "the held complete")
	complete1 := settleAsync(func() (claim.Record, error) { return l.Complete(ctx, "a", wins[1].ID, wins[1].Token, "inv_1") })
	fail2 := settleAsync(func() (claim.Record, error) {
		return l.Fail(ctx, "a", wins[2].ID, wins[2].Token, claim.Permanent, "smtp 550")
	})
	repeat3 := settleAsync(func() (claim.Record, error) { return l.Complete(ctx, "a", wins[3].ID, wins[3].Token, "inv_3") })
	wrong := settleAsync(func() (claim.Record, error) {
		return l.Complete(ctx, "a", wins[1].ID, "00000000-0000-0000-0000-000000000000", "x")
	})
	missing := settleAsync(func() (claim.Record, error) {
		return l.Complete(ctx, "a", "11111111-1111-1111-1111-111111111111", wins[1].Token, "x")
	})
	otherTenant := settleAsync(func() (claim.Record, error) { return l.Complete(ctx, "b", wins[1].ID, wins[1].Token, "x") })
	_, err = l.Complete(ctx, "a", "not-a-uuid", wins[1].Token, "x")
	require.Error(t, err, "an invalid call is answered at once")
	pgtest.WaitUntil(t, "the settles to queue", func() bool { _, n := l.Queued(); return n == 6 })
	unlock()

	a := <-heldA
	require.NoError(t, a.err)
	require.Equal(t, claim.StateCompleted, a.rec.State)
	a = <-complete1
	require.NoError(t, a.err)
	require.Equal(t, "inv_1", a.rec.ResultRef)
	a = <-fail2
	require.NoError(t, a.err)
	require.Equal(t, claim.StateDeadLettered, a.rec.State)
	a = <-repeat3
	require.NoError(t, a.err, "a repeat answers the completed record")
	require.Equal(t, "inv_3", a.rec.ResultRef)
	for name, ch := range map[string]chan settleAnswer{"wrong token": wrong, "missing": missing, "other tenant": otherTenant} {
		a := <-ch
		e := apperr.As(a.err)
		require.NotNil(t, e, name)
		if name == "wrong token" {
			require.Equal(t, apperr.LeaseLost, e.Code, name)
		} else {
			require.Equal(t, apperr.NotFound, e.Code, name)
		}
	}
	require.Contains(t, sizes.of("settle"), 6, "the queued settles went as one group")
}

// A database error that means "try again" for a whole group is every
// call's answer (as alone); nothing of the group is kept.
func TestGroupSharesADatabaseWideError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 20 })
	l := groupLedger(t, pool, nil, claim.GroupConfig{Workers: 1, MaxItems: 64})
	h := holdTheWorker(t, ctx, pool, l)
	_, err := pool.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{pool.Config().ConnConfig.Database}.Sanitize()+
		` SET default_transaction_read_only = on`)
	require.NoError(t, err)
	pool.Reset() // new sessions take the setting; the held claim's keeps its own
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[i] = l.Claim(ctx, req("a", fmt.Sprintf("evt_ro_%d", i))) }()
	}
	pgtest.WaitUntil(t, "the claims to queue", func() bool { n, _ := l.Queued(); return n == len(errs) })
	h.release()
	wg.Wait()
	for _, err := range errs {
		e := apperr.As(err)
		require.NotNil(t, e, "%v", err)
		require.Equal(t, apperr.Unavailable, e.Code, "%v", err)
	}
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM claims WHERE event_id LIKE 'evt_ro_%'`).Scan(&n))
	require.Zero(t, n)
}

// A caller whose context ends while its group is in flight is answered at
// once as a statement cut by its context (Unavailable, outcome unknown);
// the group goes on and commits its neighbours' claims and its own, and
// the same request again (its request id) gets that win back.
func TestCallerCancelledInsideAGroupInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 20 })
	sizes := newGroupSizes()
	l := groupLedger(t, pool, sizes, claim.GroupConfig{Workers: 1, MaxItems: 64})
	blocker, err := l.Claim(ctx, req("a", "evt_blocker"))
	require.NoError(t, err)
	h := holdTheWorker(t, ctx, pool, l)

	// The group to come will wait for a second lock of the test's.
	lockerPID, unlock := pgtest.LockClaim(t, ctx, pool, blocker.ID)

	mine := req("a", "evt_mine")
	mine.RequestID = "exec-9:Claim:0:0"
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	mineErr := make(chan error, 1)
	go func() { _, err := l.Claim(cctx, mine); mineErr <- err }()
	type answer struct {
		res claim.Result
		err error
	}
	neighbour, again := make(chan answer, 1), make(chan answer, 1)
	go func() { r, err := l.Claim(ctx, req("a", "evt_neighbour")); neighbour <- answer{r, err} }()
	go func() { r, err := l.Claim(ctx, req("a", "evt_blocker")); again <- answer{r, err} }()
	pgtest.WaitUntil(t, "three calls to queue", func() bool { n, _ := l.Queued(); return n == 3 })
	require.Equal(t, claim.InProgress, h.release().Outcome)
	pgtest.WaitBlockedBy(t, ctx, pool, lockerPID, "the group of three")

	cancel()
	err = <-mineErr
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, apperr.Unavailable, apperr.As(err).Code, "503, outcome unknown: retry the same request")
	unlock()
	n := <-neighbour
	require.NoError(t, n.err)
	require.Equal(t, claim.Won, n.res.Outcome, "the neighbours' claims are decided")
	a := <-again
	require.NoError(t, a.err)
	require.Equal(t, claim.InProgress, a.res.Outcome)
	require.Contains(t, sizes.of("claim"), 3)

	var stored string
	require.NoError(t, pool.QueryRow(ctx, `SELECT claim_token::text FROM claims WHERE event_id = 'evt_mine'`).Scan(&stored))
	res, err := l.Claim(ctx, mine)
	require.NoError(t, err)
	require.Equal(t, claim.Won, res.Outcome, "the same request gets its win back")
	require.Equal(t, stored, res.Token)
	require.Equal(t, 1, res.Attempt)
}
