package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"time"
)

// result is one cell's figures.
type result struct {
	// throughput is claims (items) per second.
	throughput float64
	// requests is the number of requests (pgbench transactions) measured.
	requests int
	// errors counts failed requests or unexpected outcomes.
	errors   int
	firstErr string
	// lat holds every request's latency, sorted.
	lat []time.Duration
	// clientCPU is pgbench's user+sys time (pgbench cells only).
	clientCPU time.Duration
}

// pct returns the p-quantile (nearest rank) of the sorted latencies.
func (r result) pct(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	i := int(float64(len(r.lat))*p+0.999999) - 1
	return r.lat[max(0, min(i, len(r.lat)-1))]
}

// workload is one kind of claim traffic.
type workload struct {
	name string
	// source of the sidecar's claims; pgbenchSource of pgbench's.
	source, pgbenchSource string
	// items per request; keyMax bounds the random keys (1..keyMax).
	items  int
	keyMax int64
	// expect is the outcome every claim must have.
	expect string
}

type bench struct {
	s       settings
	sidecar *sidecar
	stmt    *statement
	dir     string
	dbURL   string
	client  *http.Client
}

// freshKeyMax makes accidental reuse of a "fresh" key negligible.
const freshKeyMax = 9_000_000_000_000_000

func (b *bench) run(ctx context.Context, out io.Writer) error {
	maxConc := maxOf(b.s.concurrency)
	b.client = &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		// The ingest section's clients reuse this transport.
		MaxIdleConns:        max(maxConc, maxOf(b.s.ingestConc)) * 2,
		MaxIdleConnsPerHost: max(maxConc, maxOf(b.s.ingestConc)) * 2, DisableCompression: true,
	}}
	workloads := []workload{
		{name: "fresh", source: "bench-fresh", pgbenchSource: "pgbench-fresh", items: 1, keyMax: freshKeyMax, expect: "won"},
		{name: "duplicate", source: "bench-dup", pgbenchSource: "bench-dup", items: 1, keyMax: int64(b.s.dupKeys), expect: "duplicate"},
		{name: fmt.Sprintf("batch x%d", b.s.batch), source: "bench-batch", pgbenchSource: "pgbench-batch", items: b.s.batch, keyMax: freshKeyMax, expect: "won"},
	}
	if err := b.prepareDuplicates(ctx, workloads[1]); err != nil {
		return fmt.Errorf("prepare duplicate keys: %w", err)
	}
	// Warm-up (not reported): opens the sidecar's pool connections and
	// prepares its statements.
	b.httpCell(ctx, workloads[0], min(16, maxConc), time.Second)
	meter := b.newCPUMeter(ctx)
	var cpuRows []cpuRow

	fmt.Fprintf(out, "\n%-11s %5s | %10s %8s %8s %8s %4s | %10s %8s %8s %8s %4s | %6s\n",
		"", "", "sidecar", "", "", "", "", "pgbench", "", "", "", "", "")
	fmt.Fprintf(out, "%-11s %5s | %10s %8s %8s %8s %4s | %10s %8s %8s %8s %4s | %6s\n",
		"workload", "conc", "claims/s", "p50 ms", "p99 ms", "reqs", "err", "claims/s", "p50 ms", "p99 ms", "txns", "err", "ratio")
	var notes []string
	var groupRows []string
	for _, w := range workloads {
		for _, c := range b.s.concurrency {
			if err := ctx.Err(); err != nil {
				return err
			}
			g0, gerr := b.sidecar.scrapeGroups(ctx, "claim")
			mark := meter.start()
			sr := b.httpCell(ctx, w, c, b.s.duration)
			row := cpuRow{workload: w.name, conc: c, sidecar: mark.end(), sidecarClaims: sr.requests * w.items}
			g1, gerr1 := b.sidecar.scrapeGroups(ctx, "claim")
			if gerr = errors.Join(gerr, gerr1); gerr != nil {
				groupRows = append(groupRows, fmt.Sprintf("%-11s %5d | %v", w.name, c, gerr))
			} else {
				groupRows = append(groupRows, fmt.Sprintf("%-11s %5d | %s", w.name, c, g1.sub(g0)))
			}
			pgb := fmt.Sprintf("%42s", "n/a (pgbench failed, see below)")
			ratio := "-"
			mark = meter.start()
			pr, err := b.pgbenchCell(ctx, w, c)
			row.pgbench = mark.end()
			switch {
			case ctx.Err() != nil:
				return ctx.Err()
			case err != nil:
				notes = append(notes, fmt.Sprintf("%s c=%d: %v", w.name, c, err))
			default:
				pgb = fmt.Sprintf("%10.0f %8.2f %8.2f %8d %4d", pr.throughput, ms(pr.pct(0.50)), ms(pr.pct(0.99)), pr.requests, pr.errors)
				if pr.throughput > 0 {
					ratio = fmt.Sprintf("%.2f", sr.throughput/pr.throughput)
				}
				row.pgbenchClaims, row.pgbenchClient = pr.requests*w.items, &pr.clientCPU
			}
			cpuRows = append(cpuRows, row)
			fmt.Fprintf(out, "%-11s %5d | %10.0f %8.2f %8.2f %8d %4d | %s | %6s\n",
				w.name, c, sr.throughput, ms(sr.pct(0.50)), ms(sr.pct(0.99)), sr.requests, sr.errors, pgb, ratio)
			if sr.firstErr != "" {
				notes = append(notes, fmt.Sprintf("%s c=%d: first sidecar error: %s", w.name, c, sr.firstErr))
			}
		}
	}
	fmt.Fprintf(out, "\nclaims/s counts claims decided (batch: items, %d per request); latency is per HTTP request\n"+
		"(per pgbench transaction: one statement, or BEGIN + %d statements + COMMIT in one pipeline).\n"+
		"ratio = sidecar claims/s / pgbench claims/s. %s per cell; figures only, no pass/fail.\n",
		b.s.batch, b.s.batch, b.s.duration)
	for _, n := range notes {
		fmt.Fprintln(out, n)
	}
	meter.print(out, cpuRows)
	fmt.Fprintf(out, "\nGroup commit of claims (claimd_group_calls{kind=\"claim\"} from claimd's /metrics, per cell)\n")
	fmt.Fprintf(out, "%-11s %5s | %8s %8s %8s\n", "workload", "conc", "groups", "calls/gr", "of one")
	for _, r := range groupRows {
		fmt.Fprintln(out, r)
	}
	fmt.Fprintln(out, "Batch requests are one transaction each and never join a group. A group of one is a call that\n"+
		"found no group in flight (or, alone, behind a stalled one); the database's cost per claim falls with the group's size.")
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// claimBody appends one claim object for key to buf.
func claimBody(buf []byte, source string, key int64) []byte {
	buf = append(buf, `{"source":"`...)
	buf = append(buf, source...)
	buf = append(buf, `","event_id":"`...)
	buf = strconv.AppendInt(buf, key, 10)
	buf = append(buf, `","payload_hash":"`+benchPayloadHash+`"}`...)
	return buf
}

