package pgtest

// Clusters of their own: a primary and streaming standbys made from the
// machine's PostgreSQL server programs, for failover tests. Unlike
// NewDatabase, which shares one server (ServerURL), every server here
// belongs to one test: its own folder under the temp dir, its own free port
// on 127.0.0.1, its Unix socket in its own folder, stopped (pg_ctl stop -m
// immediate on its data dir) and deleted when the test ends, passed or
// failed.
//
// The programs are found as sidecar/scripts/devdb.sh finds them: pg_ctl on
// PATH (testenv.sh puts devdb's folder there), else the usual install
// folders, newest version first. When they are missing the test fails with
// a message saying how to install them; IC_PG_CLUSTER=0 skips these tests
// instead (never silently). When the tests run as root (CI), the server
// programs run as an unprivileged user through runuser, as devdb.sh does:
// PGTEST_USER, else postgres, else nobody.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/short"
)

// ClusterDB is the database every server of a cluster has (made on the
// primary before any standby is copied from it).
const ClusterDB = "claims"

// Replication is how a standby's commits are acknowledged.
type Replication int

const (
	// Async: the primary's commits do not wait for the standby.
	Async Replication = iota
	// Sync: the standby is named in synchronous_standby_names and the
	// primary runs synchronous_commit = on: a commit returns once the
	// standby has flushed it.
	Sync
)

// ClusterOptions configures NewPrimary.
type ClusterOptions struct {
	// Durable keeps fsync on (default off: the tests measure what a
	// failover loses, not what a power cut does, and fsync off keeps them
	// fast on a loaded machine).
	Durable bool
	// Settings are extra postgresql.conf lines for every server.
	Settings []string
	// HBA are pg_hba.conf lines placed before initdb's own (which trust
	// every local and loopback connection), so they decide first: for
	// example "host all app 127.0.0.1/32 scram-sha-256" makes role app
	// log in with its password, "host all blocked 127.0.0.1/32 reject"
	// refuses role blocked. The cluster's own connections (user
	// postgres) stay trusted unless a line names them.
	HBA []string
}

// Server is one PostgreSQL server of a test cluster.
type Server struct {
	t    testing.TB
	Name string
	// Dir holds data/, the log and the Unix socket; deleted at cleanup.
	Dir  string
	Data string
	Log  string
	Port int
	env  *clusterEnv

	mu      sync.Mutex
	running bool
}

type clusterEnv struct {
	bin   string
	runAs *user.User // nil unless running as root
}

var binDirOnce struct {
	sync.Once
	dir string
	err error
}

// BinDir returns the folder holding initdb, pg_ctl and pg_basebackup, or
// fails t with a message saying how to get them (skips when IC_PG_CLUSTER=0,
// and under -short).
func BinDir(t testing.TB) string {
	t.Helper()
	short.Skip(t, "PostgreSQL's server programs (a cluster of its own)")
	if os.Getenv("IC_PG_CLUSTER") == "0" {
		t.Skip("IC_PG_CLUSTER=0: skipping a test that runs PostgreSQL clusters of its own")
	}
	binDirOnce.Do(func() { binDirOnce.dir, binDirOnce.err = findBinDir() })
	if binDirOnce.err != nil {
		t.Fatalf("pgtest: %v. This test starts PostgreSQL servers of its own (a primary and a standby); "+
			"install the server programs (Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql@16), "+
			"put their folder on PATH, or set IC_PG_CLUSTER=0 to skip the failover tests", binDirOnce.err)
	}
	return binDirOnce.dir
}

var serverTools = []string{"initdb", "pg_ctl", "pg_basebackup", "postgres"}

func hasTools(dir string) bool {
	for _, tool := range serverTools {
		if fi, err := os.Stat(filepath.Join(dir, tool)); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

func findBinDir() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		if d := filepath.Dir(p); hasTools(d) {
			return d, nil
		}
	}
	versioned, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	major := func(d string) int { n, _ := strconv.Atoi(filepath.Base(filepath.Dir(d))); return n }
	slices.SortFunc(versioned, func(a, b string) int { return major(b) - major(a) })
	candidates := append(versioned, "/usr/local/pgsql/bin")
	for _, pattern := range []string{"/opt/homebrew/opt/postgresql*/bin", "/usr/local/opt/postgresql*/bin"} {
		m, _ := filepath.Glob(pattern)
		candidates = append(candidates, m...)
	}
	for _, d := range candidates {
		if hasTools(d) {
			return d, nil
		}
	}
	return "", fmt.Errorf("PostgreSQL server programs (%s) not found on PATH or in /usr/lib/postgresql/*/bin", strings.Join(serverTools, ", "))
}

