package main

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// A process name may hold spaces and parentheses (a PostgreSQL backend's
// comm is "postgres", but anyone may name a thread "a) b"): comm ends at
// the last ')'.
func TestParseProcStatOddNames(t *testing.T) {
	t.Parallel()
	rest := " S 1 123 123 0 -1 4194304 100 0 0 0 250 75 1000 400 20 0 1 0 98765 1000000 300 18446744073709551615"
	for _, comm := range []string{"my (odd) name", "a) b", ")", "plain", "with  two  spaces"} {
		st, err := parseProcStat("123 (" + comm + ")" + rest)
		require.NoError(t, err, comm)
		require.Equal(t, 123, st.pid)
		require.Equal(t, comm, st.comm)
		require.Equal(t, byte('S'), st.state)
		require.Equal(t, 1, st.ppid)
		require.Equal(t, uint64(250), st.utime)
		require.Equal(t, uint64(75), st.stime)
		require.Equal(t, uint64(1000), st.cutime)
		require.Equal(t, uint64(400), st.cstime)
		require.Equal(t, uint64(98765), st.starttime)
		require.Equal(t, uint64(325), st.own())
		require.Equal(t, uint64(1725), st.withChildren())
	}
	for _, bad := range []string{"", "123 no comm", "x (a) S 1 2", "123 (a) S 1 2 3", "123 (a)" + strings.Replace(rest, " 250 ", " -5 ", 1)} {
		_, err := parseProcStat(bad)
		require.Error(t, err, "%q", bad)
	}
	self, err := readProcStat(os.Getpid())
	require.NoError(t, err)
	require.Equal(t, os.Getpid(), self.pid)
	require.Equal(t, os.Getppid(), self.ppid)
}

// burn spins for d of wall time on this goroutine.
func burn(d time.Duration) (n uint64) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		for i := range 100_000 {
			n += uint64(i) * n
		}
	}
	return n
}

func TestCPUMeterSeesThisProcessBurn(t *testing.T) {
	// Not parallel: it measures its own process.
	m := &cpuMeter{claimd: os.Getpid()}
	m.hz, m.hzSource = clockTicks()
	mark := m.start()
	_ = burn(300 * time.Millisecond)
	c := mark.end()
	require.NotNil(t, c.claimd, "the process's /proc/<pid>/stat is readable")
	require.Greater(t, *c.claimd, time.Duration(0))
	require.Greater(t, c.self, time.Duration(0))
	require.Nil(t, c.pg)
	require.NoError(t, c.err)
}

// clockTicks reads what sysconf(_SC_CLK_TCK) reads.
func TestClockTicksIsGetconf(t *testing.T) {
	t.Parallel()
	hz, src := clockTicks()
	require.Equal(t, "AT_CLKTCK", src)
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err != nil {
		t.Skip("no getconf")
	}
	want, err := strconv.Atoi(strings.TrimSpace(string(out)))
	require.NoError(t, err)
	require.Equal(t, want, hz)

	// An auxiliary vector without AT_CLKTCK, and one cut short.
	v, ok := auxvValue(make([]byte, 64), atClkTck)
	require.False(t, ok)
	require.Zero(t, v)
	_, ok = auxvValue([]byte{17, 0, 0}, atClkTck)
	require.False(t, ok)
}

func TestLoadAverageWarning(t *testing.T) {
	t.Parallel()
	l, err := parseLoadAvg("6.92 2.65 1.31 19/199 13828\n")
	require.NoError(t, err)
	require.Equal(t, loadAverage{one: 6.92, five: 2.65, fifteen: 1.31, raw: "6.92 2.65 1.31"}, l)
	w := loadWarning(l, 2)
	require.Contains(t, w, "load average 6.92 2.65 1.31 at start (/proc/loadavg)")
	require.Contains(t, w, "1-minute 6.92 is above 2 CPUs / 2")
	require.Contains(t, w, "noisy")

	l, err = parseLoadAvg("1.00 4.00 4.00 1/100 1")
	require.NoError(t, err)
	require.Empty(t, loadWarning(l, 2), "not above half the CPUs")
	l, err = parseLoadAvg("1.01 0.00 0.00 1/100 1")
	require.NoError(t, err)
	require.NotEmpty(t, loadWarning(l, 2))
	require.Empty(t, loadWarning(l, 4))

	for _, bad := range []string{"", "1.0 2.0", "a b c d e"} {
		_, err := parseLoadAvg(bad)
		require.Error(t, err, "%q", bad)
	}
}

