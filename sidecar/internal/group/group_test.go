package group

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// gate is a run function whose groups each wait for the test: every group
// is announced on started (its items) and returns when released.
type gate struct {
	started chan []int
	release chan struct{}
}

func newGate() *gate { return &gate{started: make(chan []int, 64), release: make(chan struct{})} }

func (g *gate) run(_ context.Context, calls []*Call[int, int]) {
	items := make([]int, len(calls))
	for i, c := range calls {
		items[i] = c.Item
	}
	g.started <- items
	<-g.release
	for _, c := range calls {
		c.Finish(c.Item*10, nil)
	}
}

func gone(err error) error { return err }

// do runs g.Do(item) in a goroutine; its answer arrives on the channel.
func do(g *Grouper[int, int], item int) chan int {
	ch := make(chan int, 1)
	go func() {
		out, err := g.Do(context.Background(), item)
		if err != nil {
			out = -1
		}
		ch <- out
	}()
	return ch
}

// waitQueued waits until n calls wait for a group (a signal: Queued is
// read under the Grouper's lock, polled without a fixed sleep budget).
func waitQueued(t *testing.T, g *Grouper[int, int], n int) {
	t.Helper()
	require.Eventually(t, func() bool { return g.Queued() == n }, 10*time.Second, time.Millisecond)
}

// An idle Grouper sends a lone call at once, in a group of one.
func TestIdleCallRunsAlone(t *testing.T) {
	gt := newGate()
	close(gt.release)
	g := New(Config{Workers: 2, MaxItems: 8}, gt.run, gone, nil)
	require.Equal(t, 10, <-do(g, 1))
	require.Equal(t, []int{1}, <-gt.started)
}

// Calls that arrive while a group is in flight wait for it, and the next
// group takes them all: no second worker starts for a queue that does
// not fill a group, so a group of one is not split off for each of them.
func TestCallsBehindAGroupJoinTheNext(t *testing.T) {
	gt := newGate()
	g := New(Config{Workers: 2, MaxItems: 8, SpareAfter: time.Hour}, gt.run, gone, nil)
	first := do(g, 1)
	require.Equal(t, []int{1}, <-gt.started)
	var later []chan int
	for i := 2; i <= 5; i++ {
		later = append(later, do(g, i))
	}
	waitQueued(t, g, 4)
	select {
	case items := <-gt.started:
		t.Fatalf("a second group started while the first was in flight: %v", items)
	default:
	}
	gt.release <- struct{}{} // the first group ends
	require.Equal(t, 10, <-first)
	require.ElementsMatch(t, []int{2, 3, 4, 5}, <-gt.started)
	close(gt.release)
	for i, ch := range later {
		require.Equal(t, (i+2)*10, <-ch)
	}
}

// A queue that fills a group starts a second worker at once, while the
// first group is still in flight (Workers bounds them).
func TestAFullQueueStartsASpare(t *testing.T) {
	gt := newGate()
	g := New(Config{Workers: 2, MaxItems: 3, SpareAfter: time.Hour}, gt.run, gone, nil)
	first := do(g, 1)
	require.Equal(t, []int{1}, <-gt.started)
	var later []chan int
	for i := 2; i <= 4; i++ {
		later = append(later, do(g, i))
	}
	// The third waiting call fills a group: the spare takes all three.
	require.ElementsMatch(t, []int{2, 3, 4}, <-gt.started)
	// Workers is 2: a further full queue waits.
	for i := 5; i <= 7; i++ {
		later = append(later, do(g, i))
	}
	waitQueued(t, g, 3)
	select {
	case items := <-gt.started:
		t.Fatalf("a third group started with Workers 2: %v", items)
	default:
	}
	close(gt.release)
	require.Equal(t, 10, <-first)
	for i, ch := range later {
		require.Equal(t, (i+2)*10, <-ch)
	}
	require.ElementsMatch(t, []int{5, 6, 7}, <-gt.started)
}

// MaxWeight counts as full too: one heavy call waiting starts a spare.
func TestAFullWeightStartsASpare(t *testing.T) {
	gt := newGate()
	g := New(Config{Workers: 2, MaxItems: 8, MaxWeight: 4, SpareAfter: time.Hour}, gt.run, gone, nil)
	first := do(g, 1)
	require.Equal(t, []int{1}, <-gt.started)
	heavy := make(chan int, 1)
	go func() {
		out, _ := g.DoWeighted(context.Background(), 2, 4)
		heavy <- out
	}()
	require.Equal(t, []int{2}, <-gt.started)
	close(gt.release)
	require.Equal(t, 10, <-first)
	require.Equal(t, 20, <-heavy)
}

// A group in flight longer than SpareAfter, with calls behind it (a row
// lock held elsewhere, a slow flush), no longer holds them up: a spare
// starts, even when no further call arrives to notice.
func TestAStalledGroupStartsASpare(t *testing.T) {
	stuck := make(chan struct{})
	started := make(chan []int, 8)
	run := func(_ context.Context, calls []*Call[int, int]) {
		items := []int{}
		for _, c := range calls {
			items = append(items, c.Item)
		}
		started <- items
		if calls[0].Item == 1 {
			<-stuck
		}
		for _, c := range calls {
			c.Finish(c.Item*10, nil)
		}
	}
	g := New(Config{Workers: 2, MaxItems: 8, SpareAfter: time.Millisecond}, run, gone, nil)
	first := do(g, 1)
	require.Equal(t, []int{1}, <-started)
	second, third := do(g, 2), do(g, 3)
	// Answered while the first group is still stuck.
	require.Equal(t, 20, <-second)
	require.Equal(t, 30, <-third)
	close(stuck)
	require.Equal(t, 10, <-first)
}

// Groups never exceed MaxItems, every call is answered exactly once with
// its own answer, and the Grouper ends with no worker running.
func TestStormEveryCallAnsweredOnce(t *testing.T) {
	var mu sync.Mutex
	answered := map[int]int{}
	maxSeen := 0
	run := func(_ context.Context, calls []*Call[int, int]) {
		mu.Lock()
		maxSeen = max(maxSeen, len(calls))
		for _, c := range calls {
			answered[c.Item]++
		}
		mu.Unlock()
		for _, c := range calls {
			c.Finish(c.Item+1, nil)
		}
	}
	g := New(Config{Workers: 3, MaxItems: 5, SpareAfter: 50 * time.Microsecond}, run, gone, nil)
	const n = 2000
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := g.Do(context.Background(), i)
			require.NoError(t, err)
			require.Equal(t, i+1, out)
		}()
	}
	wg.Wait()
	require.Len(t, answered, n)
	for i, k := range answered {
		require.Equal(t, 1, k, "call %d", i)
	}
	require.LessOrEqual(t, maxSeen, 5)
	require.Eventually(t, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.running == 0 && len(g.queue) == 0
	}, 10*time.Second, time.Millisecond)
}

// A caller whose context ends while it waits is answered at once (Gone),
// and the group that would have taken it leaves it out.
func TestCallerGoneWhileWaitingIsLeftOut(t *testing.T) {
	gt := newGate()
	g := New(Config{Workers: 1, MaxItems: 8}, gt.run, gone, nil)
	first := do(g, 1)
	require.Equal(t, []int{1}, <-gt.started)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := g.Do(ctx, 2); errc <- err }()
	later := do(g, 3)
	waitQueued(t, g, 2)
	cancel()
	require.True(t, errors.Is(<-errc, context.Canceled))
	close(gt.release)
	require.Equal(t, 10, <-first)
	require.Equal(t, []int{3}, <-gt.started)
	require.Equal(t, 30, <-later)
}
