package httpapi

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// The choice of the connection reclaimed, on connections whose phase,
// start and header bytes are set by hand: the one idle longest, else the
// header block arriving slowest (the oldest at equal rates) once past
// headerGrace, never a busy one.
func TestReclaimChoice(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	l := newConnLimiter(nil, 8, 0, nil)
	add := func(phase int32, age time.Duration, headBytes int64) *limitedConn {
		c := &limitedConn{l: l, key: "k", Conn: &net.TCPConn{}}
		c.phase.Store(phase)
		c.since.Store(now.Add(-age).UnixNano())
		c.headBytes.Store(headBytes)
		l.mu.Lock()
		l.open++
		l.byAddr["k"]++
		l.conns[c] = struct{}{}
		l.mu.Unlock()
		return c
	}
	pick := func() *limitedConn {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.reclaimLocked(now)
	}
	busyOld := add(phaseBusy, time.Hour, 0)
	young := add(phaseHead, l.headerGrace/2, 0)      // within the grace: spared
	fast := add(phaseHead, 10*time.Second, 4000)     // 400 B/s
	slow := add(phaseHead, 10*time.Second, 100)      // 10 B/s
	slowOlder := add(phaseHead, 20*time.Second, 200) // 10 B/s, older
	idleRecent := add(phaseIdle, time.Second, 0)
	idleLongest := add(phaseIdle, 100*time.Second, 0)
	for _, want := range []*limitedConn{idleLongest, idleRecent, slowOlder, slow, fast} {
		got := pick()
		require.Same(t, want, got)
		require.Equal(t, phaseReclaimed, got.phase.Load())
		require.True(t, got.released.Load())
	}
	require.Nil(t, pick(), "a busy connection and a young header block are not reclaimed")
	require.Equal(t, 2, l.open)
	require.Contains(t, l.conns, busyOld)
	require.Contains(t, l.conns, young)
	require.True(t, busyOld.moveTo(phaseIdle, 0), "a connection not reclaimed moves on")
	require.False(t, slow.moveTo(phaseBusy, 0), "a reclaimed connection stays reclaimed")
}

// BenchmarkReclaimScan is the cost of choosing a connection to reclaim
// among 4096 (the default CLAIMD_MAX_CONNECTIONS), none reclaimable: the
// scan a refused connection costs when the total is reached.
func BenchmarkReclaimScan(b *testing.B) {
	l := newConnLimiter(nil, 4096, 0, nil)
	for range 4096 {
		c := &limitedConn{l: l, key: "k"}
		c.phase.Store(phaseBusy)
		l.conns[c] = struct{}{}
	}
	now := time.Now()
	b.ResetTimer()
	for range b.N {
		l.mu.Lock()
		if l.reclaimLocked(now) != nil {
			b.Fatal("a busy connection was chosen")
		}
		l.mu.Unlock()
	}
}

// On a real fasthttp server behind the listener and the framing check,
// with no header grace: an idle connection is reclaimed first, then the
// connection in its header block, never one whose handler runs; with
// every connection busy the next one is refused 503.
func TestReclaimOrderOnConnections(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := newConnLimiter(raw, 3, 0, nil)
	l.headerGrace = 0
	reclaimed := make(chan bool, 8)
	l.onReclaim = func(idle bool) { reclaimed <- idle }
	entered, release := make(chan struct{}, 8), make(chan struct{})
	srv := &fasthttp.Server{ConnState: connState, Handler: func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/hold" {
			entered <- struct{}{}
			<-release
		}
		ctx.SetBodyString("ok")
	}}
	s := &Server{cfg: Config{MaxHeaderBytes: 8192}}
	go func() { _ = srv.Serve(s.FramingListener(l)) }()
	t.Cleanup(func() { close(release); _ = srv.Shutdown() })
	addr := raw.Addr().String()

	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	send := func(c net.Conn, s string) {
		_, err := io.WriteString(c, s)
		require.NoError(t, err)
	}
	// answered reads one answer on c; false when c was closed instead.
	answered := func(c net.Conn, br *bufio.Reader) (int, bool) {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second)) // a failing test's bound
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			require.False(t, errors.As(err, &ne) && ne.Timeout(), "no answer and no close")
			return 0, false
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode, true
	}
	hold := func() net.Conn {
		c := dial()
		send(c, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
		<-entered
		return c
	}

	busy := hold()
	idle := dial()
	idleBR := bufio.NewReader(idle)
	send(idle, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
	status, ok := answered(idle, idleBR)
	require.True(t, ok)
	require.Equal(t, 200, status)

	head := dial()
	send(head, "GET /ok HTTP/1.1\r\nHo")
	// Every place is taken. fasthttp marks a connection idle just after
	// writing its answer: wait for that mark.
	waitIdle := func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for c := range l.conns {
			if c.phase.Load() == phaseIdle {
				return true
			}
		}
		return false
	}
	for i := 0; !waitIdle(); i++ {
		require.Less(t, i, 3000, "the answered connection is never marked idle")
		time.Sleep(time.Millisecond)
	}

	second := hold()
	require.True(t, <-reclaimed, "the idle connection goes first")
	_, ok = answered(idle, idleBR)
	require.False(t, ok, "the idle connection was closed")

	third := hold()
	require.False(t, <-reclaimed, "then the connection in its header block")
	_, ok = answered(head, bufio.NewReader(head))
	require.False(t, ok, "the header block's connection was closed")

	refused := dial()
	send(refused, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
	status, ok = answered(refused, bufio.NewReader(refused))
	require.True(t, ok)
	require.Equal(t, 503, status, "every connection is busy")
	require.Empty(t, reclaimed)
	_, _, _ = busy, second, third
}
