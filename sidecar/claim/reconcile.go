package claim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
)

// Automatic reconciliation of unknown outcomes: the ledger half.
//
// A claim that becomes unknown (a Fail with UnknownOutcome, a lease expiry
// under policy review, an operator's Release) and has a reconciler (its
// own, Request.Reconciler, else its source's, Policy.Reconciler) gets a
// row in the reconciles table (migration 00024), one per claim, for its
// current unknown episode: the claim's attempt and claim token when it
// went unknown. A runner (package sidecar/reconcile) calls the reconciler,
// an n8n workflow that looks at the destination, and reports its answer:
//
//   - done: the claim becomes completed with the result_ref found;
//   - not_done: the claim becomes retryable_failed, claimable at once with
//     one more attempt allowed (as an operator's Resolve retry), and an
//     ingested event's dispatch is re-armed in the same transaction;
//   - still_unknown, or a failed call: asked again after a backoff, at most
//     max_calls calls per episode; then the reconcile gives up and the
//     claim stays unknown for an operator.
//
// Every statement is bounded (a limit) and takes its rows FOR UPDATE SKIP
// LOCKED, so any number of claimd replicas may run the engine: each call
// is taken by one of them, and one call per claim is in flight at a time
// (state calling until its answer, its failure or its deadline). Each call
// carries a fresh call token (a fencing token); an answer must present the
// token of the call in flight, and is applied only while the claim is
// still unknown in the same episode: a Complete of the holder, or an
// operator's decision, that came first wins, and the answer writes
// nothing.

// ReconcileVerdict is a reconciler's answer about a claim's effect.
type ReconcileVerdict string

// Reconcile verdicts.
const (
	// ReconcileDone: the effect happened; the claim becomes completed.
	ReconcileDone ReconcileVerdict = "done"
	// ReconcileNotDone: the effect did not happen; the claim becomes
	// retryable_failed, claimable at once.
	ReconcileNotDone ReconcileVerdict = "not_done"
	// ReconcileStillUnknown: the reconciler cannot tell yet; it is asked
	// again after a backoff, at most max_calls calls per episode.
	ReconcileStillUnknown ReconcileVerdict = "still_unknown"
)

// ReconcileStatus is the state of a claim's reconcile (reconciles.state).
type ReconcileStatus string

// Reconcile states.
const (
	// ReconcileWaiting: the next call is due at NextCallAt.
	ReconcileWaiting ReconcileStatus = "waiting"
	// ReconcileCalling: one call is in flight until CallDeadline.
	ReconcileCalling ReconcileStatus = "calling"
	// ReconcileAnswered: a done or not_done answer was applied.
	ReconcileAnswered ReconcileStatus = "answered"
	// ReconcileGaveUp: MaxCalls calls answered still_unknown or failed;
	// the claim stays unknown for an operator.
	ReconcileGaveUp ReconcileStatus = "gave_up"
	// ReconcileDropped: the claim left unknown, or went unknown again in
	// another episode, before an answer; nothing was applied.
	ReconcileDropped ReconcileStatus = "dropped"
)

// Reconcile call error classes: the fixed texts of ReconcileState.LastError
// (ReconcileFail; ReconcileExpire records ReconcileErrTimeout). Nothing a
// reconciler sends is stored as an error.
const (
	ReconcileErrTimeout     = "timeout"     // no answer within the call's timeout, or by its deadline
	ReconcileErrUnreachable = "unreachable" // transport error
	ReconcileErrStatus5xx   = "status_5xx"  // the reconciler answered 5xx
	ReconcileErrStatus4xx   = "status_4xx"  // the reconciler answered 4xx (or another non-2xx)
	ReconcileErrBadAnswer   = "bad_answer"  // a 2xx whose body is not a valid answer
)

// ReconcileErrClasses lists every call error class.
var ReconcileErrClasses = []string{ReconcileErrTimeout, ReconcileErrUnreachable, ReconcileErrStatus5xx,
	ReconcileErrStatus4xx, ReconcileErrBadAnswer}

// Delivery-log outcomes of the reconcile engine (Delivery.Outcome), with
// actor "reconciler:<name>" and a detail naming the reconciler and the
// call number. Failed calls are not logged (ReconcileState.LastError and
// the runner's metrics have them).
const (
	DeliveryReconciledDone    = "reconciled_done"
	DeliveryReconciledNotDone = "reconciled_not_done"
	DeliveryReconcileGaveUp   = "reconcile_gave_up"
)