func TestForeignBackendTitles(t *testing.T) {
	t.Parallel()
	const db = "claimbench_0123456789ab"
	for title, foreign := range map[string]bool{
		"postgres: 15/main: postgres claimbench_0123456789ab 127.0.0.1(50578) idle": false,
		"postgres: postgres claimbench_0123456789ab [local] SELECT":                 false,
		"postgres: 15/main: postgres claimbench_ffffffffffff 127.0.0.1(50592) idle": true,
		"postgres: alice app [local] idle in transaction":                           true,
		"postgres: bob app ::1(40000) INSERT":                                       true,
		"postgres: 15/main: checkpointer":                                           false,
		"postgres: walwriter":                                                       false,
		"postgres: 15/main: autovacuum launcher":                                    false,
		"postgres: 15/main: parallel worker for PID 4242":                           false,
		"": false,
	} {
		require.Equal(t, foreign, foreignBackend(title, db), "%q", title)
	}
}

// The server's CPU is found through the database's own backend; a backend
// that exits during the measurement keeps its time (the postmaster's
// cutime), and the busy backend of another database is told apart.
func TestPgServerCPU(t *testing.T) {
	ctx := context.Background()
	ours, other := pgtest.NewDatabase(t), pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, ours)
	require.NoError(t, err)
	var pid int
	var db string
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_backend_pid(), current_database()").Scan(&pid, &db))
	conn.Close(ctx)
	srv, err := findPgServer(pid, db)
	if err != nil {
		t.Skipf("the test server's processes are not local: %v", err)
	}

	foreignConn, err := pgx.Connect(ctx, other)
	require.NoError(t, err)
	defer foreignConn.Close(ctx)
	_, err = foreignConn.Exec(ctx, "SELECT 1") // started before the measurement
	require.NoError(t, err)

	w, err := srv.watch()
	require.NoError(t, err)
	const spin = "SELECT count(*) FROM generate_series(1, 4000000)"
	_, err = foreignConn.Exec(ctx, spin)
	require.NoError(t, err)
	time.Sleep(3 * pgPollInterval) // the poller sees the foreign backend's time
	short, err := pgx.Connect(ctx, ours)
	require.NoError(t, err)
	var shortPid int
	require.NoError(t, short.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&shortPid))
	t0 := time.Now()
	_, err = short.Exec(ctx, spin)
	wall := time.Since(t0)
	require.NoError(t, err)
	spun, err := readProcStat(shortPid)
	require.NoError(t, err)
	require.NoError(t, short.Close(ctx)) // its backend exits before the end
	time.Sleep(200 * time.Millisecond)
	c, err := w.end()
	require.NoError(t, err)
	hz, _ := clockTicks()
	// For a look at the figures with -v: ours ≈ the spin's wall time on
	// an idle machine.
	t.Logf("server %d ticks, other database %d, ours %d (%d ticks/s); our exited backend %d ticks, its spin %v of wall time",
		c.total, c.foreign, c.ours(), hz, spun.own(), wall)
	require.Greater(t, spun.own(), uint64(0))
	require.GreaterOrEqual(t, c.ours(), spun.own(), "the exited backend's time is in the sum, not taken for another database's")
	require.Greater(t, c.foreign, uint64(0), "the other database's busy backend")
	require.GreaterOrEqual(t, c.total, c.foreign)
}

// Without a local backend of the database, the server's CPU is n/a with a
// reason, never an error of the run.
func TestFindPgServerSaysWhyNot(t *testing.T) {
	t.Parallel()
	_, err := findPgServer(1<<30, "claimbench_0123456789ab") // above pid_max
	require.ErrorContains(t, err, "not readable in /proc (remote server or another pid namespace)")
	_, err = findPgServer(os.Getpid(), "claimbench_0123456789ab") // a process, not a backend of it
	require.ErrorContains(t, err, "is not this database's backend")
}
