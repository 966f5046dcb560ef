package claim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
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
// the answer's transaction tx (ingest.Inbox.RedispatchTx). It is called
// for every not_done answer applied; it does nothing for a claim without
// an inbox row.
type Redispatch func(ctx context.Context, tx pgx.Tx, tenant, claimID string) error

// reconcileColumns is the column list reconcile reads return, in
// scanReconcile order.
const reconcileColumns = `claim_id::text, tenant, reconciler, state, episode_attempt, calls, max_calls,
	next_call_at, call_deadline, COALESCE(verdict, ''), COALESCE(result_ref, ''), COALESCE(note, ''),
	COALESCE(last_error, ''), created_at, updated_at, COALESCE(call_token::text, '')`

// scanReconcile scans reconcileColumns, then extra destinations for
// columns selected after them.
func scanReconcile(row pgx.Row, extra ...any) (ReconcileState, error) {
	var s ReconcileState
	err := row.Scan(append([]any{&s.ClaimID, &s.Tenant, &s.Reconciler, &s.State, &s.EpisodeAttempt, &s.Calls,
		&s.MaxCalls, &s.NextCallAt, &s.CallDeadline, &s.Verdict, &s.ResultRef, &s.Note, &s.LastError, &s.CreatedAt,
		&s.UpdatedAt, &s.token}, extra...)...)
	return s, err
}

// reconcileDiscoverSQL starts the reconciles of unknown claims. $1
// configured reconciler names, $2 their max_calls, $8 their delay in
// seconds (ReconcilerPolicy.Delay); $3 the sources with a
// policy of their own, $4 their default reconciler ("" none); $5 the
// default policy's reconciler (NULL none) for every other source; $6 the
// limit; $7 the sources whose default reconciler is configured; {OTHER}
// is reconcileDiscoverOther when the default policy's reconciler is
// configured, else empty (a statement of its own, so that no plan of it
// reads the unknown claims of every source for a default that is not
// there). A claim's
// reconciler is its own (claims.reconciler), else its source's default.
// It inserts a waiting row (its first call due the reconciler's delay after
// the claim went unknown: its updated_at; now if that has passed), for at most $6 unknown claims with a
// configured reconciler and no row for their current episode (no row, or
// one of an earlier episode whose call is not in flight: reset), oldest change first; a concurrent
// discovery of the same claim inserts or resets it once (ON CONFLICT, its
// WHERE judged on the row as the other left it). It returns the rows
// started and how many unknown claims (at most $6) name a reconciler of
// their own that is not configured.
// Cost: only unknown claims that can be reconciled are visited (their
// own reconciler configured, or none and a source whose default is), by
// claims_unknown_reconciler_idx (migration 00026), with a primary-key
// probe of reconciles each; unknown claims without a reconciler are not
// read. Those with a reconcile of their current episode (waiting, gave up
// for an operator) are still read on each run.
const reconcileDiscoverSQL = `
WITH cfg AS (
	SELECT * FROM unnest($1::text[], $2::int[], $8::float8[]) AS r(name, max_calls, delay)
), src AS (
	SELECT * FROM unnest($3::text[], $4::text[]) AS s(source, reconciler)
), cand AS (
	SELECT c.id, c.tenant, c.attempt, c.claim_token, c.updated_at,
		COALESCE(c.reconciler, CASE WHEN s.source IS NOT NULL THEN NULLIF(s.reconciler, '') ELSE $5::text END) AS rname
	FROM claims c LEFT JOIN src s ON s.source = c.source
	WHERE c.state = 'unknown'
	  AND (c.reconciler = ANY($1::text[])
		OR (c.reconciler IS NULL AND c.source = ANY($7::text[])){OTHER})
	  AND NOT EXISTS (SELECT 1 FROM reconciles r WHERE r.claim_id = c.id AND (r.state = 'calling'
		OR (r.episode_attempt = c.attempt AND r.episode_token IS NOT DISTINCT FROM c.claim_token)))
), ins AS (
	INSERT INTO reconciles AS r (claim_id, tenant, reconciler, episode_attempt, episode_token, state, calls,
		max_calls, next_call_at, created_at, updated_at)
	SELECT cand.id, cand.tenant, cand.rname, cand.attempt, cand.claim_token, 'waiting', 0, cfg.max_calls,
		GREATEST(cand.updated_at + make_interval(secs => cfg.delay), statement_timestamp()),
		statement_timestamp(), statement_timestamp()
	FROM cand JOIN cfg ON cfg.name = cand.rname
	ORDER BY cand.updated_at, cand.id
	LIMIT $6
	ON CONFLICT (claim_id) DO UPDATE SET reconciler = excluded.reconciler,
		episode_attempt = excluded.episode_attempt, episode_token = excluded.episode_token,
		state = 'waiting', calls = 0, max_calls = excluded.max_calls, next_call_at = excluded.next_call_at,
		call_token = NULL, call_deadline = NULL, verdict = NULL, result_ref = NULL, note = NULL,
		last_error = NULL, updated_at = statement_timestamp()
	WHERE r.episode_attempt <> excluded.episode_attempt OR r.episode_token IS DISTINCT FROM excluded.episode_token
	RETURNING 1
)
SELECT (SELECT count(*) FROM ins),
	(SELECT count(*) FROM (SELECT 1 FROM claims c
		WHERE c.state = 'unknown' AND c.reconciler IS NOT NULL AND c.reconciler <> ALL($1::text[])
		  AND NOT EXISTS (SELECT 1 FROM reconciles r WHERE r.claim_id = c.id
			AND r.episode_attempt = c.attempt AND r.episode_token IS NOT DISTINCT FROM c.claim_token)
		LIMIT $6) k)`