// ReconcileTokenStale is apperr.ReconcileTokenStale: the code of an
// answer or failure report whose call token is not the call in flight
// (409); nothing was written.
const ReconcileTokenStale = apperr.ReconcileTokenStale

// ReconcilerPolicy is a configured reconciler's limits (the sources file's
// reconcilers.<name>, less its URL and headers, which the runner keeps).
// Zero fields take defaults (WithDefaults).
type ReconcilerPolicy struct {
	// MaxCalls bounds the calls per unknown episode, 1..100; default 6.
	MaxCalls int
	// BackoffBase and BackoffCap shape the wait before call n+1 after a
	// still_unknown answer or a failed call: uniformly random in
	// [0, min(BackoffCap, BackoffBase·2^(n-1))] ("full jitter"). Defaults
	// 30 seconds and 1 hour.
	BackoffBase, BackoffCap time.Duration
	// Call is one call's timeout; default 30 seconds.
	Call time.Duration
	// Answer is how long after the call's timeout an answer may still
	// come through the API (an asynchronous answer); 0 is Call. A call's
	// deadline (ReconcileCall.Deadline) is its start plus Call plus Answer.
	Answer time.Duration
	// Delay is the least time between a claim going unknown and the
	// first call of its episode, so that a holder that may still be
	// mid-effect (an operator released its processing claim; its lease
	// ran out under review while it worked on) is not judged too early:
	// a not_done would let the next delivery run the effect while the
	// holder may still be doing it. The basis is claims.updated_at when
	// discovery starts the episode, which every move into unknown sets
	// (a sweep finding an expired lease sets it then, after the lease
	// ran out); a later change of the claim while it stays unknown would
	// only move the call later. Not defaulted here: 0 is no delay (the
	// sources file's delay_seconds defaults to 60 seconds, 0..86400).
	Delay time.Duration
}

// Defaults of ReconcilerPolicy.
const (
	DefaultReconcileMaxCalls    = 6
	DefaultReconcileBackoffBase = 30 * time.Second
	DefaultReconcileBackoffCap  = time.Hour
	DefaultReconcileCall        = 30 * time.Second
)

// WithDefaults returns p with zero fields set to their defaults.
func (p ReconcilerPolicy) WithDefaults() ReconcilerPolicy {
	if p.MaxCalls == 0 {
		p.MaxCalls = DefaultReconcileMaxCalls
	}
	if p.BackoffBase == 0 {
		p.BackoffBase = DefaultReconcileBackoffBase
	}
	if p.BackoffCap == 0 {
		p.BackoffCap = max(DefaultReconcileBackoffCap, p.BackoffBase)
	}
	if p.Call == 0 {
		p.Call = DefaultReconcileCall
	}
	if p.Answer == 0 {
		p.Answer = p.Call
	}
	return p
}

// Validate reports the first invalid field of p (after WithDefaults).
func (p ReconcilerPolicy) Validate() error {
	switch {
	case p.MaxCalls < 1 || p.MaxCalls > 100:
		return fmt.Errorf("max_calls must be between 1 and 100")
	case p.BackoffBase < 0:
		return fmt.Errorf("backoff_base cannot be negative")
	case p.BackoffCap < p.BackoffBase:
		return fmt.Errorf("backoff_cap cannot be shorter than backoff_base")
	case p.Call < time.Second:
		return fmt.Errorf("timeout must be at least 1s")
	case p.Answer < 0:
		return fmt.Errorf("answer cannot be negative")
	case p.Delay < 0:
		return fmt.Errorf("delay cannot be negative")
	}
	return nil
}

// backoffCeiling is the upper bound of the full-jitter wait after call n
// (1-based).
func (p ReconcilerPolicy) backoffCeiling(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	d := float64(p.BackoffBase) * math.Pow(2, float64(n-1))
	if d > float64(p.BackoffCap) || math.IsInf(d, 0) {
		return p.BackoffCap
	}
	return time.Duration(d)
}

