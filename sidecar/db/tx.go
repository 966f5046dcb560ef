package db

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Bounds of the retries of RunTx and Retry: at most MaxTxAttempts runs in
// all, with a full-jitter pause of up to min(retryCap, retryBase·2^n)
// before run n+1 (about 100 ms at most in all), well inside a request's
// timeout.
const (
	MaxTxAttempts = 5
	retryBase     = 4 * time.Millisecond
	retryCap      = 50 * time.Millisecond
)

// RetryableTx reports whether err (or an error it wraps, an *apperr.Error
// included) is PostgreSQL rolling back a statement or transaction because
// of concurrent work: a serialization failure (40001) or a deadlock
// (40P01). Nothing of it was committed, so running the whole of it again
// is safe. It classifies by SQLSTATE only.
func RetryableTx(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) &&
		(pgErr.Code == pgerrcode.SerializationFailure || pgErr.Code == pgerrcode.DeadlockDetected)
}

// Retry runs fn, and again while it fails RetryableTx, at most
// MaxTxAttempts times in all, pausing a short full-jitter backoff between
// runs. It returns fn's last error; when ctx ends during a pause, the error
// that preceded it. fn must be one whole statement or transaction.
func Retry(ctx context.Context, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || attempt >= MaxTxAttempts || !RetryableTx(err) {
			return err
		}
		pause := time.Duration(rand.Float64() * float64(min(retryCap, retryBase<<attempt)))
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// TxStarter begins transactions: a *pgxpool.Pool, a *pgxpool.Conn or a
// *pgx.Conn.
type TxStarter interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// RunTx runs fn in a transaction on db and commits it when fn returns nil.
// The transaction is READ COMMITTED, set explicitly (BEGIN ISOLATION LEVEL
// READ COMMITTED), whatever the session's default_transaction_isolation.
// When PostgreSQL rolls it back as RetryableTx (a statement of fn, or the
// commit), the whole transaction runs again, at most MaxTxAttempts times
// in all: fn must do all its work through tx, and what it keeps from a
// run must be overwritten by the next. Errors are returned as they are
// (fn's, or the driver's from begin or commit; ErrUnreplicatedCommit for
// a commit the server kept without its synchronous standby, see
// unreplicated.go); the caller maps them (Error).
func RunTx(ctx context.Context, db TxStarter, fn func(pgx.Tx) error) error {
	return Retry(ctx, func() error { return txOn(ctx, db, fn) })
}
