package inbox_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// The benchmarks below are the test-only way to profile the ingest path
// and the dispatcher in one process (claimd exposes no pprof):
//
//	go test ./sidecar/inbox -run '^$' -bench . -benchtime 5000x -cpuprofile cpu.out
//
// Their figures include the database server's time as seen by the
// client; claimbench (make bench) is the end-to-end measurement.

// groupCount is an inbox.Observer counting ingest groups and their
// deliveries.
type groupCount struct{ groups, calls atomic.Int64 }

func (*groupCount) Received(string, inbox.Status)            {}
func (*groupCount) Rejected(string, string)                  {}
func (*groupCount) Dispatched(string, string, time.Duration) {}
func (g *groupCount) Grouped(kind string, n int) {
	if kind == "ingest" {
		g.groups.Add(1)
		g.calls.Add(int64(n))
	}
}

// benchInbox returns an inbox over a fresh database with source "bench"
// (forward concurrency 16) posting to target, dispatching when dispatch.
func benchInbox(b *testing.B, pool *pgxpool.Pool, target string, dispatch bool, obs *groupCount, gc *claim.GroupConfig) (*inbox.Inbox, *sources.Source) {
	b.Helper()
	cfg, err := sources.Parse([]byte(`
sources:
  bench:
    tenant: acme
    provider: token
    secrets: [tok]
    options: {key: {id_header: X-Id}}
    forward: {url: "`+target+`", require_claim: false, concurrency: 16}
`), envOf(nil))
	if err != nil {
		b.Fatal(err)
	}
	ledger, err := claim.New(pool, claim.Config{Policies: claim.Policies{BySource: cfg.Policies}})
	if err != nil {
		b.Fatal(err)
	}
	in, err := inbox.New(inbox.Options{Pool: pool, Ledger: ledger, Config: cfg, Logger: zerolog.Nop(), Dispatch: dispatch, Observer: obs, Group: gc})
	if err != nil {
		b.Fatal(err)
	}
	return in, cfg.Sources["bench"]
}

// benchPayload is a 1 KiB JSON event body.
func benchPayload(id string) []byte {
	s := `{"type":"bench.event.created","id":"` + id + `","data":{"pad":"`
	return []byte(s + strings.Repeat("x", 1024-len(s)-3) + `"}}`)
}

// receiveAll stores n fresh events with 16 concurrent callers.
func receiveAll(b *testing.B, in *inbox.Inbox, src *sources.Source, prefix string, n int) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				id := fmt.Sprintf("%s-%d", prefix, i)
				if _, err := in.Receive(context.Background(), src, []verify.Event{{ID: id}}, benchPayload(id), "application/json", nil); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// BenchmarkReceive stores b.N fresh one-event deliveries, 16 callers at
// once, with group commit off and on (the default GroupConfig's bounds).
func BenchmarkReceive(b *testing.B) {
	for _, workers := range []int{0, 1, 2, 4} {
		b.Run(fmt.Sprintf("group-workers=%d", workers), func(b *testing.B) {
			gc := claim.DefaultGroupConfig()
			gc.Workers = workers
			benchReceive(b, &gc)
		})
	}
}

func benchReceive(b *testing.B, gc *claim.GroupConfig) {
	pool := pgtest.NewPoolConfig(b, func(c *pgxpool.Config) { c.MaxConns = 16 })
	var obs groupCount
	in, src := benchInbox(b, pool, "http://127.0.0.1:9/hook", false, &obs, gc)
	cpu := &cpuMeter{pool: pool}
	cpu.start(b)
	b.ResetTimer()
	receiveAll(b, in, src, "r", b.N)
	b.StopTimer()
	cpu.report(b, b.N)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	if n := obs.groups.Load(); n > 0 {
		b.ReportMetric(float64(obs.calls.Load())/float64(n), "deliveries/group")
	}
}

