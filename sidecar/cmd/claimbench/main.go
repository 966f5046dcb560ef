// Command claimbench measures the claim path of the sidecar against the raw
// database statement, and prints figures only (no pass/fail).
//
//	go run ./sidecar/cmd/claimbench [flags]     (make bench)
//
// It connects to the PostgreSQL server of DATABASE_URL (or
// TEST_DATABASE_URL), creates a fresh database there (dropped at the end),
// builds and starts the claimd binary on it.
//
// First the hash section (unless -hash=false; alone with -hash-only, which
// needs neither the database nor pgbench), a few seconds in this process:
// MB/s of the payload hash on number-heavy documents
// (sidecar/internal/benchdoc, as in strictjson's benchmarks):
// claim.PayloadHash, ingest's hash of a JSON delivery, of 1 MiB of records
// without and with volatile fields; the claims API's strict decode of a
// request holding those records as its payload followed by
// claim.PayloadHashAt; one 4 MiB array of long floats (the shape of a
// hashing-cost attack), and that array hashed 8 times at
// once, with the time of each call and the Go heap's peak. Best and median
// of the calls, bytes and allocations per call.
//
// Then, at each concurrency (default 1, 16 and 64), it runs for a fixed
// duration per cell:
//
//   - fresh: POST /v1/claims with a new key every time (outcome won);
//   - duplicate: POST /v1/claims of keys already completed (duplicate);
//   - batch: POST /v1/claims/batch with -batch new keys per request;
//
// over HTTP/1.1 with keep-alive, one connection per client (a minimal
// client, wire.go, that costs little CPU: on a small machine the load
// generator competes with claimd and PostgreSQL, as pgbench's C client
// does on its side; the ingest cells use it too, setup uses net/http), next to a
// pgbench run (-M prepared, same client count) of the very statement and
// parameters the ledger sends for that claim. The statement is captured
// from the ledger itself (a pgx query tracer around one claim), so the
// pgbench script cannot drift from the code. The batch pgbench script
// sends BEGIN, -batch single-row claims and COMMIT in one pipeline: what
// the database's own client does with one statement per claim (the
// ledger itself decides a batch, and a group of concurrent claims, with
// one multi-row statement per round of distinct keys).
//
// Throughput is claims per second (items per second for batches); latency
// is per request (per pgbench transaction), p50 and p99. ratio is the
// sidecar's throughput divided by pgbench's.
//
// A second table gives the CPU time per claim (µs of user+sys per claim
// decided; batch: per item) of every cell, which varies less than
// claims/s on a small, shared machine, though contention still raises it
// (cpu.go, cputable.go):
//
//   - claimd: utime+stime of /proc/<pid>/stat (all threads of the
//     process), before and after the cell;
//   - PG, on the sidecar side and on the pgbench side alike: the whole
//     server's process tree, found from this database's backend
//     (pg_backend_pid(); its parent is the postmaster): the postmaster's
//     utime+stime+cutime+cstime plus those of every live child, before and
//     after the cell. cutime/cstime hold reaped children, so backends that
//     exit during the cell (pgbench's connections) keep their time; the
//     shared processes (walwriter, checkpointer, …) count on both sides. A
//     poller samples the children every 100 ms during the cell and
//     subtracts the time of client backends of other databases (their
//     process titles name another database); a cell where those used 5%
//     or more of the server's CPU is marked *. When the server's
//     processes are not this machine's (remote server, another pid
//     namespace) PG is n/a, with the reason once;
//   - client: this process's getrusage (the HTTP clients, the poller, the
//     Go runtime) on the sidecar side; pgbench's rusage at exit (os/exec)
//     on the pgbench side. The pgbench side includes opening its
//     connections (the sidecar's pool is warm) and, as pgbench -M prepared
//     prepares each command of the script on each connection, the planning
//     of the first executions, which dominates short batch cells;
//   - PG ratio: PG µs/claim under the sidecar divided by under pgbench.
//
// /proc/<pid>/stat counts in clock ticks (USER_HZ, 100 on every Linux
// architecture): the rate is read where sysconf(_SC_CLK_TCK) reads it,
// the AT_CLKTCK entry of /proc/self/auxv, 100 if absent. The resolution is
// one tick (10 ms) per process per reading: fine for cells of seconds.
//
// When the 1-minute load average at start (/proc/loadavg, read before
// claimd is built) is above half the CPUs, a warning line says so: figures
// will be noisy. It never refuses the run nor changes the exit status.
//
// Then the ingest section (unless -ingest=false): the first claimd is
// stopped and a second one started on the same database with a sources
// file holding one standard-webhooks source, whose dispatcher (on)
// forwards to an in-process target answering 200. At each
// -ingest-concurrency (default 1, 4 and 16) it measures POST
// /ingest/{source} for fresh events (a new webhook-id each) and for
// redeliveries of stored events (duplicates): deliveries per second and
// the acknowledgement latency (p50, p95, p99), with the dispatcher's
// progress per cell and at the end, its steady-state rate (events/s over
// the 100 ms samples in which it was saturated: a backlog of at least the
// forward concurrency at both ends; during the cells and after them
// apart), the peak backlog and whether the backlog was drained within
// 60 s of the last cell (-ingest-dup-events stored events are
// redelivered; -forward-concurrency sets the source's forward.concurrency,
// default the source default). A closing line states the DESIGN goal
// (p99 acknowledgement under 50 ms at moderate load) and whether the run
// met it; it never changes the exit status.
//
// Then the retention section, with -retention-keys N (alone with
// -retention-only, which needs neither claimd nor pgbench): in a scratch
// database of its own, N kept keys (payload purged) and -retention-due
// records due for each purge, written with generate_series; it prints the
// bytes a kept key costs per table and index, then times the ledger's
// Purge statement by statement, and an idle Purge with its plans (see
// retention.go). At the scale operations.md names (10 million kept keys):
//
//	go run ./sidecar/cmd/claimbench -retention-only -retention-keys 10000000
//
// The sidecar runs with default settings plus any CLAIMD_* variables of
// the environment (their names are printed). Its pool size comes from the
// URL as in production (e.g. DATABASE_URL=…?pool_max_conns=32); pgx-only
// parameters are removed from the URL pgbench gets. pgbench needs
// max_connections room for the largest concurrency.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idempotent-claim/idempotent-claim/sidecar/config"
)