func newClusterEnv(t testing.TB) *clusterEnv {
	t.Helper()
	env := &clusterEnv{bin: BinDir(t)}
	if os.Geteuid() == 0 {
		name := os.Getenv("PGTEST_USER")
		if name == "" {
			name = "postgres"
			if _, err := user.Lookup(name); err != nil {
				name = "nobody"
			}
		}
		u, err := user.Lookup(name)
		if err != nil {
			t.Fatalf("pgtest: running as root, and user %q (PGTEST_USER) to run PostgreSQL as does not exist: %v", name, err)
		}
		if _, err := exec.LookPath("runuser"); err != nil {
			t.Fatalf("pgtest: running as root needs runuser to start PostgreSQL as %q: %v", name, err)
		}
		env.runAs = u
	}
	return env
}

// command runs a server program as the cluster owner.
func (e *clusterEnv) command(ctx context.Context, tool string, args ...string) *exec.Cmd {
	path := filepath.Join(e.bin, tool)
	var cmd *exec.Cmd
	if e.runAs != nil {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", e.runAs.Username, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), "LC_ALL=C", "PGTZ=UTC")
	return cmd
}

func (e *clusterEnv) run(tool string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := e.command(ctx, tool, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w\n%s", tool, strings.Join(args, " "), err, out)
	}
	return out, nil
}

// chown hands path to the cluster owner.
func (e *clusterEnv) chown(path string) error {
	if e.runAs == nil {
		return nil
	}
	uid, _ := strconv.Atoi(e.runAs.Uid)
	gid, _ := strconv.Atoi(e.runAs.Gid)
	return os.Chown(path, uid, gid)
}

// newServer makes the folder of a server and registers its cleanup: stop
// (immediate) whatever runs on its data dir, then delete the folder.
func newServer(t testing.TB, env *clusterEnv, name string) *Server {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgtest-"+name+"-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if err := env.chown(dir); err != nil {
		os.RemoveAll(dir)
		t.Fatalf("pgtest: %v", err)
	}
	s := &Server{t: t, Name: name, Dir: dir, Data: filepath.Join(dir, "data"), Log: filepath.Join(dir, "postgres.log"), env: env}
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(s.Data, "postmaster.pid")); err == nil {
			if out, err := env.run("pg_ctl", "stop", "-D", s.Data, "-m", "immediate", "-w", "-t", "60"); err != nil &&
				!strings.Contains(string(out), "is the server running") {
				t.Logf("pgtest: stop %s: %v", name, err)
			}
		}
		if t.Failed() {
			if b, err := os.ReadFile(s.Log); err == nil {
				t.Logf("pgtest: %s log (last 40 lines):\n%s", name, lastLines(string(b), 40))
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("pgtest: remove %s: %v", dir, err)
		}
	})
	return s
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// freePort returns a TCP port of 127.0.0.1 nothing listens on now, below
// Linux's ephemeral range (32768 and up): a server stopped and started
// again (an old primary coming back) needs its port again, and a port of
// that range may meanwhile be the local end of some outgoing connection.
func freePort(t testing.TB) int {
	t.Helper()
	for range 200 {
		p := 20000 + rand.IntN(12000)
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		ln.Close()
		return p
	}
	t.Fatalf("pgtest: no free port in 20000-31999 on 127.0.0.1")
	return 0
}

