package ha

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/httpapi"
	"github.com/idempotent-claim/idempotent-claim/sidecar/migrate"
)

// Starting during a failover waits instead of exiting: the start-up.
//
// claimd serves /healthz from the start, whatever the database: when no
// writable primary answers (down, failing over, only a standby
// reachable, transactions read-only by default), claimd listens at once
// and waits (Starter.Wait), /readyz says why it is not ready, and the API
// answers 503 with Retry-After. The start-up loop tries again with a growing pause (at
// most startRetryCap) for as long as the process runs, and logs the
// reason when it changes and otherwise every startLogEvery; a readiness
// check that finds the database writable makes it try at once. Once a
// writable primary answers it migrates (CLAIMD_MIGRATE), then starts the
// dispatcher (River) and the claim waiter's LISTEN connection; the
// maintenance loop (lease sweep, retention purge) and the sources file
// watcher run from then on. When the database is writable at the first
// try (Starter.Start), all of that happens before claimd listens.
//
// A server that refuses claimd's session for good (refused.go: no such
// database or role, a wrong password, no CONNECT privilege) is no
// failover: when the first connection, made as the pool opens and before
// claimd listens, meets that refusal (Gate.Probe), claimd exits 1 with
// the server's reason and the setting to check. Met later, by an attempt
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
// start-up itself and the readiness check (Gate): a request meets
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

// Internal marks ctx as claimd's own start-up or readiness work, which the
// start-up gate and the SyncGuard let through.
func Internal(ctx context.Context) context.Context {
	return context.WithValue(ctx, internalKey{}, true)
}

// IsInternal reports whether ctx was marked by Internal.
func IsInternal(ctx context.Context) bool { v, _ := ctx.Value(internalKey{}).(bool); return v }

// Gate refuses the pool's connections to requests until the schema is
// current (Open): install Prepare as the pool's PrepareConn and Probe
// right after the pool opens. Its zero value is closed.
type Gate struct {
	open   atomic.Bool
	reason atomic.Pointer[string]
	// probed is the failure of the first connection (Probe), which the
	// Starter's first attempt reports instead of connecting again (a host
	// that drops packets would hold claimd for startProbeTimeout twice
	// before it listens). Set by Probe and taken by Start, on one
	// goroutine, before the wait.
	probed error
}