// settings are the command-line flags.
type settings struct {
	duration    time.Duration
	concurrency []int
	ingestConc  []int
	ingestDups  int
	forwardConc int
	ingest      bool
	batch       int
	dupKeys     int
	claimd      string
	keepDB      bool
	showScript  bool
	// The retention section (retention.go).
	retentionKeys int
	retentionDue  int
	retentionBody int
	retentionOnly bool
	purgeBatch    int
	// The hash section (hash.go).
	hash, hashOnly bool
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "claimbench:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (settings, error) {
	fs := flag.NewFlagSet("claimbench", flag.ContinueOnError)
	var s settings
	var conc, ingestConc string
	fs.DurationVar(&s.duration, "duration", 5*time.Second, "measured time of each cell (sidecar and pgbench alike)")
	fs.StringVar(&conc, "concurrency", "1,16,64", "comma-separated client counts")
	fs.StringVar(&ingestConc, "ingest-concurrency", "1,4,16", "comma-separated client counts of the ingest section")
	fs.IntVar(&s.ingestDups, "ingest-dup-events", 200, "stored events the ingest duplicate workload redelivers at random")
	fs.IntVar(&s.forwardConc, "forward-concurrency", 0, "forward.concurrency of the ingest source (0: the source default)")
	fs.BoolVar(&s.ingest, "ingest", true, "run the ingest section (POST /ingest/{source} with dispatch)")
	fs.BoolVar(&s.hash, "hash", true, "run the hash section first (claim.PayloadHash in this process, a few seconds)")
	fs.BoolVar(&s.hashOnly, "hash-only", false, "run only the hash section (needs neither claimd, the database nor pgbench)")
	fs.IntVar(&s.batch, "batch", 50, "claims per batch request")
	fs.IntVar(&s.dupKeys, "dup-keys", 2000, "completed keys the duplicate workload picks from at random")
	fs.StringVar(&s.claimd, "claimd", "", "prebuilt claimd binary (default: go build ./sidecar/cmd/claimd)")
	fs.BoolVar(&s.keepDB, "keep-db", false, "keep the benchmark database instead of dropping it")
	fs.BoolVar(&s.showScript, "show-script", false, "print the generated pgbench script of a single claim")
	fs.IntVar(&s.retentionKeys, "retention-keys", 0, "run the retention section with this many kept keys (0: skip; e.g. 10000000)")
	fs.IntVar(&s.retentionDue, "retention-due", 100_000, "retention section: records due for the payload purge, and as many past the key retention")
	fs.IntVar(&s.retentionBody, "retention-body-bytes", 1024, "retention section: inbox body size of the records due for the payload purge")
	fs.BoolVar(&s.retentionOnly, "retention-only", false, "run only the retention section (needs neither claimd nor pgbench)")
	fs.IntVar(&s.purgeBatch, "purge-batch", 1000, "retention section: rows per purge statement (CLAIMD_PURGE_BATCH)")
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	var err error
	if s.concurrency, err = parseCounts("-concurrency", conc); err != nil {
		return s, err
	}
	if s.ingestConc, err = parseCounts("-ingest-concurrency", ingestConc); err != nil {
		return s, err
	}
	if s.duration < time.Second {
		return s, errors.New("-duration must be at least 1s (pgbench -T counts whole seconds)")
	}
	if s.batch < 1 || s.dupKeys < 1 || s.ingestDups < 1 {
		return s, errors.New("-batch, -dup-keys and -ingest-dup-events must be positive")
	}
	if s.forwardConc < 0 || s.forwardConc > 1000 {
		return s, errors.New("-forward-concurrency must be between 0 and 1000")
	}
	return s, checkRetentionFlags(s)
}

