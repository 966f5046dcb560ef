// Command claimd is the Idempotent Claim sidecar.
//
//	claimd [serve] [flags]     run the HTTP API (default)
//	claimd migrate             apply pending migrations and exit
//	claimd keys create TENANT [NAME] | keys revoke ID_OR_PREFIX | keys list
//	claimd purge               run the retention purge once and exit
//	claimd healthcheck [URL]   exit 0 when GET URL (default http://CLAIMD_ADDR/readyz) answers 200
//	claimd help                print the settings table
//
// Configuration comes from environment variables and flags; see
// `claimd help` and the README.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/config"
	"github.com/idempotent-claim/idempotent-claim/sidecar/httpapi"
	"github.com/idempotent-claim/idempotent-claim/sidecar/ingest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/metrics"
	"github.com/idempotent-claim/idempotent-claim/sidecar/migrate"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "claimd:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		cmd, args = "help", args[1:]
	} else if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "help", "-h", "--help":
		if len(args) > 0 && args[0] == "-markdown" {
			fmt.Fprint(stdout, config.MarkdownTable())
			return nil
		}
		printHelp(stdout)
		return nil
	case "healthcheck":
		return healthcheck(ctx, args, getenv)
	case "serve", "migrate", "keys", "purge":
	default:
		printHelp(stderr)
		return fmt.Errorf("unknown command %q", cmd)
	}
	var rest []string
	if cmd == "keys" {
		args, rest = splitKeysArgs(args)
	}
	cfg, err := config.Load(args, getenv)
	if err != nil {
		return err
	}
	log := newLogger(cfg, stderr)
	switch cmd {
	case "serve":
		m := NewMain(cfg, log)
		defer m.Close()
		return m.Run(ctx)
	case "migrate":
		pool, err := openPool(ctx, cfg)
		if err != nil {
			return err
		}
		defer pool.Close()
		n, err := migrate.Up(ctx, pool)
		if err != nil {
			return err
		}
		log.Info().Int("applied", n).Msg("migrations applied")
		return nil
	case "purge":
		pool, err := openPool(ctx, cfg)
		if err != nil {
			return err
		}
		defer pool.Close()
		l, err := claim.New(pool, claim.Config{Policies: cfg.Policies})
		if err != nil {
			return err
		}
		n, err := l.Purge(ctx, cfg.PurgeBatch)
		log.Info().Int("deleted", n).Msg("retention purge")
		return err
	default:
		return keysCommand(ctx, cfg, rest, stdout)
	}
}

// splitKeysArgs separates `keys` positional arguments from flags.
func splitKeysArgs(args []string) (flags, positional []string) {
	for _, a := range args {
		if len(a) > 0 && a[0] == '-' {
			flags = append(flags, a)
		} else {
			positional = append(positional, a)
		}
	}
	return flags, positional
}

func keysCommand(ctx context.Context, cfg config.Config, args []string, stdout io.Writer) error {
	pool, err := openPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if cfg.Migrate {
		if _, err := migrate.Up(ctx, pool); err != nil {
			return err
		}
	}
	if len(args) == 0 {
		return errors.New("usage: claimd keys create TENANT [NAME] | keys revoke ID_OR_PREFIX | keys list")
	}
	switch args[0] {
	case "create":
		if len(args) < 2 {
			return errors.New("usage: claimd keys create TENANT [NAME]")
		}
		name := ""
		if len(args) > 2 {
			name = args[2]
		}
		key, info, err := auth.Create(ctx, pool, args[1], name)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "id:     %s\ntenant: %s\nkey:    %s\n(shown once; only its SHA-256 is stored)\n", info.ID, info.Tenant, key)
		return nil
	case "revoke":
		if len(args) != 2 {
			return errors.New("usage: claimd keys revoke ID_OR_PREFIX")
		}
		info, err := auth.Revoke(ctx, pool, args[1])
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "revoked %s (%s, tenant %s); cached lookups expire within %s\n", info.ID, info.Prefix, info.Tenant, cfg.KeyCacheTTL)
		return nil
	case "list":
		infos, err := auth.List(ctx, pool)
		if err != nil {
			return err
		}
		w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tTENANT\tNAME\tPREFIX\tCREATED\tREVOKED")
		for _, i := range infos {
			revoked := "-"
			if i.RevokedAt != nil {
				revoked = i.RevokedAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", i.ID, i.Tenant, i.Name, i.Prefix, i.CreatedAt.UTC().Format(time.RFC3339), revoked)
		}
		return w.Flush()
	}
	return fmt.Errorf("unknown keys command %q", args[0])
}

