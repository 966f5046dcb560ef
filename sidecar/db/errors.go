// Package db is the sidecar's one home for PostgreSQL: what a failed
// database call means for its request (Classify, Error), transactions and
// their retries (RunTx, Retry), the pool's session settings
// (ConfigurePool, NewPoolConfig), the check of a commit kept without its
// synchronous standby (unreplicated.go), and the statements, in
// queries/*.sql, with the code sqlc generates from them (package dbsqlc).
package db

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
)

// Fault is what a failed database call means for the request that made
// it, as Classify tells.
type Fault int

// Database faults.
const (
	// NotRetryable: the database refused the statement for a reason
	// that retrying does not change (bad data, a violated constraint, a
	// missing table or privilege, an internal error of the server): the
	// sidecar's own fault or its deployment's, answered 500 internal.
	NotRetryable Fault = iota
	// NothingKept: the request did not take effect — no connection
	// could be had, or the server refused it with an ERROR (read-only,
	// lock timeout, cancel, serialization failure, deadlock, out of
	// resources), which rolls its statement and transaction back. Retry.
	NothingKept
	// OutcomeUnknown: the connection was lost (or the request's time ran
	// out) after the statement or the commit was sent: it may have taken
	// effect or not. Retry the same request, which is answered as what
	// happened.
	OutcomeUnknown
)

// RetrySameRequest is the advice of every answer to an unknown outcome.
const RetrySameRequest = "retry the same request: a claim retried with the same request_id gets its own win back, " +
	"and a complete or fail retried with the same claim token is answered with the record as it settled"

// Error is the one translation of a database error into the error a
// request answers (every route and the API key lookup use it, see
// Classify): nil for nil; an *apperr.Error in err's chain as it is;
// apperr.Unavailable (503 with Retry-After) with a message safe to show for
// what Classify finds retryable; otherwise an internal error (500)
// wrapping err. The database's own message is never in an answer's
// message: it stays in Err, for the log.
func Error(err error) error {
	if err == nil {
		return nil
	}
	if apperr.As(err) != nil {
		return err
	}
	fault, reason := Classify(err)
	switch fault {
	case NothingKept:
		return &apperr.Error{Code: apperr.Unavailable, Message: reason + "; nothing was kept; retry", Err: err}
	case OutcomeUnknown:
		return &apperr.Error{Code: apperr.Unavailable, Message: reason + ", so its outcome is unknown; " + RetrySameRequest, Err: err}
	}
	return fmt.Errorf("database: %w", err)
}

// Retryable reports whether err (or an error it wraps) is a database
// error that means "try again" (Classify finds NothingKept or
// OutcomeUnknown).
func Retryable(err error) bool {
	f, _ := Classify(err)
	return f != NotRetryable
}

