package claim

import (
	"context"
	"errors"
	"sort"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/group"
)

// Completion is one item of CompleteBatch: what Complete takes.
type Completion struct {
	ID, Token string
	// ResultRef is the effect's external reference; may be empty.
	ResultRef string
}

// Failure is one item of FailBatch: what Fail takes.
type Failure struct {
	ID, Token string
	Kind      FailKind
	// Error is stored as last_error, cut to MaxErrorLen bytes.
	Error string
}

// Settled is the answer for one item of CompleteBatch or FailBatch: the
// record as the report left it, or Err, the *apperr.Error the same report
// would get alone (Invalid naming the field, NotFound, LeaseLost).
type Settled struct {
	Record Record
	Err    error
}

// settleItem is one token-guarded write of a settle batch.
type settleItem struct {
	tenant, id, token string
	// order is the record id in canonical form: batches lock rows in this
	// order.
	order string
	// write is the item's own statement (Complete or Fail) on q.
	write func(ctx context.Context, q dbsqlc.DBTX) (dbsqlc.RecordRow, error)
	// op, ref, text and jitter are the item as a row of SettleMany
	// (op: "complete" or the fail kind).
	op     string
	ref    string
	text   string
	jitter float64
	// replayed reports whether cur, the record after the guard matched no
	// row, is as this very report left it (an idempotent repeat).
	replayed func(cur Record) bool
	// done is called once, after commit, for an item the batch moved.
	done func(rec Record)
	err  error
}

// CompleteBatch is Complete for many records of tenant in one round trip
// and one transaction; results are in items order, one per item. Each item
// is decided exactly as Complete decides it alone: completing again with
// the same token answers the completed record (a retry whose answer was
// lost), a superseded token is LeaseLost, an unknown id NotFound. Those
// are per-item results; the error return is for the batch as a whole
// (Unavailable for a database error that means "try again", see db.Error;
// otherwise internal), and then no item of it is kept — unless the
// connection was lost under the commit (db.OutcomeUnknown): the same batch
// again is then answered item by item as it settled. Rows are locked in id
// order; a serialization failure or deadlock runs the whole batch again
// (db.RunTx).
func (l *Ledger) CompleteBatch(ctx context.Context, tenant string, items []Completion) ([]Settled, error) {
	batch := make([]settleItem, len(items))
	for i, c := range items {
		batch[i] = l.completion(tenant, c)
	}
	return l.settleBatch(ctx, batch)
}

// completion is the settle item of Complete c: checked, its write, how a
// repeat is told, and the metrics once it is done.
func (l *Ledger) completion(tenant string, c Completion) settleItem {
	it := settleItem{tenant: tenant, id: c.ID, token: c.Token}
	it.err = checkTokenArgs(c.ID, c.Token)
	if it.err == nil && len(c.ResultRef) > MaxResultRefLen {
		it.err = apperr.Field("result_ref", "must be at most %d bytes", MaxResultRefLen)
	}
	if it.err == nil {
		it.err = textFields(map[string]string{"result_ref": c.ResultRef})
	}
	token := c.Token
	it.write = func(ctx context.Context, q dbsqlc.DBTX) (dbsqlc.RecordRow, error) {
		row, err := queries.Complete(ctx, q, dbsqlc.CompleteParams{ID: c.ID, Tenant: tenant, Token: c.Token,
			ResultRef: nullable(c.ResultRef)})
		return dbsqlc.RecordRow(row), err
	}
	it.op, it.ref = "complete", c.ResultRef
	it.replayed = func(cur Record) bool { return cur.State == StateCompleted && cur.token == token }
	it.done = func(rec Record) {
		if rec.ClaimedAt != nil && rec.CompletedAt != nil {
			l.obs.Completed(rec.Source, rec.CompletedAt.Sub(*rec.ClaimedAt))
		}
	}
	return it
}

// FailBatch is Fail for many records of tenant in one round trip and one
// transaction, with CompleteBatch's rules: results in items order, each
// item decided as Fail decides it alone (failing again with the same token,
// kind and error answers the record), per-item errors in Settled.Err, the
// error return for the whole batch.
func (l *Ledger) FailBatch(ctx context.Context, tenant string, items []Failure) ([]Settled, error) {
	batch := make([]settleItem, len(items))
	for i, f := range items {
		batch[i] = l.failure(tenant, f)
	}
	return l.settleBatch(ctx, batch)
}

