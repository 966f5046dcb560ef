package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"sort"

	"github.com/jackc/pgx/v5"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/group"
)

// Grouped dispatch statements.
//
// Besides River's own fetch and completion (each already one statement
// for many jobs), every dispatch reads its stored event and, once the
// target answered 2xx, marks it dispatched with its delivery-log row: a
// read and a commit per event, and each attempt is reserved before its
// POST (reserve): a commit more. Concurrent dispatches share them, with
// the grouping rules of the receipts (receipt_groups.go, the same
// GroupConfig): the reads of a group are one statement (claim_id = ANY),
// the marks of a group one transaction of one pipelined batch in claim
// id order (so that overlapping groups never deadlock); a serialization failure or deadlock
// runs the group's transaction again; a retryable database error is every
// caller's answer; any other error runs each alone. A dispatch that waits
// for its group is already past its POST (marks) or before it (reads):
// the target never sees a delay beyond the group's own statements.
// Retries, dead letters and waits for a source stay one statement each:
// they are the exception.

// loaded is a read's answer: found false when the event is gone (purged
// by retention).
type loaded struct {
	st    stored
	found bool
}

// mark is a dispatch to mark dispatched after a 2xx (or a status in
// forward.delivered_statuses).
type mark struct {
	claimID string
	// holder is the attempt's reservation (reserve): the mark applies
	// only while it still holds the event.
	holder       string
	attempt      int
	status       int
	detail       string
	requireClaim bool
}

// newDispatchGroupers sets the groupers of reads and marks for gc (none
// when gc.Workers is 0: each dispatch its own statements).
func (in *Inbox) newDispatchGroupers(gc group.Config) {
	if gc.Workers <= 0 {
		return
	}
	var observe func(int)
	if o, ok := in.obs.(claim.GroupObserver); ok {
		observe = func(n int) { o.Grouped("dispatch", n) }
	}
	gc.MaxWeight = 0
	in.loads = group.New(gc, in.runLoads, db.Error, nil)
	in.reserves = group.New(gc, in.runReserves, db.Error, nil)
	in.marks = group.New(gc, in.runMarks, db.Error, observe)
}

// reserveReq is an attempt to reserve with ReserveDispatch: holder and
// the lease in milliseconds.
type reserveReq struct {
	claimID, holder string
	leaseMS         int64
}

// reserved is ReserveDispatch's answer: the attempt's number, or ok false when
// the dispatch is not pending or another attempt holds it.
type reserved struct {
	attempt int
	ok      bool
}

// reserveFast runs ReserveDispatch for r, grouped with concurrent reservations.
func (in *Inbox) reserveFast(ctx context.Context, r reserveReq) (reserved, error) {
	if in.reserves == nil {
		return in.reserveAlone(ctx, r)
	}
	return in.reserves.Do(ctx, r)
}

func (in *Inbox) reserveAlone(ctx context.Context, r reserveReq) (reserved, error) {
	attempt, err := queries.ReserveDispatch(ctx, in.pool, r.params())
	if errors.Is(err, pgx.ErrNoRows) {
		return reserved{}, nil
	}
	return reserved{attempt: int(attempt), ok: err == nil}, err
}

func (r reserveReq) params() dbsqlc.ReserveDispatchParams {
	return dbsqlc.ReserveDispatchParams{ClaimID: r.claimID, Holder: r.holder, LeaseMs: float64(r.leaseMS)}
}

// runReserves reserves a group (the group.Grouper's run): one
// transaction, one pipelined batch in claim id order, as runMarks.
func (in *Inbox) runReserves(ctx context.Context, calls []*group.Call[reserveReq, reserved]) {
	if len(calls) == 1 {
		calls[0].Finish(in.reserveAlone(ctx, calls[0].Item))
		return
	}
	order := make([]int, len(calls))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return calls[order[a]].Item.claimID < calls[order[b]].Item.claimID })
	out := make([]reserved, len(calls))
	err := db.RunTx(ctx, in.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		queue := db.Queue(b)
		for _, i := range order {
			_, _ = queries.ReserveDispatch(ctx, queue, calls[i].Item.params())
		}
		results := db.Results(tx.SendBatch(ctx, b))
		for _, i := range order {
			out[i] = reserved{}
			attempt, err := queries.ReserveDispatch(ctx, results, dbsqlc.ReserveDispatchParams{})
			switch {
			case errors.Is(err, pgx.ErrNoRows):
			case err != nil:
				results.Close()
				return err
			default:
				out[i] = reserved{attempt: int(attempt), ok: true}
			}
		}
		return results.Close()
	})
	switch {
	case err == nil:
		for i, c := range calls {
			c.Finish(out[i], nil)
		}
	case db.Retryable(err):
		for _, c := range calls {
			c.Finish(reserved{}, err)
		}
	default:
		for _, c := range calls {
			c.Finish(in.reserveAlone(ctx, c.Item))
		}
	}
}

