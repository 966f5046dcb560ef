package main

// CPU time per claim, from /proc (Linux). See the package doc for what is
// counted; in short:
//
//   - claimd: utime+stime of /proc/<pid>/stat (every thread of the
//     process, exited threads included), before and after the cell;
//   - PostgreSQL: the whole server's process tree, found from this
//     database's own backend (pg_backend_pid(), whose parent is the
//     postmaster): the postmaster's utime+stime+cutime+cstime plus the
//     same four of every live child. cutime/cstime hold the time of reaped
//     children, so a backend that exits during the cell (pgbench's
//     connections) keeps its time in the sum. A poller samples the children
//     during the cell to tell the CPU of other databases' backends, which
//     is subtracted (another workload on the same server);
//   - the benchmark's HTTP clients: getrusage(RUSAGE_SELF) of this process
//     (all its goroutines: the clients, the poller, the runtime);
//   - pgbench's client: the rusage of the exited process (os/exec).
//
// /proc/<pid>/stat counts in clock ticks of USER_HZ; sysconf(_SC_CLK_TCK)
// (getconf CLK_TCK) reads it from the AT_CLKTCK entry of the auxiliary
// vector the kernel gives every process, which clockTicks reads from
// /proc/self/auxv (golang.org/x/sys/unix has no sysconf). USER_HZ is 100
// on every Linux architecture; 100 is the fallback.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// procStat is what claimbench reads of /proc/<pid>/stat.
type procStat struct {
	pid, ppid                    int
	comm                         string
	state                        byte
	utime, stime, cutime, cstime uint64 // clock ticks
	starttime                    uint64 // clock ticks after boot
}

// own returns the process's own CPU time (all its threads), in ticks.
func (p procStat) own() uint64 { return p.utime + p.stime }

// withChildren adds the time of its reaped children.
func (p procStat) withChildren() uint64 { return p.utime + p.stime + p.cutime + p.cstime }

// parseProcStat parses a /proc/<pid>/stat line: "pid (comm) state ppid
// …". comm may hold spaces and parentheses; it ends at the last ')'.
func parseProcStat(line string) (procStat, error) {
	var p procStat
	open, close := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
	if open < 0 || close < open {
		return p, fmt.Errorf("stat line %.60q: no (comm)", line)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line[:open]))
	if err != nil {
		return p, fmt.Errorf("stat line %.60q: pid: %w", line, err)
	}
	p.pid, p.comm = pid, line[open+1:close]
	f := strings.Fields(line[close+1:])
	// f[0] is field 3 of proc(5): state; f[1] ppid; f[11..14] utime,
	// stime, cutime, cstime; f[19] starttime.
	if len(f) < 20 || len(f[0]) != 1 {
		return p, fmt.Errorf("stat line %.60q: %d fields after comm", line, len(f))
	}
	p.state = f[0][0]
	nums := []*uint64{&p.utime, &p.stime, &p.cutime, &p.cstime}
	for i, dst := range nums {
		// cutime and cstime are signed in proc(5) ("long"); never
		// negative in practice.
		v, err := strconv.ParseInt(f[11+i], 10, 64)
		if err != nil || v < 0 {
			return p, fmt.Errorf("stat line %.60q: field %d: %q", line, 14+i, f[11+i])
		}
		*dst = uint64(v)
	}
	if p.ppid, err = strconv.Atoi(f[1]); err != nil {
		return p, fmt.Errorf("stat line %.60q: ppid %q", line, f[1])
	}
	if p.starttime, err = strconv.ParseUint(f[19], 10, 64); err != nil {
		return p, fmt.Errorf("stat line %.60q: starttime %q", line, f[19])
	}
	return p, nil
}

func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(string(bytes.TrimSpace(b)))
}

// procTitle returns a process's command line (its process title for a
// PostgreSQL process: "postgres: [cluster: ]user db host(port) activity"),
// NULs as spaces, trimmed.
func procTitle(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
}

// atClkTck is AT_CLKTCK of <elf.h>: the auxiliary vector's USER_HZ.
const atClkTck = 17

// clockTicks returns the clock ticks per second of /proc/<pid>/stat, as
// sysconf(_SC_CLK_TCK) does, and where the figure comes from.
func clockTicks() (int, string) {
	b, err := os.ReadFile("/proc/self/auxv")
	if err == nil {
		if hz, ok := auxvValue(b, atClkTck); ok && hz > 0 {
			return int(hz), "AT_CLKTCK"
		}
	}
	return 100, "USER_HZ default"
}

// auxvValue finds key in an auxiliary vector (native-endian word pairs).
func auxvValue(b []byte, key uint64) (uint64, bool) {
	word := int(unsafe.Sizeof(uintptr(0)))
	read := func(p []byte) uint64 {
		if word == 4 {
			return uint64(binary.NativeEndian.Uint32(p))
		}
		return binary.NativeEndian.Uint64(p)
	}
	for i := 0; i+2*word <= len(b); i += 2 * word {
		k, v := read(b[i:]), read(b[i+word:])
		if k == 0 { // AT_NULL
			break
		}
		if k == key {
			return v, true
		}
	}
	return 0, false
}

