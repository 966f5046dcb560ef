package ha

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// A DATABASE_URL the server refuses for good is not a failover.
//
// Waiting is right while no writable primary answers: a host down or
// dropping packets, a standby, a server starting up or shutting down
// (57P03), too many connections. It is wrong when the server itself
// answers that claimd's session cannot be: the database does not exist
// (3D000 invalid_catalog_name), the role does not exist, may not log in
// or has no pg_hba.conf entry (28000 invalid_authorization_specification),
// the password is wrong (28P01 invalid_password), the role lacks CONNECT
// on the database (42501 insufficient_privilege, at connection start).
// Those are settings to fix, and no wait fixes them.
//
// Only the server's own answer counts, a FATAL at connection start, and
// only when it is the whole story of the attempt. pgx tries the hosts of
// a host list (host=a,b) in order, and each host twice under the default
// sslmode=prefer (TLS, then plain). It stops at the first 3D000, 28P01 or
// 42501, so these end the attempt; it goes on after a 28000 (pg_hba.conf
// is per server), so a 28000 is the answer only when no other host was
// left to answer. When any host failed for a reason a wait can fix
// (refused, timed out, 57P03, read-only for target_session_attrs, a stale
// server the fence refused), the attempt is not a refusal: that host may
// be the primary coming back, and pgx tries it first. A standby is a
// physical copy of its primary, with the same databases, roles and
// passwords, so a standby's refusal is its primary's.

// The SQLSTATEs of a refused session: pgerrcode.InvalidCatalogName (no
// such database), InvalidAuthorizationSpecification (no such role,
// NOLOGIN, pg_hba.conf), InvalidPassword, InsufficientPrivilege (no
// CONNECT on the database).

// What to check, by SQLSTATE.
const (
	checkDatabaseName    = "check the database name in DATABASE_URL"
	checkUserAndPassword = "check the user name and password in DATABASE_URL"
	checkUserAndHBA      = "check the user name in DATABASE_URL, and that the server's pg_hba.conf lets it connect from this host"
	checkConnectPriv     = "check the user and database names in DATABASE_URL, or grant the role CONNECT on the database"
)

// RefusedError is the server's refusal of claimd's session (see
// above): its answers, distinct, in the order of the hosts. It wraps the
// failed connection attempt.
type RefusedError struct {
	answers []*pgconn.PgError
	err     error
}

// Error is each answer with its SQLSTATE, then what to check: database
// "nosuch" does not exist (SQLSTATE 3D000): check the database name in
// DATABASE_URL. The server's message names no password.
func (e *RefusedError) Error() string {
	var said, checks []string
	for _, a := range e.answers {
		said = append(said, fmt.Sprintf("%s (SQLSTATE %s)", a.Message, a.Code))
		if c := checkFor(a.Code); !slices.Contains(checks, c) {
			checks = append(checks, c)
		}
	}
	return strings.Join(said, "; ") + ": " + strings.Join(checks, "; ")
}

func (e *RefusedError) Unwrap() error { return e.err }

func checkFor(code string) string {
	switch code {
	case pgerrcode.InvalidCatalogName:
		return checkDatabaseName
	case pgerrcode.InvalidPassword:
		return checkUserAndPassword
	case pgerrcode.InvalidAuthorizationSpecification:
		return checkUserAndHBA
	default:
		return checkConnectPriv
	}
}

// ConnectRefused returns the refusal err is (a *pgconn.ConnectError in
// its chain whose every step the server refused for good), or nil when
// err is not a failed connection attempt, or one a wait may fix.
func ConnectRefused(err error) *RefusedError {
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		return nil
	}
	if answers := refusals(ce.Unwrap()); answers != nil {
		return &RefusedError{answers: answers, err: err}
	}
	return nil
}