// BenchmarkDispatch stores b.N events, then times the dispatcher (forward
// concurrency 16) delivering all of them to a target answering 200.
func BenchmarkDispatch(b *testing.B) {
	var seen atomic.Int64
	done := make(chan struct{})
	n := int64(b.N)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if seen.Add(1) == n {
			close(done)
		}
	}))
	defer target.Close()
	trace := &sqlTimes{}
	pool := pgtest.NewPoolConfig(b, func(c *pgxpool.Config) {
		c.MaxConns = 16
		if os.Getenv("BENCH_TRACE") != "" {
			c.ConnConfig.Tracer = trace
		}
	})
	store, src := benchInbox(b, pool, target.URL, false, &groupCount{}, nil)
	receiveAll(b, store, src, "d", b.N)
	trace.mu.Lock()
	trace.by = nil // the dispatch only
	trace.mu.Unlock()
	in, _ := benchInbox(b, pool, target.URL, true, &groupCount{}, nil)
	cpu := &cpuMeter{pool: pool}
	cpu.start(b)
	b.ResetTimer()
	if err := in.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("dispatched %d of %d", seen.Load(), n)
	}
	b.StopTimer()
	cpu.report(b, b.N)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	trace.report(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = in.Stop(ctx)
}

// sqlTimes is a pgx tracer summing statement time by the statement's
// first words (BENCH_TRACE=1: printed at the end of BenchmarkDispatch).
type sqlTimes struct {
	mu sync.Mutex
	by map[string]*sqlTime
}

type sqlTime struct {
	n int
	d time.Duration
}

type traceKey struct{}

type traceStart struct {
	sql string
	at  time.Time
}

func (s *sqlTimes) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, traceKey{}, traceStart{d.SQL, time.Now()})
}

func (s *sqlTimes) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	st, ok := ctx.Value(traceKey{}).(traceStart)
	if !ok {
		return
	}
	k := strings.Join(strings.Fields(st.sql), " ")
	k = k[:min(len(k), 90)]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.by == nil {
		s.by = map[string]*sqlTime{}
	}
	t := s.by[k]
	if t == nil {
		t = &sqlTime{}
		s.by[k] = t
	}
	t.n++
	t.d += time.Since(st.at)
}

func (s *sqlTimes) report(b *testing.B) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.by))
	for k := range s.by {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return s.by[keys[i]].d > s.by[keys[j]].d })
	for _, k := range keys {
		t := s.by[k]
		b.Logf("%8d × %8.3f ms = %8.0f ms  %s", t.n, float64(t.d.Microseconds())/1000/float64(t.n), float64(t.d.Milliseconds()), k)
	}
}

// cpuMeter reads the CPU time of this process and of the database
// server's backends serving pool (from /proc: the server on this machine,
// readable by this user), so that a benchmark can report CPU per event,
// which other work on the machine skews far less than wall time.
type cpuMeter struct {
	pool    *pgxpool.Pool
	self    time.Duration
	backend map[int]time.Duration
}

func procCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0, false
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond, true // USER_HZ 100
}

func (m *cpuMeter) read(b *testing.B) (time.Duration, map[int]time.Duration) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	self := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	rows, err := m.pool.Query(context.Background(), `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		b.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		b.Fatal(err)
	}
	out := map[int]time.Duration{}
	for _, p := range pids {
		if d, ok := procCPU(int(p)); ok {
			out[int(p)] = d
		}
	}
	return self, out
}

func (m *cpuMeter) start(b *testing.B) { m.self, m.backend = m.read(b) }

// report adds the CPU milliseconds per event since start: this process's
// and the database backends'.
func (m *cpuMeter) report(b *testing.B, events int) {
	self, backend := m.read(b)
	var db time.Duration
	for p, d := range backend {
		db += d - m.backend[p]
	}
	if len(backend) == 0 {
		return // not a local server
	}
	b.ReportMetric(float64((self-m.self).Microseconds())/1000/float64(events), "client-cpu-ms/event")
	b.ReportMetric(float64(db.Microseconds())/1000/float64(events), "db-cpu-ms/event")
}