// Classify tells what a failed database call means for its request, and
// why, in words safe to show to a caller (no SQL, no server message). It
// looks at err's chain, by type and SQLSTATE, in this order:
//
//  1. context.Canceled or context.DeadlineExceeded (the request's own time
//     bound, also inside pgconn's timeout error): OutcomeUnknown, since
//     the time may have run out while the commit was under way; so is
//     ErrUnreplicatedCommit (a commit kept without its synchronous standby),
//     so that no caller runs such a write again on its own.
//  2. *pgconn.ConnectError: no connection could be opened (refused,
//     unreachable host, TLS, authentication, too many connections, the
//     database missing, a standby where target_session_attrs wants a
//     primary), also when a server's FATAL is inside it: NothingKept.
//  3. *pgconn.PgError: by SQLSTATE, in the table below.
//  4. puddle.ErrClosedPool (the sidecar is shutting down): NothingKept.
//  5. The connection lost under a statement or a commit: io.EOF,
//     io.ErrUnexpectedEOF, net.ErrClosed, os.ErrDeadlineExceeded, a pgconn
//     timeout, any net.Error (a *net.OpError: connection reset, broken
//     pipe, refused, unreachable, a read or write deadline), the errnos
//     ECONNRESET, ECONNABORTED, ECONNREFUSED, EPIPE, ETIMEDOUT,
//     EHOSTUNREACH, ENETUNREACH and ENETDOWN, pgconn's "conn closed"
//     (pgconn.ErrConnClosed), any error pgconn.SafeToRetry accepts, and,
//     for such an error that reached here flattened to text, the words of
//     lostWords ("unexpected EOF", "connection reset", "broken pipe", "conn
//     closed", "failed to receive message", …): OutcomeUnknown. pgx
//     v5.12 answers "conn closed", which SafeToRetry accepts, for a
//     statement whose connection broke while it waited for the result,
//     after the server had committed it (TestClassifyRealFailures; see
//     also jackc/pgx#2428): SafeToRetry never proves that nothing
//     happened.
//  6. Anything else (a scan into the wrong type, an argument the driver
//     cannot encode): NotRetryable.
//
// SQLSTATEs, by the classes of PostgreSQL's Appendix A "PostgreSQL Error
// Codes" (https://www.postgresql.org/docs/current/errcodes-appendix.html).
// "retry" is NothingKept: the server answered with an ERROR, which rolls
// the statement and its transaction back. "unknown" is OutcomeUnknown:
// the server ended the session (FATAL), and a commit may have happened
// before it did.
//
//	class / SQLSTATE                               fault    what it is
//	08    connection_exception (all)               unknown  the session broke
//	25006 read_only_sql_transaction                retry    a standby, default_transaction_read_only = on, or claimd's synchronous-commit check
//	25P03 idle_in_transaction_session_timeout      unknown  FATAL
//	25P04 transaction_timeout                      unknown  FATAL
//	40000 transaction_rollback                     retry
//	40001 serialization_failure                    retry    still failing after RunTx ran it again (RetryableTx)
//	40003 statement_completion_unknown             unknown
//	40P01 deadlock_detected                        retry    still failing after RunTx ran it again (RetryableTx)
//	53    insufficient_resources (all)             retry    disk_full, out_of_memory, too_many_connections, configuration_limit_exceeded
//	55P03 lock_not_available                       retry    lock_timeout, NOWAIT
//	57000 operator_intervention                    retry
//	57014 query_canceled                           retry    statement_timeout, pg_cancel_backend
//	57P01 admin_shutdown                           unknown  FATAL: pg_terminate_backend, a fast shutdown
//	57P02 crash_shutdown                           unknown  FATAL: another backend crashed, immediate shutdown
//	57P03 cannot_connect_now                       unknown  FATAL: starting up, shutting down
//	57P04 database_dropped                         unknown  FATAL
//	57P05 idle_session_timeout                     unknown  FATAL
//	58000 system_error, 58030 io_error             retry    the server's environment failed
//	72000 snapshot_too_old                         retry    the next run takes a new snapshot
//	any SQLSTATE with severity FATAL or PANIC      unknown  the server ended the session
//
// Every other SQLSTATE is NotRetryable, answered 500: running the same
// request again meets the same refusal. Among them: the classes 00–03 (not
// errors), 09, 0A feature_not_supported, 0B, 0F, 0L, 0P, 0Z, 20, 21
// cardinality_violation, 22 data_exception, 23
// integrity_constraint_violation, 24, 25 (but 25006, 25P03, 25P04), 26,
// 27, 28 invalid_authorization_specification (after connecting), 2B, 2D,
// 2F, 34, 38, 39, 3B, 3D invalid_catalog_name, 3F invalid_schema_name,
// 40002 transaction_integrity_constraint_violation, 42
// syntax_error_or_access_rule_violation (a missing table, column or
// privilege), 44, 54 program_limit_exceeded, 55 (but 55P03), 58P01
// undefined_file, 58P02 duplicate_file, F0, HV, P0 and XX internal_error
// (XX001 data_corrupted, XX002 index_corrupted).
func Classify(err error) (Fault, string) {
	if err == nil {
		return NotRetryable, ""
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return OutcomeUnknown, "the request timed out waiting for the database"
	}
	if errors.Is(err, ErrUnreplicatedCommit) {
		return OutcomeUnknown, "the database committed without the synchronous standby's confirmation"
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return NothingKept, "the database is unreachable (no connection could be opened: it is down, " +
			"failing over, a standby, refusing the login or out of connections)"
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return classifyPgError(pgErr)
	}
	if errors.Is(err, puddle.ErrClosedPool) {
		return NothingKept, "the sidecar is shutting down"
	}
	if pgconn.SafeToRetry(err) || connectionLost(err) {
		return OutcomeUnknown, "the connection to the database was lost during the request"
	}
	return NotRetryable, ""
}

