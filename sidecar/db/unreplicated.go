package db

import (
	"context"
	"errors"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
)

// A commit kept on the primary but not replicated is never answered as done.
//
// With synchronous replication (synchronous_standby_names set,
// synchronous_commit on, remote_write or remote_apply) PostgreSQL answers
// a COMMIT only once a synchronous standby confirmed it, except when that
// wait is cancelled: a cancel request or pg_cancel_backend makes it stop
// waiting, keep the transaction (it is committed locally) and answer the
// COMMIT as done, with a WARNING ("canceling wait for synchronous
// replication due to user request", SQLSTATE 01000; "… terminating
// connection due to administrator command", 57P01, before the session
// ends). pgx reports such a commit as successful (a nil error); the
// warning reaches only the connection's notice handler. A claim answered
// `won` then may be missing after a failover to the standby.
//
// ConfigurePool installs a notice handler that marks the connection on
// every WARNING of SQLSTATE 01000 or 57P01 (the message is localised, so
// it is not matched; any such warning during a ledger write is rare, and a
// false alarm costs a 503, never a wrong answer), and the writes (RunTx on the
// pool; OnPoolConn, which the ledger's single claim, group of claims,
// complete, fail, extend, resolve and release run on) take the mark on the
// connection they used and answer ErrUnreplicatedCommit instead of their
// result: 503 with
// Retry-After, an unknown outcome. The same request sent again is answered
// from the primary (the claim's own win back): run two synchronous
// standbys (ANY 1) so that one going away does not leave commits waiting.
//
// claimd itself never cancels a statement (pgx's default context handling
// closes the connection instead, an unknown outcome), and PostgreSQL turns
// statement_timeout off before it commits, so only another session's
// pg_cancel_backend (or a pooler's cancel) causes this.

// unreplicatedKey marks, in a connection's CustomData, a warning that a
// commit's wait for the synchronous standby was cancelled.
const unreplicatedKey = "db.unreplicated_commit"

// ErrUnreplicatedCommit is the answer of a write whose commit PostgreSQL
// kept without the synchronous standby's confirmation (see above): 503,
// outcome unknown.
var ErrUnreplicatedCommit = &apperr.Error{Code: apperr.Unavailable,
	Message: "the database committed the write without the synchronous standby's confirmation (its wait was cancelled on " +
		"the server), so it may be lost in a failover and its outcome is unknown; " + RetrySameRequest}

// noteUnreplicated is the pool's notice handler (see above).
func noteUnreplicated(pc *pgconn.PgConn, n *pgconn.Notice) {
	sev := n.SeverityUnlocalized
	if sev == "" {
		sev = n.Severity
	}
	if sev == "WARNING" && (n.Code == pgerrcode.Warning || n.Code == pgerrcode.AdminShutdown) {
		pc.CustomData()[unreplicatedKey] = true
	}
}

// takeUnreplicated reports and clears the mark of pc.
func takeUnreplicated(pc *pgconn.PgConn) bool {
	d := pc.CustomData()
	if d[unreplicatedKey] != true {
		return false
	}
	delete(d, unreplicatedKey)
	return true
}

// SyncRequiredKey marks, in a connection's CustomData, a session its
// pool's owner made read-only because a commit on it would not wait for a
// synchronous standby (claimd with CLAIMD_REQUIRE_SYNC_REPLICATION). A
// ledger write refused there as read-only (25006) answers
// notSynchronous's words instead of the generic read-only ones.
const SyncRequiredKey = "db.sync_required"

// notSynchronous is the answer of a write refused on a session marked
// SyncRequiredKey: 503, nothing kept.
func notSynchronous(err error) error {
	return &apperr.Error{Code: apperr.Unavailable, Err: err,
		Message: "CLAIMD_REQUIRE_SYNC_REPLICATION is on and a commit now would not wait for a synchronous standby " +
			"(none is connected in sync or quorum state, or synchronous_standby_names is empty: see /readyz); nothing was kept; retry"}
}

// checked turns err, the result of a write on pc, into
// ErrUnreplicatedCommit when pc carries the mark, and a read-only refusal
// on a session marked SyncRequiredKey into notSynchronous. The mark is
// cleared in any case, so that it never reaches the connection's next
// user.
func checked(pc *pgconn.PgConn, err error) error {
	if takeUnreplicated(pc) && err == nil {
		return ErrUnreplicatedCommit
	}
	var pgErr *pgconn.PgError
	if err != nil && pc.CustomData()[SyncRequiredKey] == true && errors.As(err, &pgErr) && pgErr.Code == pgerrcode.ReadOnlySQLTransaction {
		return notSynchronous(err)
	}
	return err
}

// OnPoolConn runs fn on one connection of pool and checks its commit
// (checked).
func OnPoolConn(ctx context.Context, pool *pgxpool.Pool, fn func(*pgxpool.Conn) error) error {
	return pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error {
		takeUnreplicated(c.Conn().PgConn())
		return checked(c.Conn().PgConn(), fn(c))
	})
}

// txOn runs fn in a transaction on db (see RunTx), on one connection of
// db when it is a pool, and checks its commit (checked).
func txOn(ctx context.Context, db TxStarter, fn func(pgx.Tx) error) error {
	opts := pgx.TxOptions{IsoLevel: pgx.ReadCommitted}
	switch d := db.(type) {
	case *pgxpool.Pool:
		return OnPoolConn(ctx, d, func(c *pgxpool.Conn) error { return pgx.BeginTxFunc(ctx, c, opts, fn) })
	case *pgxpool.Conn:
		return checked(d.Conn().PgConn(), pgx.BeginTxFunc(ctx, d, opts, fn))
	case *pgx.Conn:
		return checked(d.PgConn(), pgx.BeginTxFunc(ctx, d, opts, fn))
	}
	return pgx.BeginTxFunc(ctx, db, opts, fn)
}
