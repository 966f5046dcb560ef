package claim_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// The database's settings cannot break the claim (B16): with the
// database's default_transaction_isolation at SERIALIZABLE, set by a DBA or
// a managed-PostgreSQL profile before the sidecar connects, a storm of
// concurrent claims of one key still gets one won and decided outcomes for
// the rest, never an error.

// alterDatabase runs ALTER DATABASE db <set> from a maintenance connection.
func alterDatabase(t *testing.T, db, set string) {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgtest.ServerURL(t))
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{db}.Sanitize()+" "+set)
	require.NoError(t, err)
}

// serializablePool creates a fresh database whose default isolation is
// SERIALIZABLE before any pool connects to it, and returns a pool of 40
// connections on it with the schema applied. pin builds the pool as claimd
// does (db.ConfigurePool); without it the pool's sessions keep the
// database's default. adjust, when not nil, changes the pool's
// configuration further.
func serializablePool(t *testing.T, pin bool, adjust func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	var plain string
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) {
		alterDatabase(t, c.ConnConfig.Database, "SET default_transaction_isolation = 'serializable'")
		plain = c.ConnString()
		c.MaxConns = 40
		if pin {
			db.ConfigurePool(c)
		}
		if adjust != nil {
			adjust(c)
		}
	})
	// The setting is in effect: a session that does not pin its isolation
	// runs at SERIALIZABLE.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, plain)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var iso string
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_setting('transaction_isolation')").Scan(&iso))
	require.Equal(t, "serializable", iso)
	return pool
}

// storm runs fn n times at once, each on its own goroutine (and so its own
// pooled connection), released together.
func storm[T any](n int, fn func(i int) (T, error)) ([]T, []error) {
	out, errs := make([]T, n), make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i], errs[i] = fn(i)
		}()
	}
	close(start)
	wg.Wait()
	return out, errs
}

func requireNoErrors(t *testing.T, errs []error) {
	t.Helper()
	n := 0
	var first error
	for _, err := range errs {
		if err != nil {
			if first == nil {
				first = err
			}
			n++
		}
	}
	require.Zero(t, n, "%d of %d calls failed; first: %v", n, len(errs), first)
}

func TestSerializableDefaultClaimStormOneWinnerNoErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := serializablePool(t, true, nil)
	l, err := claim.New(pool, claim.Config{})
	require.NoError(t, err)
	var iso string
	require.NoError(t, pool.QueryRow(ctx, "SELECT current_setting('transaction_isolation')").Scan(&iso))
	require.Equal(t, "read committed", iso, "ConfigurePool pins the session's isolation over the database's default")

	const n = 30
	for round := range 3 {
		key := fmt.Sprintf("evt_storm_%d", round)
		res, errs := storm(n, func(int) (claim.Result, error) { return l.Claim(ctx, req("a", key)) })
		requireNoErrors(t, errs)
		count := map[claim.Outcome]int{}
		var won claim.Result
		for _, r := range res {
			count[r.Outcome]++
			if r.Outcome == claim.Won {
				won = r
			}
		}
		require.Equal(t, map[claim.Outcome]int{claim.Won: 1, claim.InProgress: n - 1}, count, "round %d", round)

		_, err := l.Complete(ctx, "a", won.ID, won.Token, "ref-"+key)
		require.NoError(t, err)
		res, errs = storm(n, func(int) (claim.Result, error) { return l.Claim(ctx, req("a", key)) })
		requireNoErrors(t, errs)
		for _, r := range res {
			require.Equal(t, claim.Duplicate, r.Outcome)
			require.Equal(t, "ref-"+key, r.ResultRef)
		}
	}
}

// A batch runs in its own transaction, which sets READ COMMITTED itself:
// even on a pool whose sessions keep the SERIALIZABLE default, concurrent
// batches of the same keys (in different orders) all get decided outcomes.
func TestSerializableDefaultBatchStormOnUnpinnedPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := serializablePool(t, false, nil)
	l, err := claim.New(pool, claim.Config{})
	require.NoError(t, err)

	const n, keys = 30, 5
	res, errs := storm(n, func(i int) ([]claim.Result, error) {
		reqs := make([]claim.Request, keys)
		for k := range keys {
			reqs[k] = req("a", fmt.Sprintf("evt_batch_%d", (k+i)%keys)) // each caller its own order
		}
		return l.ClaimBatch(ctx, reqs)
	})
	requireNoErrors(t, errs)
	won := map[string]int{}
	for _, rs := range res {
		require.Len(t, rs, keys)
		for _, r := range rs {
			require.Contains(t, []claim.Outcome{claim.Won, claim.InProgress}, r.Outcome)
			if r.Outcome == claim.Won {
				won[r.EventID]++
			}
		}
	}
	require.Len(t, won, keys)
	for k, c := range won {
		require.Equal(t, 1, c, "winners of %s", k)
	}
}

// A batch of one claim (decided by the single-claim statement) keeps the
// batch's transaction: READ COMMITTED, set by the transaction itself, so
// a storm of one-item batches of one key on a SERIALIZABLE session
// default gets one winner and no errors.
func TestSerializableDefaultOneItemBatchStormOnUnpinnedPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := serializablePool(t, false, nil)
	l, err := claim.New(pool, claim.Config{})
	require.NoError(t, err)

	const n = 30
	res, errs := storm(n, func(int) ([]claim.Result, error) {
		return l.ClaimBatch(ctx, []claim.Request{req("a", "evt_one")})
	})
	requireNoErrors(t, errs)
	count := map[claim.Outcome]int{}
	for _, rs := range res {
		require.Len(t, rs, 1)
		count[rs[0].Outcome]++
	}
	require.Equal(t, map[claim.Outcome]int{claim.Won: 1, claim.InProgress: n - 1}, count)
}