// failure is the settle item of Fail f.
func (l *Ledger) failure(tenant string, f Failure) settleItem {
	it := settleItem{tenant: tenant, id: f.ID, token: f.Token}
	it.err = checkTokenArgs(f.ID, f.Token)
	switch f.Kind {
	case Retryable, Permanent, UnknownOutcome:
	default:
		if it.err == nil {
			it.err = apperr.Field("retry", "must be one of retryable, permanent, unknown")
		}
	}
	msg := failText(f.Error)
	token, kind := f.Token, f.Kind
	it.op, it.text, it.jitter = string(f.Kind), msg, l.jitter()
	it.write = func(ctx context.Context, q dbsqlc.DBTX) (dbsqlc.RecordRow, error) {
		row, err := queries.Fail(ctx, q, dbsqlc.FailParams{ID: f.ID, Tenant: tenant, Token: f.Token,
			Kind: string(f.Kind), Error: msg, Jitter: it.jitter})
		return dbsqlc.RecordRow(row), err
	}
	it.replayed = func(cur Record) bool { return failedAs(cur, token, kind, msg) }
	it.done = func(rec Record) { l.obs.Failed(rec.Source, kind) }
	return it
}

// settle decides one Complete or Fail: in a group with concurrent ones
// (group commit, groupcommit.go), else alone.
func (l *Ledger) settle(ctx context.Context, it settleItem) (Record, error) {
	if it.err != nil {
		return Record{}, it.err
	}
	if l.settles == nil {
		s := l.settleAlone(ctx, it)
		return s.Record, s.Err
	}
	s, err := l.settles.Do(ctx, it)
	if err != nil {
		return Record{}, err
	}
	return s.Record, s.Err
}

// settleAlone decides one checked item with its one statement, committed
// on its own; a guard that matched no row is told apart (a repeat, a lost
// lease, no such record) by reading the record.
func (l *Ledger) settleAlone(ctx context.Context, it settleItem) Settled {
	rec, err := l.writeRow(ctx, func(q dbsqlc.DBTX) (dbsqlc.RecordRow, error) { return it.write(ctx, q) })
	if errors.Is(err, pgx.ErrNoRows) {
		cur, gerr := l.get(ctx, it.tenant, it.id)
		switch {
		case gerr != nil:
			return Settled{Err: gerr}
		case it.replayed(cur):
			return Settled{Record: cur}
		default:
			return Settled{Err: leaseLost(cur)}
		}
	}
	if err != nil {
		return Settled{Err: db.Error(err)}
	}
	it.done(rec)
	return Settled{Record: rec}
}

// runSettles decides a group of checked completes and fails
// (the group.Grouper's run), with the rules of runClaims.
func (l *Ledger) runSettles(ctx context.Context, calls []*group.Call[settleItem, Settled]) {
	if len(calls) == 1 {
		calls[0].Finish(l.settleAlone(ctx, calls[0].Item), nil)
		return
	}
	items := make([]settleItem, len(calls))
	for i, c := range calls {
		items[i] = c.Item
	}
	out, err := l.settleBatch(ctx, items)
	switch {
	case err == nil:
		for i, c := range calls {
			c.Finish(out[i], nil)
		}
	case db.Retryable(err):
		for _, c := range calls {
			c.Finish(Settled{}, err)
		}
	default:
		for _, c := range calls {
			c.Finish(l.settleAlone(ctx, c.Item), nil)
		}
	}
}

// failText is the error text Fail stores: at most MaxErrorLen bytes, valid
// UTF-8, no NUL characters.
func failText(msg string) string {
	return strings.ToValidUTF8(strings.ReplaceAll(truncate(msg, MaxErrorLen), "\x00", ""), "\uFFFD")
}

