package httpapi

import (
	"encoding/json"
	"io"
	"net"
	"strconv"
	"sync"
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
type connLimiter struct {
	net.Listener
	max, perAddr int

	mu     sync.Mutex
	open   int
	byAddr map[string]int

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

func newConnLimiter(ln net.Listener, maxConns, perAddr int, onRefuse func(perAddress bool)) *connLimiter {
	return &connLimiter{Listener: ln, max: maxConns, perAddr: perAddr, byAddr: map[string]int{},
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
		l.mu.Lock()
		perAddr := l.perAddr > 0 && l.byAddr[key] >= l.perAddr
		if perAddr || l.open >= l.max {
			l.mu.Unlock()
			l.refuse(c, perAddr)
			continue
		}
		l.open++
		l.byAddr[key]++
		l.mu.Unlock()
		return &limitedConn{Conn: c, l: l, key: key}, nil
	}
}

// Open is the number of connections being served.
func (l *connLimiter) Open() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int64(l.open)
}

func (l *connLimiter) done(key string) {
	l.mu.Lock()
	l.open--
	if l.byAddr[key]--; l.byAddr[key] <= 0 {
		delete(l.byAddr, key)
	}
	l.mu.Unlock()
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

// limitedConn gives its place back when closed.
type limitedConn struct {
	net.Conn
	l    *connLimiter
	key  string
	once sync.Once
}

func (c *limitedConn) Close() error {
	c.once.Do(func() { c.l.done(c.key) })
	return c.Conn.Close()
}
