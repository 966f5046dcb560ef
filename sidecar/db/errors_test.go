package db_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/puddle/v2"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgfault"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// faultDB is a fresh database with a probe table (rows 1 and 2) for the
// classifier's cases, and a proxy to it that can break a session.
type faultDB struct {
	ctx   context.Context
	admin *pgxpool.Pool
	proxy *pgfault.Proxy
	url   string
}

func newFaultDB(t *testing.T) *faultDB {
	t.Helper()
	url := pgtest.NewDatabase(t)
	ctx := t.Context()
	admin, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	_, err = admin.Exec(ctx, `CREATE TABLE probe (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
		INSERT INTO probe (id) VALUES (1), (2)`)
	require.NoError(t, err)
	return &faultDB{ctx: ctx, admin: admin, proxy: pgfault.New(t, url), url: url}
}

// conn opens a connection of its own, through the proxy when proxied.
func (f *faultDB) conn(t *testing.T, proxied bool) *pgx.Conn {
	t.Helper()
	url := f.url
	if proxied {
		url = f.proxy.URL(url)
	}
	c, err := pgx.Connect(f.ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func (f *faultDB) exec(t *testing.T, c *pgx.Conn, sql string) {
	t.Helper()
	_, err := c.Exec(f.ctx, sql)
	require.NoError(t, err, sql)
}

// waitActive waits until the backend pid runs a statement (or waits for a
// lock), so that a signal sent to it lands mid-statement.
func (f *faultDB) waitActive(t *testing.T, pid uint32, lock bool) {
	t.Helper()
	q := `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND state = 'active')`
	if lock {
		q = `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock')`
	}
	require.Eventually(t, func() bool {
		var ok bool
		require.NoError(t, f.admin.QueryRow(f.ctx, q, pid).Scan(&ok))
		return ok
	}, 10*time.Second, 10*time.Millisecond)
}

// signalled runs sql on a fresh connection (after setup, on it), sends the
// backend the admin statement signal (pg_cancel_backend or
// pg_terminate_backend) once sql is under way, and returns sql's error.
func (f *faultDB) signalled(t *testing.T, setup, sql, signal string) error {
	t.Helper()
	c := f.conn(t, false)
	if setup != "" {
		f.exec(t, c, setup)
	}
	pid := c.PgConn().PID()
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(f.ctx, sql)
		done <- err
	}()
	f.waitActive(t, pid, false)
	var ok bool
	require.NoError(t, f.admin.QueryRow(f.ctx, `SELECT `+signal+`($1)`, pid).Scan(&ok))
	require.True(t, ok)
	return <-done
}

// committed reports whether probe row id has n = want.
func (f *faultDB) committed(t *testing.T, id, want int) bool {
	t.Helper()
	var n int
	require.NoError(t, f.admin.QueryRow(f.ctx, `SELECT n FROM probe WHERE id = $1`, id).Scan(&n))
	return n == want
}

// dbCase is one failure of the classifier's table: err as a real server,
// driver or network produced it, and what it means.
type dbCase struct {
	name  string
	err   error
	fault db.Fault
}

// The one classifier of database errors (db.Classify, db.Error),
// over failures produced for real: by the server (read-only transaction,
// lock_timeout, statement_timeout, pg_cancel_backend, pg_terminate_backend
// mid-transaction, a serialization failure, a deadlock, a role over its
// connection limit, errors no retry fixes), by the network (a session cut
// after the server committed, cut by a reset, cut before the statement was
// sent, a reply that never came within the request's time, a refused
// connection) and by the driver (a connection used after it broke, a
// closed pool). Then the SQLSTATEs one server cannot produce on demand
// (a crash, a full disk, 40003), built by hand. Every retryable one is
// Unavailable with an answer that quotes nothing of the database; every
// other stays internal.
func TestClassifyRealFailures(t *testing.T) {
	t.Parallel()
	f := newFaultDB(t)
	var cases []dbCase
	add := func(name string, err error, fault db.Fault) {
		t.Helper()
		require.Error(t, err, name)
		cases = append(cases, dbCase{name, err, fault})
	}

	// --- The server refuses with an ERROR: the transaction is rolled back.
	c := f.conn(t, false)
	f.exec(t, c, `SET default_transaction_read_only = on`)
	_, err := c.Exec(f.ctx, `UPDATE probe SET n = n + 1 WHERE id = 1`)
	add("25006 read-only transaction", err, db.NothingKept)

	holder := f.conn(t, false)
	f.exec(t, holder, `BEGIN`)
	f.exec(t, holder, `SELECT * FROM probe WHERE id = 1 FOR UPDATE`)
	c = f.conn(t, false)
	f.exec(t, c, `SET lock_timeout = '50ms'`)
	_, err = c.Exec(f.ctx, `UPDATE probe SET n = n + 1 WHERE id = 1`)
	add("55P03 lock_timeout", err, db.NothingKept)
	f.exec(t, holder, `ROLLBACK`)

	c = f.conn(t, false)
	f.exec(t, c, `SET statement_timeout = '50ms'`)
	_, err = c.Exec(f.ctx, `SELECT pg_sleep(5)`)
	add("57014 statement_timeout", err, db.NothingKept)

	add("57014 pg_cancel_backend", f.signalled(t, "", `SELECT pg_sleep(5)`, "pg_cancel_backend"), db.NothingKept)

	add("57P01 pg_terminate_backend mid-transaction",
		f.signalled(t, `BEGIN; UPDATE probe SET n = n + 1 WHERE id = 2`, `SELECT pg_sleep(5)`, "pg_terminate_backend"),
		db.OutcomeUnknown)
	require.True(t, f.committed(t, 2, 0), "the terminated transaction was rolled back")

	c1 := f.conn(t, false)
	f.exec(t, c1, `BEGIN ISOLATION LEVEL SERIALIZABLE`)
	f.exec(t, c1, `SELECT n FROM probe WHERE id = 1`)
	_, err = f.admin.Exec(f.ctx, `UPDATE probe SET n = n + 1 WHERE id = 1`)
	require.NoError(t, err)
	_, err = c1.Exec(f.ctx, `UPDATE probe SET n = n + 1 WHERE id = 1`)
	add("40001 serialization failure (SERIALIZABLE)", err, db.NothingKept)
	f.exec(t, c1, `ROLLBACK`)

	add("40P01 deadlock", deadlock(t, f), db.NothingKept)

	add("53300 too many connections for role", overConnectionLimit(t, f), db.NothingKept)

	// --- The network breaks the session (pgfault between driver and server).
	for _, reset := range []bool{false, true} {
		pc := f.conn(t, true)
		before := nAt(t, f, 1)
		fired := f.proxy.Arm(func(sql string) bool { return strings.HasPrefix(sql, "UPDATE probe") }, pgfault.AfterReply, reset)
		_, err = pc.Exec(f.ctx, `UPDATE probe SET n = n + 1 WHERE id = 1`)
		requireFired(t, fired)
		require.True(t, f.committed(t, 1, before+1), "the server committed; its answer was lost")
		add(fmt.Sprintf("connection lost after the commit (reset %v)", reset), err, db.OutcomeUnknown)
		var pgErr *pgconn.PgError
		require.False(t, errors.As(err, &pgErr))
		if !reset {
			// pgx reports the statement after the break with the very
			// error it gave the committed one: "conn closed".
			_, again := pc.Exec(f.ctx, `SELECT 1`)
			require.EqualError(t, again, err.Error())
			add("a statement on the connection that broke (conn closed)", again, db.OutcomeUnknown)
		}
	}

	pc := f.conn(t, true)
	before := nAt(t, f, 1)
	fired := f.proxy.Arm(func(sql string) bool { return strings.HasPrefix(sql, "UPDATE probe") }, pgfault.BeforeSend, false)
	_, err = pc.Exec(f.ctx, `UPDATE probe SET n = n + 1 WHERE id = 1`)
	requireFired(t, fired)
	require.True(t, f.committed(t, 1, before), "the statement never reached the server")
	add("connection lost before the statement reached the server", err, db.OutcomeUnknown)

	pc = f.conn(t, true)
	before = nAt(t, f, 1)
	fired = f.proxy.Arm(func(sql string) bool { return strings.HasPrefix(sql, "UPDATE probe") }, pgfault.Stall, false)
	ctx, cancel := context.WithTimeout(f.ctx, 300*time.Millisecond)
	_, err = pc.Exec(ctx, `UPDATE probe SET n = n + 1 WHERE id = 1`)
	cancel()
	requireFired(t, fired)
	require.True(t, f.committed(t, 1, before+1), "the server committed; the answer never came")
	add("the request's time ran out waiting for the commit's answer", err, db.OutcomeUnknown)

	_, err = pgx.Connect(f.ctx, "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2")
	add("connection refused", err, db.NothingKept)

	closed, err := pgxpool.New(f.ctx, f.url)
	require.NoError(t, err)
	closed.Close()
	_, err = closed.Exec(f.ctx, `SELECT 1`)
	require.ErrorIs(t, err, puddle.ErrClosedPool)
	add("closed pool", err, db.NothingKept)

	// --- Errors no retry fixes.
	_, err = f.admin.Exec(f.ctx, `SELECT 1/0`)
	add("22012 division by zero", err, db.NotRetryable)
	_, err = f.admin.Exec(f.ctx, `INSERT INTO probe (id) VALUES (1)`)
	add("23505 unique violation", err, db.NotRetryable)
	_, err = f.admin.Exec(f.ctx, `SELECT * FROM no_such_table`)
	add("42P01 undefined table", err, db.NotRetryable)
	var n int
	err = f.admin.QueryRow(f.ctx, `SELECT 'x'`).Scan(&n)
	add("scan into the wrong type", err, db.NotRetryable)
	add("no rows", pgx.ErrNoRows, db.NotRetryable)

	// --- SQLSTATEs one server does not produce on demand, as pgconn
	// reports them.
	for _, s := range []struct {
		code, severity string
		fault          db.Fault
	}{
		{"08006", "FATAL", db.OutcomeUnknown},
		{"08P01", "ERROR", db.OutcomeUnknown},
		{"25P03", "FATAL", db.OutcomeUnknown},
		{"40000", "ERROR", db.NothingKept},
		{"40003", "ERROR", db.OutcomeUnknown},
		{"53100", "ERROR", db.NothingKept},
		{"53200", "ERROR", db.NothingKept},
		{"53300", "FATAL", db.NothingKept},
		{"53400", "ERROR", db.NothingKept},
		{"57000", "ERROR", db.NothingKept},
		{"57P02", "FATAL", db.OutcomeUnknown},
		{"57P03", "FATAL", db.OutcomeUnknown},
		{"57P04", "FATAL", db.OutcomeUnknown},
		{"57P05", "FATAL", db.OutcomeUnknown},
		{"58000", "ERROR", db.NothingKept},
		{"58030", "ERROR", db.NothingKept},
		{"72000", "ERROR", db.NothingKept},
		{"XX000", "PANIC", db.OutcomeUnknown},
		{"28000", "FATAL", db.OutcomeUnknown},
		{"40002", "ERROR", db.NotRetryable},
		{"42501", "ERROR", db.NotRetryable},
		{"54000", "ERROR", db.NotRetryable},
		{"55000", "ERROR", db.NotRetryable},
		{"58P01", "ERROR", db.NotRetryable},
		{"XX000", "ERROR", db.NotRetryable},
		{"XX001", "ERROR", db.NotRetryable},
		{"P0001", "ERROR", db.NotRetryable},
	} {
		add(s.code+" "+s.severity, fmt.Errorf("query: %w", &pgconn.PgError{Severity: s.severity, SeverityUnlocalized: s.severity,
			Code: s.code, Message: "server words " + s.code}), s.fault)
	}
	add("ECONNRESET from a write", &net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET}, db.OutcomeUnknown)
	add("EPIPE", fmt.Errorf("flush: %w", syscall.EPIPE), db.OutcomeUnknown)
	add("flattened to text", errors.New("dispatch: failed to receive message: unexpected EOF"), db.OutcomeUnknown)
	add("flattened reset", errors.New("read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer"), db.OutcomeUnknown)
	add("already an application error", apperr.New(apperr.Invalid, "bad"), db.NotRetryable)

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fault, reason := db.Classify(c.err)
			require.Equal(t, c.fault, fault, "%v", c.err)
			require.Equal(t, fault != db.NotRetryable, db.Retryable(c.err))
			mapped := db.Error(c.err)
			e := apperr.As(mapped)
			if fault == db.NotRetryable {
				if ae := apperr.As(c.err); ae != nil {
					require.Same(t, ae, e, "an application error passes as it is")
					return
				}
				require.Equal(t, apperr.Internal, apperr.CodeOf(mapped), "%v", c.err)
				require.ErrorIs(t, mapped, c.err)
				return
			}
			require.NotNil(t, e, "%v", c.err)
			require.Equal(t, apperr.Unavailable, e.Code)
			require.ErrorIs(t, mapped, c.err, "the cause is kept, for the log")
			require.NotEmpty(t, reason)
			require.True(t, strings.HasPrefix(e.Message, reason), e.Message)
			if fault == db.OutcomeUnknown {
				require.Contains(t, e.Message, "outcome is unknown")
				require.Contains(t, e.Message, db.RetrySameRequest)
			} else {
				require.Contains(t, e.Message, "nothing was kept; retry")
			}
			requireOwnWords(t, e.Message, c.err)
			t.Logf("%v\n    → %s", c.err, e.Message)
		})
	}
}

