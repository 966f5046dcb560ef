package httpapi

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
)

// ingestBudget bounds the /ingest request bodies held at once. Ingest
// bodies arrive before anything can be authenticated (a signature covers
// the whole body), so an authentic delivery and an attacker's are the same
// until their last byte. The budget therefore bounds what each sender can
// hold, and for how long:
//
//   - A body holds the bytes that have arrived, not the length it
//     declares: a sender that declares 1 MiB and sends 16 KiB holds 16 KiB.
//   - After a grace (IngestBodyGrace) a body must keep arriving at the
//     minimum data rate (IngestMinBodyRate bytes per second, counted from
//     its start): a body that falls behind is answered 408 request_timeout,
//     its connection closed and its bytes released. So a body holds b bytes
//     for at most grace + b/rate, and at most the read timeout counted
//     from when its headers were read.
//   - One client address (IPv6: its /64) holds at most its share of the
//     budget (IngestAddressShare percent), one source at most its share
//     (IngestSourceShare percent). The oldest body of an address or a
//     source still receiving is bound only by the whole budget, so that
//     the largest body fits and honest deliveries that together pass a
//     share end one after the other (the younger wait) instead of
//     blocking each other.
//   - A body that finds no room waits for it, and meanwhile preempts only
//     a body that is stalling or hopeless: one past its grace, still
//     receiving and not itself waiting for room, whose recent rate (bytes
//     over its last one to two windows, a window being the grace but at
//     least a second) is below preemptRateFactor times the minimum rate,
//     or at which the rest of its declared length cannot arrive before
//     its read timeout (a chunked body: the rate alone). Within the bound
//     that is full (all bodies, its address's or its source's), the one
//     of the lowest recent rate is answered 408 and closed. So a body
//     arriving at preemptRateFactor times the minimum rate or more, on
//     course to end within its read timeout, is never preempted; what an
//     attacker holds it must keep sending at that rate, and it releases
//     it within the read timeout.
//   - A body that still finds no room within the request timeout (every
//     holder is younger than its grace, arriving fast enough, waiting, or
//     already read and being answered) is answered 503 unavailable with
//     Retry-After.
//
// A body read to its end is no longer preempted: it is verified, stored
// and answered within the request timeout, and its bytes are released when
// the answer is written.
type ingestBudget struct {
	size        int64
	addrShare   int64
	sourceShare int64
	grace       time.Duration
	rate        int64

	mu       sync.Mutex
	held     int64
	byAddr   map[string]int64
	bySource map[string]int64
	holds    map[*bodyHold]struct{}
	// changed is closed (and replaced) whenever bytes are released.
	changed chan struct{}

	// heldNow mirrors held for the metrics; preempted and slow count the
	// bodies cut by preemption and by the minimum rate.
	heldNow         atomic.Int64
	preempted, slow atomic.Int64
}

func newIngestBudget(size int64, addrPercent, sourcePercent int, grace time.Duration, rate int64) *ingestBudget {
	return &ingestBudget{size: size, addrShare: size * int64(addrPercent) / 100,
		sourceShare: size * int64(sourcePercent) / 100, grace: grace, rate: rate,
		byAddr: map[string]int64{}, bySource: map[string]int64{}, holds: map[*bodyHold]struct{}{},
		changed: make(chan struct{})}
}

// preemptRateFactor: a body whose recent rate is below this multiple of
// the minimum rate may be preempted; at or above it (and on course to end
// within its read timeout) it never is.
const preemptRateFactor = 4

// bodyHold is one ingest body's share of the budget.
type bodyHold struct {
	addr, source string
	start        time.Time
	// want is the body's declared length, -1 for a chunked body; hard is
	// its read deadline.
	want int64
	hard time.Time
	// got is what arrived, last when; markAt/markGot and prevAt/prevGot
	// are the starts of the current and the previous rate window (guarded
	// by the budget's mu). waiting: the body is waiting for room.
	got              int64
	last             time.Time
	markAt, prevAt   time.Time
	markGot, prevGot int64
	waiting          bool
	// conn is the body's connection: preemption ends its read by setting
	// a read deadline in the past.
	conn net.Conn
	// held is what the body holds (guarded by the budget's mu); done: it
	// arrived whole and is no longer preempted.
	held int64
	done bool
	// cancelled: the body was preempted.
	cancelled atomic.Bool
}