// ReconcileCall is one call taken (ReconcileTake): what the runner sends
// the reconciler, and the call token its answer must present.
type ReconcileCall struct {
	// ClaimID, Tenant and the claim's key.
	ClaimID, Tenant, Source, EventID, Action string
	// EventType, PayloadHash, ResultRef and LastError are the claim's
	// ("" when none); Attempt is the attempt whose outcome is unknown.
	EventType, PayloadHash, ResultRef, LastError string
	Attempt                                      int
	// IdempotencyKey is the claim's stable idempotency key (the one the
	// effect carried to its destination; see IdempotencyKey).
	IdempotencyKey string
	// Token is the call token: ReconcileAnswer and ReconcileFail must
	// present it.
	Token string
	// Call is this call's number in the episode (1-based), MaxCalls the
	// episode's bound.
	Call, MaxCalls int
	// Deadline is when the call ends: an answer after it is refused
	// (apperr.ReconcileTokenStale) and ReconcileExpire counts the call as a
	// timeout.
	Deadline time.Time
	// Reconciler is the reconciler's name.
	Reconciler string
	// Ingested: the claim is an ingested event's (it has an inbox row), so
	// a not_done answer re-arms its dispatch.
	Ingested bool
}

// ReconcileState is a claim's reconcile as stored (ReconcileOf and the
// engine's answers).
type ReconcileState struct {
	ClaimID, Tenant, Reconciler string
	State                       ReconcileStatus
	// EpisodeAttempt is the claim's attempt when it went unknown.
	EpisodeAttempt int
	// Calls made in this episode (the one in flight included), and the
	// bound.
	Calls, MaxCalls int
	// NextCallAt is when the next call is due (state waiting).
	NextCallAt time.Time
	// CallDeadline ends the call in flight (state calling; kept after).
	CallDeadline *time.Time
	// Verdict is the last answer ("" when none came, or the last call
	// failed), ResultRef and Note what came with it.
	Verdict         ReconcileVerdict
	ResultRef, Note string
	// LastError is the error class of the last call that ended, if it
	// failed (one of ReconcileErrClasses); "" when it was answered or no
	// call ended yet. While the next call is in flight it stays as the
	// previous call left it; that call's end clears or replaces it.
	LastError            string
	CreatedAt, UpdatedAt time.Time
	// token is the last call's token (idempotent repeats of an answer).
	token string
}

// ReconcileResult is ReconcileAnswer's result: the reconcile and the
// claim as the answer left them (or as they are, for a repeat).
type ReconcileResult struct {
	Reconcile ReconcileState
	Record    Record
	// Ended: this answer ended the call in flight, so a count of calls
	// counts it now: its verdict was applied, or (with the InvalidState
	// refusal of a claim settled first) the reconcile was dropped. False
	// for a repeat of an answer applied already (nothing written).
	Ended bool
}

// ReconcileDiscovered is what ReconcileDiscover did.
type ReconcileDiscovered struct {
	// Created counts reconciles started: new rows and rows reset for a new
	// episode.
	Created int
	// Skipped counts unknown claims (at most the limit) without a
	// reconcile whose own reconciler is no longer configured: they are
	// left for an operator, and picked up if the name is configured again.
	Skipped int
}

// Redispatch re-runs an ingested event after a not_done verdict, inside
// the answer's transaction tx (inbox.Inbox.RedispatchTx). It is called
// for every not_done answer applied; it does nothing for a claim without
// an inbox row.
type Redispatch func(ctx context.Context, tx pgx.Tx, tenant, claimID string) error

// reconcileOf is the ReconcileState of row. Every statement that returns a
// reconcile selects the columns of dbsqlc.ReconcileOfRow, so its row
// converts to one.
func reconcileOf(row dbsqlc.ReconcileOfRow) ReconcileState {
	return ReconcileState{ClaimID: row.ClaimID, Tenant: row.Tenant, Reconciler: row.Reconciler,
		State: ReconcileStatus(row.State), EpisodeAttempt: int(row.EpisodeAttempt), Calls: int(row.Calls),
		MaxCalls: int(row.MaxCalls), NextCallAt: row.NextCallAt, CallDeadline: row.CallDeadline,
		Verdict: ReconcileVerdict(row.Verdict), ResultRef: row.ResultRef, Note: row.Note, LastError: row.LastError,
		CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt, token: row.CallToken}
}