// requireOwnWords fails when msg quotes the database: its message, its
// SQLSTATE or a statement.
func requireOwnWords(t *testing.T, msg string, cause error) {
	t.Helper()
	var pgErr *pgconn.PgError
	if errors.As(cause, &pgErr) {
		require.NotContains(t, msg, pgErr.Message)
	}
	for _, w := range []string{"SQLSTATE", "ERROR", "FATAL", "UPDATE", "SELECT", "INSERT", "probe", "pg_", "EOF", "tcp"} {
		require.NotContains(t, msg, w)
	}
}

func nAt(t *testing.T, f *faultDB, id int) int {
	t.Helper()
	var n int
	require.NoError(t, f.admin.QueryRow(f.ctx, `SELECT n FROM probe WHERE id = $1`, id).Scan(&n))
	return n
}

func requireFired(t *testing.T, fired <-chan struct{}) {
	t.Helper()
	select {
	case <-fired:
	default:
		t.Fatal("the proxy's trap did not fire")
	}
}

// deadlock makes two transactions lock rows 1 and 2 in opposite orders and
// returns the error of the one the server chose to abort.
func deadlock(t *testing.T, f *faultDB) error {
	t.Helper()
	a, b := f.conn(t, false), f.conn(t, false)
	for _, c := range []*pgx.Conn{a, b} {
		f.exec(t, c, `SET deadlock_timeout = '50ms'`)
		f.exec(t, c, `BEGIN`)
	}
	f.exec(t, a, `UPDATE probe SET n = n WHERE id = 1`)
	f.exec(t, b, `UPDATE probe SET n = n WHERE id = 2`)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, errs[0] = a.Exec(f.ctx, `UPDATE probe SET n = n WHERE id = 2`)
	}()
	f.waitActive(t, a.PgConn().PID(), true)
	_, errs[1] = b.Exec(f.ctx, `UPDATE probe SET n = n WHERE id = 1`)
	if errs[1] == nil {
		f.exec(t, b, `ROLLBACK`) // the other was aborted; let it go on
	}
	wg.Wait()
	f.exec(t, a, `ROLLBACK`)
	if errs[1] != nil {
		f.exec(t, b, `ROLLBACK`)
		require.NoError(t, errs[0])
		return errs[1]
	}
	return errs[0]
}

// overConnectionLimit creates a role with CONNECTION LIMIT 1, holds its one
// connection and returns the error of a second.
func overConnectionLimit(t *testing.T, f *faultDB) error {
	t.Helper()
	role := fmt.Sprintf("ic_limited_%d", time.Now().UnixNano())
	_, err := f.admin.Exec(f.ctx, `CREATE ROLE `+role+` LOGIN CONNECTION LIMIT 1`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = f.admin.Exec(context.Background(), `DROP ROLE IF EXISTS `+role) })
	cfg, err := pgx.ParseConfig(f.url)
	require.NoError(t, err)
	cfg.User = role
	first, err := pgx.ConnectConfig(f.ctx, cfg)
	require.NoError(t, err)
	defer first.Close(f.ctx)
	_, err = pgx.ConnectConfig(f.ctx, cfg)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "53300", pgErr.Code)
	return err
}