// selfCPU returns this process's user+sys time (getrusage).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAverage is /proc/loadavg's first three fields.
type loadAverage struct {
	one, five, fifteen float64
	raw                string
}

func parseLoadAvg(s string) (loadAverage, error) {
	f := strings.Fields(s)
	if len(f) < 3 {
		return loadAverage{}, fmt.Errorf("loadavg %q: want three numbers", s)
	}
	var l loadAverage
	for i, dst := range []*float64{&l.one, &l.five, &l.fifteen} {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return loadAverage{}, fmt.Errorf("loadavg %q: %w", s, err)
		}
		*dst = v
	}
	l.raw = strings.Join(f[:3], " ")
	return l, nil
}

// loadWarning returns a warning when the 1-minute load average is above
// half the CPUs, "" otherwise. It never refuses the run.
func loadWarning(l loadAverage, cpus int) string {
	if l.one <= float64(cpus)/2 {
		return ""
	}
	return fmt.Sprintf("warning:     load average %s at start (/proc/loadavg): 1-minute %.2f is above %d CPUs / 2;\n"+
		"             other work is running, claims/s and latency will be noisy (CPU time per claim less so)",
		l.raw, l.one, cpus)
}

// startLoadWarning reads /proc/loadavg and returns loadWarning's verdict.
func startLoadWarning(cpus int) string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	l, err := parseLoadAvg(string(b))
	if err != nil {
		return ""
	}
	return loadWarning(l, cpus)
}

// pgServer is the local process tree of the benchmark's PostgreSQL server.
type pgServer struct {
	postmaster int
	dbName     string
}

// findPgServer locates the server's postmaster from this database's
// backend pid (pg_backend_pid() of a connection to dbName), or says why
// it cannot: the pid must be a local process whose title names dbName
// (else the server is remote or in another pid namespace) and whose
// parent is readable.
func findPgServer(backendPid int, dbName string) (*pgServer, error) {
	st, err := readProcStat(backendPid)
	if err != nil {
		return nil, fmt.Errorf("backend pid %d is not readable in /proc (remote server or another pid namespace)", backendPid)
	}
	if !titleNamesDB(procTitle(backendPid), dbName) {
		return nil, fmt.Errorf("local pid %d is not this database's backend (remote server or another pid namespace)", backendPid)
	}
	pm, err := readProcStat(st.ppid)
	if err != nil {
		return nil, fmt.Errorf("the postmaster (pid %d) is not readable: %w", st.ppid, err)
	}
	if _, err := childPids(pm.pid); err != nil {
		return nil, fmt.Errorf("the postmaster's children are not listable: %w", err)
	}
	return &pgServer{postmaster: pm.pid, dbName: dbName}, nil
}

func titleNamesDB(title, db string) bool {
	for _, f := range strings.Fields(title) {
		if f == db {
			return true
		}
	}
	return false
}

// clientAddrRe matches the host(port) field of a backend's title.
var clientAddrRe = regexp.MustCompile(`^\S+\(\d+\)$`)

// foreignBackend tells a client backend of another database (its title
// has a client address and does not name ours) from the server's shared
// processes (checkpointer, walwriter, …) and this database's backends.
func foreignBackend(title, db string) bool {
	if titleNamesDB(title, db) {
		return false
	}
	for _, f := range strings.Fields(title) {
		if f == "[local]" || clientAddrRe.MatchString(f) {
			return true
		}
	}
	return false
}

// childPids lists the children of pid: /proc/<pid>/task/<pid>/children
// (the postmaster is single-threaded), else a walk of /proc.
func childPids(pid int) ([]int, error) {
	p := strconv.Itoa(pid)
	if b, err := os.ReadFile("/proc/" + p + "/task/" + p + "/children"); err == nil {
		var out []int
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
		return out, nil
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readProcStat(n); err == nil && st.ppid == pid {
			out = append(out, n)
		}
	}
	return out, nil
}

// child is one process of the server tree as last sampled.
type child struct {
	ticks   uint64 // own + reaped children
	first   uint64 // at the start of the measurement (0: born during it)
	foreign bool
	// settled once the title is PostgreSQL's ("postgres: …"): a backend
	// just forked still bears the postmaster's command line.
	settled bool
}

// pgSample is one walk of the server tree.
type pgSample struct {
	total    uint64 // postmaster own + reaped children + every live child
	children map[childKey]uint64
}

// childKey tells a pid apart from a later process with the same pid.
type childKey struct {
	pid       int
	starttime uint64
}