// reconcileDiscoverOther is reconcileDiscoverSQL's {OTHER}: the unknown
// claims naming no reconciler of every source without a policy of its
// own, under the default policy's reconciler.
const reconcileDiscoverOther = `
		OR (c.reconciler IS NULL AND c.source <> ALL($3::text[]))`

// reconcileDiscoverSQLs are reconcileDiscoverSQL without and with
// reconcileDiscoverOther.
var reconcileDiscoverSQLs = [2]string{strings.Replace(reconcileDiscoverSQL, "{OTHER}", "", 1),
	strings.Replace(reconcileDiscoverSQL, "{OTHER}", reconcileDiscoverOther, 1)}

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
	sql, args, ok := l.reconcileDiscoverArgs(limit)
	if !ok {
		return ReconcileDiscovered{}, nil
	}
	var d ReconcileDiscovered
	err := db.Retry(ctx, func() error {
		return l.pool.QueryRow(ctx, sql, args...).Scan(&d.Created, &d.Skipped)
	})
	if err != nil {
		return ReconcileDiscovered{}, db.Error(err)
	}
	return d, nil
}

// reconcileDiscoverArgs is discovery's statement (reconcileDiscoverSQLs)
// and its arguments under the current policies; ok false when no
// reconciler is configured.
func (l *Ledger) reconcileDiscoverArgs(limit int) (sql string, args []any, ok bool) {
	if limit <= 0 {
		limit = 100
	}
	ps := l.policies.Load()
	if len(ps.Reconcilers) == 0 {
		return "", nil, false
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
	sql = reconcileDiscoverSQLs[0]
	if _, ok := ps.Reconcilers[ps.Default.Reconciler]; ok && ps.Default.Reconciler != "" {
		sql = reconcileDiscoverSQLs[1]
	}
	return sql, []any{names, maxCalls, sources, defaults, nullable(ps.Default.Reconciler), limit, reconciled, delays}, true
}

// episodeMatch is whether claim c is unknown in the episode of reconcile
// r.
const episodeMatch = `c.state = 'unknown' AND c.attempt = r.episode_attempt
	AND c.claim_token IS NOT DISTINCT FROM r.episode_token`

// reconcileTakeSQL takes at most $3 due calls of configured reconcilers
// ($1 names, $2 each one's call plus answer seconds), oldest due first,
// FOR UPDATE SKIP LOCKED (a call is taken by one replica): a due row
// whose claim is still unknown in its episode becomes calling, with a
// fresh call token, one more call counted and its deadline (last_error,
// verdict and note stay as the previous call left them until this one
// ends); one whose
// claim left unknown or changed episode is dropped. It returns the calls
// taken, with what their requests need.
const reconcileTakeSQL = `
WITH cfg AS (
	SELECT * FROM unnest($1::text[], $2::float8[]) AS r(name, secs)
), due AS (
	SELECT claim_id FROM reconciles
	WHERE state = 'waiting' AND next_call_at <= statement_timestamp() AND reconciler = ANY($1::text[])
	ORDER BY next_call_at
	LIMIT $3
	FOR UPDATE SKIP LOCKED
), gone AS (
	UPDATE reconciles r SET state = 'dropped', updated_at = statement_timestamp()
	FROM due WHERE r.claim_id = due.claim_id
	  AND NOT EXISTS (SELECT 1 FROM claims c WHERE c.id = r.claim_id AND ` + episodeMatch + `)
), taken AS (
	UPDATE reconciles r SET state = 'calling', call_token = gen_random_uuid(), calls = r.calls + 1,
		call_deadline = statement_timestamp() + make_interval(secs => cfg.secs), updated_at = statement_timestamp()
	FROM due, cfg, claims c
	WHERE r.claim_id = due.claim_id AND cfg.name = r.reconciler AND c.id = r.claim_id AND ` + episodeMatch + `
	RETURNING r.claim_id, r.tenant, c.source, c.event_id, c.action, COALESCE(c.event_type, ''),
		COALESCE(c.payload_hash, ''), COALESCE(c.result_ref, ''), COALESCE(c.last_error, ''), c.attempt,
		r.call_token::text, r.calls, r.max_calls, r.call_deadline, r.reconciler,
		EXISTS (SELECT 1 FROM inbox_events e WHERE e.claim_id = c.id)
)
SELECT * FROM taken ORDER BY call_deadline, claim_id`

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
	var calls []ReconcileCall
	err := db.Retry(ctx, func() error {
		rows, err := l.pool.Query(ctx, reconcileTakeSQL, names, secs, limit)
		if err != nil {
			return err
		}
		calls, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (ReconcileCall, error) {
			var c ReconcileCall
			err := row.Scan(&c.ClaimID, &c.Tenant, &c.Source, &c.EventID, &c.Action, &c.EventType, &c.PayloadHash,
				&c.ResultRef, &c.LastError, &c.Attempt, &c.Token, &c.Call, &c.MaxCalls, &c.Deadline, &c.Reconciler,
				&c.Ingested)
			c.IdempotencyKey = IdempotencyKey(c.Tenant, Key{Source: c.Source, EventID: c.EventID, Action: c.Action})
			return c, err
		})
		return err
	})
	if err != nil {
		return nil, db.Error(err)
	}
	return calls, nil
}