// lockReconcile locks the reconcile of claimID (of tenant; nil: any) and
// says whether its call's deadline has passed (LockReconcile).
func lockReconcile(ctx context.Context, tx pgx.Tx, claimID string, tenant *string) (ReconcileState, bool, error) {
	row, err := queries.LockReconcile(ctx, tx, dbsqlc.LockReconcileParams{ClaimID: claimID, Tenant: tenant})
	if err != nil {
		return ReconcileState{}, false, err
	}
	return reconcileOf(dbsqlc.ReconcileOfRow{ClaimID: row.ClaimID, Tenant: row.Tenant, Reconciler: row.Reconciler,
		State: row.State, EpisodeAttempt: row.EpisodeAttempt, Calls: row.Calls, MaxCalls: row.MaxCalls,
		NextCallAt: row.NextCallAt, CallDeadline: row.CallDeadline, Verdict: row.Verdict, ResultRef: row.ResultRef,
		Note: row.Note, LastError: row.LastError, CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt,
		CallToken: row.CallToken}), row.Late, nil
}

// ReconcileDiscover starts the reconciles of at most limit claims that
// are unknown, have a reconciler (their own, else their source's default,
// Policy.Reconciler) that is configured (Policies.Reconcilers), and have
// no reconcile for their current unknown episode: a waiting row, its
// first call due the reconciler's Delay after the claim went unknown
// (claims.updated_at when discovered; at once if that has passed),
// bounded by the reconciler's MaxCalls. A claim that
// went unknown again after a later win (a new episode) starts afresh. A
// claim naming a reconciler that is no longer configured is skipped and
// counted, not failed. With no reconciler configured it does nothing
// and sends no statement. Safe on any number of replicas at once.
// Errors: Unavailable (db.Error).
func (l *Ledger) ReconcileDiscover(ctx context.Context, limit int) (ReconcileDiscovered, error) {
	discover, ok := l.reconcileDiscovery(limit)
	if !ok {
		return ReconcileDiscovered{}, nil
	}
	var d ReconcileDiscovered
	err := db.Retry(ctx, func() (err error) {
		d, err = discover(ctx, l.pool)
		return err
	})
	if err != nil {
		return ReconcileDiscovered{}, db.Error(err)
	}
	return d, nil
}

// reconcileDiscovery is discovery's statement (DiscoverReconciles, or
// DiscoverReconcilesWithDefault when the default policy's reconciler is
// configured) with its arguments under the current policies; ok false
// when no reconciler is configured.
func (l *Ledger) reconcileDiscovery(limit int) (discover func(context.Context, dbsqlc.DBTX) (ReconcileDiscovered, error), ok bool) {
	if limit <= 0 {
		limit = 100
	}
	ps := l.policies.Load()
	if len(ps.Reconcilers) == 0 {
		return nil, false
	}
	names, maxCalls := make([]string, 0, len(ps.Reconcilers)), make([]int32, 0, len(ps.Reconcilers))
	delays := make([]float64, 0, len(ps.Reconcilers))
	for name, r := range ps.Reconcilers {
		names, maxCalls = append(names, name), append(maxCalls, int32(r.MaxCalls))
		delays = append(delays, r.Delay.Seconds())
	}
	sources, defaults := make([]string, 0, len(ps.BySource)), make([]string, 0, len(ps.BySource))
	var reconciled []string // sources whose default reconciler is configured
	for name, p := range ps.BySource {
		sources, defaults = append(sources, name), append(defaults, p.Reconciler)
		if _, ok := ps.Reconcilers[p.Reconciler]; ok && p.Reconciler != "" {
			reconciled = append(reconciled, name)
		}
	}
	arg := dbsqlc.DiscoverReconcilesParams{Names: names, MaxCalls: maxCalls, DelaySeconds: delays, Sources: sources,
		SourceReconcilers: defaults, DefaultReconciler: nullable(ps.Default.Reconciler), MaxRows: int32(limit),
		ReconciledSources: reconciled}
	if _, ok := ps.Reconcilers[ps.Default.Reconciler]; ok && ps.Default.Reconciler != "" {
		return func(ctx context.Context, q dbsqlc.DBTX) (ReconcileDiscovered, error) {
			r, err := queries.DiscoverReconcilesWithDefault(ctx, q, dbsqlc.DiscoverReconcilesWithDefaultParams(arg))
			return ReconcileDiscovered{Created: int(r.Created), Skipped: int(r.Skipped)}, err
		}, true
	}
	return func(ctx context.Context, q dbsqlc.DBTX) (ReconcileDiscovered, error) {
		r, err := queries.DiscoverReconciles(ctx, q, arg)
		return ReconcileDiscovered{Created: int(r.Created), Skipped: int(r.Skipped)}, err
	}, true
}

