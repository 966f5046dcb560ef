package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// The ingest section: a standard-webhooks source of a second claimd
// process, whose dispatcher forwards to an in-process target.
const (
	ingestSourceName = "bench-sw"
	// ingestBodyBytes is the size of every delivery body (a typical
	// webhook event is a few hundred bytes to a few KiB).
	ingestBodyBytes = 1024
	// ingestSecretEnv passes the signing secret to claimd, so the sources
	// file holds a ${VAR} reference instead of the secret.
	ingestSecretEnv = "CLAIMBENCH_WEBHOOK_SECRET"
	// ackGoal is the acknowledgement goal: p99 under 50 ms at moderate
	// load.
	ackGoal = 50 * time.Millisecond
	// moderateMaxConc is the largest concurrency the goal speaks of.
	moderateMaxConc = 16
)

// ingestCell is one measured ingest cell.
type ingestCell struct {
	workload string
	conc     int
	r        result
	// dispatchRate is events first delivered to the target per second
	// during the cell; backlog is events acknowledged but not yet
	// delivered to the target when the cell ended.
	dispatchRate float64
	backlog      int64
}

// target is the dispatch target: it answers 200 to every POST and counts
// the posts and the distinct inbox records (X-Inbox-Id) they carried.
type target struct {
	srv      *httptest.Server
	posts    atomic.Int64
	distinct atomic.Int64
	seen     sync.Map
}

func newTarget() *target {
	t := &target{}
	t.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		t.posts.Add(1)
		if _, dup := t.seen.LoadOrStore(r.Header.Get(inbox.HeaderInboxID), struct{}{}); !dup {
			t.distinct.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	return t
}

// ingestBench holds the ingest section's state.
type ingestBench struct {
	b      *bench
	sc     *sidecar
	target *target
	secret string
	url    string
	// accepted counts deliveries answered "accepted" (stored and queued).
	accepted atomic.Int64
}

// dispatchSample is the dispatcher's progress at one instant: events
// acknowledged "accepted" and events first delivered to the target so
// far, and whether an ingest cell was running.
type dispatchSample struct {
	at                 time.Time
	accepted, received int64
	load               bool
}

// sampleEvery is the period of the dispatch progress samples.
const sampleEvery = 100 * time.Millisecond

// drainWait bounds the wait for the backlog after the last cell.
const drainWait = 60 * time.Second

// sampler records the dispatcher's progress every sampleEvery.
type sampler struct {
	mu      sync.Mutex
	samples []dispatchSample
	load    atomic.Bool
}

func (ib *ingestBench) sample(sp *sampler) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.samples = append(sp.samples, dispatchSample{at: time.Now(), accepted: ib.accepted.Load(),
		received: ib.target.distinct.Load(), load: sp.load.Load()})
}