// sqlstateTracer counts the statements that failed with each SQLSTATE.
type sqlstateTracer struct {
	mu     sync.Mutex
	counts map[string]int
}

func (*sqlstateTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (t *sqlstateTracer) TraceQueryEnd(_ context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	var pgErr *pgconn.PgError
	if errors.As(d.Err, &pgErr) {
		t.mu.Lock()
		t.counts[pgErr.Code]++
		t.mu.Unlock()
	}
}

func (t *sqlstateTracer) count(code string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.counts[code]
}

// A real serialization failure (40001) of the claim statement is retried
// inside the ledger and the caller gets the decided outcome. The failure is
// provoked deterministically: on a pool that keeps the SERIALIZABLE
// default, the claim waits for the row lock of another transaction that
// updates the record; when that one commits, the waiting statement cannot
// serialize and PostgreSQL rolls it back with 40001.
func TestClaimRetriesSerializationFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tracer := &sqlstateTracer{counts: map[string]int{}}
	pool := serializablePool(t, false, func(c *pgxpool.Config) { c.ConnConfig.Tracer = tracer })
	l, err := claim.New(pool, claim.Config{})
	require.NoError(t, err)
	first, err := l.Claim(ctx, req("a", "evt_40001"))
	require.NoError(t, err)
	require.Equal(t, claim.Won, first.Outcome)

	holder, err := pgx.Connect(ctx, pool.Config().ConnString())
	require.NoError(t, err)
	defer holder.Close(ctx)
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `UPDATE claims SET updated_at = updated_at WHERE id = $1`, first.ID)
	require.NoError(t, err)

	type result struct {
		r   claim.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := l.Claim(ctx, req("a", "evt_40001"))
		done <- result{r, err}
	}()
	waitForLockWait(t, holder)
	require.NoError(t, tx.Commit(ctx))

	got := <-done
	require.NoError(t, got.err)
	require.Equal(t, claim.InProgress, got.r.Outcome)
	require.Equal(t, 1, tracer.count("40001"), "the claim statement failed once with 40001 and was run again")
}

// waitForLockWait waits until a backend of conn's database waits for a lock.
func waitForLockWait(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute) // a hang guard, not a timing assertion
	for {
		var waiting int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
		if waiting > 0 {
			return
		}
		require.False(t, time.Now().After(deadline), "no backend waits for a lock")
		time.Sleep(5 * time.Millisecond)
	}
}

// RunTx runs a transaction again after a real deadlock (40P01): two
// transactions update two rows in opposite orders, PostgreSQL rolls one
// back, and both end committed.
func TestRunTxRetriesDeadlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 4 })
	_, err := pool.Exec(ctx, `CREATE TABLE deadlock_probe (id int PRIMARY KEY, n int NOT NULL);
		INSERT INTO deadlock_probe VALUES (1, 0), (2, 0)`)
	require.NoError(t, err)

	var attempts atomic.Int32
	locked := []chan struct{}{make(chan struct{}), make(chan struct{})}
	run := func(me int, order [2]int) error {
		first := true
		return db.RunTx(ctx, pool, func(tx pgx.Tx) error {
			attempts.Add(1)
			if _, err := tx.Exec(ctx, `UPDATE deadlock_probe SET n = n + 1 WHERE id = $1`, order[0]); err != nil {
				return err
			}
			if first { // the first run of each waits until both hold their first row
				first = false
				close(locked[me])
				<-locked[1-me]
			}
			_, err := tx.Exec(ctx, `UPDATE deadlock_probe SET n = n + 1 WHERE id = $1`, order[1])
			return err
		})
	}
	_, errs := storm(2, func(i int) (struct{}, error) {
		if i == 0 {
			return struct{}{}, run(0, [2]int{1, 2})
		}
		return struct{}{}, run(1, [2]int{2, 1})
	})
	requireNoErrors(t, errs)
	// At least one ran again after the deadlock. Its retry can deadlock
	// once more: when the victim rolls back, its retry may lock the row
	// the survivor waited for before the survivor wakes, and the two then
	// cross again (seen under -race in CI: 4 runs). What RunTx promises is
	// that every deadlock is retried and both commit once.
	require.GreaterOrEqual(t, attempts.Load(), int32(3), "one of the two ran again after the deadlock")
	var sum int
	require.NoError(t, pool.QueryRow(ctx, `SELECT sum(n) FROM deadlock_probe`).Scan(&sum))
	require.Equal(t, 4, sum, "both transactions committed once each")
}

// Exhausted retries and other errors: an error that is not a serialization
// failure or deadlock is returned at once; the ledger reports a database
// that still asks to retry as Unavailable (503), never internal.
func TestRunTxReturnsOtherErrorsAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	calls := 0
	err := db.RunTx(ctx, pool, func(tx pgx.Tx) error {
		calls++
		_, err := tx.Exec(ctx, `SELECT 1/0`)
		return err
	})
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "22012", pgErr.Code)
	require.Equal(t, 1, calls)
	require.False(t, db.RetryableTx(err))

	// A serialization failure, wrapped as the ledger wraps it, is retryable.
	wrapped := &apperr.Error{Code: apperr.Unavailable, Err: fmt.Errorf("x: %w", &pgconn.PgError{Code: "40001"})}
	require.True(t, db.RetryableTx(wrapped))
	require.True(t, db.RetryableTx(&pgconn.PgError{Code: "40P01"}))
	require.False(t, db.RetryableTx(&pgconn.PgError{Code: "40002"}))
	require.False(t, db.RetryableTx(errors.New("could not serialize access due to concurrent update")),
		"classified by SQLSTATE, never by message")
}
