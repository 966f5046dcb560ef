package db

import (
	"context"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
)

// Retry is bounded: a database that keeps asking to retry gets
// MaxTxAttempts runs, then Error answers Unavailable (503 with
// Retry-After), never internal.
func TestRetryIsBoundedThenUnavailable(t *testing.T) {
	t.Parallel()
	calls := 0
	err := Retry(context.Background(), func() error {
		calls++
		return &pgconn.PgError{Code: pgerrcode.SerializationFailure}
	})
	require.Equal(t, MaxTxAttempts, calls)
	e := apperr.As(Error(err))
	require.NotNil(t, e)
	require.Equal(t, apperr.Unavailable, e.Code)

	calls = 0
	err = Retry(context.Background(), func() error {
		calls++
		if calls < 3 {
			return Error(&pgconn.PgError{Code: pgerrcode.DeadlockDetected})
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 3, calls)

	// A cancelled request stops retrying after the run in progress.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls = 0
	err = Retry(ctx, func() error {
		calls++
		return &pgconn.PgError{Code: pgerrcode.SerializationFailure}
	})
	require.Error(t, err)
	require.Equal(t, 1, calls)
}

// A read-only session (a standby, default_transaction_read_only) and a
// lock_timeout are the database's state, answered 503 so the caller
// retries, never 500.
func TestErrorReadOnlyAndLockTimeoutAreUnavailable(t *testing.T) {
	t.Parallel()
	for _, code := range []string{pgerrcode.ReadOnlySQLTransaction, pgerrcode.LockNotAvailable} {
		e := apperr.As(Error(&pgconn.PgError{Code: code}))
		require.NotNil(t, e, code)
		require.Equal(t, apperr.Unavailable, e.Code, code)
	}
}