// ReconcileTake takes at most limit due calls of configured reconcilers
// for this replica to make: each becomes the one call in flight of its
// claim (state calling, a fresh call token, its deadline now plus the
// reconciler's Call plus Answer), so no other Take returns it until it is
// answered, failed or expired. Reconciles whose claim left unknown are
// dropped on the way. Safe on any number of replicas at once (SKIP
// LOCKED). Errors: Unavailable (db.Error).
func (l *Ledger) ReconcileTake(ctx context.Context, limit int) ([]ReconcileCall, error) {
	if limit <= 0 {
		limit = 10
	}
	ps := l.policies.Load()
	if len(ps.Reconcilers) == 0 {
		return nil, nil
	}
	names, secs := make([]string, 0, len(ps.Reconcilers)), make([]float64, 0, len(ps.Reconcilers))
	for name, r := range ps.Reconcilers {
		names, secs = append(names, name), append(secs, (r.Call+r.Answer).Seconds())
	}
	var rows []dbsqlc.TakeReconcileCallsRow
	err := db.Retry(ctx, func() (err error) {
		rows, err = queries.TakeReconcileCalls(ctx, l.pool, dbsqlc.TakeReconcileCallsParams{Names: names, Seconds: secs,
			MaxRows: int32(limit)})
		return err
	})
	if err != nil {
		return nil, db.Error(err)
	}
	calls := make([]ReconcileCall, len(rows))
	for i, r := range rows {
		c := ReconcileCall{ClaimID: r.ClaimID, Tenant: r.Tenant, Source: r.Source, EventID: r.EventID,
			Action: r.Action, EventType: r.EventType, PayloadHash: r.PayloadHash, ResultRef: r.ResultRef,
			LastError: r.LastError, Attempt: int(r.Attempt), Token: r.CallToken, Call: int(r.Calls),
			MaxCalls: int(r.MaxCalls), Reconciler: r.Reconciler, Ingested: r.Ingested}
		if r.CallDeadline != nil {
			c.Deadline = *r.CallDeadline
		}
		c.IdempotencyKey = IdempotencyKey(c.Tenant, Key{Source: c.Source, EventID: c.EventID, Action: c.Action})
		calls[i] = c
	}
	return calls, nil
}

// reconcileActor is the delivery-log actor of a reconciler's entries.
func reconcileActor(name string) string { return "reconciler:" + name }

