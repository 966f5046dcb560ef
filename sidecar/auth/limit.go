package auth

import (
	"net/netip"
	"strings"
	"sync"
	"time"
)

// fifo is a map that holds at most its capacity of keys: putting a new key
// into a full one evicts the key put longest ago. Keys are never removed
// otherwise, so the ring holds exactly the map's keys. Not safe for
// concurrent use.
type fifo[K comparable, V any] struct {
	m    map[K]V
	ring []K
	next int // the oldest key once the ring is full
}

func newFIFO[K comparable, V any](capacity int) *fifo[K, V] {
	return &fifo[K, V]{m: make(map[K]V), ring: make([]K, 0, capacity)}
}

func (f *fifo[K, V]) get(k K) (V, bool) {
	v, ok := f.m[k]
	return v, ok
}

func (f *fifo[K, V]) put(k K, v V) {
	if _, ok := f.m[k]; !ok {
		if len(f.ring) < cap(f.ring) {
			f.ring = append(f.ring, k)
		} else {
			delete(f.m, f.ring[f.next])
			f.ring[f.next] = k
			f.next = (f.next + 1) % len(f.ring)
		}
	}
	f.m[k] = v
}

func (f *fifo[K, V]) len() int { return len(f.m) }

// negativeCache remembers the hashes the database did not know, each until
// its expiry, at most capacity of them (the oldest is forgotten first), so
// that random keys cannot grow it.
type negativeCache struct {
	mu sync.Mutex
	f  *fifo[hashed, time.Time]
}

func newNegativeCache(capacity int) *negativeCache {
	return &negativeCache{f: newFIFO[hashed, time.Time](capacity)}
}

// has reports whether h failed a lookup that has not expired at now.
func (c *negativeCache) has(h hashed, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	expires, ok := c.f.get(h)
	return ok && now.Before(expires)
}

func (c *negativeCache) add(h hashed, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.f.put(h, expires)
}

// limiter counts failed authentications per client in fixed windows: a
// client's window starts at its first attempt after the previous one
// ended, and once failures (plus attempts still being checked) reach
// limit, the client is refused until the window ends. It remembers at most
// capacity clients, the oldest forgotten first; a forgotten client starts
// again with a fresh window.
type limiter struct {
	limit  int
	window time.Duration
	mu     sync.Mutex
	f      *fifo[string, attempts]
}

// attempts is one client's window.
type attempts struct {
	start    time.Time
	failures int
	// pending counts attempts admitted and not yet decided: they may all
	// fail, so they count against the limit until they do or succeed.
	pending int
}

func newLimiter(limit int, window time.Duration, capacity int) *limiter {
	return &limiter{limit: limit, window: window, f: newFIFO[string, attempts](capacity)}
}

// current returns client's window at now, a fresh one when it ended.
func (l *limiter) current(client string, now time.Time) attempts {
	a, ok := l.f.get(client)
	if !ok || !now.Before(a.start.Add(l.window)) {
		a = attempts{start: now, pending: a.pending}
	}
	return a
}

// admit reserves one attempt for client, or returns how long until its
// window ends when its failures and pending attempts reached the limit.
// Every admitted attempt ends with failed or succeeded.
func (l *limiter) admit(client string, now time.Time) (wait time.Duration, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.current(client, now)
	if a.failures+a.pending >= l.limit {
		return a.start.Add(l.window).Sub(now), false
	}
	a.pending++
	l.f.put(client, a)
	return 0, true
}

// failed counts a failure of client: one it admitted, or one that was not
// subject to admission (a key that was valid before).
func (l *limiter) failed(client string, now time.Time, admitted bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.current(client, now)
	a.failures++
	if admitted {
		a.pending = max(0, a.pending-1)
	}
	l.f.put(client, a)
}

// succeeded ends an admitted attempt of client that was not a failure (the
// key was accepted, or it could not be checked). It does not forgive the
// client's failures.
func (l *limiter) succeeded(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if a, ok := l.f.get(client); ok && a.pending > 0 {
		a.pending--
		l.f.put(client, a)
	}
}

// maxClientLen bounds the length of a client identity kept by the limiter.
const maxClientLen = 64

// clientID is the identity failures are counted under: the IPv4 address,
// or the /64 prefix of an IPv6 address (the smallest block a host is
// usually given, so one host cannot step through its own addresses). Text
// that is not an address is kept as it is, cut to maxClientLen bytes. The
// result never shares memory with client.
func clientID(client string) string {
	a, err := netip.ParseAddr(client)
	if err != nil {
		return strings.Clone(client[:min(len(client), maxClientLen)])
	}
	a = a.Unmap().WithZone("")
	if a.Is6() {
		return netip.PrefixFrom(a, 64).Masked().String()
	}
	return a.String()
}