// healthcheck is for container health checks in images without curl.
func healthcheck(ctx context.Context, args []string, getenv func(string) string) error {
	url := ""
	if len(args) > 0 {
		url = args[0]
	} else {
		addr := getenv("CLAIMD_ADDR")
		if addr == "" {
			addr = "127.0.0.1:8080"
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("CLAIMD_ADDR: %w", err)
		}
		if host == "" || host == "0.0.0.0" || host == "::" {
			host = "127.0.0.1"
		}
		url = "http://" + net.JoinHostPort(host, port) + "/readyz"
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %d", url, resp.StatusCode)
	}
	return nil
}

func printHelp(w io.Writer) {
	fmt.Fprintln(w, "usage: claimd [serve|migrate|purge|keys create TENANT [NAME]|keys revoke ID|keys list|healthcheck [URL]|help] [flags]")
	fmt.Fprintln(w, "\nSettings (flag, environment variable, default):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, v := range config.Vars {
		fmt.Fprintf(tw, "  -%s\t%s\t%s\t%s\n", v.Flag, v.Env, v.Default, v.Help)
	}
	tw.Flush()
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

	pool   *pgxpool.Pool
	server *httpapi.Server
	// Ready is closed once the listener is up.
	Ready chan struct{}
	// Addr is the bound address, valid after Ready.
	Addr string
}

// NewMain returns a Main for cfg.
func NewMain(cfg config.Config, log zerolog.Logger) *Main {
	return &Main{Config: cfg, Log: log, Ready: make(chan struct{})}
}

// Run connects, migrates, serves until ctx ends, then drains in-flight
// requests for at most ShutdownTimeout.
func (m *Main) Run(ctx context.Context) error {
	pool, err := openPool(ctx, m.Config)
	if err != nil {
		return err
	}
	m.pool = pool
	if m.Config.Migrate {
		if err := m.migrateWithRetry(ctx); err != nil {
			return err
		}
	}
	var ledger *claim.Ledger
	met := metrics.New(func(ctx context.Context) (claim.Stats, error) { return ledger.Stats(ctx) })
	ledger, err = claim.New(pool, claim.Config{Policies: m.Config.Policies, Observer: met})
	if err != nil {
		return err
	}
	inbox, err := ingest.New(ingest.Options{Pool: pool, Ledger: ledger, Config: m.Config.Ingest,
		Logger: m.Log, Observer: met, Dispatch: m.Config.Dispatch})
	if err != nil {
		return err
	}
	// Not ctx: River treats a cancelled start context as a hard stop that
	// cancels running dispatches; Stop below drains them instead.
	if err := inbox.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("start dispatcher: %w", err)
	}
	m.server = httpapi.New(httpapi.Config{
		Ledger: ledger, Keys: auth.NewKeys(pool, m.Config.APIKeys, m.Config.KeyCacheTTL), Metrics: met,
		Logger: m.Log, BodyLimit: m.Config.BodyLimit, MaxBatch: m.Config.MaxBatch,
		RequestTimeout: m.Config.RequestTimeout, Ready: m.ready, Inbox: inbox,
	})
	app := m.server.App()
	ln, err := listen(m.Config.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", m.Config.Addr, err)
	}
	m.Addr = ln.Addr().String()
	// Take SIGHUP before announcing readiness: its default action ends the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	serveErr := make(chan error, 1)
	go func() { serveErr <- app.Listener(ln) }()
	m.Log.Info().Str("addr", m.Addr).Int("static_keys", len(m.Config.APIKeys)).
		Int("ingest_sources", len(m.Config.Ingest.Sources)).Bool("dispatch", m.Config.Dispatch).Msg("claimd listening")
	close(m.Ready)

	maintDone := make(chan struct{})
	mctx, stopMaint := context.WithCancel(ctx)
	go func() { defer close(maintDone); m.maintain(mctx, ledger) }()
	go m.watchSources(mctx, hup, ledger, inbox)

	select {
	case err := <-serveErr:
		stopMaint()
		<-maintDone
		return err
	case <-ctx.Done():
	}
	m.Log.Info().Str("timeout", m.Config.ShutdownTimeout.String()).Msg("shutting down: draining in-flight requests")
	stopMaint()
	err = app.ShutdownWithTimeout(m.Config.ShutdownTimeout)
	<-maintDone
	sctx, cancel := context.WithTimeout(context.Background(), m.Config.ShutdownTimeout)
	defer cancel()
	if serr := inbox.Stop(sctx); serr != nil {
		m.Log.Warn().Err(serr).Msg("dispatcher stop")
	}
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	m.Log.Info().Msg("stopped")
	return nil
}

