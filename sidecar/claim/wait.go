package claim

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
)

// Waiting for a concurrent holder.
//
// A claim answered in_progress may wait, up to a bound its caller chooses
// (at most MaxWait), until the holder's record leaves processing, and is
// then decided again: a copy of an event delivered while the first copy
// still runs its effect gets duplicate with the holder's result_ref once
// the holder completes (retry_later after a retryable Fail, unknown after
// an unknown outcome, won when the holder's lease ran out under policy
// reclaim) instead of "come back later". The wait ends at its bound with
// the in_progress answer it started from.
//
// The wake-up comes from PostgreSQL, not from polling: the waiter marks the
// record (wait_notify), and the record's next transition out of processing,
// by any statement on any replica, sends a notification on NotifyChannel
// (migration 00007). One connection per process, outside the pool, LISTENs
// and hands each notification to the claims that wait on that record. A
// waiting claim holds no pool connection: only its steps do (the first
// decision, the mark, each new decision), each bounded by StepTimeout.
//
// Race-free by order: a claim subscribes in the process first, then marks
// the record in a statement that also reports whether it is still
// processing. A settle that committed before the mark is seen by it (the
// claim is decided again at once); a settle after it finds the mark and
// notifies, and the subscription already listens.

// NotifyChannel is the PostgreSQL notification channel on which the
// database announces that a record a claim waits on has left processing.
// The payload is the record's id.
const NotifyChannel = "claimd_claim_settled"

// MaxWait is the longest a claim waits for a concurrent holder. It stays
// below the 30 seconds that the sidecar's HTTP server and the n8n node's
// sidecar calls allow one request.
const MaxWait = 25 * time.Second

// WaiterConfig configures a Waiter.
type WaiterConfig struct {
	// ConnConfig configures the waiter's own connection, the one that
	// LISTENs (usually pool.Config().ConnConfig). It is opened outside the
	// ledger's pool and kept open while Run runs.
	ConnConfig *pgx.ConnConfig
	// StepTimeout bounds each database step of a waiting claim (the first
	// decision, marking the record, each new decision), never the wait
	// itself; default 10 s.
	StepTimeout time.Duration
	// Logger receives the listener's connection failures.
	Logger zerolog.Logger
}

// Waiter decides claims that may wait for a concurrent holder (Claim,
// ClaimBatch). Its listener runs in Run; while it is not connected claims
// do not wait (they are answered at once, as without a wait). Safe for
// concurrent use. Close, or the end of Run, ends every wait at once.
type Waiter struct {
	ledger *Ledger
	cfg    WaiterConfig

	mu        sync.Mutex
	subs      map[string]map[*subscription]struct{} // by record id
	waiting   map[*subscription]struct{}
	listening bool
	closed    bool
	done      chan struct{} // closed by Close
}

// NewWaiter returns a Waiter that decides claims with l. Start its
// listener with Run.
func NewWaiter(l *Ledger, cfg WaiterConfig) *Waiter {
	if cfg.StepTimeout <= 0 {
		cfg.StepTimeout = 10 * time.Second
	}
	return &Waiter{ledger: l, cfg: cfg, subs: map[string]map[*subscription]struct{}{},
		waiting: map[*subscription]struct{}{}, done: make(chan struct{})}
}

// Listening reports whether the listener is connected: only then do claims
// wait.
func (w *Waiter) Listening() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.listening && !w.closed
}

// Close ends every wait at once (each is answered as it stands) and stops
// later claims from waiting. It does not stop Run; cancel Run's context.
func (w *Waiter) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		close(w.done)
	}
}

// Listener timing: how long the listener waits for a notification before
// it checks its connection with a ping, how long the ping may take, and
// the pauses between reconnection attempts.
const (
	listenIdle       = 30 * time.Second
	listenPing       = 5 * time.Second
	listenBackoff    = 100 * time.Millisecond
	listenBackoffCap = 5 * time.Second
)

// Run connects the listener (LISTEN NotifyChannel on a connection of its
// own) and hands notifications to waiting claims until ctx ends; a lost
// connection is opened again, with a growing pause, and every waiting
// claim is then decided again (notifications sent meanwhile were lost).
// It returns nil when ctx ends, after Close.
func (w *Waiter) Run(ctx context.Context) error {
	defer w.Close()
	pause := listenBackoff
	for {
		connected, err := w.listen(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if connected {
			pause = listenBackoff
		}
		w.cfg.Logger.Warn().Err(err).Str("retry_in", pause.String()).
			Msg("claim wait listener: no connection; claims answer in_progress without waiting until it is back")
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		pause = min(2*pause, listenBackoffCap)
	}
}

// listen runs one connection of the listener until it fails or ctx ends.
// connected reports whether it got as far as LISTEN.
func (w *Waiter) listen(ctx context.Context) (connected bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, w.cfg.ConnConfig)
	if err != nil {
		return false, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return false, err
	}
	w.setListening(true)
	defer w.setListening(false)
	for {
		wctx, cancel := context.WithTimeout(ctx, listenIdle)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			w.notify(n.Payload)
			continue
		case ctx.Err() != nil:
			return true, ctx.Err()
		case errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed():
			pctx, cancel := context.WithTimeout(ctx, listenPing)
			err = conn.Ping(pctx)
			cancel()
			if err == nil {
				continue
			}
		}
		return true, err
	}
}