// run samples until ctx ends.
func (ib *ingestBench) runSampler(ctx context.Context, sp *sampler) {
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		ib.sample(sp)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// steadyRate is the dispatcher's rate while it was saturated: events
// first delivered per second over the sample intervals that began and
// ended with at least saturation events acknowledged but not yet
// delivered (the forward concurrency: every dispatch worker had work all
// along, so the rate is the dispatcher's own, not the rate events
// arrived at), those during an ingest cell (load) or after the last one
// apart. secs is the time those intervals cover.
type steadyRate struct {
	rate, secs float64
	events     int64
}

func steadyRates(samples []dispatchSample, saturation int64) (load, after steadyRate, peak int64) {
	saturation = max(saturation, 1)
	var d [2]time.Duration
	var n [2]int64
	for i := 1; i < len(samples); i++ {
		a, b := samples[i-1], samples[i]
		peak = max(peak, a.accepted-a.received)
		if a.accepted-a.received < saturation || b.accepted-b.received < saturation {
			continue
		}
		k := 1
		if a.load {
			k = 0
		}
		d[k] += b.at.Sub(a.at)
		n[k] += b.received - a.received
	}
	mk := func(k int) steadyRate {
		if d[k] <= 0 {
			return steadyRate{}
		}
		return steadyRate{rate: float64(n[k]) / d[k].Seconds(), secs: d[k].Seconds(), events: n[k]}
	}
	return mk(0), mk(1), peak
}

// eventBody returns the delivery body of event id: a JSON object of
// exactly size bytes (when size allows) with a top-level "type", the same
// bytes for the same id, so a redelivery is a duplicate and not a conflict.
func eventBody(id string, size int) []byte {
	b := []byte(`{"type":"bench.event.created","id":"` + id + `","data":{"pad":"`)
	const tail = `"}}`
	for i := 0; len(b)+len(tail) < size; i++ {
		b = append(b, "abcdefghijklmnopqrstuvwxyz"[i%26])
	}
	return append(b, tail...)
}

// dupEventID is the webhook-id of the i-th stored event of the duplicate
// workload.
func dupEventID(i int) string { return fmt.Sprintf("msg_bench_dup_%06d", i) }

// newSecret returns a whsec_ secret of 32 random bytes.
func newSecret() string {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return verify.StandardWebhooksSecretPrefix + base64.StdEncoding.EncodeToString(k)
}

// sourcesFile is the YAML sources file of the ingest sidecar; forward
// concurrency 0 leaves the source's default.
func sourcesFile(targetURL string, forwardConc int) string {
	conc := ""
	if forwardConc > 0 {
		conc = "      concurrency: " + strconv.Itoa(forwardConc) + "\n"
	}
	return "sources:\n" +
		"  " + ingestSourceName + ":\n" +
		"    tenant: " + benchTenant + "\n" +
		"    provider: " + string(verify.TypeStandardWebhooks) + "\n" +
		"    secrets: [\"${" + ingestSecretEnv + "}\"]\n" +
		"    forward:\n" +
		"      require_claim: false\n" + // the bench target only counts
		"      url: " + targetURL + "/hook\n" + conc
}

// runIngest starts claimd with the standard-webhooks source and measures
// POST /ingest/{source} at each -ingest-concurrency, fresh events and
// redeliveries, then reports the dispatcher's progress.
func (b *bench) runIngest(ctx context.Context, out io.Writer, bin, dbURL string) error {
	ib := &ingestBench{b: b, target: newTarget(), secret: newSecret()}
	defer ib.target.srv.Close()
	path := filepath.Join(b.dir, "sources.yaml")
	if err := os.WriteFile(path, []byte(sourcesFile(ib.target.srv.URL, b.s.forwardConc)), 0o600); err != nil {
		return err
	}
	sc, err := startClaimd(ctx, bin, b.dir, dbURL,
		"CLAIMD_SOURCES_FILE="+path, "CLAIMD_DISPATCH=true", ingestSecretEnv+"="+ib.secret)
	if err != nil {
		return fmt.Errorf("start claimd with the ingest source: %w", err)
	}
	defer sc.stop()
	ib.sc, ib.url = sc, sc.url+"/ingest/"+ingestSourceName

	fwd := fmt.Sprintf("%d, the default", sources.DefaultConcurrency)
	if b.s.forwardConc > 0 {
		fwd = strconv.Itoa(b.s.forwardConc)
	}
	fmt.Fprintf(out, "\ningest:      POST /ingest/%s (standard-webhooks, v1 HMAC-SHA256 signed by the client before the\n"+
		"             timer starts), %d-byte JSON bodies; a new claimd process with a sources file, dispatch on\n"+
		"             (forward concurrency %s) to an in-process target answering 200\n",
		ingestSourceName, ingestBodyBytes, fwd)

	// The duplicate workload redelivers the events stored here (16
	// clients; this also warms the sidecar up).
	if err := ib.store(ctx, b.s.ingestDups); err != nil {
		return fmt.Errorf("store the events to redeliver: %w", err)
	}
	sectionStart, dispatched0 := time.Now(), ib.target.distinct.Load()
	sp := &sampler{}
	sctx, stopSampler := context.WithCancel(ctx)
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		ib.runSampler(sctx, sp)
	}()
	defer func() {
		stopSampler()
		<-samplerDone
	}()

	fmt.Fprintf(out, "\n%-11s %5s | %10s %8s %8s %8s %8s %4s | %10s %8s\n",
		"ingest", "conc", "deliv/s", "p50 ms", "p95 ms", "p99 ms", "reqs", "err", "dispatch/s", "backlog")
	var cells []ingestCell
	var notes []string
	for _, w := range []string{"fresh", "duplicate"} {
		for _, c := range b.s.ingestConc {
			if err := ctx.Err(); err != nil {
				return err
			}
			d0, t0 := ib.target.distinct.Load(), time.Now()
			sp.load.Store(true)
			r := ib.cell(ctx, w, c, b.s.duration)
			sp.load.Store(false)
			d1, el := ib.target.distinct.Load(), time.Since(t0)
			cell := ingestCell{workload: w, conc: c, r: r,
				dispatchRate: float64(d1-d0) / el.Seconds(), backlog: max(0, ib.accepted.Load()-d1)}
			cells = append(cells, cell)
			fmt.Fprintf(out, "%-11s %5d | %10.0f %8.2f %8.2f %8.2f %8d %4d | %10.0f %8d\n",
				w, c, r.throughput, ms(r.pct(0.50)), ms(r.pct(0.95)), ms(r.pct(0.99)), r.requests, r.errors,
				cell.dispatchRate, cell.backlog)
			if r.firstErr != "" {
				notes = append(notes, fmt.Sprintf("ingest %s c=%d: first error: %s", w, c, r.firstErr))
			}
		}
	}
	sectionRate := float64(ib.target.distinct.Load()-dispatched0) / time.Since(sectionStart).Seconds()
	cellsEnd := time.Now()
	backlogEnd := max(0, ib.accepted.Load()-ib.target.distinct.Load())
	drained := ib.waitDrain(ctx, drainWait)
	drainTime := time.Since(cellsEnd)
	stopSampler()
	<-samplerDone
	ib.sample(sp)

	fmt.Fprintf(out, "\ndeliv/s counts deliveries acknowledged 2xx (fresh: \"accepted\", duplicate: \"duplicate\", a\n"+
		"redelivery of one of %d stored events); latency is request sent to 2xx read (the acknowledgement).\n"+
		"dispatch/s: events first delivered to the target during the cell; backlog: acknowledged, not yet\n"+
		"delivered when the cell ended. %s per cell; figures only.\n", b.s.ingestDups, b.s.duration)
	for _, n := range notes {
		fmt.Fprintln(out, n)
	}
	if err := ib.reportDispatch(ctx, out, sectionRate); err != nil {
		fmt.Fprintf(out, "dispatch:    cannot read the inbox: %v\n", err)
	}
	sp.mu.Lock()
	saturation := int64(sources.DefaultConcurrency)
	if b.s.forwardConc > 0 {
		saturation = int64(b.s.forwardConc)
	}
	load, after, peak := steadyRates(sp.samples, saturation)
	sp.mu.Unlock()
	fmt.Fprint(out, steadyLine(load, after, peak, saturation, backlogEnd, drained, drainTime, max(0, ib.accepted.Load()-ib.target.distinct.Load())))
	fmt.Fprintln(out, goalLine(cells))
	return nil
}