// transactionTimeout is SQLSTATE 25P04 transaction_timeout (FATAL,
// PostgreSQL 17), which pgerrcode does not list yet.
const transactionTimeout = "25P04"

// classifyPgError classifies an error the server answered (see Classify).
func classifyPgError(e *pgconn.PgError) (Fault, string) {
	code := e.Code
	switch code {
	case pgerrcode.ReadOnlySQLTransaction:
		return NothingKept, "the database is read-only now (a standby; default_transaction_read_only on; or, with " +
			"CLAIMD_REQUIRE_SYNC_REPLICATION, no synchronous standby for the commit to wait for: see /readyz)"
	case pgerrcode.LockNotAvailable:
		return NothingKept, "the database gave up waiting for a lock (lock_timeout)"
	case pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected, pgerrcode.TransactionRollback:
		return NothingKept, "the database rolled the request back (serialization failure or deadlock, still after retries)"
	case pgerrcode.StatementCompletionUnknown:
		return OutcomeUnknown, "the database could not tell whether the statement completed"
	case pgerrcode.QueryCanceled:
		return NothingKept, "the database cancelled the statement (statement_timeout, or an operator)"
	case pgerrcode.OperatorIntervention:
		return NothingKept, "the database refused the statement (operator intervention)"
	case pgerrcode.AdminShutdown, pgerrcode.CrashShutdown, pgerrcode.CannotConnectNow, pgerrcode.DatabaseDropped,
		pgerrcode.IdleSessionTimeout, pgerrcode.IdleInTransactionSessionTimeout, transactionTimeout:
		return OutcomeUnknown, "the database ended the session (an administrator, a shutdown, a crash or a failover)"
	case pgerrcode.SystemError, pgerrcode.IOError:
		return NothingKept, "the database server failed to read or write its storage"
	case pgerrcode.SnapshotTooOld:
		return NothingKept, "the database could no longer serve the request's snapshot"
	}
	switch {
	case inClass(code, pgerrcode.ConnectionException):
		return OutcomeUnknown, "the connection to the database broke during the request"
	case inClass(code, pgerrcode.InsufficientResources):
		return NothingKept, "the database is out of resources (connections, memory or disk)"
	case inClass(code, pgerrcode.OperatorIntervention):
		return OutcomeUnknown, "the database ended the session (an administrator, a shutdown, a crash or a failover)"
	}
	switch e.SeverityUnlocalized {
	case "FATAL", "PANIC":
		return OutcomeUnknown, "the database ended the session"
	case "":
		if e.Severity == "FATAL" || e.Severity == "PANIC" {
			return OutcomeUnknown, "the database ended the session"
		}
	}
	return NotRetryable, ""
}

// inClass reports whether code is in the class of class (the first two
// characters of a SQLSTATE), any code of it, also one pgerrcode does not
// list (its Is… functions match only the codes it lists).
func inClass(code, class string) bool {
	return len(code) >= 2 && code[:2] == class[:2]
}

// lostWords are the texts of connection failures, for errors that reach
// Classify flattened to text (a library formatting its cause with %v).
var lostWords = []string{"unexpected eof", "connection reset", "broken pipe", "conn closed",
	"failed to receive message", "failed to write", "use of closed network connection", "i/o timeout"}

// connectionLost reports whether err is a connection lost under a
// statement (see Classify).
func connectionLost(err error) bool {
	for _, target := range []error{io.EOF, io.ErrUnexpectedEOF, net.ErrClosed, pgconn.ErrConnClosed,
		os.ErrDeadlineExceeded, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.ECONNREFUSED, syscall.EPIPE,
		syscall.ETIMEDOUT, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ENETDOWN} {
		if errors.Is(err, target) {
			return true
		}
	}
	var netErr net.Error
	if pgconn.Timeout(err) || errors.As(err, &netErr) {
		return true
	}
	msg := strings.ToLower(err.Error())
	for _, w := range lostWords {
		if strings.Contains(msg, w) {
			return true
		}
	}
	return false
}