// NewPrimary initialises and starts a primary ready for streaming
// standbys (wal_level = replica, replication connections trusted on
// loopback), with the database ClusterDB.
func NewPrimary(t testing.TB, opts ClusterOptions) *Server {
	t.Helper()
	env := newClusterEnv(t)
	s := newServer(t, env, "primary")
	if _, err := env.run("initdb", "-D", s.Data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale", "--no-sync"); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	fsync := "off"
	if opts.Durable {
		fsync = "on"
	}
	conf := []string{
		"", "# pgtest cluster (sidecar/internal/pgtest/cluster.go)",
		"listen_addresses = '127.0.0.1'",
		"max_connections = 100",
		"shared_buffers = 32MB",
		"wal_level = replica",
		"max_wal_senders = 8",
		"max_replication_slots = 8",
		"wal_keep_size = 256MB",
		"hot_standby = on",
		"fsync = " + fsync,
		"full_page_writes = " + fsync,
		"synchronous_commit = on",
		"wal_receiver_status_interval = 1s",
		"log_min_messages = warning",
		"log_line_prefix = '%m [%p] '",
	}
	conf = append(conf, opts.Settings...)
	f, err := os.OpenFile(filepath.Join(s.Data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	_, err = f.WriteString(strings.Join(conf, "\n") + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if len(opts.HBA) > 0 {
		hba := filepath.Join(s.Data, "pg_hba.conf")
		b, err := os.ReadFile(hba)
		if err == nil {
			b = append([]byte("# pgtest (ClusterOptions.HBA)\n"+strings.Join(opts.HBA, "\n")+"\n\n"), b...)
			err = os.WriteFile(hba, b, 0o600)
		}
		if err == nil {
			err = env.chown(hba)
		}
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	s.Start()
	s.Exec("CREATE DATABASE " + ClusterDB)
	return s
}

// NewStandby copies the running primary p with pg_basebackup -R into a
// new server named name (its application_name on the primary), starts it
// and waits until it streams. With Sync the primary's commits then wait
// for it (synchronous_standby_names = name, set on the primary after the
// copy: the standby, once promoted, has no synchronous standby of its own
// and its commits do not wait).
func (p *Server) NewStandby(name string, mode Replication) *Server {
	t := p.t
	t.Helper()
	s := newServer(t, p.env, name)
	if _, err := p.env.run("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(p.Port), "-U", "postgres",
		"-D", s.Data, "-R", "-X", "stream", "--checkpoint=fast", "--no-sync"); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	// After -R's own line, so it wins: the standby's application_name is
	// what synchronous_standby_names and pg_stat_replication name.
	f, err := os.OpenFile(filepath.Join(s.Data, "postgresql.auto.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	_, err = fmt.Fprintf(f, "primary_conninfo = 'host=127.0.0.1 port=%d user=postgres application_name=%s'\n", p.Port, name)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	s.Start()
	if mode == Sync {
		p.SetSynchronousStandbys(name)
	}
	p.WaitStreaming(name, mode == Sync)
	return s
}

// SetSynchronousStandbys sets synchronous_standby_names on the primary
// ("" makes every standby asynchronous) and reloads its configuration.
func (s *Server) SetSynchronousStandbys(names string) {
	s.t.Helper()
	s.Exec("ALTER SYSTEM SET synchronous_standby_names = '" + strings.ReplaceAll(names, "'", "''") + "'")
	s.Exec("SELECT pg_reload_conf()")
}

// WaitStreaming waits until standby name streams from s (and is its
// synchronous standby when sync).
func (s *Server) WaitStreaming(name string, sync bool) {
	s.t.Helper()
	want := "async"
	if sync {
		want = "sync"
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var state, syncState string
		err := s.QueryRow(`SELECT state, sync_state FROM pg_stat_replication WHERE application_name = $1`, name).Scan(&state, &syncState)
		if err == nil && state == "streaming" && syncState == want {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("pgtest: standby %s does not stream from %s as %s (state %q, sync_state %q, err %v)", name, s.Name, want, state, syncState, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitReplayed waits until standby name has replayed everything s has
// written so far (its replay_lsn in pg_stat_replication reaches s's
// current WAL position): with an asynchronous standby, what s committed
// before is then on the standby too, whatever the machine's load.
func (s *Server) WaitReplayed(name string) {
	s.t.Helper()
	var target string
	if err := s.QueryRow(`SELECT pg_current_wal_lsn()::text`).Scan(&target); err != nil {
		s.t.Fatalf("pgtest: current WAL position of %s: %v", s.Name, err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var done bool
		err := s.QueryRow(`SELECT replay_lsn >= $2::pg_lsn FROM pg_stat_replication WHERE application_name = $1`, name, target).Scan(&done)
		if err == nil && done {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("pgtest: standby %s has not replayed %s of %s (err %v)", name, target, s.Name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Start starts the server on its port (a free one at the first start, the
// same one afterwards) and waits until it accepts connections.
func (s *Server) Start() {
	s.t.Helper()
	for try := 0; ; try++ {
		if s.Port == 0 || try > 0 {
			s.Port = freePort(s.t)
		}
		mark := logSize(s.Log)
		_, err := s.env.run("pg_ctl", "start", "-D", s.Data, "-l", s.Log, "-w", "-t", "120",
			"-o", fmt.Sprintf("-p %d -k %s", s.Port, s.Dir))
		if err == nil {
			break
		}
		// Another program took the port between the probe and the bind:
		// only for a first start, a restart must keep its port.
		if try < 3 && !s.started() && strings.Contains(logSince(s.Log, mark), "Address already in use") {
			continue
		}
		s.t.Fatalf("pgtest: start %s: %v\n%s", s.Name, err, lastLines(logSince(s.Log, mark), 20))
	}
	s.mu.Lock()
	s.running = true
	s.mu.Unlock()
	// pg_ctl -w returns once the postmaster is ready; a standby's may
	// take a moment longer to accept read-only connections.
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := s.Connect("postgres")
		if err == nil {
			c.Close(context.Background())
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("pgtest: %s does not accept connections: %v", s.Name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// started reports whether the server has been started before.
func (s *Server) started() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running
}

func logSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func logSince(path string, mark int64) string {
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) < mark {
		return string(b)
	}
	return string(b[mark:])
}

// Stop stops the server with a fast shutdown (clients disconnected, a
// clean checkpoint).
func (s *Server) Stop() { s.t.Helper(); s.stop("fast") }

// StopImmediate stops the server as a crash would: no checkpoint, no
// goodbye to clients or standbys (pg_ctl stop -m immediate).
func (s *Server) StopImmediate() { s.t.Helper(); s.stop("immediate") }

func (s *Server) stop(mode string) {
	s.t.Helper()
	if _, err := s.env.run("pg_ctl", "stop", "-D", s.Data, "-m", mode, "-w", "-t", "120"); err != nil {
		s.t.Fatalf("pgtest: stop %s: %v", s.Name, err)
	}
}

// Promote promotes a standby (pg_ctl promote) and waits until it takes
// writes (pg_is_in_recovery() is false).
func (s *Server) Promote() {
	s.t.Helper()
	if _, err := s.env.run("pg_ctl", "promote", "-D", s.Data, "-w", "-t", "120"); err != nil {
		s.t.Fatalf("pgtest: promote %s: %v", s.Name, err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var inRecovery bool
		err := s.QueryRow("SELECT pg_is_in_recovery()").Scan(&inRecovery)
		if err == nil && !inRecovery {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("pgtest: %s still in recovery after promote (err %v)", s.Name, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Addr is host:port of the server.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// URL is the URL of database db on this server (ClusterDB when db is "").
func (s *Server) URL(db string) string {
	if db == "" {
		db = ClusterDB
	}
	return "postgres://postgres@" + s.Addr() + "/" + db + "?sslmode=disable"
}

// MultiHostURL is the URL of ClusterDB naming every server in order, with
// target_session_attrs=read-write: a client connects to the first one
// that takes writes, as an application in front of a failover cluster
// without a proxy would.
func MultiHostURL(servers ...*Server) string {
	hosts := make([]string, len(servers))
	for i, s := range servers {
		hosts[i] = s.Addr()
	}
	q := url.Values{"sslmode": {"disable"}, "target_session_attrs": {"read-write"}}
	return "postgres://postgres@" + strings.Join(hosts, ",") + "/" + ClusterDB + "?" + q.Encode()
}

// Connect opens a connection to database db ("" = ClusterDB); the caller
// closes it.
func (s *Server) Connect(db string) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return pgx.Connect(ctx, s.URL(db))
}

// Exec runs sql on the postgres database of s and fails the test on error.
func (s *Server) Exec(sql string, args ...any) {
	s.t.Helper()
	if err := s.withConn("postgres", func(c *pgx.Conn) error {
		_, err := c.Exec(context.Background(), sql, args...)
		return err
	}); err != nil {
		s.t.Fatalf("pgtest: %s: %s: %v", s.Name, sql, err)
	}
}

// QueryRow runs a one-row query on the postgres database of s.
func (s *Server) QueryRow(sql string, args ...any) pgx.Row {
	return rowFunc(func(dest ...any) error {
		return s.withConn("postgres", func(c *pgx.Conn) error {
			return c.QueryRow(context.Background(), sql, args...).Scan(dest...)
		})
	})
}

// QueryRowDB is QueryRow on database db.
func (s *Server) QueryRowDB(db, sql string, args ...any) pgx.Row {
	return rowFunc(func(dest ...any) error {
		return s.withConn(db, func(c *pgx.Conn) error {
			return c.QueryRow(context.Background(), sql, args...).Scan(dest...)
		})
	})
}

type rowFunc func(dest ...any) error

func (f rowFunc) Scan(dest ...any) error { return f(dest...) }

func (s *Server) withConn(db string, fn func(*pgx.Conn) error) error {
	c, err := s.Connect(db)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	return fn(c)
}

// Timeline returns the server's current timeline: the one its WAL is
// written on (a primary) or replayed on (a standby).
func (s *Server) Timeline() int {
	s.t.Helper()
	var tl int
	if err := s.QueryRow(`SELECT CASE WHEN pg_is_in_recovery() THEN (SELECT received_tli FROM pg_stat_wal_receiver)
		ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END`).Scan(&tl); err != nil {
		s.t.Fatalf("pgtest: timeline of %s: %v", s.Name, err)
	}
	return tl
}
