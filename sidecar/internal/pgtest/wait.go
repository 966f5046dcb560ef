package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// WaitUntil polls cond (a state the test cannot be told of otherwise)
// every 5 ms until it holds, failing the test after a minute.
func WaitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// LockClaim locks the claims row id FOR UPDATE in a transaction of the
// test until unlock; lockerPID is that session's backend (for
// WaitBlockedBy).
func LockClaim(t testing.TB, ctx context.Context, pool *pgxpool.Pool, id string) (lockerPID int, unlock func()) {
	t.Helper()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&lockerPID))
	_, err = tx.Exec(ctx, `SELECT 1 FROM claims WHERE id = $1 FOR UPDATE`, id)
	require.NoError(t, err)
	return lockerPID, func() { t.Helper(); require.NoError(t, tx.Rollback(ctx)) }
}

// WaitBlockedBy waits until a session of the pool's database waits for a
// lock that the backend lockerPID holds.
func WaitBlockedBy(t testing.TB, ctx context.Context, pool *pgxpool.Pool, lockerPID int, who string) {
	t.Helper()
	WaitUntil(t, who+" to wait for the test's row lock", func() bool {
		var blocked bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND $1::int = ANY (pg_blocking_pids(pid)))`, lockerPID).Scan(&blocked))
		return blocked
	})
}
