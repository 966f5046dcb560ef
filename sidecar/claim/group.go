package claim

import (
	"context"
	"sync"
	"time"
)

// Group commit.
//
// Every claim is one statement and every commit one WAL flush; a sidecar
// that gave each request a transaction of its own could at best approach
// the database's own single-row client. Concurrent Claim, Complete and
// Fail calls of a Ledger therefore share transactions: a call joins the
// queue of its kind; while fewer than GroupConfig.Workers groups of that
// kind are in flight, the call starts one at once, taking everything that
// waits (at most GroupConfig.MaxItems calls); otherwise it waits for the
// next group to close. A group closes when it is full or when nothing else
// waits, never on a timer: an idle ledger sends a lone call at once, and
// under load the groups grow by themselves while the previous ones commit.
//
// A group is one round trip and one transaction (claims: one pipelined
// batch in PostgreSQL's implicit transaction; settles: settleBatch),
// acknowledged only after its commit. Each call still gets exactly the
// answer it would get alone:
//
//   - calls are validated before they join (an invalid one is answered at
//     once and never reaches a group);
//   - the statements of a group run in key (claims) or id (settles) order,
//     so that overlapping groups, here or on other replicas, lock rows in
//     one order and never deadlock; two calls for one key in a group are
//     decided one after the other, as two transactions would be;
//   - a serialization failure or deadlock runs the whole group again
//     (retry); a database error that means "try again" for the whole group
//     (RetryableDB: the database unreachable, the connection lost, the
//     commit's outcome unknown) is every call's answer, as it would have
//     been alone; any other error, which one call's statement may have
//     caused, runs each call of the group again in a transaction of its
//     own, so that it fails alone and its neighbours go on;
//   - a call whose context ends before its group is sent is left out; once
//     sent, a group of several is decided whatever one caller does (a lone
//     call runs on its caller's context, as without grouping). Either way
//     the caller is answered as a statement cut by its context would be
//     (DBError: Unavailable, outcome unknown, retry the same request): a
//     claim won meanwhile is found again by its request id (won_replayed)
//     or expires like any lease whose holder went away.

// GroupConfig sets group commit of a Ledger.
type GroupConfig struct {
	// Workers is how many groups of one kind (claims; completes and fails)
	// may be in flight at once, each on a connection of its own; 0 turns
	// grouping off (every call its own transaction). Default (negative or
	// unset through DefaultGroupConfig): 4.
	Workers int
	// MaxItems bounds the calls of one group (and so the rows it locks);
	// default 64.
	MaxItems int
	// Timeout bounds one group's database work, whatever its callers'
	// deadlines; default 10 s.
	Timeout time.Duration
}

// DefaultGroupConfig is group commit as claimd runs it by default.
func DefaultGroupConfig() GroupConfig {
	return GroupConfig{Workers: 4, MaxItems: 64, Timeout: 10 * time.Second}
}

func (c GroupConfig) withDefaults() GroupConfig {
	d := DefaultGroupConfig()
	if c.Workers < 0 {
		c.Workers = d.Workers
	}
	if c.MaxItems <= 0 {
		c.MaxItems = d.MaxItems
	}
	if c.Timeout <= 0 {
		c.Timeout = d.Timeout
	}
	return c
}

// call is one caller's item in a group and, once done is closed, its
// answer.
type call[T, R any] struct {
	ctx  context.Context
	item T
	out  R
	err  error
	done chan struct{}
}

func (c *call[T, R]) finish(out R, err error) {
	c.out, c.err = out, err
	close(c.done)
}

// grouper is one kind's queue. It holds no goroutine while idle: the call
// that finds a free worker slot starts a driver, which runs groups until
// the queue is empty.
type grouper[T, R any] struct {
	cfg GroupConfig
	// run decides a group; it must finish every call it is given.
	run func(ctx context.Context, calls []*call[T, R])
	// observe, when set, is told each group's size.
	observe func(n int)

	mu      sync.Mutex
	queue   []*call[T, R]
	running int
}

// do adds item to the queue and waits for its answer or for ctx's end.
func (g *grouper[T, R]) do(ctx context.Context, item T) (R, error) {
	c := &call[T, R]{ctx: ctx, item: item, done: make(chan struct{})}
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
		// As a statement cut by its context: Unavailable, the outcome
		// unknown (the group may still decide it), retry the same request.
		var zero R
		return zero, DBError(ctx.Err())
	}
}

// drive runs groups until the queue is empty, then gives its slot back.
func (g *grouper[T, R]) drive() {
	for {
		g.mu.Lock()
		var group []*call[T, R]
		for len(g.queue) > 0 && len(group) < g.cfg.MaxItems {
			c := g.queue[0]
			g.queue[0] = nil
			g.queue = g.queue[1:]
			if err := c.ctx.Err(); err != nil {
				var zero R
				c.finish(zero, DBError(err)) // its caller is gone: left out
				continue
			}
			group = append(group, c)
		}
		if len(group) == 0 {
			g.running--
			if len(g.queue) == 0 {
				g.queue = nil // let the backing array go
			}
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		if g.observe != nil {
			g.observe(len(group))
		}
		if len(group) == 1 {
			// Alone: on its caller's context, as without grouping (its end
			// cuts the statement).
			g.run(group[0].ctx, group)
			continue
		}
		// The group's own bound: no one caller's end cancels its neighbours'
		// decisions; the values of the first caller's context (a trace)
		// are kept.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(group[0].ctx), g.cfg.Timeout)
		g.run(ctx, group)
		cancel()
	}
}