// steadyLine reports the dispatcher's steady-state rate and whether the
// backlog was drained by the end of the run.
func steadyLine(load, after steadyRate, peak, saturation, backlogEnd int64, drained bool, drainTime time.Duration, left int64) string {
	rate := func(r steadyRate) string {
		if r.secs == 0 {
			return "never saturated"
		}
		return fmt.Sprintf("%.0f events/s (%d events in %.1f s)", r.rate, r.events, r.secs)
	}
	all := steadyRate{events: load.events + after.events, secs: load.secs + after.secs}
	if all.secs > 0 {
		all.rate = float64(all.events) / all.secs
	}
	line := fmt.Sprintf("dispatch:    steady state (sampled every %s, intervals with a backlog of at least %d, the forward\n"+
		"             concurrency, at both ends): %s; peak backlog %d\n",
		sampleEvery, saturation, rate(all), peak)
	if load.secs > 0 && after.secs > 0 {
		line += fmt.Sprintf("             of which during the cells %s, after them (dispatcher alone) %s\n", rate(load), rate(after))
	}
	switch {
	case backlogEnd == 0:
		line += "             backlog: none when the last cell ended\n"
	case drained:
		line += fmt.Sprintf("             backlog: %d when the last cell ended, drained %.1f s later\n", backlogEnd, drainTime.Seconds())
	default:
		line += fmt.Sprintf("             backlog: %d when the last cell ended, NOT drained: %d still undelivered %.0f s later\n",
			backlogEnd, left, drainTime.Seconds())
	}
	return line
}

