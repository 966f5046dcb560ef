// Package group is group commit's queue: concurrent calls of one kind
// (claims, settles, ingest receipts) join a queue and are decided together,
// many to one transaction, by a function of the caller's package.
//
// A call joins the queue of its Grouper. When no group is in flight, the
// call starts one at once, taking everything that waits (at most
// Config.MaxItems calls, and at most Config.MaxWeight in weight). While a
// group is in flight, calls wait for it to end and the next group takes
// them all: a group closes when it is full or when nothing else waits,
// never on a timer, so an idle Grouper sends a lone call at once and under
// load the groups grow by themselves while the previous one commits.
//
// More groups run at once (up to Config.Workers) only when one worker
// cannot keep up: when the waiting calls fill a group, or when the group
// in flight has run longer than Config.SpareAfter (a commit slower than
// the disk's usual flush, a row lock held elsewhere) and calls wait behind
// it. Starting a second group for every call that arrives while one
// commits would split the load into many small groups, and the database's
// cost per claim falls steeply with the size of its group. A worker beyond
// the first stops as soon as the queue no longer fills a group.
// No goroutine runs while the queue is empty.
//
// A call whose context ends before its group starts is left out; once
// started, a group of several is decided whatever one caller does, on a
// context of its own (the first caller's values, no cancellation, bounded
// by Config.Timeout). A lone call runs on its caller's context, as without
// grouping. Either way a caller whose context ends is answered with
// Grouper.Gone(ctx.Err()).
package group

import (
	"context"
	"sync"
	"time"
)

// Config bounds a Grouper.
type Config struct {
	// Workers is how many groups may be in flight at once (each on a
	// database connection of its own); at least 1.
	Workers int
	// MaxItems bounds the calls of one group (and so the rows it locks); at
	// least 1.
	MaxItems int
	// MaxWeight, when > 0, bounds the sum of the weights (DoWeighted) of
	// one group's calls: the rows it locks when one call may write many.
	// A call heavier than MaxWeight runs in a group of its own.
	MaxWeight int
	// Timeout bounds one group of several calls, whatever its callers'
	// deadlines; > 0.
	Timeout time.Duration
	// SpareAfter is how long the oldest group in flight may run, with
	// calls waiting behind it, before another worker starts (when fewer
	// than Workers run); default 10 ms, about ten times a local commit.
	// A queue that fills a group starts one at once, whatever the time.
	SpareAfter time.Duration
}

// Call is one caller's item in a group. Run must Finish every Call it is
// given, exactly once.
type Call[T, R any] struct {
	// Ctx is the caller's context (for its values and, alone, its end).
	Ctx    context.Context
	Item   T
	weight int
	out    R
	err    error
	done   chan struct{}
}

// Finish answers the call.
func (c *Call[T, R]) Finish(out R, err error) {
	c.out, c.err = out, err
	close(c.done)
}

// Grouper is one kind's queue; its zero value is not usable (see New).
type Grouper[T, R any] struct {
	cfg     Config
	run     func(ctx context.Context, calls []*Call[T, R])
	gone    func(error) error
	observe func(n int)

	mu      sync.Mutex
	queue   []*Call[T, R]
	weight  int // of the queue's calls
	running int
	// taken counts the groups taken so far; started is when each running
	// worker took the group it runs (zero between groups).
	taken   uint64
	started map[uint64]time.Time
	workers uint64 // drive loops started so far: each one's key in started
	// spareArmed: a SpareAfter timer waits for the queue's head.
	spareArmed bool
}

// New returns a Grouper whose groups are decided by run. gone turns the
// error of a caller's ended context into that caller's answer (claimd: a
// statement cut by its context, 503 outcome unknown); observe, when not
// nil, is told each group's size before it runs.
func New[T, R any](cfg Config, run func(ctx context.Context, calls []*Call[T, R]), gone func(error) error, observe func(n int)) *Grouper[T, R] {
	cfg.Workers, cfg.MaxItems = max(cfg.Workers, 1), max(cfg.MaxItems, 1)
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.SpareAfter <= 0 {
		cfg.SpareAfter = 10 * time.Millisecond
	}
	return &Grouper[T, R]{cfg: cfg, run: run, gone: gone, observe: observe, started: map[uint64]time.Time{}}
}

// Do adds item to the queue and waits for its answer or for ctx's end.
func (g *Grouper[T, R]) Do(ctx context.Context, item T) (R, error) {
	return g.DoWeighted(ctx, item, 1)
}