// settleBatch runs the writes of the items without an error in one
// transaction, in id order: one SettleMany statement per round of
// distinct ids (a record reported twice is decided twice, the second time
// on what the first left, as two transactions would), pipelined (one
// round trip) after ForceGenericPlan, so that they run on their cached
// generic plan, never planned afresh; then it reads the records whose
// guard matched no row (second round trip, same transaction, Record on
// its generic plan too) to tell a replay from a lost lease or a missing
// record.
func (l *Ledger) settleBatch(ctx context.Context, items []settleItem) ([]Settled, error) {
	out := make([]Settled, len(items))
	var order []int
	for i := range items {
		if items[i].err != nil {
			out[i].Err = items[i].err
			continue
		}
		items[i].order = uuid.MustParse(items[i].id).String() // checkTokenArgs parsed it
		order = append(order, i)
	}
	if len(order) == 0 {
		return out, nil
	}
	sort.SliceStable(order, func(a, b int) bool { return items[order[a]].order < items[order[b]].order })

	moved := make([]bool, len(items))
	err := db.RunTx(ctx, l.pool, func(tx pgx.Tx) error {
		var missed []int
		rounds := distinctIDRounds(items, order)
		b := &pgx.Batch{}
		queue := db.Queue(b)
		_ = queries.ForceGenericPlan(ctx, queue)
		for _, round := range rounds {
			_, _ = queries.SettleMany(ctx, queue, settleManyParams(items, round))
		}
		results := db.Results(tx.SendBatch(ctx, b))
		if err := queries.ForceGenericPlan(ctx, results); err != nil {
			results.Close()
			return err
		}
		for _, round := range rounds {
			rows, err := queries.SettleMany(ctx, results, dbsqlc.SettleManyParams{})
			if err != nil {
				results.Close()
				return err
			}
			got := make(map[string]Record, len(rows))
			for _, row := range rows {
				rec := recordOf(dbsqlc.RecordRow(row))
				got[rec.ID] = rec
			}
			for _, i := range round {
				if rec, ok := got[items[i].order]; ok {
					out[i], moved[i] = Settled{Record: rec}, true
				} else {
					missed = append(missed, i)
					moved[i] = false
				}
			}
		}
		if err := results.Close(); err != nil {
			return err
		}
		if len(missed) == 0 {
			return nil
		}
		b = &pgx.Batch{}
		queue = db.Queue(b)
		for _, i := range missed {
			_, _ = queries.Record(ctx, queue, dbsqlc.RecordParams{ID: items[i].id, Tenant: items[i].tenant})
		}
		results = db.Results(tx.SendBatch(ctx, b))
		for _, i := range missed {
			row, err := queries.Record(ctx, results, dbsqlc.RecordParams{})
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				out[i] = Settled{Err: apperr.New(apperr.NotFound, "no such claim")}
			case err != nil:
				results.Close()
				return err
			case items[i].replayed(recordOf(row)):
				out[i] = Settled{Record: recordOf(row)}
			default:
				out[i] = Settled{Err: leaseLost(recordOf(row))}
			}
		}
		return results.Close()
	})
	if err != nil {
		return nil, db.Error(err)
	}
	for _, i := range order {
		if moved[i] {
			items[i].done(out[i].Record)
		}
	}
	return out, nil
}

// distinctIDRounds splits order (indexes of items, in id order) into
// rounds of distinct record ids, each in id order: the k-th report of
// every record goes to round k, so every record a later round locks was
// locked by the first.
func distinctIDRounds(items []settleItem, order []int) [][]int {
	var rounds [][]int
	seen := make(map[string]int, len(order))
	for _, i := range order {
		n := seen[items[i].order]
		seen[items[i].order] = n + 1
		if n == len(rounds) {
			rounds = append(rounds, nil)
		}
		rounds[n] = append(rounds[n], i)
	}
	return rounds
}

// settleManyParams returns SettleMany's arguments for items[idx...].
func settleManyParams(items []settleItem, idx []int) dbsqlc.SettleManyParams {
	n := len(idx)
	a := dbsqlc.SettleManyParams{IDs: make([]string, n), Tenants: make([]string, n), Tokens: make([]string, n),
		Ops: make([]string, n), ResultRefs: make([]string, n), Errors: make([]string, n), Jitters: make([]float64, n)}
	for j, i := range idx {
		it := items[i]
		a.IDs[j], a.Tenants[j], a.Tokens[j], a.Ops[j] = it.order, it.tenant, it.token, it.op
		a.ResultRefs[j], a.Errors[j], a.Jitters[j] = it.ref, it.text, it.jitter
	}
	return a
}