// setListening records the listener's state. On (re)connection every
// waiting claim is woken to be decided again: a settle may have happened
// while no connection listened.
func (w *Waiter) setListening(on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.listening = on
	if on {
		for s := range w.waiting {
			s.wakeAll()
		}
	}
}

// notify wakes the claims waiting on record id.
func (w *Waiter) notify(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for s := range w.subs[id] {
		s.wake(id)
	}
}

// subscription is one waiting request: the records it waits on and what
// woke it.
type subscription struct {
	signal chan struct{} // capacity 1: something woke it

	mu    sync.Mutex
	ids   map[string]bool
	woken map[string]bool
	all   bool
}

func (s *subscription) wake(id string) {
	s.mu.Lock()
	s.woken[id] = true
	s.mu.Unlock()
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

func (s *subscription) wakeAll() {
	s.mu.Lock()
	s.all = true
	s.mu.Unlock()
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

// take returns and clears what woke s.
func (s *subscription) take() (woken map[string]bool, all bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	woken, all = s.woken, s.all
	s.woken, s.all = map[string]bool{}, false
	return woken, all
}

func (w *Waiter) subscribe() *subscription {
	s := &subscription{signal: make(chan struct{}, 1), ids: map[string]bool{}, woken: map[string]bool{}}
	w.mu.Lock()
	w.waiting[s] = struct{}{}
	w.mu.Unlock()
	return s
}

// watch adds ids to the records s waits on.
func (w *Waiter) watch(s *subscription, ids []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		if s.ids[id] {
			continue
		}
		s.ids[id] = true
		if w.subs[id] == nil {
			w.subs[id] = map[*subscription]struct{}{}
		}
		w.subs[id][s] = struct{}{}
	}
}

func (w *Waiter) unsubscribe(s *subscription) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.waiting, s)
	for id := range s.ids {
		delete(w.subs[id], s)
		if len(w.subs[id]) == 0 {
			delete(w.subs, id)
		}
	}
}

// step runs one database step of a waiting claim under StepTimeout.
func (w *Waiter) step(ctx context.Context, fn func(context.Context) error) error {
	sctx, cancel := context.WithTimeout(ctx, w.cfg.StepTimeout)
	defer cancel()
	return fn(sctx)
}

// Claim decides r like Ledger.Claim; when the outcome is InProgress and
// wait > 0 it waits for the holder, at most wait (capped at MaxWait) from
// the call, and decides r again each time the holder's record may have
// changed (it left processing, its lease ran out, the listener
// reconnected). It returns the last decision: InProgress only when the
// wait reached its bound (or Close ended it). Every decision is a claim
// attempt in the record's delivery log. Errors: as Ledger.Claim, for any
// decision; the first decision's error comes before any wait.
func (w *Waiter) Claim(ctx context.Context, r Request, wait time.Duration) (Result, error) {
	start := time.Now()
	results := make([]Result, 1)
	decide := func(ctx context.Context, _ []int) error {
		return w.step(ctx, func(ctx context.Context) (err error) {
			results[0], err = w.ledger.Claim(ctx, r)
			return err
		})
	}
	if err := decide(ctx, nil); err != nil {
		return Result{}, err
	}
	if err := w.await(ctx, results, []time.Duration{wait}, start, decide); err != nil {
		return Result{}, err
	}
	return results[0], nil
}

// ClaimBatch decides reqs like Ledger.ClaimBatch, then lets each
// InProgress result whose waits[i] > 0 wait for its holder as Claim does,
// all at once, each up to its own bound; the woken ones are decided again
// together (Ledger.ClaimBatch of them). A result whose holder is another
// request of the same batch does not wait: that holder cannot settle before
// the batch is answered. Results are in request order. waits has one entry
// per request. On an error no result is returned.
func (w *Waiter) ClaimBatch(ctx context.Context, reqs []Request, waits []time.Duration) ([]Result, error) {
	start := time.Now()
	var results []Result
	err := w.step(ctx, func(ctx context.Context) (err error) {
		results, err = w.ledger.ClaimBatch(ctx, reqs)
		return err
	})
	if err != nil {
		return nil, err
	}
	decide := func(ctx context.Context, idx []int) error {
		again := make([]Request, len(idx))
		for k, i := range idx {
			again[k] = reqs[i]
		}
		return w.step(ctx, func(ctx context.Context) error {
			rs, err := w.ledger.ClaimBatch(ctx, again)
			if err != nil {
				return err
			}
			for k, i := range idx {
				results[i] = rs[k]
			}
			return nil
		})
	}
	if err := w.await(ctx, results, waits, start, decide); err != nil {
		return nil, err
	}
	return results, nil
}