// httpCell runs conc clients for d and measures every request.
func (b *bench) httpCell(ctx context.Context, w workload, conc int, d time.Duration) result {
	path := "/v1/claims"
	if w.items > 1 {
		path = "/v1/claims/batch"
	}
	want := []byte(`"outcome":"` + w.expect + `"`)
	results := make([]workerResult, conc)
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for i := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
			wr := &results[i]
			wc, err := newWireClient(b.sidecar.url, b.sidecar.key)
			if err != nil {
				wr.errors, wr.firstErr = 1, err.Error()
				return
			}
			defer wc.close()
			var body []byte
			for ctx.Err() == nil && time.Now().Before(deadline) {
				body = body[:0]
				if w.items > 1 {
					body = append(body, `{"claims":[`...)
				}
				for j := range w.items {
					if j > 0 {
						body = append(body, ',')
					}
					body = claimBody(body, w.source, rng.Int64N(w.keyMax)+1)
				}
				if w.items > 1 {
					body = append(body, "]}"...)
				}
				t0 := time.Now()
				status, resp, err := wc.post(ctx, path, body)
				lat := time.Since(t0)
				switch {
				case err != nil:
					wr.errors++
					if wr.firstErr == "" {
						wr.firstErr = err.Error()
					}
					continue
				case status != http.StatusOK || bytes.Count(resp, want) != w.items:
					wr.errors++
					if wr.firstErr == "" {
						wr.firstErr = fmt.Sprintf("HTTP %d: %.300s", status, resp)
					}
					continue
				}
				wr.n++
				wr.lat = append(wr.lat, lat)
			}
		}()
	}
	wg.Wait()
	return merge(results, time.Since(start), w.items)
}

