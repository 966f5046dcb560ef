// Command claimd is the Idempotent Claim sidecar.
//
//	claimd [serve] [flags]            run the HTTP API (the default command)
//	claimd migrate [flags]            apply pending migrations and exit
//	claimd purge [flags]              run the retention purge once and exit
//	claimd keys create TENANT [NAME]  create a database API key; keys revoke ID_OR_PREFIX; keys list
//	claimd healthcheck [URL]          exit 0 when GET URL (default http://CLAIMD_ADDR/readyz) answers 200
//	claimd settings [-markdown]       print every setting
//	claimd help [COMMAND]             usage (COMMAND --help too)
//
// Configuration comes from environment variables and flags; see
// `claimd settings` and sidecar/docs/manual.md#configuration. The command
// line is in cli.go, the one-shot commands in commands.go. This file is
// serve: Main wires the packages that do the work (claim, ingest, httpapi,
// reconcile, backfill; ha for the start-up wait, the failover fence and the
// replication report; sourcesfile for the sources-file reloads) and runs
// them until SIGTERM. pool.go opens the database pool, riverlog.go gives
// River claimd's log.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/backfill"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/config"
	"github.com/idempotent-claim/idempotent-claim/sidecar/ha"
	"github.com/idempotent-claim/idempotent-claim/sidecar/httpapi"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/metrics"
	"github.com/idempotent-claim/idempotent-claim/sidecar/reconcile"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sourcesfile"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "claimd:", err)
		os.Exit(1)
	}
}

func serveCommand(ctx context.Context, cfg config.Config, stderr io.Writer) error {
	m := NewMain(cfg, newLogger(cfg, stderr))
	defer m.Close()
	return m.Run(ctx)
}

func newLogger(cfg config.Config, w io.Writer) zerolog.Logger {
	level, err := zerolog.ParseLevel(cfg.LogLevel)
	if err != nil {
		level = zerolog.InfoLevel
	}
	if cfg.LogFormat == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Str("service", "claimd").Logger()
}

// Main is the running sidecar: used by main() and by end-to-end tests.
type Main struct {
	Config config.Config
	Log    zerolog.Logger

	pool    *pgxpool.Pool
	server  *httpapi.Server
	fence   *ha.Fence
	gate    *ha.Gate
	repl    *ha.ReplicationMonitor
	starter *ha.Starter
	// backfillTick queues the backfill scans that are due (maintain).
	backfillTick func(context.Context)
	// replicationMaxAge overrides ha.ReplicationMaxAge (tests).
	replicationMaxAge time.Duration
	// Ready is closed once the listener is up.
	Ready chan struct{}
	// Addr is the bound address, valid after Ready.
	Addr string
	// MetricsAddr is the bound address of the metrics listener
	// (CLAIMD_METRICS_ADDR), valid after Ready; "" without one.
	MetricsAddr string
	// deadline is the hard end of the shutdown, once it began.
	deadline time.Time
}

// NewMain returns a Main for cfg.
func NewMain(cfg config.Config, log zerolog.Logger) *Main {
	return &Main{Config: cfg, Log: log, Ready: make(chan struct{})}
}

