package main

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/benchdoc"
	"github.com/idempotent-claim/idempotent-claim/sidecar/strictjson"
)

// The hash section: the payload hash as the sidecar computes it, called in
// this process on number-heavy documents (sidecar/internal/benchdoc, the
// documents of strictjson's benchmarks): claim.PayloadHash, ingest's hash
// of every JSON delivery (with the source's volatile_fields), and the
// claims API's decode of a request that carries the payload followed by
// claim.PayloadHashAt, which hashes the payload from that decode. It needs
// neither claimd nor the database.

// hashCallBudget is how long each line of the hash section calls for.
const hashCallBudget = 500 * time.Millisecond

// hashConcurrent is the number of calls at once of the last line, as in
// the attack report (8 concurrent 4 MB documents).
const hashConcurrent = 8

type hashCase struct {
	name     string
	doc      []byte
	volatile []strictjson.Pointer
	request  bool // doc is a claim request: decode it, then hash its payload
}

// claimRequest is the part of the claims API's request body (httpapi's
// claimBody) a payload request uses.
type claimRequest struct {
	Source  string         `json:"source"`
	EventID string         `json:"event_id"`
	Payload jsontext.Value `json:"payload"`
}

var payloadAt, _ = strictjson.ParsePointer("/payload")

// hashOnce computes what the sidecar does for c once.
func hashOnce(c hashCase) error {
	if !c.request {
		_, err := claim.PayloadHash(c.doc, c.volatile...)
		return err
	}
	var r claimRequest
	doc, err := strictjson.UnmarshalDoc(c.doc, &r, strictjson.RejectUnknown())
	if err != nil {
		return err
	}
	defer doc.Release()
	if _, ok := claim.PayloadHashAt(doc, payloadAt, c.volatile...); !ok {
		return errors.New("no payload")
	}
	return nil
}

// runHash prints the hash section, each line calling for about budget
// (and at least 3 times; the last line at least 2 rounds).
func runHash(out io.Writer, budget time.Duration) error {
	var volatile []strictjson.Pointer
	for _, s := range []string{"/0/rate", "/5000/v/1", "/8000/name"} {
		p, err := strictjson.ParsePointer(s)
		if err != nil {
			return err
		}
		volatile = append(volatile, p)
	}
	records, floats := benchdoc.NumberHeavy(1<<20), benchdoc.Floats(4<<20)
	request := append(append([]byte(`{"source":"bench","event_id":"evt_1","payload":`), records...), '}')
	cases := []hashCase{
		{name: "records 1 MiB", doc: records},
		{name: "  3 volatile", doc: records, volatile: volatile},
		{name: "  as a claim", doc: request, request: true},
		{name: "floats 4 MiB", doc: floats},
	}
	fmt.Fprintf(out, "\nhash:        the payload hash: claim.PayloadHash (ingest, every JSON delivery; strictjson.HashWithout)\n"+
		"             and, \"as a claim\", the claims API's strict decode of a request holding the payload, then\n"+
		"             claim.PayloadHashAt; in this process, GOMAXPROCS %d, load avg %s\n"+
		"             records: objects of 9 numbers and a string; 3 volatile: three fields left out;\n"+
		"             floats: one array of %d numbers of many digits\n",
		runtime.GOMAXPROCS(0), loadAvg(), floatCount(floats))
	fmt.Fprintf(out, "\n%-14s %9s | %9s %9s %7s | %9s %9s\n", "document", "bytes", "MB/s best", "median", "calls", "KB/call", "allocs")
	for _, c := range cases {
		if err := hashOnce(c); err != nil { // and warm up
			return fmt.Errorf("hash %s: %w", c.name, err)
		}
		times, bytes, allocs := timeCalls(budget, func() { _ = hashOnce(c) })
		fmt.Fprintf(out, "%-14s %9d | %9.1f %9.1f %7d | %9.1f %9.1f\n", c.name, len(c.doc),
			mbps(len(c.doc), times[0]), mbps(len(c.doc), times[len(times)/2]), len(times),
			bytes/1024, allocs)
	}

	// The attack's shape: several large documents at once.
	var rounds []time.Duration
	var calls []time.Duration
	var peak uint64
	for start := time.Now(); len(rounds) < 2 || time.Since(start) < 2*budget; {
		stop := make(chan struct{})
		sampled := make(chan uint64)
		go sampleHeap(stop, sampled)
		var mu sync.Mutex
		var wg sync.WaitGroup
		t0 := time.Now()
		for range hashConcurrent {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c0 := time.Now()
				_, _ = claim.PayloadHash(floats)
				d := time.Since(c0)
				mu.Lock()
				calls = append(calls, d)
				mu.Unlock()
			}()
		}
		wg.Wait()
		rounds = append(rounds, time.Since(t0))
		close(stop)
		peak = max(peak, <-sampled)
	}
	slices.Sort(rounds)
	slices.Sort(calls)
	fmt.Fprintf(out, "%-14s %9d | %9.1f %9.1f %7d | each call %s median, %s worst; Go heap peak %.0f MB\n",
		fmt.Sprintf("  %d at once", hashConcurrent), len(floats),
		mbps(hashConcurrent*len(floats), rounds[0]), mbps(hashConcurrent*len(floats), rounds[len(rounds)/2]), len(calls),
		calls[len(calls)/2].Round(time.Millisecond), calls[len(calls)-1].Round(time.Millisecond), float64(peak)/1e6)
	fmt.Fprintf(out, "\nMB/s is document bytes over the wall time of one call (at once: of the %d calls together), best\n"+
		"and median of the calls made in %s; KB and allocations per call from the Go runtime's counters.\n"+
		"Figures only.\n", hashConcurrent, budget)
	return nil
}

// timeCalls calls f for budget (at least 3 times) and returns the sorted
// wall time of each call and the bytes and allocations per call.
func timeCalls(budget time.Duration, f func()) (times []time.Duration, bytesPerCall, allocsPerCall float64) {
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	for start := time.Now(); len(times) < 3 || time.Since(start) < budget; {
		t0 := time.Now()
		f()
		times = append(times, time.Since(t0))
	}
	runtime.ReadMemStats(&m1)
	slices.Sort(times)
	n := float64(len(times))
	return times, float64(m1.TotalAlloc-m0.TotalAlloc) / n, float64(m1.Mallocs-m0.Mallocs) / n
}

// sampleHeap sends the largest Go heap (bytes in live and unswept
// objects) seen every millisecond until stop is closed.
func sampleHeap(stop <-chan struct{}, peak chan<- uint64) {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var most uint64
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		metrics.Read(s)
		if s[0].Value.Kind() == metrics.KindUint64 {
			most = max(most, s[0].Value.Uint64())
		}
		select {
		case <-stop:
			peak <- most
			return
		case <-t.C:
		}
	}
}

func mbps(n int, d time.Duration) float64 { return float64(n) / d.Seconds() / 1e6 }

// floatCount is the number of elements of the float document (one flat
// array).
func floatCount(doc []byte) int {
	n := 1
	for _, c := range doc {
		if c == ',' {
			n++
		}
	}
	return n
}