func (b *bench) post(ctx context.Context, path string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.sidecar.url+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+b.sidecar.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

// pgbenchCell runs pgbench for workload w with c clients.
func (b *bench) pgbenchCell(ctx context.Context, w workload, c int) (result, error) {
	script, defs, err := b.stmt.pgbenchScript(w.items, w.keyMax)
	if err != nil {
		return result{}, err
	}
	defs = append(defs, "src="+w.pgbenchSource, "tok=00000000-0000-4000-8000-000000000000")
	return pgbenchRun{dir: b.dir, dbURL: b.dbURL, label: fmt.Sprintf("%s-%d", w.pgbenchSource, c),
		script: script, defs: defs, clients: c, duration: b.s.duration, items: w.items}.run(ctx)
}

// prepareDuplicates claims and completes keys 1..dupKeys of w's source
// through the API, so the duplicate workload (sidecar and pgbench) meets
// completed records only.
func (b *bench) prepareDuplicates(ctx context.Context, w workload) error {
	type won struct{ id, token string }
	var todo []won
	const chunk = 500
	for lo := int64(1); lo <= w.keyMax; lo += chunk {
		body := []byte(`{"claims":[`)
		for k := lo; k < lo+chunk && k <= w.keyMax; k++ {
			if k > lo {
				body = append(body, ',')
			}
			body = claimBody(body, w.source, k)
		}
		body = append(body, "]}"...)
		status, resp, err := b.post(ctx, "/v1/claims/batch", body)
		if err != nil {
			return err
		}
		if status != http.StatusOK {
			return fmt.Errorf("batch claim: HTTP %d: %.300s", status, resp)
		}
		var br struct {
			Results []struct {
				Outcome    string `json:"outcome"`
				ClaimID    string `json:"claim_id"`
				ClaimToken string `json:"claim_token"`
			} `json:"results"`
		}
		if err := json.Unmarshal(resp, &br); err != nil {
			return err
		}
		for _, r := range br.Results {
			if r.Outcome != "won" {
				return fmt.Errorf("setup claim: outcome %q", r.Outcome)
			}
			todo = append(todo, won{r.ClaimID, r.ClaimToken})
		}
	}
	jobs := make(chan won)
	errc := make(chan error, 1)
	var wg sync.WaitGroup
	for range max(4, runtime.NumCPU()*4) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				status, resp, err := b.post(ctx, "/v1/claims/"+j.id+"/complete",
					[]byte(`{"claim_token":"`+j.token+`","result_ref":"bench"}`))
				if err == nil && status != http.StatusOK {
					err = fmt.Errorf("complete: HTTP %d: %.300s", status, resp)
				}
				if err != nil {
					select {
					case errc <- err:
					default:
					}
				}
			}
		}()
	}
	for _, j := range todo {
		jobs <- j
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// workerResult is what one client of a cell measured.
type workerResult struct {
	n, errors int
	firstErr  string
	lat       []time.Duration
}

// merge folds the clients of a cell into its result; itemsPerRequest turns
// requests into claims (batch cells).
func merge(results []workerResult, elapsed time.Duration, itemsPerRequest int) result {
	var r result
	for _, wr := range results {
		r.requests += wr.n
		r.errors += wr.errors
		if r.firstErr == "" {
			r.firstErr = wr.firstErr
		}
		r.lat = append(r.lat, wr.lat...)
	}
	sort.Slice(r.lat, func(i, j int) bool { return r.lat[i] < r.lat[j] })
	r.throughput = float64(r.requests*itemsPerRequest) / elapsed.Seconds()
	return r
}