// refusals returns the server's refusals in attempt, what a
// *pgconn.ConnectError wraps (the failure of each host pgx tried, joined),
// distinct and in order; nil when there is none, or when any step of the
// attempt failed for a reason a wait may fix.
//
// It walks the error tree itself, one node at a time, on purpose:
// errors.As would stop at the first *pgconn.PgError of a joined error and
// leave the other hosts' failures unread.
//
//nolint:errorlint // each node of the tree is looked at as it is (see above)
func refusals(attempt error) []*pgconn.PgError {
	var answers []*pgconn.PgError
	waitMayFix := false
	var walk func(error)
	walk = func(e error) {
		if e == nil || waitMayFix {
			return
		}
		if pe, ok := e.(*pgconn.PgError); ok {
			if !refusesSession(pe) {
				waitMayFix = true
			} else if !slices.ContainsFunc(answers, func(a *pgconn.PgError) bool { return a.Code == pe.Code && a.Message == pe.Message }) {
				answers = append(answers, pe)
			}
			return
		}
		if passing(e) {
			waitMayFix = true
			return
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(attempt)
	if waitMayFix {
		return nil
	}
	return answers
}

// refusesSession reports whether e is the server refusing the session
// for good: a FATAL at connection start with one of the codes above.
func refusesSession(e *pgconn.PgError) bool {
	if cmp.Or(e.SeverityUnlocalized, e.Severity) != "FATAL" {
		return false
	}
	switch e.Code {
	case pgerrcode.InvalidCatalogName, pgerrcode.InvalidAuthorizationSpecification, pgerrcode.InvalidPassword, pgerrcode.InsufficientPrivilege:
		return true
	}
	return false
}

// passing reports whether e, one step of a failed connection attempt,
// is a state a wait may end: the network (refused, reset, timed out, no
// such host yet), the connection ending early, the attempt's time
// running out, a server of the wrong role for target_session_attrs (a
// standby during a failover), a server the fence refused. e is one node
// of the tree refusals walks, not a chain (refusals unwraps).
//
//nolint:errorlint // one node of the tree, compared as it is (see refusals)
func passing(e error) bool {
	if _, ok := e.(net.Error); ok {
		return true
	}
	switch e {
	case io.EOF, io.ErrUnexpectedEOF, context.Canceled, context.DeadlineExceeded,
		pgconn.ErrReadOnlyConnection, pgconn.ErrReadWriteConnection, pgconn.ErrPrimaryConnection, pgconn.ErrStandbyConnection:
		return true
	}
	switch e.(type) {
	case *pgconn.NotPreferredError, *StaleServerError:
		return true
	}
	return false
}

// connectFailure is a failed connection of a one-shot command (migrate,
// purge, keys) in its words: the server's refusal as serve words it, else
// each host's failure, without pgx's `failed to connect to user=…
// database=…` preamble.
type connectFailure struct {
	msg string
	err error
}

func (e *connectFailure) Error() string { return e.msg }
func (e *connectFailure) Unwrap() error { return e.err }

// ConnectProblem words err, from connecting to DATABASE_URL, for a
// one-shot command (migrate, purge, keys): the *RefusedError, or each
// host's failure without pgx's preamble (the error wraps err); err as it
// is when it is not a failed connection.
func ConnectProblem(err error) error {
	if r := ConnectRefused(err); r != nil {
		return r
	}
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) || ce.Unwrap() == nil {
		return err
	}
	hosts := strings.ReplaceAll(ce.Unwrap().Error(), "\n", "; ")
	return &connectFailure{msg: "cannot connect to the database of DATABASE_URL: " + hosts, err: err}
}

// Unreachable is the not-ready reason for a database that could not be
// read (err, under ctx): a server the fence refused (named, with its
// timeline), not answering in time (DatabaseNotAnswering), no writable
// primary among the hosts (target_session_attrs=read-write), or
// unreachable.
func Unreachable(ctx context.Context, err error) string {
	if e := Refusal(err); e != nil {
		return e.Error()
	}
	if NotAnswering(ctx, err) {
		return DatabaseNotAnswering
	}
	if errors.Is(err, pgconn.ErrReadOnlyConnection) {
		return "no writable primary: the database hosts that answer are standbys or read-only (target_session_attrs=read-write)"
	}
	return "database unreachable"
}

// DatabaseNotAnswering is the not-ready reason for a database that took
// the connection (or had one open) but did not answer within /readyz's
// time budget: frozen, overloaded, or a network that drops packets.
const DatabaseNotAnswering = "database not answering: it took the connection but sent no reply in time (frozen, overloaded, or packets dropped)"

// NotAnswering reports whether err is a check running out of time (its
// context's deadline, or a network timeout) rather than a refusal.
func NotAnswering(ctx context.Context, err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) ||
		errors.As(err, &ne) && ne.Timeout()
}