// load reads the stored event of claim id.
func (in *Inbox) load(ctx context.Context, id string) (loaded, error) {
	if in.loads == nil {
		return in.loadAlone(ctx, id)
	}
	return in.loads.Do(ctx, id)
}

func (in *Inbox) loadAlone(ctx context.Context, id string) (loaded, error) {
	m, err := in.loadMany(ctx, []string{id})
	if err != nil {
		return loaded{}, err
	}
	st, ok := m[id]
	return loaded{st: st, found: ok}, nil
}

// loadMany reads the stored events of ids in one statement, by claim id.
func (in *Inbox) loadMany(ctx context.Context, ids []string) (map[string]stored, error) {
	rows, err := queries.LoadEvents(ctx, in.pool, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[string]stored, len(ids))
	for _, r := range rows {
		st := stored{tenant: r.Tenant, keySource: r.Source, eventID: r.EventID, eventType: r.EventType,
			contentType: r.ContentType, state: r.DispatchState, body: r.Body, attempts: int(r.DispatchAttempts),
			receivedAt: r.ReceivedAt}
		_ = json.Unmarshal(r.Headers, &st.headers)
		out[r.ClaimID] = st
	}
	return out, nil
}

// runLoads reads a group (the group.Grouper's run).
func (in *Inbox) runLoads(ctx context.Context, calls []*group.Call[string, loaded]) {
	if len(calls) == 1 {
		calls[0].Finish(in.loadAlone(ctx, calls[0].Item))
		return
	}
	ids := make([]string, len(calls))
	for i, c := range calls {
		ids[i] = c.Item
	}
	m, err := in.loadMany(ctx, ids)
	switch {
	case err == nil:
		for _, c := range calls {
			st, ok := m[c.Item]
			c.Finish(loaded{st: st, found: ok}, nil)
		}
	case db.Retryable(err):
		for _, c := range calls {
			c.Finish(loaded{}, err)
		}
	default:
		for _, c := range calls {
			c.Finish(in.loadAlone(ctx, c.Item))
		}
	}
}

// markDispatched marks a 2xx dispatch done and reports whether it did.
func (in *Inbox) markDispatched(ctx context.Context, m mark) (bool, error) {
	if in.marks == nil {
		return in.markAlone(ctx, m)
	}
	return in.marks.Do(ctx, m)
}

func (in *Inbox) markAlone(ctx context.Context, m mark) (bool, error) {
	return queries.MarkDispatched(ctx, in.pool, m.params())
}

func (m mark) params() dbsqlc.MarkDispatchedParams {
	return dbsqlc.MarkDispatchedParams{ClaimID: m.claimID, Attempt: int32(m.attempt), Status: int32(m.status),
		RequireClaim: m.requireClaim, Holder: m.holder, Detail: m.detail}
}

// runMarks marks a group (the group.Grouper's run): one transaction, one
// pipelined batch in claim id order.
func (in *Inbox) runMarks(ctx context.Context, calls []*group.Call[mark, bool]) {
	if len(calls) == 1 {
		calls[0].Finish(in.markAlone(ctx, calls[0].Item))
		return
	}
	order := make([]int, len(calls))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return calls[order[a]].Item.claimID < calls[order[b]].Item.claimID })
	marked := make([]bool, len(calls))
	err := db.RunTx(ctx, in.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		queue := db.Queue(b)
		for _, i := range order {
			_, _ = queries.MarkDispatched(ctx, queue, calls[i].Item.params())
		}
		results := db.Results(tx.SendBatch(ctx, b))
		for _, i := range order {
			var err error
			if marked[i], err = queries.MarkDispatched(ctx, results, dbsqlc.MarkDispatchedParams{}); err != nil {
				results.Close()
				return err
			}
		}
		return results.Close()
	})
	switch {
	case err == nil:
		for i, c := range calls {
			c.Finish(marked[i], nil)
		}
	case db.Retryable(err):
		for _, c := range calls {
			c.Finish(false, err)
		}
	default:
		for _, c := range calls {
			c.Finish(in.markAlone(ctx, c.Item))
		}
	}
}