// Run serves until ctx ends, then drains in-flight requests for at most
// ShutdownTimeout. It migrates and starts the dispatcher before it
// listens when the database takes writes at once; otherwise it listens
// at once and starts once a writable primary answers (ha.Starter).
// It returns an error only for what no wait can fix (a malformed
// DATABASE_URL, an address it cannot listen on).
func (m *Main) Run(ctx context.Context) error {
	m.fence = ha.NewFence(m.Log)
	m.gate = &ha.Gate{}
	hooks := &poolHooks{fence: m.fence, gate: m.gate}
	if m.Config.RequireSyncReplication {
		hooks.sync = &ha.SyncGuard{}
	}
	pool, err := openPool(ctx, m.Config, hooks)
	if err != nil {
		return err
	}
	m.pool = pool
	m.repl = ha.NewReplicationMonitor(pool, m.Log, m.replicationMaxAge)
	m.fence.OnFailover(m.repl.Invalidate)
	var ledger *claim.Ledger
	met := metrics.New(func(ctx context.Context) (claim.Stats, error) { return ledger.Stats(ctx) })
	met.ObserveReplication(m.repl.Metric)
	met.ObserveStaleServerRefusals(m.fence.Refusals)
	ledger, err = claim.New(pool, claim.Config{Policies: m.Config.Policies, Observer: met, Group: &m.Config.Group})
	if err != nil {
		return err
	}
	// Gap detection: scan jobs run on the dispatching replicas; the
	// maintenance loop queues the scans that are due.
	scanner := &backfill.Scanner{Log: m.Log, Obs: met.Backfill()}
	in, err := inbox.New(inbox.Options{Pool: pool, Ledger: ledger, Config: m.Config.Ingest,
		Logger: m.Log, Observer: met, Dispatch: m.Config.Dispatch, RiverLogger: riverLogger(m.Log),
		Workers: backfill.Workers(scanner)})
	if err != nil {
		return err
	}
	scanner.Inbox = in
	// Reconcilers: calls about claims left unknown, on every replica
	// (the ledger hands each call to one).
	recon := reconcile.New(reconcile.Options{Ledger: ledger, Pool: pool, Reconcilers: m.Config.Ingest.Reconcilers,
		Redispatch: in.RedispatchTx, Observer: met.Reconcile(), Logger: m.Log,
		Interval: m.Config.ReconcileInterval, Concurrency: m.Config.ReconcileConcurrency})
	met.ObserveReconcileOpen(recon.Open)
	sourcesfile.Observe(met, in, m.Config.Ingest)
	sources := sourcesfile.New(sourcesfile.Options{Path: m.Config.SourcesFile, Interval: m.Config.ReloadInterval,
		Log: m.Log, Env: m.Config.Policies, Ledger: ledger, Inbox: in, Metrics: met, Reconciler: recon,
		Running: m.Config.Ingest})
	m.backfillTick = func(ctx context.Context) {
		if n, err := backfill.Schedule(ctx, in, time.Now()); err != nil {
			m.Log.Warn().Err(err).Msg("backfill schedule failed")
		} else if n > 0 {
			m.Log.Info().Int("scans_queued", n).Msg("backfill schedule")
		}
		if _, err := backfill.Purge(ctx, pool, time.Now().Add(-backfill.Retention)); err != nil {
			m.Log.Warn().Err(err).Msg("backfill purge failed")
		}
	}
	// Claims that wait for a concurrent holder (wait_seconds) are woken by
	// PostgreSQL notifications on a connection of the waiter's own; its
	// context ends with ctx, before the drain below, so that no request
	// drains for a whole wait. It runs once claimd has started: until then
	// such claims are answered at once.
	waiter := claim.NewWaiter(ledger, claim.WaiterConfig{ConnConfig: pool.Config().ConnConfig,
		StepTimeout: m.Config.RequestTimeout, Logger: m.Log})
	m.starter = ha.NewStarter(ha.StarterOptions{Pool: pool, Gate: m.gate, Replication: m.repl, Log: m.Log,
		Migrate: m.Config.Migrate, ReadSession: func(ctx context.Context) (httpapi.DatabaseFacts, error) { return readSession(ctx, pool) },
		LogSession: m.logSession, StartDispatcher: in.Start})
	first := m.starter.Start(ctx)
	keys := auth.New(pool, m.Config.APIKeys, auth.Options{CacheTTL: m.Config.KeyCacheTTL,
		NegativeTTL: m.Config.KeyNegativeTTL, FailureLimit: m.Config.AuthFailureLimit,
		FailureWindow: m.Config.AuthFailureWindow, Observer: met})
	var consoleCfg *httpapi.ConsoleConfig
	if m.Config.Console {
		consoleCfg = &httpapi.ConsoleConfig{Sessions: auth.NewSessions(pool, keys, 0, 0),
			SecureCookie: m.Config.ConsoleSecureCookie}
	}
	m.server = httpapi.New(httpapi.Config{
		Ledger: ledger, Keys: keys, Metrics: met, Console: consoleCfg,
		Logger: m.Log, BodyLimit: m.Config.BodyLimit, MaxBatch: m.Config.MaxBatch,
		RequestTimeout: m.Config.RequestTimeout, ReadyDatabase: m.ready, Inbox: in, Waiter: waiter, Reconciler: recon,
		ReadTimeout: m.Config.ReadTimeout, MaxHeaderBytes: m.Config.MaxHeaderBytes,
		MaxConnections: m.Config.MaxConnections, MaxConnsPerIP: cmp.Or(m.Config.MaxConnsPerIP, -1), // 0: no bound
		APIBodyBytesInFlight: m.Config.APIBodyBytesInFlight, IngestBodyBytesInFlight: m.Config.IngestBodyBytesInFlight,
		IngestAddressSharePercent: m.Config.IngestAddressSharePercent, IngestSourceSharePercent: m.Config.IngestSourceSharePercent,
		IngestMinBodyRate: m.Config.IngestMinBodyRate, IngestBodyGrace: m.Config.IngestBodyGrace,
		MetricsToken: m.Config.MetricsToken, MetricsElsewhere: m.Config.MetricsAddr != "",
	})
	app := m.server.App()
	ln, err := listen(m.Config.Addr)
	if err != nil {
		if m.starter.Dispatching() {
			m.stopDispatcher(in, time.Now().Add(m.Config.ShutdownTimeout))
		}
		return fmt.Errorf("listen on %s: %w", m.Config.Addr, err)
	}
	m.Addr = ln.Addr().String()
	var metricsApp *fiber.App
	if m.Config.MetricsAddr != "" {
		mln, err := listen(m.Config.MetricsAddr)
		if err != nil {
			ln.Close()
			if m.starter.Dispatching() {
				m.stopDispatcher(in, time.Now().Add(m.Config.ShutdownTimeout))
			}
			return fmt.Errorf("listen on %s (CLAIMD_METRICS_ADDR): %w", m.Config.MetricsAddr, err)
		}
		m.MetricsAddr = mln.Addr().String()
		metricsApp = m.server.MetricsApp()
		go func() { _ = metricsApp.Listener(m.server.FramingListener(mln)) }()
	}
	// Take SIGHUP before announcing readiness: its default action ends the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if first == nil {
		m.warnWithoutKeys(ctx)
	}
	// stopErr is what Run returns after a clean shutdown: nil, or the
	// refusal that ended the start-up wait.
	var stopErr error
	serveErr := make(chan error, 1)
	go func() { serveErr <- m.server.Listener(ln) }()
	m.Log.Info().Str("addr", m.Addr).Str("metrics_addr", m.MetricsAddr).Int("static_keys", len(m.Config.APIKeys)).
		Int("ingest_sources", len(m.Config.Ingest.Sources)).Int("trigger_sources", len(m.Config.Ingest.Triggers)).
		Bool("dispatch", m.Config.Dispatch).
		Bool("started", first == nil).Msg("claimd listening")
	close(m.Ready)

	// Everything that needs a writable database with its schema runs once
	// started: at once, or when the start-up wait ends.
	bg, stopBG := context.WithCancel(ctx)
	var waiterDone, maintDone, watchDone, reconDone chan struct{}
	startDone := make(chan struct{})
	// refused carries the server's refusal for good met by the start-up
	// wait: claimd shuts down as on SIGTERM and Run returns it.
	refused := make(chan error, 1)
	go func() {
		defer close(startDone)
		if first != nil {
			if err := m.starter.Wait(bg, first); err != nil {
				if ha.ConnectRefused(err) != nil {
					refused <- err
				}
				return
			}
			m.warnWithoutKeys(bg)
		}
		waiterDone, maintDone, watchDone, reconDone = make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
		go func() { defer close(waiterDone); _ = waiter.Run(bg) }()
		go func() { defer close(maintDone); m.maintain(bg, ledger) }()
		go func() { defer close(watchDone); sources.Run(bg, hup) }()
		go func() {
			// A call in flight at shutdown is cut: it ends at its deadline
			// and the next call is made by a replica still running.
			defer close(reconDone)
			if m.Config.ReconcileInterval > 0 {
				recon.Run(bg)
			}
		}()
	}()
	stopBackground := func() {
		stopBG()
		<-startDone
		if waiterDone != nil {
			<-waiterDone
			<-maintDone
			<-watchDone
			<-reconDone
		}
	}

	select {
	case err := <-serveErr:
		stopBackground()
		if m.starter.Dispatching() {
			m.stopDispatcher(in, time.Now().Add(m.Config.ShutdownTimeout))
		}
		return err
	case err := <-refused:
		m.Log.Error().Str("reason", err.Error()).Msg(ha.MsgRefusedExit)
		stopErr = err
	case <-ctx.Done():
	}
	// The shutdown has one hard deadline, ShutdownTimeout from now, for
	// everything: from here every new request, on a kept-alive connection
	// too, is answered 503 + Retry-After + Connection: close; requests in
	// flight and running dispatches finish meanwhile; at the deadline the
	// requests still running have their context cancelled (they answer
	// 503) and Run returns.
	m.deadline = time.Now().Add(m.Config.ShutdownTimeout)
	m.server.Drain()
	m.Log.Info().Str("timeout", m.Config.ShutdownTimeout.String()).Msg("shutting down: draining in-flight requests")
	// The waiter ends with ctx (waiting claims are answered at once), the
	// maintenance loop and the sources watcher with it; then the drain.
	stopBackground()
	dispatchDone := make(chan struct{})
	go func() {
		defer close(dispatchDone)
		if m.starter.Dispatching() {
			m.stopDispatcher(in, m.deadline)
		}
	}()
	dctx, cancel := context.WithDeadline(context.Background(), m.deadline)
	defer cancel()
	err = app.ShutdownWithContext(dctx)
	if metricsApp != nil {
		_ = metricsApp.ShutdownWithContext(dctx)
	}
	if err != nil {
		m.Log.Warn().Msg("shutdown deadline reached: cancelling the requests still in flight (they answer 503)")
	}
	m.server.Abort()
	<-dispatchDone
	if err != nil {
		return fmt.Errorf("shutdown: requests still in flight at the deadline (%s)", m.Config.ShutdownTimeout)
	}
	m.Log.Info().Msg("stopped")
	return stopErr
}

