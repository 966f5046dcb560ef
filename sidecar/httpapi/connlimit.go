package httpapi

import (
	"encoding/json"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
)

// connLimiter is claimd's listener: it bounds the connections served at
// once, in all (Config.MaxConnections) and per client address
// (Config.MaxConnsPerIP; IPv6 addresses grouped by /64), before fasthttp
// sees them. A connection past a bound is answered at once, whatever it
// sends, in the API's error shape: 429 rate_limited past the per-address
// bound, 503 unavailable past the total, each with Retry-After: 1 and
// Connection: close; then it is closed. fasthttp's own bounds answer in
// plain text without Retry-After, so they are set above these.
//
// When the total is reached, a new connection within its address's bound
// takes the place of one that does no work (reclaim), if there is one:
// first the connection kept alive longest with no request in progress
// (closed: RFC 9112 section 9.3.1 has clients anticipate the close of a
// kept-alive connection and open another), else, among the connections in
// a request's header block for at least headerGrace (a new connection
// that has sent nothing included), the one whose header bytes arrived at
// the lowest rate, the oldest at equal rates. A connection whose header
// block was read (its body arriving, its handler running or its response
// being written) is never reclaimed; when every connection is such, the
// new one is refused 503.
type connLimiter struct {
	net.Listener
	max, perAddr int

	mu     sync.Mutex
	open   int
	byAddr map[string]int
	// conns are the connections being served, for reclaim.
	conns map[*limitedConn]struct{}
	// headerGrace is how long a header block may take before its
	// connection may be reclaimed.
	headerGrace time.Duration
	// onReclaim, when set, is told of each connection reclaimed: idle
	// between requests, else in a header block.
	onReclaim func(idle bool)

	// refusing bounds the refusals being written at once; past it a
	// refused connection is closed without an answer.
	refusing chan struct{}
	// onRefuse, when set, is told of each refused connection.
	onRefuse func(perAddress bool)
}

// refusalWriters is how many refused connections are answered at once;
// refuseTime bounds each (write, then a short read of what the client
// sent, so that closing does not reset the connection before the answer
// is read).
const (
	refusalWriters = 64
	refuseTime     = 2 * time.Second
)

// defaultHeaderGrace is how long a connection may spend in a header block
// (from its accept or its request's first byte) without being reclaimed:
// a client sends its header block in one round trip.
const defaultHeaderGrace = time.Second

func newConnLimiter(ln net.Listener, maxConns, perAddr int, onRefuse func(perAddress bool)) *connLimiter {
	return &connLimiter{Listener: ln, max: maxConns, perAddr: perAddr, byAddr: map[string]int{},
		conns: map[*limitedConn]struct{}{}, headerGrace: defaultHeaderGrace,
		refusing: make(chan struct{}, refusalWriters), onRefuse: onRefuse}
}

// Accept returns the next connection within the bounds; the ones past them
// are answered and closed here.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key := connAddress(c)
		now := time.Now()
		l.mu.Lock()
		perAddr := l.perAddr > 0 && l.byAddr[key] >= l.perAddr
		var victim *limitedConn
		if !perAddr && l.open >= l.max {
			victim = l.reclaimLocked(now)
		}
		if perAddr || (l.open >= l.max && victim == nil) {
			l.mu.Unlock()
			l.refuse(c, perAddr)
			continue
		}
		lc := &limitedConn{Conn: c, l: l, key: key}
		lc.since.Store(now.UnixNano())
		l.open++
		l.byAddr[key]++
		l.conns[lc] = struct{}{}
		l.mu.Unlock()
		if victim != nil {
			_ = victim.Conn.Close()
			if l.onReclaim != nil {
				l.onReclaim(victim.reclaimedIdle)
			}
		}
		return lc, nil
	}
}

// reclaimLocked picks the connection to close for a new one (see
// connLimiter), marks it reclaimed and gives its place back; nil when
// every connection is at work. The caller holds mu and closes it.
func (l *connLimiter) reclaimLocked(now time.Time) *limitedConn {
	for range 4 { // a connection may change phase under the scan: scan again
		var idle, head *limitedConn
		var idleSince int64
		var headRate float64
		var headSince int64
		for c := range l.conns {
			since := c.since.Load()
			switch c.phase.Load() {
			case phaseIdle:
				if idle == nil || since < idleSince {
					idle, idleSince = c, since
				}
			case phaseHead:
				age := now.UnixNano() - since
				if age < int64(l.headerGrace) || age <= 0 {
					continue
				}
				rate := float64(c.headBytes.Load()) / float64(age)
				if head == nil || rate < headRate || (rate == headRate && since < headSince) {
					head, headRate, headSince = c, rate, since
				}
			}
		}
		victim, from := idle, phaseIdle
		if victim == nil {
			victim, from = head, phaseHead
		}
		if victim == nil {
			return nil
		}
		if !victim.phase.CompareAndSwap(from, phaseReclaimed) || !victim.released.CompareAndSwap(false, true) {
			continue
		}
		victim.reclaimedIdle = from == phaseIdle
		l.releaseLocked(victim)
		return victim
	}
	return nil
}