// waitDrain waits until every accepted event reached the target, at most
// d; it reports whether they all did.
func (ib *ingestBench) waitDrain(ctx context.Context, d time.Duration) bool {
	deadline := time.Now().Add(d)
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for ib.target.distinct.Load() < ib.accepted.Load() {
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

func maxOf(xs []int) int {
	m := 1
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// reportDispatch prints, as of the end of the last cell, the inbox's
// dispatch states and the target's counts; rate is the target's distinct
// events per second over the cells.
func (ib *ingestBench) reportDispatch(ctx context.Context, out io.Writer, rate float64) error {
	conn, err := pgx.Connect(ctx, ib.b.dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	states, err := queries.DispatchStates(ctx, conn, ingestSourceName)
	if err != nil {
		return err
	}
	var total, pending int64
	var parts []string
	for _, s := range states {
		total += s.Count
		if s.DispatchState == "pending" {
			pending = s.Count
		}
		parts = append(parts, fmt.Sprintf("%s %d", s.DispatchState, s.Count))
	}
	fmt.Fprintf(out, "dispatch:    by the end of the run: inbox %d events (%s);\n"+
		"             target received %d POSTs for %d distinct events; %.0f events/s over the cells",
		total, strings.Join(parts, ", "), ib.target.posts.Load(), ib.target.distinct.Load(), rate)
	if pending > 0 && rate > 0 {
		fmt.Fprintf(out, "\n             (the %d pending need about %.0f s more at that rate)", pending, float64(pending)/rate)
	}
	fmt.Fprintln(out)
	return nil
}

// goalLine states the DESIGN goal and whether this run's cells at
// moderate load (concurrency ≤ 16) met it. Informational only.
func goalLine(cells []ingestCell) string {
	var worst *ingestCell
	for i := range cells {
		c := &cells[i]
		if c.conc > moderateMaxConc || len(c.r.lat) == 0 {
			continue
		}
		if worst == nil || c.r.pct(0.99) > worst.r.pct(0.99) {
			worst = c
		}
	}
	head := fmt.Sprintf("DESIGN goal: p99 ack < %d ms at moderate load (concurrency ≤ %d): ", ackGoal.Milliseconds(), moderateMaxConc)
	if worst == nil {
		return head + "not measured in this run (no cell at concurrency ≤ 16 with acknowledged deliveries)"
	}
	p99 := worst.r.pct(0.99)
	verdict := "met in this run"
	if p99 >= ackGoal {
		verdict = "NOT met in this run"
	}
	return fmt.Sprintf("%s%s (worst p99 %.2f ms: %s c=%d); informational, not an exit status", head, verdict,
		ms(p99), worst.workload, worst.conc)
}

// store delivers events dupEventID(1..n) with 16 clients, each must be
// accepted.
func (ib *ingestBench) store(ctx context.Context, n int) error {
	ids := make(chan int)
	errc := make(chan error, 1)
	var wg sync.WaitGroup
	for range moderateMaxConc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ids {
				if _, err := ib.deliver(ctx, nil, dupEventID(i), "accepted"); err != nil {
					select {
					case errc <- err:
					default:
					}
				}
			}
		}()
	}
	for i := 1; i <= n; i++ {
		ids <- i
	}
	close(ids)
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// deliver signs and posts event id and checks that the answer is 200 with
// receipt status want; it returns the acknowledgement latency (signing
// excluded). wc, when not nil, sends it (the cells' clients); else
// net/http does (setup).
func (ib *ingestBench) deliver(ctx context.Context, wc *wireClient, id, want string) (time.Duration, error) {
	body := eventBody(id, ingestBodyBytes)
	ts := time.Now().Unix()
	sig, err := verifytest.StandardWebhooks(ib.secret, id, ts, body)
	if err != nil {
		return 0, err
	}
	if wc != nil {
		hdr := []byte(verify.StandardWebhookIDHeader + ": " + id + "\r\n" +
			verify.StandardWebhookTimestampHeader + ": " + strconv.FormatInt(ts, 10) + "\r\n" +
			verify.StandardWebhookSignatureHeader + ": " + sig + "\r\n")
		t0 := time.Now()
		status, out, err := wc.postWith(ctx, "/ingest/"+ingestSourceName, hdr, body)
		lat := time.Since(t0)
		if err != nil {
			return 0, err
		}
		return lat, ib.checkAnswer(status, out, want)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ib.url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(verify.StandardWebhookIDHeader, id)
	req.Header.Set(verify.StandardWebhookTimestampHeader, strconv.FormatInt(ts, 10))
	req.Header.Set(verify.StandardWebhookSignatureHeader, sig)
	t0 := time.Now()
	resp, err := ib.b.client.Do(req)
	if err != nil {
		return 0, err
	}
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	lat := time.Since(t0)
	if err != nil {
		return 0, err
	}
	return lat, ib.checkAnswer(resp.StatusCode, out, want)
}

// checkAnswer requires a 200 with receipt status want, and counts an
// accepted event.
func (ib *ingestBench) checkAnswer(status int, out []byte, want string) error {
	if status != http.StatusOK || !bytes.Contains(out, []byte(`"status":"`+want+`"`)) {
		return fmt.Errorf("HTTP %d: %.300s", status, out)
	}
	if want == "accepted" {
		ib.accepted.Add(1)
	}
	return nil
}

// cell runs conc clients for d: fresh delivers a new webhook-id every
// time, duplicate redelivers a random stored event.
func (ib *ingestBench) cell(ctx context.Context, workload string, conc int, d time.Duration) result {
	want := "accepted"
	if workload == "duplicate" {
		want = "duplicate"
	}
	results := make([]workerResult, conc)
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for i := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := mrand.New(mrand.NewPCG(mrand.Uint64(), mrand.Uint64()))
			wr := &results[i]
			wc, err := newWireClient(ib.sc.url, "")
			if err != nil {
				wr.errors, wr.firstErr = 1, err.Error()
				return
			}
			defer wc.close()
			for ctx.Err() == nil && time.Now().Before(deadline) {
				id := fmt.Sprintf("msg_%016x%016x", rng.Uint64(), rng.Uint64())
				if workload == "duplicate" {
					id = dupEventID(rng.IntN(ib.b.s.ingestDups) + 1)
				}
				lat, err := ib.deliver(ctx, wc, id, want)
				if err != nil {
					wr.errors++
					if wr.firstErr == "" {
						wr.firstErr = err.Error()
					}
					continue
				}
				wr.n++
				wr.lat = append(wr.lat, lat)
			}
		}()
	}
	wg.Wait()
	return merge(results, time.Since(start), 1)
}