// stopDispatcher waits for running dispatches until deadline.
// warnWithoutKeys logs a warning when claimd has no API key at all (none
// in CLAIMD_API_KEYS, none active in the database): every /v1 request is
// then refused 401, which a newcomer would otherwise only learn from the
// client. Signed /ingest deliveries need no API key.
func (m *Main) warnWithoutKeys(ctx context.Context) {
	if len(m.Config.APIKeys) > 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, m.Config.RequestTimeout)
	defer cancel()
	n, err := auth.Active(ctx, m.pool)
	if err != nil || n > 0 {
		return
	}
	m.Log.Warn().Msg("no API keys: every /v1 request is answered 401 until one exists; " +
		"create one with `claimd keys create TENANT` (while claimd runs) or set CLAIMD_API_KEYS")
}

func (m *Main) stopDispatcher(in *inbox.Inbox, deadline time.Time) {
	sctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if err := in.Stop(sctx); err != nil {
		m.Log.Warn().Err(err).Msg("dispatcher stop")
	}
}

// ready is /readyz: "ready" means "can write". One read of a session's
// settings (which is also the ping, see readSession), the migration
// version and (cached, see ha.ReplicationMonitor) what the primary's commits
// wait for. A setting claimd cannot work with makes it not ready, with a
// reason naming it; unless the server is a standby (its promotion makes
// the same sessions writable) the pool's sessions are then renewed, since
// a session keeps the defaults it started with and a fix made with ALTER
// DATABASE … SET reaches new sessions only. A database that is writable
// with its schema current also makes a waiting start-up try again at once.
func (m *Main) ready(ctx context.Context) (httpapi.DatabaseFacts, error) {
	ctx = ha.Internal(ctx)
	facts, err := readSession(ctx, m.pool)
	if err != nil {
		return httpapi.DatabaseFacts{}, errors.New(ha.Unreachable(ctx, err))
	}
	if ps := sessionProblems(facts); len(ps) > 0 {
		if !facts.InRecovery {
			m.pool.Reset()
		}
		return facts, errors.New(strings.Join(ps, "; "))
	}
	pending, err := ha.SchemaPending(ctx, m.pool)
	if err != nil {
		if ha.NotAnswering(ctx, err) {
			return facts, errors.New(ha.DatabaseNotAnswering)
		}
		return facts, errors.New("cannot read the migration version")
	}
	if pending {
		if m.Config.Migrate {
			m.starter.Poke()
			return facts, errors.New("migrations pending: applying them")
		}
		return facts, errors.New("migrations pending (CLAIMD_MIGRATE is off: apply them with claimd migrate)")
	}
	m.gate.Open()
	if !m.starter.Started() {
		m.starter.Poke()
	}
	rep, rerr := m.repl.Get(ctx)
	if rerr == nil && !rep.InRecovery {
		facts.Replication = rep.Facts()
	}
	if rerr == nil && rep.Synchronous != nil {
		switch {
		case facts.SynchronousCommit == "off":
			facts.Durability = httpapi.DurabilityNone
		case *rep.Synchronous:
			facts.Durability = httpapi.DurabilityStandby
		default:
			facts.Durability = httpapi.DurabilityLocal
		}
	}
	if m.Config.RequireSyncReplication {
		if p := ha.RequireSyncProblem(rep, rerr); p != "" {
			return facts, errors.New(p)
		}
	}
	return facts, nil
}