var (
	errIngestFull = apperr.New(apperr.Unavailable, "too many request bodies are being received at once; retry")
	errPreempted  = &apperr.Error{Code: apperr.RequestTimeout, Message: "the request body did not arrive in time"}
)

func (b *ingestBudget) open(h *bodyHold) {
	b.mu.Lock()
	h.last, h.markAt, h.prevAt = h.start, h.start, h.start
	b.holds[h] = struct{}{}
	b.mu.Unlock()
}

// grow adds n arrived bytes to h, waiting for room within ctx and
// preempting a slower body when there is none. Errors: errPreempted when h
// itself was preempted, errIngestFull when ctx ends first.
func (b *ingestBudget) grow(ctx context.Context, h *bodyHold, n int64) error {
	b.mu.Lock()
	b.arrived(h, n, time.Now())
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		h.waiting = false
		b.mu.Unlock()
	}()
	for {
		b.mu.Lock()
		if h.cancelled.Load() {
			b.mu.Unlock()
			return errPreempted
		}
		n = min(n, b.size-h.held) // one body never holds more than the whole budget
		scope := b.blocked(h, n)
		if scope == scopeNone {
			h.held += n
			b.held += n
			b.byAddr[h.addr] += n
			b.bySource[h.source] += n
			b.heldNow.Store(b.held)
			b.mu.Unlock()
			return nil
		}
		h.waiting = true
		victim := b.victim(h, scope, time.Now())
		changed := b.changed
		b.mu.Unlock()
		if victim != nil {
			b.preempted.Add(1)
			if victim.conn != nil {
				_ = victim.conn.SetReadDeadline(time.Unix(1, 0))
			}
		}
		// A holder may become a victim without any release (it stalls):
		// look again after a while.
		recheck := time.NewTimer(b.window() / 4)
		select {
		case <-changed:
		case <-recheck.C:
		case <-ctx.Done():
			recheck.Stop()
			return errIngestFull
		}
		recheck.Stop()
	}
}

// window is the span over which a body's recent rate is measured: the
// grace, at least a second.
func (b *ingestBudget) window() time.Duration { return max(b.grace, time.Second) }

// arrived records n bytes of h arriving at now (b.mu held).
func (b *ingestBudget) arrived(h *bodyHold, n int64, now time.Time) {
	h.got += n
	h.last = now
	if now.Sub(h.markAt) >= b.window() {
		h.prevAt, h.prevGot = h.markAt, h.markGot
		h.markAt, h.markGot = now, h.got
	}
}

// recentRate is h's rate in bytes per second over its last one to two
// windows; 0 when nothing arrived within the last window (b.mu held).
func (b *ingestBudget) recentRate(h *bodyHold, now time.Time) float64 {
	if now.Sub(h.last) >= b.window() {
		return 0
	}
	span := now.Sub(h.prevAt).Seconds()
	if span <= 0 {
		return 0
	}
	return float64(h.got-h.prevGot) / span
}

type holdScope int

const (
	scopeNone holdScope = iota
	scopeAll
	scopeAddr
	scopeSource
)

// blocked tells which bound n more bytes of h would pass (b.mu held). The
// shares bound a body only while others of its address or source hold
// bytes too, and never the oldest body of its address or source still
// receiving.
func (b *ingestBudget) blocked(h *bodyHold, n int64) holdScope {
	switch {
	case b.held+n > b.size:
		return scopeAll
	case b.byAddr[h.addr]+n > b.addrShare && b.byAddr[h.addr] > h.held && !b.oldest(h, scopeAddr):
		return scopeAddr
	case b.bySource[h.source]+n > b.sourceShare && b.bySource[h.source] > h.held && !b.oldest(h, scopeSource):
		return scopeSource
	}
	return scopeNone
}

// oldest tells whether h started first among the bodies of its address
// or source (scope) still receiving (b.mu held).
func (b *ingestBudget) oldest(h *bodyHold, scope holdScope) bool {
	for o := range b.holds {
		if o == h || o.done || o.cancelled.Load() || scope == scopeAddr && o.addr != h.addr || scope == scopeSource && o.source != h.source {
			continue
		}
		if o.start.Before(h.start) {
			return false
		}
	}
	return true
}

