package httpapi

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