// maintain runs the lease sweep, the retention purge and the stats rollup
// periodically.
func (m *Main) maintain(ctx context.Context, l *claim.Ledger) {
	if m.Config.MaintenanceInterval <= 0 {
		return
	}
	t := time.NewTicker(m.Config.MaintenanceInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n, err := l.SweepExpiredLeases(ctx, m.Config.PurgeBatch); err != nil {
			m.Log.Warn().Err(err).Msg("lease sweep failed")
		} else if n > 0 {
			m.Log.Info().Int("moved_to_unknown", n).Msg("lease sweep")
		}
		if res, err := l.Purge(ctx, m.Config.PurgeBatch); err != nil {
			logPurge(m.Log.Warn().Err(err), res).Msg("retention purge failed")
		} else if res != (claim.PurgeResult{}) {
			logPurge(m.Log.Info(), res).Msg("retention purge")
		}
		// The console's hourly numbers: the last hours recomputed (a row
		// committed late is caught; what a purge removed stays counted).
		if _, _, err := l.RollupStats(ctx, time.Now().Add(-claim.RollupWindow)); err != nil {
			m.Log.Warn().Err(err).Msg("stats rollup failed")
		}
		if m.backfillTick != nil {
			m.backfillTick(ctx)
		}
	}
}

// logPurge adds what a retention purge removed to e: deleted (records
// past their key retention), payloads_purged (records past their payload
// retention: key kept, payload and delivery log removed) and
// conflicts_purged (late conflict bodies).
func logPurge(e *zerolog.Event, res claim.PurgeResult) *zerolog.Event {
	return e.Int("deleted", res.KeysDeleted).Int("payloads_purged", res.PayloadsPurged).Int("conflicts_purged", res.ConflictsPurged).Int("nonces_purged", res.NoncesPurged)
}

// Close releases the database pool. After a shutdown it waits for that
// at most until the shutdown's deadline (a connection still held by a
// cancelled request is left to the process's exit).
func (m *Main) Close() {
	if m.pool == nil {
		return
	}
	if m.deadline.IsZero() {
		m.pool.Close()
		return
	}
	closed := make(chan struct{})
	go func() { defer close(closed); m.pool.Close() }()
	t := time.NewTimer(max(time.Until(m.deadline), 100*time.Millisecond))
	defer t.Stop()
	select {
	case <-closed:
	case <-t.C:
	}
}