// victim picks, and marks cancelled, the body to preempt for h within
// scope: one still receiving, not waiting for room, holding bytes, past
// its grace and stalling or hopeless (see ingestBudget), of the lowest
// recent rate; nil when there is none, or when a body of the scope was
// cut already and has not yet released its bytes (b.mu held).
func (b *ingestBudget) victim(h *bodyHold, scope holdScope, now time.Time) *bodyHold {
	var best *bodyHold
	var bestRate float64
	for o := range b.holds {
		if o == h || scope == scopeAddr && o.addr != h.addr || scope == scopeSource && o.source != h.source {
			continue
		}
		if o.cancelled.Load() && o.held > 0 {
			return nil // its bytes are on their way back
		}
		if o.done || o.waiting || o.held == 0 || o.cancelled.Load() || now.Sub(o.start) < b.grace {
			continue
		}
		rate := b.recentRate(o, now)
		if rate >= preemptRateFactor*float64(b.rate) && (o.want < 0 || float64(o.want-o.got) <= rate*o.hard.Sub(now).Seconds()) {
			continue // arriving fast enough to end in time
		}
		if best == nil || rate < bestRate {
			best, bestRate = o, rate
		}
	}
	if best != nil {
		best.cancelled.Store(true)
	}
	return best
}

// finish marks h as read to its end: it is no longer preempted.
func (b *ingestBudget) finish(h *bodyHold) {
	b.mu.Lock()
	h.done = true
	b.mu.Unlock()
}

// release returns what h holds.
func (b *ingestBudget) release(h *bodyHold) {
	b.mu.Lock()
	delete(b.holds, h)
	b.held -= h.held
	b.heldNow.Store(b.held)
	if b.byAddr[h.addr] -= h.held; b.byAddr[h.addr] <= 0 {
		delete(b.byAddr, h.addr)
	}
	if b.bySource[h.source] -= h.held; b.bySource[h.source] <= 0 {
		delete(b.bySource, h.source)
	}
	h.held = 0
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}

// ingestChunk is the most one read of an ingest body takes before its bytes
// are added to the budget.
const ingestChunk = 16 << 10

// ingestReader reads an ingest body for readBody: each read first sets the
// connection's read deadline to when the body falls below the minimum rate
// (never past hard: the read timeout from when the headers were read),
// and what arrives is added to the budget.
type ingestReader struct {
	r    io.Reader
	b    *ingestBudget
	h    *bodyHold
	hard time.Time
	// wait bounds each wait for room (the request timeout).
	wait time.Duration
	base context.Context
	got  int64
	// slow: the last read ended at the rate deadline (not the hard one).
	slow bool
}

func (r *ingestReader) Read(p []byte) (int, error) {
	if len(p) > ingestChunk {
		p = p[:ingestChunk]
	}
	deadline := r.h.start.Add(r.b.grace + time.Duration(float64(r.got)/float64(r.b.rate)*float64(time.Second)))
	r.slow = deadline.Before(r.hard)
	if !r.slow {
		deadline = r.hard
	}
	if r.h.conn != nil {
		_ = r.h.conn.SetReadDeadline(deadline)
	}
	// After the deadline is set: a preemption that set its own deadline
	// before this one is seen here, one after it ends the read below.
	if r.h.cancelled.Load() {
		return 0, errPreempted
	}
	k, err := r.r.Read(p)
	r.got += int64(k)
	if k > 0 {
		ctx, cancel := context.WithTimeout(r.base, r.wait)
		gerr := r.b.grow(ctx, r.h, int64(k))
		cancel()
		if gerr != nil {
			return k, gerr
		}
	}
	if err != nil && r.h.cancelled.Load() {
		return k, errPreempted
	}
	return k, err
}

// addressGroup is the key of a client address for per-address bounds: an
// IPv4 address itself, an IPv6 address its /64 (one subscriber's prefix).
func addressGroup(ip net.IP) string {
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	if ip16 := ip.To16(); ip16 != nil {
		return ip16.Mask(net.CIDRMask(64, 128)).String() + "/64"
	}
	return ""
}