// Open is the number of connections being served.
func (l *connLimiter) Open() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int64(l.open)
}

func (l *connLimiter) done(c *limitedConn) {
	l.mu.Lock()
	l.releaseLocked(c)
	l.mu.Unlock()
}

func (l *connLimiter) releaseLocked(c *limitedConn) {
	l.open--
	if l.byAddr[c.key]--; l.byAddr[c.key] <= 0 {
		delete(l.byAddr, c.key)
	}
	delete(l.conns, c)
}

// Refusal answers: whole HTTP/1.1 responses, written before the request is
// read (none of it is quoted).
var (
	refusalPerAddress = refusalResponse(429, apperr.RateLimited,
		"too many connections from this address at once (CLAIMD_MAX_CONNS_PER_IP); close idle ones or retry")
	refusalTotal = refusalResponse(503, apperr.Unavailable,
		"claimd serves as many connections as it takes (CLAIMD_MAX_CONNECTIONS); retry")
)

func refusalResponse(status int, code apperr.Code, msg string) []byte {
	body, _ := json.Marshal(ErrorBody{ErrorDetail{Code: code, Message: msg}})
	reason := "Service Unavailable"
	if status == 429 {
		reason = "Too Many Requests"
	}
	return []byte("HTTP/1.1 " + strconv.Itoa(status) + " " + reason + "\r\nContent-Type: application/json\r\n" +
		"Retry-After: 1\r\nConnection: close\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + string(body))
}

func (l *connLimiter) refuse(c net.Conn, perAddr bool) {
	if l.onRefuse != nil {
		l.onRefuse(perAddr)
	}
	select {
	case l.refusing <- struct{}{}:
	default:
		_ = c.Close()
		return
	}
	answer := refusalTotal
	if perAddr {
		answer = refusalPerAddress
	}
	go func() {
		defer func() { <-l.refusing }()
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(refuseTime))
		if _, err := c.Write(answer); err != nil {
			return
		}
		if tc, ok := c.(interface{ CloseWrite() error }); ok {
			_ = tc.CloseWrite()
		}
		// What the client sends meanwhile is read and dropped, so that
		// closing does not reset the connection under the answer.
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	}()
}

// connAddress is the per-address key of a connection's peer.
func connAddress(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return addressGroup(a.IP)
	}
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		return c.RemoteAddr().String()
	}
	return addressGroup(net.ParseIP(host))
}

// A connection's phase, as reclaim sees it.
const (
	phaseHead      int32 = iota // accepted, or in a request's header block
	phaseIdle                   // kept alive after a response, nothing of a next request read
	phaseBusy                   // a request's header block was read: body, handler or response
	phaseReclaimed              // closed by the listener to make room
)

// limitedConn gives its place back when closed. Its phase is set by the
// framing check on the connection (framingConn), which sees its bytes
// and fasthttp's request cycle.
type limitedConn struct {
	net.Conn
	l        *connLimiter
	key      string
	released atomic.Bool

	phase atomic.Int32
	// since is when the current phase began, in Unix nanoseconds.
	since atomic.Int64
	// headBytes are the bytes of the current header block so far.
	headBytes atomic.Int64
	// reclaimedIdle: reclaimed while idle (else in a header block); set
	// under the limiter's mu before it is read.
	reclaimedIdle bool
}

// moveTo sets the connection's phase to p (with the bytes of its header
// block so far in phaseHead). It reports false when the connection was
// reclaimed: its next read is then to fail.
func (c *limitedConn) moveTo(p int32, headBytes int64) bool {
	for {
		old := c.phase.Load()
		if old == phaseReclaimed {
			return false
		}
		if p == phaseHead {
			c.headBytes.Store(headBytes)
		}
		if old == p {
			return true
		}
		c.since.Store(time.Now().UnixNano())
		if c.phase.CompareAndSwap(old, p) {
			return true
		}
	}
}

func (c *limitedConn) Close() error {
	if c.released.CompareAndSwap(false, true) {
		c.l.done(c)
	}
	return c.Conn.Close()
}