// DoWeighted is Do for an item of the given weight (at least 1; the rows
// it writes), counted against Config.MaxWeight.
func (g *Grouper[T, R]) DoWeighted(ctx context.Context, item T, weight int) (R, error) {
	c := &Call[T, R]{Ctx: ctx, Item: item, weight: max(weight, 1), done: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, c)
	g.weight += c.weight
	start := g.running == 0 || (g.running < g.cfg.Workers && (g.full() || g.stalled(time.Now())))
	if start {
		g.running++
	} else if g.running < g.cfg.Workers && !g.spareArmed {
		// Behind a group in flight: if that group is still the one in
		// flight SpareAfter from now and calls still wait, start a spare.
		g.armSpare()
	}
	g.mu.Unlock()
	if start {
		go g.drive()
	}
	select {
	case <-c.done:
		return c.out, c.err
	case <-ctx.Done():
		// The group may still decide it: the caller's package says what
		// that means (Gone).
		var zero R
		return zero, g.gone(ctx.Err())
	}
}

// Queued is how many calls wait for a group (tests).
func (g *Grouper[T, R]) Queued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue)
}

// full reports whether the waiting calls fill a group; g.mu held.
func (g *Grouper[T, R]) full() bool {
	return len(g.queue) >= g.cfg.MaxItems || (g.cfg.MaxWeight > 0 && g.weight >= g.cfg.MaxWeight)
}

// stalled reports whether a group in flight has run longer than
// SpareAfter; g.mu held.
func (g *Grouper[T, R]) stalled(now time.Time) bool {
	for _, t := range g.started {
		if !t.IsZero() && now.Sub(t) >= g.cfg.SpareAfter {
			return true
		}
	}
	return false
}

// armSpare sets the SpareAfter timer for the groups taken so far; g.mu
// held.
func (g *Grouper[T, R]) armSpare() {
	g.spareArmed = true
	taken := g.taken
	time.AfterFunc(g.cfg.SpareAfter, func() { g.spareCheck(taken) })
}

// spareCheck runs SpareAfter after a call queued behind a group in flight:
// if no group has been taken since (taken unchanged), calls still wait and
// a slot is free, it starts a spare worker.
func (g *Grouper[T, R]) spareCheck(taken uint64) {
	g.mu.Lock()
	g.spareArmed = false
	start := len(g.queue) > 0 && g.running < g.cfg.Workers && (g.taken == taken || g.stalled(time.Now()))
	if start {
		g.running++
	} else if len(g.queue) > 0 && g.running > 0 && g.running < g.cfg.Workers {
		g.armSpare() // groups moved on meanwhile; watch the new head
	}
	g.mu.Unlock()
	if start {
		go g.drive()
	}
}

// drive runs groups until the queue is empty (or, for a worker beyond
// the first, until the queue no longer fills a group), then gives its
// slot back.
func (g *Grouper[T, R]) drive() {
	g.mu.Lock()
	g.workers++
	w := g.workers
	g.mu.Unlock()
	for {
		g.mu.Lock()
		delete(g.started, w)
		if g.running > 1 && !g.full() && !g.stalled(time.Now()) {
			// A spare no longer needed: another worker takes what waits
			// when its group ends.
			g.running--
			g.mu.Unlock()
			return
		}
		var calls []*Call[T, R]
		weight := 0
		for len(g.queue) > 0 && len(calls) < g.cfg.MaxItems {
			c := g.queue[0]
			if g.cfg.MaxWeight > 0 && len(calls) > 0 && weight+c.weight > g.cfg.MaxWeight {
				break // full: c starts the next group
			}
			g.queue[0] = nil
			g.queue = g.queue[1:]
			g.weight -= c.weight
			if err := c.Ctx.Err(); err != nil {
				var zero R
				c.Finish(zero, g.gone(err)) // its caller is gone: left out
				continue
			}
			calls = append(calls, c)
			weight += c.weight
		}
		if len(calls) == 0 {
			g.running--
			if len(g.queue) == 0 {
				g.queue = nil // let the backing array go
			}
			g.mu.Unlock()
			return
		}
		g.taken++
		g.started[w] = time.Now()
		g.mu.Unlock()
		if g.observe != nil {
			g.observe(len(calls))
		}
		if len(calls) == 1 {
			// Alone: on its caller's context, as without grouping (its end
			// cuts the statement).
			g.run(calls[0].Ctx, calls)
			continue
		}
		// The group's own bound: no one caller's end cancels its neighbours'
		// decisions; the values of the first caller's context (a trace)
		// are kept.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(calls[0].Ctx), g.cfg.Timeout)
		g.run(ctx, calls)
		cancel()
	}
}
