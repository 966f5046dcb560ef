// Package group is group commit's queue: concurrent calls of one kind
// (claims, settles, ingest receipts) join a queue and are decided together,
// many to one transaction, by a function of the caller's package.
//
// A call joins the queue of its Grouper; while fewer than Config.Workers
// groups are in flight, the call starts one at once, taking everything
// that waits (at most Config.MaxItems calls, and at most Config.MaxWeight
// in weight); otherwise it waits for the next group to close. A group closes when it is full or when nothing else
// waits, never on a timer: an idle Grouper sends a lone call at once, and
// under load the groups grow by themselves while the previous ones commit.
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
	running int
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
	return &Grouper[T, R]{cfg: cfg, run: run, gone: gone, observe: observe}
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
	start := g.running < g.cfg.Workers
	if start {
		g.running++
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

// drive runs groups until the queue is empty, then gives its slot back.
func (g *Grouper[T, R]) drive() {
	for {
		g.mu.Lock()
		var calls []*Call[T, R]
		weight := 0
		for len(g.queue) > 0 && len(calls) < g.cfg.MaxItems {
			c := g.queue[0]
			if g.cfg.MaxWeight > 0 && len(calls) > 0 && weight+c.weight > g.cfg.MaxWeight {
				break // full: c starts the next group
			}
			g.queue[0] = nil
			g.queue = g.queue[1:]
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
