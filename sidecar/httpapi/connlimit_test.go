package httpapi_test

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/httpapi"
)

// The requests a refused connection may carry: one per route class.
var routeRequests = map[string]string{
	"healthz": "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
	"api":     claimRequest("conn", "evt-conn"),
	"ingest":  "POST /ingest/hooks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
	"trigger": "POST /v1/trigger/hooks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + keyA + "\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
	"console": "GET /ui/ HTTP/1.1\r\nHost: x\r\n\r\n",
	"metrics": "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
	"none":    "",
}

// holdConnections opens n kept-alive connections from local, each having
// been served one request (so the listener has accepted it).
func holdConnections(t *testing.T, local, addr string, n int) {
	t.Helper()
	for range n {
		c := dialFrom(t, local, addr)
		_, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.False(t, res.Close, "the connection stays open")
	}
}

// refusedReply sends req on a new connection from local and returns the
// one answer, which must close the connection.
func refusedReply(t *testing.T, local, addr, req string) rawReply {
	t.Helper()
	c := dialFrom(t, local, addr)
	if req != "" {
		_, _ = io.WriteString(c, req) // the answer may already be on its way
	}
	replies := readReplies(t, c, 10*time.Second)
	require.Len(t, replies, 1)
	require.True(t, replies[0].closed)
	return replies[0]
}

// One address has at most MaxConnsPerIP connections: the next is answered
// 429 rate_limited in the API's error shape with Retry-After, whatever it
// sends, and another address is still served.
func TestConnectionsPerAddress(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *options) { o.server = func(c *httpapi.Config) { c.MaxConnsPerIP = 4 } })
	holdConnections(t, "127.0.0.51", b.addr, 4)
	for name, req := range routeRequests {
		t.Run(name, func(t *testing.T) {
			r := refusedReply(t, "127.0.0.51", b.addr, req)
			require.Equal(t, http.StatusTooManyRequests, r.status, "%s", r.body)
			require.Equal(t, "rate_limited", r.code(t))
			require.Equal(t, "1", r.header.Get("Retry-After"))
			require.Equal(t, "application/json", r.header.Get("Content-Type"))
		})
	}
	holdConnections(t, "127.0.0.52", b.addr, 4)
	require.Contains(t, scrapeMetrics(t, "http://"+b.addr),
		`claimd_http_connections_refused_total{reason="address"} `+strconv.Itoa(len(routeRequests))+"\n")
}

// Past MaxConnections in all, with every connection at work (none idle
// to reclaim), a new connection from any address is answered 503
// unavailable in the API's error shape with Retry-After.
func TestConnectionsInAll(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *options) {
		o.server = func(c *httpapi.Config) { c.MaxConnections = 16; c.MaxConnsPerIP = -1 }
	})
	for i := range 16 {
		holdBusy(t, "127.0.0."+strconv.Itoa(60+i%4), b.addr, "evt-in-all-"+strconv.Itoa(i))
	}
	for name, req := range routeRequests {
		t.Run(name, func(t *testing.T) {
			r := refusedReply(t, "127.0.0.70", b.addr, req)
			require.Equal(t, http.StatusServiceUnavailable, r.status, "%s", r.body)
			require.Equal(t, "unavailable", r.code(t))
			require.Equal(t, "1", r.header.Get("Retry-After"))
		})
	}
}

// A closed connection gives its place back to its address.
func TestConnectionPlaceIsGivenBack(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *options) { o.server = func(c *httpapi.Config) { c.MaxConnsPerIP = 1 } })
	for range 3 {
		// The server closes its side after answering; the client's next
		// connection may arrive before that, and is refused: retried.
		waitForCondition(t, "a connection to be served", func() bool {
			c := dialFrom(t, "127.0.0.80", b.addr)
			defer c.Close()
			_, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
			require.NoError(t, err)
			replies := readReplies(t, c, 10*time.Second)
			require.Len(t, replies, 1)
			return replies[0].status == http.StatusOK
		})
	}
}

// With the defaults, idle connections from one address take at most
// DefaultMaxConnsPerIP places: the next is refused in JSON with
// Retry-After, and a claim from another address is answered.
func TestOneAddressCannotTakeEveryConnection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	holdConnections(t, "127.0.0.90", b.addr, httpapi.DefaultMaxConnsPerIP)
	r := refusedReply(t, "127.0.0.90", b.addr, claimRequest("conn", "evt-refused"))
	require.Equal(t, http.StatusTooManyRequests, r.status, "%s", r.body)
	require.Equal(t, "rate_limited", r.code(t))
	require.Equal(t, "1", r.header.Get("Retry-After"))
	replies := rawExchange(t, b.addr, claimRequest("conn", "evt-served"), time.Second)
	require.Len(t, replies, 1)
	require.Equal(t, http.StatusOK, replies[0].status, "%s", replies[0].body)
}
