package claim

import (
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/group"
)

// Group commit.
//
// Every claim is one statement and every commit one WAL flush; a sidecar
// that gave each request a transaction of its own could at best approach
// the database's own single-row client. Concurrent Claim, Complete and
// Fail calls of a Ledger therefore share transactions: a call joins the
// queue of its kind (package group: one group in flight while the next
// fills, more, up to GroupConfig.Workers, only while the waiting calls
// fill a group or the one in flight stalls; at most GroupConfig.MaxItems
// calls each; a group closes when it is full or when nothing else waits,
// never on a timer).
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
//     (db.Retryable: the database unreachable, the connection lost, the
//     commit's outcome unknown) is every call's answer, as it would have
//     been alone; any other error, which one call's statement may have
//     caused, runs each call of the group again in a transaction of its
//     own, so that it fails alone and its neighbours go on;
//   - a call whose context ends before its group is sent is left out; once
//     sent, a group of several is decided whatever one caller does (a lone
//     call runs on its caller's context, as without grouping). Either way
//     the caller is answered as a statement cut by its context would be
//     (db.Error: Unavailable, outcome unknown, retry the same request): a
//     claim won meanwhile is found again by its request id (won_replayed)
//     or expires like any lease whose holder went away.

// GroupConfig sets group commit of a Ledger.
type GroupConfig struct {
	// Workers is how many groups of one kind (claims; completes and fails)
	// may be in flight at once, each on a connection of its own (beyond
	// the first, only while the waiting calls fill a group or the group in
	// flight has run over 10 ms; see package group); 0 turns
	// grouping off (every call its own transaction). Default (negative or
	// unset through DefaultGroupConfig): 2.
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
	return GroupConfig{Workers: 2, MaxItems: 64, Timeout: 10 * time.Second}
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

// groupConfig is c for package group.
func (c GroupConfig) groupConfig() group.Config {
	return group.Config{Workers: c.Workers, MaxItems: c.MaxItems, Timeout: c.Timeout}
}
