package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"sort"

	"github.com/jackc/pgx/v5"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/group"
)

// Grouped dispatch statements.
//
// Besides River's own fetch and completion (each already one statement
// for many jobs), every dispatch reads its stored event and, once the
// target answered 2xx, marks it dispatched with its delivery-log row: a
// read and a commit per event, and each attempt is reserved before its
// POST (reserve): a commit more. Concurrent dispatches share them, with the
// grouping rules of the receipts (group.go, the same GroupConfig): the
// reads of a group are one statement (claim_id = ANY), the marks of a
// group one transaction of one pipelined batch in claim id order (so that
// overlapping groups never deadlock); a serialization failure or deadlock
// runs the group's transaction again; a retryable database error is every
// caller's answer; any other error runs each alone. A dispatch that waits
// for its group is already past its POST (marks) or before it (reads):
// the target never sees a delay beyond the group's own statements.
// Retries, dead letters and waits for a source stay one statement each:
// they are the exception.

// loadSQL reads stored events by claim id ($1, uuid[]).
const loadSQL = `SELECT e.claim_id::text, c.tenant, c.source, c.event_id, COALESCE(c.event_type, ''), e.content_type,
	e.dispatch_state, e.body, e.headers, e.dispatch_attempts, e.received_at
	FROM inbox_events e JOIN claims c ON c.id = e.claim_id WHERE e.claim_id = ANY($1::uuid[])`

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

// claimedSinceArmed is whether the workflow has claimed the event of
// inbox row ie (its claim c) since the dispatch was armed: the claim has
// left received and, when it is retryable_failed, a claim has won it
// since (every win counts an attempt; ie.armed_attempt is the claim's
// attempt when a replay, a redelivery or a reconciler's not_done armed
// the dispatch again, NULL when only ingest armed it). A claim already
// retryable_failed when its dispatch was re-armed is no sign that the
// workflow ran: n8n answers 200 "n8n is starting up" and runs nothing.
// Any other state (processing, completed, unknown, dead_lettered…) is
// one the workflow's claim, a holder or an operator put it in, as
// before.
const claimedSinceArmed = `c.state <> 'received'
	AND (c.state <> 'retryable_failed' OR c.attempt > COALESCE(ie.armed_attempt, 0))`

// markSQL marks a dispatch done with its delivery-log row and says
// whether it did: only while the attempt holds the event and, with
// require_claim, only once the event was claimed since the dispatch was
// armed (claimedSinceArmed). $1 claim id, $2 attempt, $3 HTTP status, $4
// require_claim, $5 holder, $6 detail.
const markSQL = `WITH e AS (UPDATE inbox_events ie SET dispatch_state = 'dispatched',
	last_dispatch_status = $3, last_dispatch_error = NULL, dispatched_at = now(),
	dispatch_holder = NULL, dispatch_lease_until = NULL
	WHERE ie.claim_id = $1 AND ie.dispatch_holder = $5
	AND (NOT $4 OR EXISTS (SELECT 1 FROM claims c WHERE c.id = $1 AND ` + claimedSinceArmed + `))
	RETURNING ie.claim_id), log AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail)
	SELECT claim_id, 'dispatched', $2, $6 FROM e)
	SELECT EXISTS (SELECT 1 FROM e)`

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

// reserveReq is an attempt to reserve with reserveSQL: holder and the
// lease in milliseconds.
type reserveReq struct {
	claimID, holder string
	leaseMS         int64
}

// reserved is reserveSQL's answer: the attempt's number, or ok false when
// the dispatch is not pending or another attempt holds it.
type reserved struct {
	attempt int
	ok      bool
}

// reserveFast runs reserveSQL for r, grouped with concurrent reservations.
func (in *Inbox) reserveFast(ctx context.Context, r reserveReq) (reserved, error) {
	if in.reserves == nil {
		return in.reserveAlone(ctx, r)
	}
	return in.reserves.Do(ctx, r)
}

func (in *Inbox) reserveAlone(ctx context.Context, r reserveReq) (reserved, error) {
	var out reserved
	err := in.pool.QueryRow(ctx, reserveSQL, r.claimID, r.holder, r.leaseMS).Scan(&out.attempt)
	if errors.Is(err, pgx.ErrNoRows) {
		return reserved{}, nil
	}
	out.ok = err == nil
	return out, err
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
		for _, i := range order {
			r := calls[i].Item
			b.Queue(reserveSQL, r.claimID, r.holder, r.leaseMS)
		}
		br := tx.SendBatch(ctx, b)
		for _, i := range order {
			out[i] = reserved{}
			err := br.QueryRow().Scan(&out[i].attempt)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
			case err != nil:
				br.Close()
				return err
			default:
				out[i].ok = true
			}
		}
		return br.Close()
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
	rows, err := in.pool.Query(ctx, loadSQL, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]stored, len(ids))
	for rows.Next() {
		var id string
		var st stored
		var hdr []byte
		if err := rows.Scan(&id, &st.tenant, &st.keySource, &st.eventID, &st.eventType, &st.contentType, &st.state,
			&st.body, &hdr, &st.attempts, &st.receivedAt); err != nil {
			return nil, err
		}
		_ = json.Unmarshal(hdr, &st.headers)
		out[id] = st
	}
	return out, rows.Err()
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
	var marked bool
	err := in.pool.QueryRow(ctx, markSQL, m.claimID, m.attempt, m.status, m.requireClaim, m.holder, m.detail).Scan(&marked)
	return marked, err
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
		for _, i := range order {
			m := calls[i].Item
			b.Queue(markSQL, m.claimID, m.attempt, m.status, m.requireClaim, m.holder, m.detail)
		}
		br := tx.SendBatch(ctx, b)
		for _, i := range order {
			if err := br.QueryRow().Scan(&marked[i]); err != nil {
				br.Close()
				return err
			}
		}
		return br.Close()
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
