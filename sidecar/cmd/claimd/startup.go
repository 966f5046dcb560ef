package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/httpapi"
	"github.com/idempotent-claim/idempotent-claim/sidecar/ingest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/migrate"
)

// Starting during a failover waits instead of exiting (issue 15, part 3).
//
// claimd serves /healthz from the start, whatever the database: when no
// writable primary answers (down, failing over, only a standby
// reachable, transactions read-only by default), Run listens at once and
// waits, /readyz says why it is not ready, and the API answers 503 with
// Retry-After. The start-up loop tries again with a growing pause (at
// most startRetryCap) for as long as the process runs, and logs the
// reason when it changes and otherwise every startLogEvery; a readiness
// check that finds the database writable makes it try at once. Once a
// writable primary answers it migrates (CLAIMD_MIGRATE), then starts the
// dispatcher (River) and the claim waiter's LISTEN connection; the
// maintenance loop (lease sweep, retention purge) and the sources file
// watcher run from then on. When the database is writable at the first
// try, all of that happens before claimd listens, as before.
//
// A server that refuses claimd's session for good (connect.go: no such
// database or role, a wrong password, no CONNECT privilege) is no
// failover: when the first connection, made as the pool opens and before
// claimd listens, meets that refusal, Run returns it (claimd exits 1 with
// the server's reason and the setting to check). Met later, by an attempt
// of the start-up wait (the server was down or read-only at the first
// try, or the role lost LOGIN meanwhile), it ends the wait too: it is
// logged as an error, claimd shuts down as on SIGTERM and exits 1 with the
// same words. A wait for a failover is for servers that cannot answer
// yet; one that answers "not you" will not change its mind, and a
// process that exits says so louder than one that stays not ready. Once
// claimd has started, a refusal of a new connection fails that request
// (503) and claimd keeps serving.
//
// Until the schema is known to be current (migrated here, or found so on
// a standby), the pool refuses connections to every caller but the
// start-up itself and the readiness check (startupGate): a request meets
// a refused connection, answered 503 (an Unavailable apperr.Error, which
// db.Error passes through), instead of running its statements
// against tables that are not there yet (500). The metrics' database
// gauges read claimd_stats_up 0 meanwhile. Once the schema is current the
// gate stays open: reads work on a standby, and writes are refused by
// PostgreSQL itself (read-only, 503).

// Start-up retry timing.
const (
	startRetryFirst = 200 * time.Millisecond
	startRetryCap   = 2 * time.Second
	startLogEvery   = 30 * time.Second
	// startProbeTimeout bounds the database check of one attempt (a host
	// that drops packets would otherwise hold it for pgx's connect timeout).
	startProbeTimeout = 5 * time.Second
)

type internalKey struct{}

// internal marks ctx as claimd's own start-up or readiness work, which the
// start-up gate lets through.
func internal(ctx context.Context) context.Context {
	return context.WithValue(ctx, internalKey{}, true)
}

func isInternal(ctx context.Context) bool { v, _ := ctx.Value(internalKey{}).(bool); return v }

// startupGate refuses the pool's connections to requests until the schema
// is current.
type startupGate struct {
	open   atomic.Bool
	reason atomic.Pointer[string]
	// probed is the failure of the first connection (probe), which the
	// first attempt reports instead of connecting again (a host that
	// drops packets would hold claimd for startProbeTimeout twice before
	// it listens). Set and taken in Run's goroutine, before the wait.
	probed error
}

// probe is the serving process's first connection, made as its pool
// opens: nil when it connected (the connection stays in the pool) or
// failed for a reason a wait may fix, kept for the first attempt; the
// refusal when the server refused the session for good.
func (g *startupGate) probe(ctx context.Context, pool *pgxpool.Pool) error {
	pctx, cancel := context.WithTimeout(internal(ctx), startProbeTimeout)
	defer cancel()
	c, err := pool.Acquire(pctx)
	if err == nil {
		c.Release()
		return nil
	}
	if r := connectRefused(err); r != nil {
		return r
	}
	g.probed = err
	return nil
}

// notStartedError is the cause of a refusal: nothing was sent to the
// database (pgconn.SafeToRetry), so any classification of it retries.
type notStartedError struct{}

func (notStartedError) Error() string     { return "claimd is starting" }
func (notStartedError) SafeToRetry() bool { return true }

// prepare is the pool's PrepareConn hook.
func (g *startupGate) prepare(ctx context.Context, _ *pgx.Conn) (bool, error) {
	if g.open.Load() || isInternal(ctx) {
		return true, nil
	}
	msg := "claimd is starting: waiting for a writable database and its schema"
	if r := g.reason.Load(); r != nil {
		msg = "claimd is starting: " + *r
	}
	return true, &apperr.Error{Code: apperr.Unavailable, Message: msg + "; retry", Err: notStartedError{}}
}

func (g *startupGate) setReason(r string) { g.reason.Store(&r) }

// starter runs the start-up: at once in Run, then in the background until
// it succeeds.
type starter struct {
	m      *Main
	inbox  *ingest.Inbox
	waiter *claim.Waiter
	// kick makes a waiting start-up try again at once.
	kick chan struct{}
	// done is closed when the start-up has succeeded.
	done chan struct{}

	migrated, logged, dispatching bool
}