func (s *pgServer) sample() (pgSample, error) {
	pm, err := readProcStat(s.postmaster)
	if err != nil {
		return pgSample{}, fmt.Errorf("postmaster pid %d: %w", s.postmaster, err)
	}
	pids, err := childPids(s.postmaster)
	if err != nil {
		return pgSample{}, err
	}
	out := pgSample{total: pm.withChildren(), children: make(map[childKey]uint64, len(pids))}
	for _, pid := range pids {
		st, err := readProcStat(pid)
		if err != nil || st.ppid != s.postmaster {
			continue // exited between the listing and the read: its time is in cutime
		}
		out.total += st.withChildren()
		out.children[childKey{pid, st.starttime}] = st.withChildren()
	}
	return out, nil
}

// pgWatch measures the server over one cell; a poller samples the
// children to attribute other databases' backends.
type pgWatch struct {
	s     *pgServer
	start pgSample
	mu    sync.Mutex
	seen  map[childKey]*child
	stop  chan struct{}
	done  chan struct{}
}

// pgPollInterval is how often the server's children are sampled during
// a cell (for attribution only; the total needs no polling).
const pgPollInterval = 100 * time.Millisecond

func (s *pgServer) watch() (*pgWatch, error) {
	first, err := s.sample()
	if err != nil {
		return nil, err
	}
	w := &pgWatch{s: s, start: first, seen: map[childKey]*child{}, stop: make(chan struct{}), done: make(chan struct{})}
	w.note(first, true)
	go func() {
		defer close(w.done)
		t := time.NewTicker(pgPollInterval)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
				if smp, err := s.sample(); err == nil {
					w.note(smp, false)
				}
			}
		}
	}()
	return w, nil
}

func (w *pgWatch) note(smp pgSample, initial bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, ticks := range smp.children {
		c := w.seen[k]
		if c == nil {
			c = &child{}
			if initial {
				c.first = ticks
			}
			w.seen[k] = c
		}
		if !c.settled {
			title := procTitle(k.pid)
			c.foreign, c.settled = foreignBackend(title, w.s.dbName), strings.HasPrefix(title, "postgres:")
		}
		c.ticks = ticks
	}
}

// pgCPU is the server's CPU over a cell.
type pgCPU struct {
	// total is the whole server tree's CPU; foreign the part seen in
	// client backends of other databases (a lower bound: a foreign backend
	// that exits loses its time since the last sample to total).
	total, foreign uint64 // ticks
}

// ours is the server's CPU less other databases' backends.
func (c pgCPU) ours() uint64 {
	if c.foreign > c.total {
		return 0
	}
	return c.total - c.foreign
}

func (w *pgWatch) end() (pgCPU, error) {
	close(w.stop)
	<-w.done
	last, err := w.s.sample()
	if err != nil {
		return pgCPU{}, err
	}
	w.note(last, false)
	var c pgCPU
	if last.total > w.start.total {
		c.total = last.total - w.start.total
	}
	for _, ch := range w.seen {
		if ch.foreign && ch.ticks > ch.first {
			c.foreign += ch.ticks - ch.first
		}
	}
	return c, nil
}

// cpuMeter measures one cell: claimd (if a pid is given), the server (if
// local), this process, and leaves the pgbench client to pgbenchRun.
type cpuMeter struct {
	hz       int
	hzSource string
	claimd   int
	pg       *pgServer
	// pgNA says why the server's CPU is not measured ("" when it is).
	pgNA string
}

// cellCPU is one cell's CPU times; the pointers are nil when unmeasured.
type cellCPU struct {
	claimd *time.Duration
	pg     *pgCPU
	self   time.Duration
	err    error
}

type cellMark struct {
	m        *cpuMeter
	claimd   uint64
	claimdOK bool
	pg       *pgWatch
	self     time.Duration
}

func (m *cpuMeter) start() *cellMark {
	c := &cellMark{m: m, self: selfCPU()}
	if m.claimd > 0 {
		if st, err := readProcStat(m.claimd); err == nil {
			c.claimd, c.claimdOK = st.own(), true
		}
	}
	if m.pg != nil {
		c.pg, _ = m.pg.watch() // nil on error: the cell says n/a
	}
	return c
}

func (c *cellMark) end() cellCPU {
	var out cellCPU
	out.self = selfCPU() - c.self
	if c.claimdOK {
		if st, err := readProcStat(c.m.claimd); err == nil && st.own() >= c.claimd {
			d := c.m.ticks(st.own() - c.claimd)
			out.claimd = &d
		}
	}
	if c.pg != nil {
		pc, err := c.pg.end()
		if err == nil {
			out.pg = &pc
		} else {
			out.err = err
		}
	} else if c.m.pg != nil {
		out.err = errors.New("the server's processes could not be sampled at the start of the cell")
	}
	return out
}

func (m *cpuMeter) ticks(t uint64) time.Duration {
	return time.Duration(t) * time.Second / time.Duration(m.hz)
}