// Probe makes the serving process's first connection, as its pool opens:
// nil when it connected (the connection stays in the pool) or failed for
// a reason a wait may fix, kept for the Starter's first attempt; the
// *RefusedError when the server refused the session for good.
func (g *Gate) Probe(ctx context.Context, pool *pgxpool.Pool) error {
	pctx, cancel := context.WithTimeout(Internal(ctx), startProbeTimeout)
	defer cancel()
	c, err := pool.Acquire(pctx)
	if err == nil {
		c.Release()
		return nil
	}
	if r := ConnectRefused(err); r != nil {
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

// Prepare is a pgxpool PrepareConn hook: until the gate is open it
// refuses every connection but claimd's own work (Internal) with an
// Unavailable *apperr.Error (503, retryable) naming the reason
// (SetReason); the connection stays in the pool.
func (g *Gate) Prepare(ctx context.Context, _ *pgx.Conn) (bool, error) {
	if g.open.Load() || IsInternal(ctx) {
		return true, nil
	}
	msg := "claimd is starting: waiting for a writable database and its schema"
	if r := g.reason.Load(); r != nil {
		msg = "claimd is starting: " + *r
	}
	return true, &apperr.Error{Code: apperr.Unavailable, Message: msg + "; retry", Err: notStartedError{}}
}

// SetReason sets the reason the refusals give, in words safe to show to
// a caller.
func (g *Gate) SetReason(r string) { g.reason.Store(&r) }

// Open lets every connection through from now on: the schema is current.
func (g *Gate) Open() { g.open.Store(true) }

// IsOpen reports whether Open was called.
func (g *Gate) IsOpen() bool { return g.open.Load() }

// Starter runs the start-up (see above): Start at once, before claimd
// listens, then, when that did not succeed, Wait in the background until
// it does.
type Starter struct {
	o StarterOptions
	// kick makes a waiting start-up try again at once.
	kick chan struct{}
	// done is closed when the start-up has succeeded.
	done chan struct{}

	migrated, logged, dispatching bool
}

// StarterOptions are what the start-up works with.
type StarterOptions struct {
	// Pool is the serving pool, its PrepareConn running Gate.Prepare.
	Pool *pgxpool.Pool
	Gate *Gate
	// Replication is read once, on the first attempt that reaches a
	// database, so that the log says what commits wait for.
	Replication *ReplicationMonitor
	Log         zerolog.Logger
	// Migrate applies pending migrations on a writable database
	// (CLAIMD_MIGRATE); without it the start-up waits until another
	// process applied them.
	Migrate bool
	// ReadSession reads the database facts of one of Pool's sessions.
	ReadSession func(context.Context) (httpapi.DatabaseFacts, error)
	// LogSession logs the session's settings, on the first attempt that
	// reaches a database.
	LogSession func(context.Context)
	// StartDispatcher starts the dispatcher, once the database takes
	// writes; its context is never cancelled (the dispatcher is stopped on
	// its own, draining).
	StartDispatcher func(context.Context) error
}

// NewStarter returns a Starter that has not tried yet.
func NewStarter(o StarterOptions) *Starter {
	return &Starter{o: o, kick: make(chan struct{}, 1), done: make(chan struct{})}
}

// Poke asks a waiting start-up to try again now.
func (s *Starter) Poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Done is closed once the start-up has succeeded.
func (s *Starter) Done() <-chan struct{} { return s.done }

// Started reports whether the start-up has succeeded.
func (s *Starter) Started() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Dispatching reports whether the start-up started the dispatcher. Read
// it from the goroutine that ran Start, or after Wait returned.
func (s *Starter) Dispatching() bool { return s.dispatching }

// errNotWritable: the database answers but does not take writes.
type errNotWritable struct{ reason string }

func (e errNotWritable) Error() string { return e.reason }

// Start makes the first try: nil once claimd has started (migrated, the
// schema current, the database writable, the dispatcher started); a
// *RefusedError when the server refused claimd's session for good;
// otherwise why it did not start, to give to Wait.
func (s *Starter) Start(ctx context.Context) error {
	err := s.attempt(ctx)
	if err == nil {
		close(s.done)
	}
	return err
}

// attempt makes one try; nil once claimd has started.
func (s *Starter) attempt(ctx context.Context) error {
	o := s.o
	pctx, cancel := context.WithTimeout(Internal(ctx), startProbeTimeout)
	var facts httpapi.DatabaseFacts
	err := o.Gate.probed
	o.Gate.probed = nil
	if err == nil {
		facts, err = o.ReadSession(pctx)
	}
	cancel()
	if r := ConnectRefused(err); r != nil {
		return r
	}
	if err != nil {
		return fmt.Errorf("%s (%w)", Unreachable(pctx, err), err)
	}
	ictx := Internal(ctx)
	if !facts.ReadOnly && o.Migrate && !s.migrated {
		n, err := migrate.Up(ictx, o.Pool)
		if err != nil {
			return fmt.Errorf("applying migrations: %w", err)
		}
		s.migrated = true
		o.Log.Info().Int("applied", n).Msg("migrations up to date")
	}
	if !o.Gate.IsOpen() {
		pending, err := SchemaPending(ictx, o.Pool)
		switch {
		case pending && facts.ReadOnly:
			return errNotWritable{reason: "the database does not take writes (a standby, or default_transaction_read_only = on) " +
				"and its schema is not current"}
		case err != nil:
			return fmt.Errorf("cannot read the migration version: %w", err)
		case pending && !o.Migrate:
			return errNotWritable{reason: "migrations pending (they are applied by a claimd with CLAIMD_MIGRATE on a writable database)"}
		case !pending:
			o.Gate.Open()
		}
	}
	if !s.logged {
		s.logged = true
		o.LogSession(ictx)
		_, _ = o.Replication.Get(ictx) // logs what commits wait for
	}
	if facts.ReadOnly {
		if !facts.InRecovery {
			o.Pool.Reset() // sessions keep the defaults they started with
		}
		return errNotWritable{reason: "the database does not take writes (a standby, or default_transaction_read_only = on)"}
	}
	if !s.dispatching {
		// Not ctx: River treats a cancelled start context as a hard stop
		// that cancels running dispatches; Stop drains them instead.
		if err := o.StartDispatcher(context.WithoutCancel(ctx)); err != nil {
			return fmt.Errorf("start dispatcher: %w", err)
		}
		s.dispatching = true
	}
	return nil
}

// Wait retries until the start-up succeeds (nil; Done is closed), ctx
// ends (its error) or the server refuses claimd's session for good (that
// *RefusedError, which claimd exits with); first is the error Start
// returned. Meanwhile the Gate gives requests the reason in words safe to
// show, and the log says why, when it changes and every startLogEvery.
func (s *Starter) Wait(ctx context.Context, first error) error {
	pause := startRetryFirst
	lastReason, lastLog := "", time.Time{}
	err := first
	for {
		if ConnectRefused(err) != nil {
			return err
		}
		reason := err.Error()
		s.o.Gate.SetReason(reasonWords(err))
		if reason != lastReason || time.Since(lastLog) >= startLogEvery {
			s.o.Log.Warn().Str("reason", reason).Str("retry", "every "+startRetryCap.String()+" at most").
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
			s.o.Log.Info().Msg("the database takes writes; started")
			close(s.done)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// MsgRefusedExit is the log message of a start-up wait that met the
// server's refusal of claimd's session.
const MsgRefusedExit = "the database server refuses claimd's session (a setting to fix, not a failover: see reason); " +
	"claimd has not started and stops"

// reasonWords is a start-up error in words safe to show to a caller (no
// database message).
func reasonWords(err error) string {
	var nw errNotWritable
	if errors.As(err, &nw) {
		return nw.reason
	}
	if ConnectRefused(err) != nil {
		return "the database server refuses claimd's session (DATABASE_URL or the server's settings; see the sidecar log)"
	}
	if e := Refusal(err); e != nil {
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

// SchemaPending reports whether a migration is pending: at once when the
// migrations' version table is missing (goose would try to create it, an
// error on a standby), else as migrate.Pending tells.
func SchemaPending(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	exists, err := queries.VersionTableExists(ctx, pool, migrate.VersionTable)
	if err != nil {
		return false, err
	}
	if !exists {
		return true, nil
	}
	return migrate.Pending(ctx, pool)
}