// reconcileLockSQL locks a claim's reconcile row ($1 claim id; $2 tenant,
// NULL for any); after reconcileColumns, whether its call's deadline
// has passed.
const reconcileLockSQL = `SELECT ` + reconcileColumns + `, COALESCE(call_deadline <= statement_timestamp(), false)
	FROM reconciles WHERE claim_id = $1 AND ($2::text IS NULL OR tenant = $2) FOR UPDATE`

// reconcileEpisodeSQL locks the claim of reconcile $1 (FOR NO KEY
// UPDATE: what its update takes, so no Complete, claim or operator
// decision lands between this check and the answer's write) and says
// whether it is unknown in the reconcile's episode.
const reconcileEpisodeSQL = `SELECT ` + episodeMatch + ` FROM claims c JOIN reconciles r ON r.claim_id = c.id
	WHERE c.id = $1 FOR NO KEY UPDATE OF c`

// reconcileDropSQL drops reconcile $1.
const reconcileDropSQL = `UPDATE reconciles SET state = 'dropped', updated_at = statement_timestamp()
	WHERE claim_id = $1 RETURNING ` + reconcileColumns

// reconcileSettleSQL applies a done or not_done verdict to the claim
// (locked, unknown in the episode; see reconcileEpisodeSQL), as an
// operator's Resolve completed or retry would: done → completed with the
// result_ref found ($3, NULL keeps the claim's) and its object version
// recorded; not_done → retryable_failed, claimable at once, one more
// attempt allowed. Logged with actor $4 and detail $5. $1 claim id,
// $2 verdict.
const reconcileSettleSQL = `
WITH c AS (
	UPDATE claims SET
		state = CASE WHEN $2 = 'done' THEN 'completed' ELSE 'retryable_failed' END,
		result_ref = CASE WHEN $2 = 'done' THEN COALESCE($3, result_ref) ELSE result_ref END,
		completed_at = CASE WHEN $2 = 'done' THEN statement_timestamp() END,
		next_attempt_at = CASE WHEN $2 = 'not_done' THEN statement_timestamp() END,
		max_attempts = CASE WHEN $2 = 'not_done' THEN GREATEST(max_attempts, attempt + 1) ELSE max_attempts END,
		lease_until = NULL, updated_at = statement_timestamp()
	WHERE id = $1 AND state = 'unknown'
	RETURNING *
), v AS (
	` + completedObjectVersionSQL + `
), log AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail, actor)
	SELECT id, CASE WHEN $2 = 'done' THEN 'reconciled_done' ELSE 'reconciled_not_done' END, attempt, $5, $4::text FROM c
)
SELECT ` + recordColumns + ` FROM c`