// ReconcileAnswer applies a reconciler's answer to the call in flight
// with callToken on claim claimID of tenant, in ONE transaction:
//
//   - done: the claim becomes completed with resultRef (empty keeps the
//     claim's), logged reconciled_done;
//   - not_done: the claim becomes retryable_failed, claimable at once with
//     one more attempt allowed (max_attempts raised to attempt+1 when
//     needed), logged reconciled_not_done; redispatch (when not nil) runs
//     in the same transaction to re-arm an ingested event's dispatch. The
//     holder's late Complete with its unchanged claim token still wins
//     until a claim takes the record;
//   - still_unknown: the next call after a full-jitter backoff, or, when
//     the episode's calls reached MaxCalls, the reconcile gives up
//     (gave_up, logged reconcile_gave_up) and the claim stays unknown.
//
// note (optional) is kept with the reconcile and in the delivery-log
// detail. Fenced: the call in flight must carry callToken and be before
// its deadline, else apperr.ReconcileTokenStale (409) and nothing is written; the
// claim must still be unknown in the episode, else the reconcile is
// dropped and the answer is InvalidState (409: settled already, by the
// holder's Complete or an operator). The same verdict again with the same
// token after it was applied answers the reconcile and the claim as they
// are now (a retry whose answer was lost); another verdict is
// InvalidState. Each call ends once: Ended is set only by the answer
// that ended it (see ReconcileResult). Errors: NotFound (no reconcile of
// the claim for tenant),
// Invalid naming verdict, result_ref or note, apperr.ReconcileTokenStale,
// InvalidState, Unavailable; redispatch's error aborts the transaction
// and is returned as it is.
func (l *Ledger) ReconcileAnswer(ctx context.Context, tenant, claimID, callToken string, verdict ReconcileVerdict,
	resultRef, note string, redispatch Redispatch) (ReconcileResult, error) {
	if _, err := uuid.Parse(claimID); err != nil {
		return ReconcileResult{}, apperr.New(apperr.NotFound, "no such claim")
	}
	if err := checkReconcileAnswer(callToken, verdict, resultRef, note); err != nil {
		return ReconcileResult{}, err
	}
	if tenant == "" {
		return ReconcileResult{}, apperr.New(apperr.Unauthorized, "no tenant")
	}
	var out ReconcileResult
	var refusal error
	err := db.RunTx(ctx, l.pool, func(tx pgx.Tx) error {
		out, refusal = ReconcileResult{}, nil
		r, late, err := lockReconcile(ctx, tx, claimID, &tenant)
		if errors.Is(err, pgx.ErrNoRows) {
			refusal = apperr.New(apperr.NotFound, "no reconcile of this claim")
			return nil
		}
		if err != nil {
			return err
		}
		if r.token == callToken && r.Verdict != "" && r.State != ReconcileCalling && r.State != ReconcileDropped {
			// The call was answered: a repeat, or another verdict.
			if r.Verdict != verdict {
				refusal = &apperr.Error{Code: apperr.InvalidState,
					Message: fmt.Sprintf("this reconcile call was answered already with another verdict (%s)", r.Verdict)}
				return nil
			}
			out.Reconcile = r
			row, err := queries.Record(ctx, tx, dbsqlc.RecordParams{ID: claimID, Tenant: tenant})
			out.Record = recordOf(row)
			return err
		}
		if r.State != ReconcileCalling || r.token != callToken || late {
			refusal = staleCall(r)
			return nil
		}
		same, err := queries.LockReconcileEpisode(ctx, tx, claimID)
		if err != nil {
			return err
		}
		if !same {
			st, err := dropReconcile(ctx, tx, claimID)
			if err != nil {
				return err
			}
			out = ReconcileResult{Reconcile: st, Ended: true}
			refusal = &apperr.Error{Code: apperr.InvalidState,
				Message: "this claim was settled already (by its holder's Complete or an operator) or went unknown again; the answer was not applied"}
			return nil
		}
		detail := reconcileDetail(r, string(verdict), note)
		actor := reconcileActor(r.Reconciler)
		switch verdict {
		case ReconcileDone, ReconcileNotDone:
			row, err := queries.SettleReconciled(ctx, tx, dbsqlc.SettleReconciledParams{ClaimID: claimID,
				Verdict: string(verdict), ResultRef: nullable(resultRef), Actor: actor, Detail: detail})
			if err != nil {
				return err
			}
			rec := recordOf(dbsqlc.RecordRow(row))
			answered, err := queries.AnswerReconcile(ctx, tx, dbsqlc.AnswerReconcileParams{ClaimID: claimID,
				Verdict: string(verdict), ResultRef: nullable(resultRef), Note: nullable(note)})
			if err != nil {
				return err
			}
			st := reconcileOf(dbsqlc.ReconcileOfRow(answered))
			if verdict == ReconcileNotDone && redispatch != nil {
				if err := redispatch(ctx, tx, tenant, claimID); err != nil {
					return err
				}
			}
			out = ReconcileResult{Reconcile: st, Record: rec, Ended: true}
			return nil
		default:
			st, err := l.reconcileAgain(ctx, tx, r, verdict, note, "")
			if err != nil {
				return err
			}
			out.Reconcile, out.Ended = st, true
			row, err := queries.Record(ctx, tx, dbsqlc.RecordParams{ID: claimID, Tenant: tenant})
			out.Record = recordOf(row)
			return err
		}
	})
	if err != nil {
		return ReconcileResult{}, db.Error(err) // an *apperr.Error of redispatch passes as it is
	}
	if refusal != nil {
		if out.Ended {
			return ReconcileResult{Reconcile: out.Reconcile, Ended: true}, refusal
		}
		return ReconcileResult{}, refusal
	}
	return out, nil
}

