package httpapi_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/httpapi"
)

// busyConn is a connection whose request is in progress: its header
// block was read (claimd answered 100 Continue) and its body is still to
// come.
type busyConn struct {
	net.Conn
	br   *bufio.Reader
	body string
}

// holdBusy opens a connection from local whose claim request waits for
// its body (sent by finish).
func holdBusy(t *testing.T, local, addr, eventID string) *busyConn {
	t.Helper()
	c := dialFrom(t, local, addr)
	body := `{"source":"conn","event_id":"` + eventID + `"}`
	_, err := io.WriteString(c, "POST /v1/claims HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+keyA+
		"\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second)) // a failing test's bound, not a measure
	res, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	_ = res.Body.Close() // a 100 Continue has no body
	require.Equal(t, http.StatusContinue, res.StatusCode)
	_ = c.SetReadDeadline(time.Time{})
	return &busyConn{Conn: c, br: br, body: body}
}

// finish sends the rest of the request and checks the claim is answered
// on a connection kept open.
func (b *busyConn) finish(t *testing.T) {
	t.Helper()
	_, err := io.WriteString(b, b.body)
	require.NoError(t, err)
	_ = b.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(b.br, nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.False(t, res.Close)
}

// keptConn is a kept-alive connection that was served one request.
type keptConn struct {
	net.Conn
	br *bufio.Reader
}

func holdIdle(t *testing.T, local, addr string) *keptConn {
	t.Helper()
	k := &keptConn{Conn: dialFrom(t, local, addr)}
	k.br = bufio.NewReader(k.Conn)
	require.True(t, k.ask(t), "the connection is served")
	return k
}

// ask sends a health check and reports whether it was answered 200 (the
// connection kept open); false when claimd had closed the connection.
func (k *keptConn) ask(t *testing.T) bool {
	t.Helper()
	if _, err := io.WriteString(k, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return false
	}
	_ = k.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(k.br, nil)
	if err != nil {
		var ne net.Error
		require.False(t, errors.As(err, &ne) && ne.Timeout(), "no answer and no close")
		return false
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.False(t, res.Close)
	return true
}

// claimOnNew sends a claim on a new connection from local and returns its
// status; the connection stays open until the test ends.
func claimOnNew(t *testing.T, local, addr, eventID string) (int, string) {
	t.Helper()
	c := dialFrom(t, local, addr)
	_, _ = io.WriteString(c, claimRequest("conn", eventID))
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	b, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
	res.Body.Close()
	return res.StatusCode, res.Header.Get("Retry-After") + " " + string(b)
}

// reclaimSetup is a server with 8 connections in all and no per-address
// bound.
func reclaimSetup(t *testing.T) *bundle {
	return setup(t, func(o *options) {
		o.server = func(c *httpapi.Config) { c.MaxConnections = 8; c.MaxConnsPerIP = -1 }
	})
}

// With every place taken by kept-alive connections from several
// addresses, a claim on a new connection is answered: the connection idle
// longest was closed for it, and only that one.
func TestReclaimIdleConnection(t *testing.T) {
	t.Parallel()
	b := reclaimSetup(t)
	var kept []*keptConn
	for i := range 8 {
		kept = append(kept, holdIdle(t, "127.0.1."+strconv.Itoa(10+i%4), b.addr))
	}
	// fasthttp marks a connection idle just after its answer is sent: a
	// new connection may come first and be refused, so it is retried.
	waitForCondition(t, "a claim on a new connection to be answered", func() bool {
		status, body := claimOnNew(t, "127.0.1.20", b.addr, "evt-reclaim-idle")
		require.Contains(t, []int{http.StatusOK, http.StatusServiceUnavailable}, status, body)
		return status == http.StatusOK
	})
	// The scrape's connection takes the place of another idle one: the
	// places are all taken still.
	metrics := scrapeMetrics(t, "http://"+b.addr)
	require.Contains(t, metrics, `claimd_http_connections_reclaimed_total{state="idle"} 2`+"\n")
	require.Contains(t, metrics, `claimd_http_connections_reclaimed_total{state="header"} 0`+"\n")
	closed := 0
	for _, k := range kept {
		if !k.ask(t) {
			closed++
		}
	}
	require.Equal(t, 2, closed, "two idle connections were reclaimed, no more")
}

// A connection whose request is in progress (its body arriving) is not
// reclaimed: with 7 such and one idle, a new connection takes the idle
// one's place, and every request in progress is answered.
func TestReclaimSparesRequestsInFlight(t *testing.T) {
	t.Parallel()
	b := reclaimSetup(t)
	var busy []*busyConn
	for i := range 7 {
		busy = append(busy, holdBusy(t, "127.0.1."+strconv.Itoa(30+i%3), b.addr, "evt-busy-"+strconv.Itoa(i)))
	}
	idle := holdIdle(t, "127.0.1.33", b.addr)
	waitForCondition(t, "a claim on a new connection to be answered", func() bool {
		status, body := claimOnNew(t, "127.0.1.34", b.addr, "evt-reclaim-spare")
		require.Contains(t, []int{http.StatusOK, http.StatusServiceUnavailable}, status, body)
		return status == http.StatusOK
	})
	require.False(t, idle.ask(t), "the idle connection was reclaimed")
	for _, c := range busy {
		c.finish(t)
	}
}

// With every connection at work, a new one is still refused 503
// unavailable in JSON with Retry-After, and the requests in progress are
// answered.
func TestReclaimNothingWhenEveryConnectionIsBusy(t *testing.T) {
	t.Parallel()
	b := reclaimSetup(t)
	var busy []*busyConn
	for i := range 8 {
		busy = append(busy, holdBusy(t, "127.0.1."+strconv.Itoa(40+i%4), b.addr, "evt-all-busy-"+strconv.Itoa(i)))
	}
	r := refusedReply(t, "127.0.1.50", b.addr, claimRequest("conn", "evt-refused-busy"))
	require.Equal(t, http.StatusServiceUnavailable, r.status, "%s", r.body)
	require.Equal(t, "unavailable", r.code(t))
	require.Equal(t, "1", r.header.Get("Retry-After"))
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	for _, c := range busy {
		c.finish(t)
	}
}

// The same on the ingest route: with every place taken by kept-alive
// connections, a provider's signed delivery on a new connection is
// stored, one idle connection closed for it.
func TestReclaimIdleConnectionForSignedDelivery(t *testing.T) {
	t.Parallel()
	e := setupBudget(t, func(c *httpapi.Config) { c.MaxConnections = 8; c.MaxConnsPerIP = -1 })
	addr := strings.TrimPrefix(e.base, "http://")
	var kept []*keptConn
	for i := range 8 {
		kept = append(kept, holdIdle(t, "127.0.2."+strconv.Itoa(10+i%4), addr))
	}
	d := stripeDelivery("evt_reclaim_delivery", 512)
	waitForCondition(t, "the delivery on a new connection to be answered", func() bool {
		req, err := http.NewRequest(http.MethodPost, e.base+"/ingest/stripe", bytes.NewReader(d.body))
		require.NoError(t, err)
		for _, kv := range d.header {
			req.Header[kv[0]] = append(req.Header[kv[0]], kv[1])
		}
		c := dialFrom(t, "127.0.2.20", addr)
		_ = req.Write(c) // a refusal may already be on its way
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), req)
		require.NoError(t, err)
		body, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
		res.Body.Close()
		require.Contains(t, []int{http.StatusOK, http.StatusServiceUnavailable}, res.StatusCode, "%s", body)
		return res.StatusCode == http.StatusOK
	})
	require.Equal(t, 1, e.counts(t, "stripe").inbox, "the delivery is in the inbox")
	closed := 0
	for _, k := range kept {
		if !k.ask(t) {
			closed++
		}
	}
	require.Equal(t, 1, closed, "one idle connection was reclaimed")
}