// reconcileAnsweredSQL records a done or not_done answer on reconcile $1:
// $2 verdict, $3 result_ref, $4 note.
const reconcileAnsweredSQL = `UPDATE reconciles SET state = 'answered', verdict = $2, result_ref = $3, note = $4,
	last_error = NULL, updated_at = statement_timestamp() WHERE claim_id = $1 RETURNING ` + reconcileColumns

// reconcileAgainSQL ends reconcile $1's call without a decision: waiting
// for the next call after $2 seconds, or gave_up when $6 (the calls
// reached max_calls), with the gave-up entry logged (actor $7, detail
// $8). $3 verdict (NULL for a failed call), $4 note, $5 error class.
const reconcileAgainSQL = `
WITH r AS (
	UPDATE reconciles SET state = CASE WHEN $6 THEN 'gave_up' ELSE 'waiting' END,
		next_call_at = CASE WHEN $6 THEN next_call_at ELSE statement_timestamp() + make_interval(secs => $2) END,
		verdict = $3, note = $4, last_error = $5, result_ref = NULL, updated_at = statement_timestamp()
	WHERE claim_id = $1
	RETURNING *
), log AS (
	INSERT INTO claim_deliveries (claim_id, outcome, attempt, detail, actor)
	SELECT c.id, 'reconcile_gave_up', c.attempt, $8, $7::text FROM r JOIN claims c ON c.id = r.claim_id WHERE $6
)
SELECT ` + reconcileColumns + ` FROM r`

// reconcileExpiredSQL locks at most $1 calls past their deadline.
const reconcileExpiredSQL = `SELECT ` + reconcileColumns + ` FROM reconciles
	WHERE state = 'calling' AND call_deadline <= statement_timestamp()
	ORDER BY call_deadline LIMIT $1 FOR UPDATE SKIP LOCKED`

const reconcileOfSQL = `SELECT ` + reconcileColumns + ` FROM reconciles WHERE claim_id = $1 AND tenant = $2`

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
		var late bool
		r, err := scanReconcile(tx.QueryRow(ctx, reconcileLockSQL, claimID, tenant), &late)
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
		var same bool
		if err := tx.QueryRow(ctx, reconcileEpisodeSQL, claimID).Scan(&same); err != nil {
			return err
		}
		if !same {
			st, err := scanReconcile(tx.QueryRow(ctx, reconcileDropSQL, claimID))
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
			rec, err := scanRecord(tx.QueryRow(ctx, reconcileSettleSQL, claimID, string(verdict), nullable(resultRef),
				actor, detail))
			if err != nil {
				return err
			}
			st, err := scanReconcile(tx.QueryRow(ctx, reconcileAnsweredSQL, claimID, string(verdict),
				nullable(resultRef), nullable(note)))
			if err != nil {
				return err
			}
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
	return scanReconcile(tx.QueryRow(ctx, reconcileAgainSQL, r.ClaimID, wait, nullable(string(verdict)), nullable(note),
		nullable(errClass), gaveUp, reconcileActor(r.Reconciler), detail))
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
		var late bool
		r, err := scanReconcile(tx.QueryRow(ctx, reconcileLockSQL, claimID, nil), &late)
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
	var same bool
	if err := tx.QueryRow(ctx, reconcileEpisodeSQL, r.ClaimID).Scan(&same); err != nil {
		return ReconcileState{}, err
	}
	if !same {
		return scanReconcile(tx.QueryRow(ctx, reconcileDropSQL, r.ClaimID))
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
		rows, err := tx.Query(ctx, reconcileExpiredSQL, limit)
		if err != nil {
			return err
		}
		expired, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ReconcileState, error) { return scanReconcile(row) })
		if err != nil {
			return err
		}
		for _, r := range expired {
			st, err := l.reconcileEnd(ctx, tx, r, ReconcileErrTimeout)
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
	st, err := scanReconcile(l.pool.QueryRow(ctx, reconcileOfSQL, claimID, tenant))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, db.Error(err)
	}
	return &st, nil
}

// Reconciler returns the limits of the configured reconciler name, and
// whether it is configured.
func (l *Ledger) Reconciler(name string) (ReconcilerPolicy, bool) {
	p, ok := l.policies.Load().Reconcilers[name]
	return p, ok
}