// checkReconcileAnswer returns an Invalid error naming the first bad
// field of an answer.
func checkReconcileAnswer(callToken string, verdict ReconcileVerdict, resultRef, note string) error {
	switch {
	case callToken == "":
		return apperr.Field("reconcile_token", "is required")
	case !isUUID(callToken):
		return apperr.Field("reconcile_token", "is not a reconcile token")
	case verdict != ReconcileDone && verdict != ReconcileNotDone && verdict != ReconcileStillUnknown:
		return apperr.Field("verdict", "must be done, not_done or still_unknown")
	case len(resultRef) > MaxResultRefLen:
		return apperr.Field("result_ref", "must be at most %d bytes", MaxResultRefLen)
	case resultRef != "" && verdict != ReconcileDone:
		return apperr.Field("result_ref", "is only taken with verdict done")
	case len(note) > MaxNoteLen:
		return apperr.Field("note", "must be at most %d bytes", MaxNoteLen)
	}
	return textFields(map[string]string{"result_ref": resultRef, "note": note})
}

func isUUID(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil
}

// staleCall is the refusal of an answer or failure whose call is not the
// one in flight.
func staleCall(r ReconcileState) error {
	return &apperr.Error{Code: apperr.ReconcileTokenStale, Message: fmt.Sprintf(
		"this reconcile token is not the call in flight: the call was answered, failed or passed its deadline, "+
			"or a later call was made; the reconcile is %s after %d of %d calls", r.State, r.Calls, r.MaxCalls)}
}

// reconcileDetail is the delivery-log detail of a reconciler's entry.
func reconcileDetail(r ReconcileState, what, note string) string {
	d := fmt.Sprintf("reconciler %s: %s on call %d of %d", r.Reconciler, what, r.Calls, r.MaxCalls)
	if note != "" {
		d += "; note: " + note
	}
	return d
}

// reconcileAgain ends r's call (locked, its claim unknown in the
// episode) without a decision: a still_unknown verdict (errClass "") or a
// failed call (errClass, verdict ""). The next call waits a full-jitter
// backoff of r's reconciler (the defaults when it is no longer
// configured); at MaxCalls calls the reconcile gives up.
func (l *Ledger) reconcileAgain(ctx context.Context, tx pgx.Tx, r ReconcileState, verdict ReconcileVerdict,
	note, errClass string) (ReconcileState, error) {
	p, ok := l.policies.Load().Reconcilers[r.Reconciler]
	if !ok {
		p = ReconcilerPolicy{}.WithDefaults()
	}
	wait := l.jitter() * p.backoffCeiling(r.Calls).Seconds()
	gaveUp := r.Calls >= r.MaxCalls
	why := "answered still_unknown"
	if errClass != "" {
		why = "call failed (" + errClass + ")"
	}
	detail := fmt.Sprintf("reconciler %s gave up after %d calls; the last %s; the claim stays unknown for an operator",
		r.Reconciler, r.Calls, why)
	if note != "" {
		detail += "; note: " + note
	}
	row, err := queries.ReconcileAgain(ctx, tx, dbsqlc.ReconcileAgainParams{ClaimID: r.ClaimID, WaitSeconds: wait,
		Verdict: nullable(string(verdict)), Note: nullable(note), ErrorClass: nullable(errClass), GaveUp: gaveUp,
		Actor: reconcileActor(r.Reconciler), Detail: detail})
	return reconcileOf(dbsqlc.ReconcileOfRow(row)), err
}

// dropReconcile drops the reconcile of claimID (DropReconcile).
func dropReconcile(ctx context.Context, tx pgx.Tx, claimID string) (ReconcileState, error) {
	row, err := queries.DropReconcile(ctx, tx, claimID)
	return reconcileOf(dbsqlc.ReconcileOfRow(row)), err
}