func newStarter(m *Main, inbox *ingest.Inbox, waiter *claim.Waiter) *starter {
	return &starter{m: m, inbox: inbox, waiter: waiter, kick: make(chan struct{}, 1), done: make(chan struct{})}
}

// poke asks a waiting start-up to try again now.
func (s *starter) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *starter) started() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// errNotWritable: the database answers but does not take writes.
type errNotWritable struct{ reason string }

func (e errNotWritable) Error() string { return e.reason }

// attempt makes one try; nil once claimd has started.
func (s *starter) attempt(ctx context.Context) error {
	m := s.m
	pctx, cancel := context.WithTimeout(internal(ctx), startProbeTimeout)
	var facts httpapi.DatabaseFacts
	err := m.gate.probed
	m.gate.probed = nil
	if err == nil {
		facts, err = readSession(pctx, m.pool)
	}
	cancel()
	if r := connectRefused(err); r != nil {
		return r
	}
	if err != nil {
		return fmt.Errorf("%s (%w)", m.unreachable(pctx, err), err)
	}
	ictx := internal(ctx)
	if !facts.ReadOnly && m.Config.Migrate && !s.migrated {
		n, err := migrate.Up(ictx, m.pool)
		if err != nil {
			return fmt.Errorf("applying migrations: %w", err)
		}
		s.migrated = true
		m.Log.Info().Int("applied", n).Msg("migrations up to date")
	}
	if !m.gate.open.Load() {
		pending, err := schemaPending(ictx, m.pool)
		switch {
		case pending && facts.ReadOnly:
			return errNotWritable{reason: "the database does not take writes (a standby, or default_transaction_read_only = on) " +
				"and its schema is not current"}
		case err != nil:
			return fmt.Errorf("cannot read the migration version: %w", err)
		case pending && !m.Config.Migrate:
			return errNotWritable{reason: "migrations pending (they are applied by a claimd with CLAIMD_MIGRATE on a writable database)"}
		case !pending:
			m.gate.open.Store(true)
		}
	}
	if !s.logged {
		s.logged = true
		m.logSession(ictx)
		_, _ = m.repl.get(ictx) // logs what commits wait for
	}
	if facts.ReadOnly {
		if !facts.InRecovery {
			m.pool.Reset() // sessions keep the defaults they started with
		}
		return errNotWritable{reason: "the database does not take writes (a standby, or default_transaction_read_only = on)"}
	}
	if !s.dispatching {
		// Not ctx: River treats a cancelled start context as a hard stop
		// that cancels running dispatches; Stop drains them instead.
		if err := s.inbox.Start(context.WithoutCancel(ctx)); err != nil {
			return fmt.Errorf("start dispatcher: %w", err)
		}
		s.dispatching = true
	}
	return nil
}

// wait retries attempt until it succeeds (nil), ctx ends (its error) or
// the server refuses claimd's session for good (that refusal, which Run
// returns); first is the error of the attempt Run made.
func (s *starter) wait(ctx context.Context, first error) error {
	pause := startRetryFirst
	lastReason, lastLog := "", time.Time{}
	err := first
	for {
		if connectRefused(err) != nil {
			return err
		}
		reason := err.Error()
		s.m.gate.setReason(reasonWords(err))
		if reason != lastReason || time.Since(lastLog) >= startLogEvery {
			s.m.Log.Warn().Str("reason", reason).Str("retry", "every "+startRetryCap.String()+" at most").
				Msg("waiting for a writable database: serving /healthz, not ready, the API answers 503")
			lastReason, lastLog = reason, time.Now()
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		case <-s.kick:
			t.Stop()
		}
		pause = min(2*pause, startRetryCap)
		if err = s.attempt(ctx); err == nil {
			s.m.Log.Info().Msg("the database takes writes; started")
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// msgRefusedExit is the log message of a start-up wait that met the
// server's refusal of claimd's session.
const msgRefusedExit = "the database server refuses claimd's session (a setting to fix, not a failover: see reason); " +
	"claimd has not started and stops"

// reasonWords is a start-up error in words safe to show to a caller (no
// database message).
func reasonWords(err error) string {
	var nw errNotWritable
	if errors.As(err, &nw) {
		return nw.reason
	}
	if connectRefused(err) != nil {
		return "the database server refuses claimd's session (DATABASE_URL or the server's settings; see the sidecar log)"
	}
	if e := refusal(err); e != nil {
		return "the database server reached is a former primary or another database system (see /readyz)"
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		if errors.Is(err, pgconn.ErrReadOnlyConnection) {
			return "no writable primary among the database hosts"
		}
		return "the database is unreachable"
	}
	return "the database is not ready"
}

// schemaPending reports whether a migration is pending: at once when the
// migrations' version table is missing (goose would try to create it, an
// error on a standby), else as migrate.Pending tells.
func schemaPending(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", migrate.VersionTable).Scan(&exists); err != nil {
		return false, err
	}
	if !exists {
		return true, nil
	}
	return migrate.Pending(ctx, pool)
}