// await lets the InProgress entries of results with a wait wait for their
// holders, deciding the woken ones again with decide (which overwrites
// their results). It returns when none waits any more: each was decided to
// something else, reached its bound, or the Waiter closed, or ctx ended.
// An error of decide ends it with that error; a failure to mark the
// records ends the waits without one (the answers stand as decided).
func (w *Waiter) await(ctx context.Context, results []Result, waits []time.Duration,
	start time.Time, decide func(context.Context, []int) error) error {
	pending := map[int]time.Time{} // result index → end of its wait
	for i, res := range results {
		if res.Outcome == InProgress && waits[i] > 0 {
			pending[i] = start.Add(min(waits[i], MaxWait))
		}
	}
	dropHeldByBatch(results, pending)
	if len(pending) == 0 || !w.Listening() {
		return nil
	}
	s := w.subscribe()
	defer w.unsubscribe(s)
	for len(pending) > 0 {
		ids := make([]string, 0, len(pending))
		seen := map[string]bool{}
		for i := range pending {
			if id := results[i].ID; !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
		w.watch(s, ids)
		var leases map[string]time.Time
		err := w.step(ctx, func(ctx context.Context) (err error) {
			leases, err = w.arm(ctx, results[firstKey(pending)].Tenant, ids)
			return err
		})
		if err != nil {
			return nil
		}

		due := dueNow(results, pending, leases, nil, false, time.Now())
		if len(due) == 0 {
			next := time.Time{}
			for i, end := range pending {
				if lease := leases[results[i].ID]; lease.Before(end) {
					end = lease
				}
				if next.IsZero() || end.Before(next) {
					next = end
				}
			}
			t := time.NewTimer(time.Until(next))
			select {
			case <-s.signal:
			case <-t.C:
			case <-ctx.Done():
			case <-w.done:
			}
			t.Stop()
			if ctx.Err() != nil || w.isClosed() {
				return nil
			}
			woken, all := s.take()
			now := time.Now()
			due = dueNow(results, pending, leases, woken, all, now)
			for i, end := range pending {
				if !end.After(now) && !contains(due, i) {
					delete(pending, i) // the wait reached its bound: answered in_progress
				}
			}
		}
		if len(due) == 0 {
			continue
		}
		if err := decide(ctx, due); err != nil {
			return err
		}
		now := time.Now()
		for _, i := range due {
			if results[i].Outcome != InProgress || !pending[i].After(now) {
				delete(pending, i)
			}
		}
		dropHeldByBatch(results, pending)
	}
	return nil
}

func (w *Waiter) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

// dueNow returns the pending results to decide again now: those whose
// record was not marked as still processing (leases has no entry: it left
// processing before the mark), whose holder's lease has run out, or whose
// record a notification (woken, or all after a reconnection) names.
func dueNow(results []Result, pending map[int]time.Time, leases map[string]time.Time,
	woken map[string]bool, all bool, now time.Time) []int {
	var due []int
	for i := range pending {
		id := results[i].ID
		lease, marked := leases[id]
		if all || woken[id] || !marked || !lease.After(now) {
			due = append(due, i)
		}
	}
	return due
}

// dropHeldByBatch ends the wait of every pending result whose record is
// held by a won result of the same call.
func dropHeldByBatch(results []Result, pending map[int]time.Time) {
	for i := range pending {
		for _, r := range results {
			if r.Outcome == Won && r.ID == results[i].ID {
				delete(pending, i)
				break
			}
		}
	}
}

func firstKey(m map[int]time.Time) int {
	for k := range m {
		return k
	}
	return -1
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// arm marks ids (see ArmWait in sidecar/db/queries/claim_intake.sql) and returns, for each record still
// processing, when its lease ends by this host's clock.
func (w *Waiter) arm(ctx context.Context, tenant string, ids []string) (map[string]time.Time, error) {
	leases := map[string]time.Time{}
	err := db.Retry(ctx, func() error {
		clear(leases)
		now := time.Now()
		rows, err := queries.ArmWait(ctx, w.ledger.pool, dbsqlc.ArmWaitParams{Tenant: tenant, IDs: ids})
		if err != nil {
			return err
		}
		for _, r := range rows {
			if r.LeaseUntil != nil {
				leases[r.ID] = now.Add(r.LeaseUntil.Sub(r.DBNow))
			}
		}
		return nil
	})
	if err != nil {
		return nil, db.Error(err)
	}
	return leases, nil
}