// ReconcileFail records that the call in flight with callToken on claim
// claimID failed without an answer: errClass is one of
// ReconcileErrClasses (timeout, unreachable, status_5xx, status_4xx,
// bad_answer). It counts as a call: the next one waits a full-jitter
// backoff, or, at MaxCalls calls, the reconcile gives up (logged
// reconcile_gave_up; the claim stays unknown). A claim that left unknown
// meanwhile has its reconcile dropped. It returns the reconcile as it
// left it. For the runner (no tenant: the call is claimd's own). Errors:
// Invalid naming error_class, NotFound, apperr.ReconcileTokenStale (not the call
// in flight; nothing written), Unavailable.
func (l *Ledger) ReconcileFail(ctx context.Context, claimID, callToken, errClass string) (ReconcileState, error) {
	if _, err := uuid.Parse(claimID); err != nil {
		return ReconcileState{}, apperr.New(apperr.NotFound, "no such claim")
	}
	known := false
	for _, c := range ReconcileErrClasses {
		known = known || c == errClass
	}
	if !known {
		return ReconcileState{}, apperr.Field("error_class", "must be timeout, unreachable, status_5xx, status_4xx or bad_answer")
	}
	if !isUUID(callToken) {
		return ReconcileState{}, apperr.Field("reconcile_token", "is not a reconcile token")
	}
	var out ReconcileState
	var refusal error
	err := db.RunTx(ctx, l.pool, func(tx pgx.Tx) error {
		out, refusal = ReconcileState{}, nil
		r, _, err := lockReconcile(ctx, tx, claimID, nil)
		if errors.Is(err, pgx.ErrNoRows) {
			refusal = apperr.New(apperr.NotFound, "no reconcile of this claim")
			return nil
		}
		if err != nil {
			return err
		}
		if r.State != ReconcileCalling || r.token != callToken {
			refusal = staleCall(r)
			return nil
		}
		out, err = l.reconcileEnd(ctx, tx, r, errClass)
		return err
	})
	if err != nil {
		return ReconcileState{}, db.Error(err)
	}
	return out, refusal
}

// reconcileEnd ends the failed call of r (locked): dropped when its claim
// left the episode, else reconcileAgain with errClass.
func (l *Ledger) reconcileEnd(ctx context.Context, tx pgx.Tx, r ReconcileState, errClass string) (ReconcileState, error) {
	same, err := queries.LockReconcileEpisode(ctx, tx, r.ClaimID)
	if err != nil {
		return ReconcileState{}, err
	}
	if !same {
		return dropReconcile(ctx, tx, r.ClaimID)
	}
	return l.reconcileAgain(ctx, tx, r, "", "", errClass)
}

// ReconcileExpire ends at most limit calls past their deadline (claimd
// stopped mid-call, or no asynchronous answer came in time) as failed
// calls with error class timeout: each counts, and the next call waits a
// backoff, or the reconcile gives up at MaxCalls (or is dropped when its
// claim left unknown). Run it on every tick; safe on any number of
// replicas at once (SKIP LOCKED). It returns the reconciles it ended, as
// it left them (State gave_up for the ones that gave up). With no
// reconciler configured it does nothing and sends no statement (a call
// of a reconciler removed by a reload stays calling until one is
// configured again). Errors: Unavailable.
func (l *Ledger) ReconcileExpire(ctx context.Context, limit int) ([]ReconcileState, error) {
	if limit <= 0 {
		limit = 100
	}
	if len(l.policies.Load().Reconcilers) == 0 {
		return nil, nil
	}
	var out []ReconcileState
	err := db.RunTx(ctx, l.pool, func(tx pgx.Tx) error {
		out = nil
		expired, err := queries.LockExpiredReconcileCalls(ctx, tx, int32(limit))
		if err != nil {
			return err
		}
		for _, row := range expired {
			st, err := l.reconcileEnd(ctx, tx, reconcileOf(dbsqlc.ReconcileOfRow(row)), ReconcileErrTimeout)
			if err != nil {
				return err
			}
			out = append(out, st)
		}
		return nil
	})
	if err != nil {
		return nil, db.Error(err)
	}
	return out, nil
}

// ReconcileOf returns the reconcile of claim claimID of tenant, nil when
// it has none (it never went unknown with a reconciler, or another
// tenant's). Errors: Unavailable.
func (l *Ledger) ReconcileOf(ctx context.Context, tenant, claimID string) (*ReconcileState, error) {
	if !isUUID(claimID) {
		return nil, nil
	}
	row, err := queries.ReconcileOf(ctx, l.pool, dbsqlc.ReconcileOfParams{ClaimID: claimID, Tenant: tenant})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, db.Error(err)
	}
	st := reconcileOf(row)
	return &st, nil
}

// Reconciler returns the limits of the configured reconciler name, and
// whether it is configured.
func (l *Ledger) Reconciler(name string) (ReconcilerPolicy, bool) {
	p, ok := l.policies.Load().Reconcilers[name]
	return p, ok
}
