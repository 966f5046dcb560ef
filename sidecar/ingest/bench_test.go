package ingest_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/ingest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// The benchmarks below are the test-only way to profile the ingest path
// and the dispatcher in one process (claimd exposes no pprof):
//
//	go test ./sidecar/ingest -run '^$' -bench . -benchtime 5000x -cpuprofile cpu.out
//
// Their figures include the database server's time as seen by the
// client; claimbench (make bench) is the end-to-end measurement.

// groupCount is an ingest.Observer counting ingest groups and their
// deliveries.
type groupCount struct{ groups, calls atomic.Int64 }

func (*groupCount) Received(string, ingest.Status)           {}
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
func benchInbox(b *testing.B, pool *pgxpool.Pool, target string, dispatch bool, obs *groupCount, gc *claim.GroupConfig) (*ingest.Inbox, *ingest.Source) {
	b.Helper()
	cfg, err := ingest.Parse([]byte(`
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
	in, err := ingest.New(ingest.Options{Pool: pool, Ledger: ledger, Config: cfg, Logger: zerolog.Nop(), Dispatch: dispatch, Observer: obs, Group: gc})
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
func receiveAll(b *testing.B, in *ingest.Inbox, src *ingest.Source, prefix string, n int) {
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
	for _, workers := range []int{0, 2, 4} {
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
	b.ResetTimer()
	receiveAll(b, in, src, "r", b.N)
	b.StopTimer()
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
	pool := pgtest.NewPoolConfig(b, func(c *pgxpool.Config) { c.MaxConns = 16 })
	store, src := benchInbox(b, pool, target.URL, false, &groupCount{}, nil)
	receiveAll(b, store, src, "d", b.N)
	in, _ := benchInbox(b, pool, target.URL, true, &groupCount{}, nil)
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
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = in.Stop(ctx)
}