// parseCounts parses a comma-separated list of positive integers.
func parseCounts(flagName, list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: %q is not a positive integer", flagName, f)
		}
		out = append(out, n)
	}
	return out, nil
}

func run(ctx context.Context, args []string) error {
	s, err := parseFlags(args)
	if err != nil {
		return err
	}
	// Read before the build of claimd, which loads the machine itself.
	loadWarn := startLoadWarning(runtime.NumCPU())
	printLoadWarn := func() {
		if loadWarn != "" {
			fmt.Fprintln(os.Stdout, loadWarn)
		}
	}
	if s.hashOnly {
		printLoadWarn()
		return runHash(os.Stdout, hashCallBudget)
	}
	serverURL := os.Getenv("DATABASE_URL")
	if serverURL == "" {
		serverURL = os.Getenv("TEST_DATABASE_URL")
	}
	if serverURL == "" {
		return errors.New("set DATABASE_URL or TEST_DATABASE_URL (a postgres:// URL; the benchmark creates and drops its own database on that server)")
	}
	if s.retentionOnly {
		printLoadWarn()
		return runRetention(ctx, os.Stdout, serverURL, s)
	}
	if _, err := exec.LookPath("pgbench"); err != nil {
		return errors.New("pgbench not found on PATH (it ships with the PostgreSQL client tools, e.g. the postgresql-client package)")
	}

	db, err := createDatabase(ctx, serverURL)
	if err != nil {
		return err
	}
	if s.keepDB {
		fmt.Fprintf(os.Stderr, "claimbench: keeping database %s\n", db.name)
	} else {
		defer db.drop()
	}

	tmp, err := os.MkdirTemp("", "claimbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	env, err := describeEnvironment(ctx, db.url)
	if err != nil {
		return err
	}
	stmt, err := captureClaimStatement(ctx, db.url)
	if err != nil {
		return fmt.Errorf("capture the ledger's claim statement: %w", err)
	}

	sc, err := startClaimd(ctx, s.claimd, tmp, db.url)
	if err != nil {
		return err
	}
	defer sc.stop()

	env.print(os.Stdout, s)
	printLoadWarn()
	script, defs, err := stmt.pgbenchScript(1, freshKeyMax)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "statement:   the ledger's claim statement, captured from one claim (%d parameters);\n"+
		"             pgbench: key :k random, -D %s,\n"+
		"             NULL and '' arguments as literals (pgbench variables cannot be NULL or empty)\n",
		len(stmt.args), strings.Join(defs, " -D "))
	if s.showScript {
		fmt.Fprintf(os.Stdout, "\n%s\n", script)
	}
	if s.hash {
		if err := runHash(os.Stdout, hashCallBudget); err != nil {
			return err
		}
		fmt.Fprintln(os.Stdout)
	}
	fmt.Fprintf(os.Stdout, "load avg:    %s (before)\n", loadAvg())
	b := &bench{s: s, sidecar: sc, stmt: stmt, dir: tmp, dbURL: libpqURL(db.url)}
	if err := b.run(ctx, os.Stdout); err != nil {
		return err
	}
	if s.ingest {
		sc.stop() // the ingest section measures a claimd of its own
		if err := b.runIngest(ctx, os.Stdout, sc.bin, db.url); err != nil {
			return err
		}
	}
	if s.retentionKeys > 0 {
		if err := runRetention(ctx, os.Stdout, serverURL, s); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stdout, "load avg:    %s (after; other work on the machine skews every figure)\n", loadAvg())
	return nil
}