// migrateWithRetry waits for the database for up to a minute on start
// (compose starts PostgreSQL and the sidecar together).
func (m *Main) migrateWithRetry(ctx context.Context) error {
	deadline := time.Now().Add(time.Minute)
	for {
		n, err := migrate.Up(ctx, m.pool)
		if err == nil {
			m.Log.Info().Int("applied", n).Msg("migrations up to date")
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		m.Log.Warn().Err(err).Msg("database not ready; retrying migrations")
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

func (m *Main) ready(ctx context.Context) error {
	if err := m.pool.Ping(ctx); err != nil {
		return errors.New("database unreachable")
	}
	pending, err := migrate.Pending(ctx, m.pool)
	if err != nil {
		return errors.New("cannot read the migration version")
	}
	if pending {
		return errors.New("migrations pending")
	}
	return nil
}

// maintain runs the lease sweep and the retention purge periodically.
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
		if n, err := l.Purge(ctx, m.Config.PurgeBatch); err != nil {
			m.Log.Warn().Err(err).Msg("retention purge failed")
		} else if n > 0 {
			m.Log.Info().Int("deleted", n).Msg("retention purge")
		}
	}
}

// watchSources reloads the sources file on SIGHUP and when its
// modification time changes (checked every ReloadInterval). A file that
// fails to parse is logged and the running configuration kept.
func (m *Main) watchSources(ctx context.Context, hup <-chan os.Signal, l *claim.Ledger, in *ingest.Inbox) {
	path := m.Config.SourcesFile
	if path == "" {
		return // SIGHUP is still taken (and ignored), never fatal
	}
	var tick <-chan time.Time
	if m.Config.ReloadInterval > 0 {
		t := time.NewTicker(m.Config.ReloadInterval)
		defer t.Stop()
		tick = t.C
	}
	modTime := func() time.Time {
		if fi, err := os.Stat(path); err == nil {
			return fi.ModTime()
		}
		return time.Time{}
	}
	last := modTime()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		case <-tick:
			if mt := modTime(); mt.Equal(last) {
				continue
			} else {
				last = mt
			}
		}
		cfg, err := ingest.ReadFile(path, os.Getenv)
		if err == nil {
			ps := m.Config.Policies
			ps.BySource = cfg.Policies
			if err = l.SetPolicies(ps); err == nil {
				err = in.Reload(cfg)
			}
		}
		if err != nil {
			m.Log.Error().Err(err).Msg("sources file not reloaded; keeping the running configuration")
			continue
		}
		m.Log.Info().Int("ingest_sources", len(cfg.Sources)).Msg("sources file reloaded")
	}
}

// Close releases the database pool.
func (m *Main) Close() {
	if m.pool != nil {
		m.pool.Close()
	}
}