// database is the fresh benchmark database.
type database struct {
	name, url, serverURL string
}

func createDatabase(ctx context.Context, serverURL string) (*database, error) {
	u, err := url.Parse(serverURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, errors.New("DATABASE_URL must be a postgres:// URL")
	}
	conn, err := pgx.Connect(ctx, libpqURL(serverURL))
	if err != nil {
		return nil, fmt.Errorf("connect to the database server: %w", err)
	}
	defer conn.Close(ctx)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "claimbench_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, createDatabaseSQL(name)); err != nil {
		return nil, fmt.Errorf("create the benchmark database (the role needs CREATEDB): %w", err)
	}
	u.Path = "/" + name
	return &database{name: name, url: u.String(), serverURL: serverURL}, nil
}

// drop removes the database and its connections; it runs after ctx ended
// too (Ctrl-C), so it has its own context.
func (d *database) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, libpqURL(d.serverURL))
	if err != nil {
		fmt.Fprintf(os.Stderr, "claimbench: drop %s: %v\n", d.name, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, dropDatabaseSQL(d.name)); err != nil {
		fmt.Fprintf(os.Stderr, "claimbench: drop %s: %v\n", d.name, err)
	}
}

// pgxOnlyParams are connection-string parameters that pgx understands and
// libpq (pgbench) rejects.
var pgxOnlyParams = []string{"pool_max_conns", "pool_min_conns", "pool_min_idle_conns", "pool_max_conn_lifetime",
	"pool_max_conn_lifetime_jitter", "pool_max_conn_idle_time", "pool_health_check_period",
	"statement_cache_capacity", "description_cache_capacity", "default_query_exec_mode"}

// libpqURL returns dbURL without pgx-only parameters.
func libpqURL(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return dbURL
	}
	q := u.Query()
	for _, p := range pgxOnlyParams {
		q.Del(p)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// environment describes the machine and the server.
type environment struct {
	cores           int
	cpuModel        string
	serverVersion   string
	maxConnections  string
	pgbenchVersion  string
	poolMaxConns    string
	synchronousCmts string
	// connsInUse counts client connections on the server at the start.
	connsInUse int
}

func describeEnvironment(ctx context.Context, dbURL string) (environment, error) {
	e := environment{cores: runtime.NumCPU(), cpuModel: cpuModel()}
	conn, err := pgx.Connect(ctx, libpqURL(dbURL))
	if err != nil {
		return e, err
	}
	defer conn.Close(ctx)
	srv, err := queries.BenchServer(ctx, conn)
	if err != nil {
		return e, err
	}
	e.serverVersion, e.maxConnections, e.synchronousCmts, e.connsInUse = srv.Version, srv.MaxConnections,
		srv.SynchronousCommit, int(srv.ClientBackends)
	out, err := exec.CommandContext(ctx, "pgbench", "--version").Output()
	if err != nil {
		return e, fmt.Errorf("pgbench --version: %w", err)
	}
	e.pgbenchVersion = strings.TrimSpace(string(out))
	e.poolMaxConns = fmt.Sprintf("%d (claimd default max(16, 4×cores))", max(16, 4*runtime.NumCPU()))
	if u, err := url.Parse(dbURL); err == nil && u.Query().Get("pool_max_conns") != "" {
		e.poolMaxConns = u.Query().Get("pool_max_conns") + " (pool_max_conns in DATABASE_URL)"
	}
	return e, nil
}

// loadAvg returns the 1, 5 and 15 minute load averages, if known.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func (e environment) print(w io.Writer, s settings) {
	fmt.Fprintln(w, "claimbench: sidecar claim path vs raw pgbench of the same statement")
	fmt.Fprintf(w, "machine:     %d cores (%s), %s/%s, %s\n", e.cores, e.cpuModel, runtime.GOOS, runtime.GOARCH, runtime.Version())
	fmt.Fprintf(w, "postgresql:  %s\n", e.serverVersion)
	fmt.Fprintf(w, "             max_connections %s (%d in use at start), synchronous_commit %s\n",
		e.maxConnections, e.connsInUse, e.synchronousCmts)
	fmt.Fprintf(w, "pgbench:     %s, -M prepared, -j min(clients, cores)\n", e.pgbenchVersion)
	settings := "default settings"
	if names := claimdEnvNames(); len(names) > 0 {
		settings += " and " + strings.Join(names, ", ") + " from the environment"
	}
	fmt.Fprintf(w, "sidecar:     claimd subprocess, %s, pool max conns %s\n", settings, e.poolMaxConns)
	fmt.Fprintf(w, "             group commit: CLAIMD_GROUP_WORKERS %s (0: off), CLAIMD_GROUP_MAX_CALLS %s\n",
		effectiveSetting("CLAIMD_GROUP_WORKERS"), effectiveSetting("CLAIMD_GROUP_MAX_CALLS"))
	fmt.Fprintf(w, "client:      a minimal HTTP/1.1 client (wire.go), keep-alive, one connection per client (ingest cells too); payload_hash given (no payload to hash)\n")
	fmt.Fprintf(w, "cells:       %s each; concurrency %v; duplicate keys 1..%d (completed); batch %d claims\n",
		s.duration, s.concurrency, s.dupKeys, s.batch)
	if s.ingest {
		fmt.Fprintf(w, "             ingest section: concurrency %v, %d stored events to redeliver\n", s.ingestConc, s.ingestDups)
	}
}

// claimdEnvNames lists the CLAIMD_* variables the sidecar inherits (names
// only: values may be secrets).
func claimdEnvNames() []string {
	var names []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "CLAIMD_") {
			names = append(names, k)
		}
	}
	return names
}

// effectiveSetting is the value claimd will run with for the setting
// name: the environment's, else its default (config.Vars).
func effectiveSetting(name string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	for _, v := range config.Vars {
		if v.Env == name {
			return v.Default
		}
	}
	return "?"
}
