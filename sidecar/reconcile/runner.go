// Package reconcile runs the reconcilers: for a claim left unknown (its
// effect may or may not have happened) that has a reconciler, claimd
// calls that reconciler, an n8n workflow that looks at the destination,
// and settles the claim by its answer (done → completed, not_done →
// retryable_failed and an ingested event dispatched again, still_unknown
// → asked again after a backoff, at most max_calls times, then left for an
// operator). The ledger half (which calls are due, fencing, the claim's
// state) is claim.Ledger's Reconcile* methods; this package makes the
// HTTP calls and applies their answers, on every claimd replica.
//
// A call is a POST of a JSON body (Request) with Content-Type
// application/json, User-Agent claimd-reconcile and the reconciler's
// configured headers. The reconciler answers in its 2xx response body,
// {"verdict":"done|not_done|still_unknown","result_ref":"…","note":"…"},
// or later through POST /v1/claims/{id}/reconcile with the call's
// reconcile_token, before answer_by (a 2xx body without a verdict
// member). A call without a valid answer is a failed call: timeout,
// unreachable, status_4xx, status_5xx or bad_answer (a body that is not
// an answer, a redirect). Nothing a reconciler sends is logged; neither
// are the configured headers or the URL.
package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// Defaults of Options.
const (
	DefaultInterval    = 2 * time.Second
	DefaultConcurrency = 4
	// DefaultBatch bounds the claims one discovery and one expiry take.
	DefaultBatch = 100
	// maxRounds bounds the rounds of calls (each up to Concurrency) in
	// one RunOnce, so that expiry and discovery run between them.
	maxRounds = 8
)

// Observer receives the runner's metrics events (metrics.ReconcileMetrics).
type Observer interface {
	// ReconcileCalled counts a call that ended, by reconciler and result
	// (a verdict, a failure class, or fenced): once per call, by the
	// replica that ended it.
	ReconcileCalled(reconciler, result string)
	// ReconcileGaveUp counts a reconcile that gave up (max_calls reached).
	ReconcileGaveUp(reconciler string)
}

type nopObserver struct{}

func (nopObserver) ReconcileCalled(string, string) {}
func (nopObserver) ReconcileGaveUp(string)         {}

// Options configure a Runner.
type Options struct {
	Ledger *claim.Ledger
	// Pool reads the open reconciles for the gauge (Open); may be nil.
	Pool *pgxpool.Pool
	// Reconcilers are the configured reconcilers (sources.Config's): where
	// and how each is called. SetReconcilers replaces them on a reload.
	Reconcilers map[string]*sources.Reconciler
	// Redispatch re-arms an ingested event's dispatch after a not_done
	// verdict, in the answer's transaction (inbox.Inbox.RedispatchTx);
	// nil: none (no ingest).
	Redispatch claim.Redispatch
	// Transport makes the calls; nil: a clone of http.DefaultTransport.
	// Redirects are never followed (a 3xx is a bad answer).
	Transport http.RoundTripper
	Observer  Observer
	Logger    zerolog.Logger
	// Interval between runs (Run); default DefaultInterval.
	Interval time.Duration
	// Concurrency bounds the calls in flight; default DefaultConcurrency.
	Concurrency int
	// Batch bounds one discovery's and one expiry's claims; default
	// DefaultBatch.
	Batch int
}

// Runner makes the reconcile calls of one claimd replica. Any number of
// runners may share a database: the ledger hands each call to one.
type Runner struct {
	o    Options
	recs atomic.Pointer[map[string]*sources.Reconciler]
}

// New returns a runner for o.
func New(o Options) *Runner {
	if o.Observer == nil {
		o.Observer = nopObserver{}
	}
	if o.Transport == nil {
		o.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Batch <= 0 {
		o.Batch = DefaultBatch
	}
	r := &Runner{o: o}
	r.SetReconcilers(o.Reconcilers)
	return r
}

// SetReconcilers replaces the configured reconcilers (a sources-file
// reload). Calls already taken keep the reconciler they were taken with.
func (r *Runner) SetReconcilers(m map[string]*sources.Reconciler) {
	if m == nil {
		m = map[string]*sources.Reconciler{}
	}
	r.recs.Store(&m)
}

// Request is the JSON body of a call.
type Request struct {
	// Type is always "idempotent_claim.reconcile".
	Type     string `json:"type"`
	ClaimID  string `json:"claim_id"`
	Token    string `json:"reconcile_token"`
	Tenant   string `json:"tenant"`
	Source   string `json:"source"`
	EventID  string `json:"event_id"`
	Action   string `json:"action"`
	EventTyp string `json:"event_type"`
	// Attempt is the attempt whose outcome is unknown.
	Attempt        int    `json:"attempt"`
	LastError      string `json:"last_error"`
	PayloadHash    string `json:"payload_hash"`
	ResultRef      string `json:"result_ref"`
	IdempotencyKey string `json:"idempotency_key"`
	// Call is this call's number (1-based), MaxCalls the episode's bound.
	Call     int `json:"call"`
	MaxCalls int `json:"max_calls"`
	// AnswerBy (RFC 3339, UTC) ends the call: an answer through the API
	// after it is refused.
	AnswerBy time.Time `json:"answer_by"`
	// AnswerPath is where an asynchronous answer goes:
	// /v1/claims/{id}/reconcile.
	AnswerPath string `json:"answer_path"`
}

// RequestType is Request.Type.
const RequestType = "idempotent_claim.reconcile"

func requestOf(c claim.ReconcileCall) Request {
	return Request{Type: RequestType, ClaimID: c.ClaimID, Token: c.Token, Tenant: c.Tenant, Source: c.Source,
		EventID: c.EventID, Action: c.Action, EventTyp: c.EventType, Attempt: c.Attempt, LastError: c.LastError,
		PayloadHash: c.PayloadHash, ResultRef: c.ResultRef, IdempotencyKey: c.IdempotencyKey, Call: c.Call,
		MaxCalls: c.MaxCalls, AnswerBy: c.Deadline.UTC().Truncate(time.Second), AnswerPath: "/v1/claims/" + c.ClaimID + "/reconcile"}
}

// Run calls RunOnce every Interval until ctx ends. Failures are logged
// and the next run tries again.
func (r *Runner) Run(ctx context.Context) {
	t := time.NewTicker(r.o.Interval)
	defer t.Stop()
	for {
		if _, err := r.RunOnce(ctx); err != nil && ctx.Err() == nil {
			r.o.Logger.Warn().Err(err).Msg("reconcile run failed")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// RunOnce ends the calls past their deadline (ReconcileExpire), starts
// the reconciles of claims newly unknown (ReconcileDiscover), then takes
// the due calls, up to Concurrency at a time, makes them and applies
// their outcomes, for a few rounds while calls are due. It returns how
// many calls it made. A call cut short by ctx (a shutdown) is left in
// flight: it ends at its deadline and counts as a timeout. Errors: the
// ledger's (db.Error), the first one met; the calls made are still
// counted.
func (r *Runner) RunOnce(ctx context.Context) (int, error) {
	expired, err := r.o.Ledger.ReconcileExpire(ctx, r.o.Batch)
	if err != nil {
		return 0, err
	}
	for _, st := range expired {
		r.ended(st, claim.ReconcileErrTimeout)
	}
	if _, err := r.o.Ledger.ReconcileDiscover(ctx, r.o.Batch); err != nil {
		return 0, err
	}
	n := 0
	for range maxRounds {
		calls, err := r.o.Ledger.ReconcileTake(ctx, r.o.Concurrency)
		if err != nil {
			return n, err
		}
		var wg sync.WaitGroup
		for _, c := range calls {
			wg.Add(1)
			go func() { defer wg.Done(); r.call(ctx, c) }()
		}
		wg.Wait()
		n += len(calls)
		if len(calls) < r.o.Concurrency || ctx.Err() != nil {
			break
		}
	}
	return n, ctx.Err()
}

// ended counts a reconcile that a failure, an expiry or an answer left
// in state st: result for its call, and its giving up.
func (r *Runner) ended(st claim.ReconcileState, result string) {
	if st.State == claim.ReconcileDropped {
		result = ResultFenced
	}
	r.o.Observer.ReconcileCalled(st.Reconciler, result)
	if st.State == claim.ReconcileGaveUp {
		r.o.Observer.ReconcileGaveUp(st.Reconciler)
		r.o.Logger.Warn().Str("claim_id", st.ClaimID).Str("reconciler", st.Reconciler).Int("calls", st.Calls).
			Str("last_error", st.LastError).Str("verdict", string(st.Verdict)).
			Msg("reconcile gave up: the claim stays unknown for an operator")
	}
}

// call makes call c and applies its outcome.
func (r *Runner) call(ctx context.Context, c claim.ReconcileCall) {
	log := r.o.Logger.With().Str("claim_id", c.ClaimID).Str("reconciler", c.Reconciler).Int("call", c.Call).Logger()
	rec := (*r.recs.Load())[c.Reconciler]
	if rec == nil {
		// Configured in the ledger's policies but not here (a reload
		// between the two): no call is made; it ends at its deadline.
		log.Warn().Msg("reconcile call taken for a reconciler this runner does not have; it ends at its deadline")
		return
	}
	body, err := json.Marshal(requestOf(c))
	if err != nil {
		log.Error().Err(err).Msg("reconcile request")
		return
	}
	cctx, cancel := context.WithTimeout(ctx, rec.Timeout)
	out := post(cctx, r.o.Transport, rec.URL, rec.Headers, body)
	cancel()
	if ctx.Err() != nil {
		return // shutting down: the call ends at its deadline
	}
	// The outcome is written even if ctx ends meanwhile: bounded by its
	// own timeout.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer wcancel()
	switch {
	case out.async:
		log.Debug().Time("answer_by", c.Deadline).Msg("reconcile call accepted; the answer comes through the API")
	case out.fail != "":
		r.fail(wctx, log, c, out.fail)
	default:
		res, err := r.Answer(wctx, c.Tenant, c.ClaimID, c.Token, out.answer)
		var ae *apperr.Error
		switch {
		case err == nil:
			log.Info().Str("verdict", out.answer.Verdict).Str("state", string(res.Reconcile.State)).Msg("reconcile answered")
		case errors.As(err, &ae) && ae.Code == apperr.Invalid:
			// The ledger refused a field the answer carried (a result_ref
			// with a verdict other than done, a control character): the
			// answer is a bad one.
			r.fail(wctx, log, c, ResultBadAnswer)
		case errors.As(err, &ae) && (ae.Code == apperr.ReconcileTokenStale || ae.Code == apperr.InvalidState):
			log.Info().Str("why", string(ae.Code)).Msg("reconcile answer not applied: the claim was settled meanwhile or the call ended")
		default:
			log.Warn().Err(err).Msg("reconcile answer not recorded; the call ends at its deadline")
		}
	}
}

// fail records c as failed with class.
func (r *Runner) fail(ctx context.Context, log zerolog.Logger, c claim.ReconcileCall, class string) {
	st, err := r.o.Ledger.ReconcileFail(ctx, c.ClaimID, c.Token, class)
	var ae *apperr.Error
	switch {
	case err == nil:
		log.Info().Str("error_class", class).Str("state", string(st.State)).Msg("reconcile call failed")
		r.ended(st, class)
	case errors.As(err, &ae) && ae.Code == apperr.ReconcileTokenStale:
		// The call was ended already (an answer through the API, or its
		// deadline), and counted then.
		log.Info().Str("error_class", class).Msg("reconcile call failure not recorded: the call had ended")
	default:
		log.Warn().Err(err).Str("error_class", class).Msg("reconcile call failure not recorded; the call ends at its deadline")
	}
}

// Answer applies a reconciler's answer to the call with token on claim
// claimID of tenant (claim.Ledger.ReconcileAnswer, the re-dispatch of an
// ingested event included) and counts the call when this answer ended it
// (claim.ReconcileResult.Ended): its verdict, or fenced when the claim
// was settled meanwhile (nothing applied), and a reconcile that gave up.
// An answer to a call that had ended is not counted again: a repeat of
// the answer applied (the node's Answer Reconcile answers both through
// the API and in the response), another verdict after it, or an answer
// after the call failed or passed its deadline (counted then). For the
// runner (an answer in the response) and the API (an answer that came
// later). Errors: as claim.Ledger.ReconcileAnswer.
func (r *Runner) Answer(ctx context.Context, tenant, claimID, token string, a Answer) (claim.ReconcileResult, error) {
	res, err := r.o.Ledger.ReconcileAnswer(ctx, tenant, claimID, token, claim.ReconcileVerdict(a.Verdict),
		a.ResultRef, a.Note, r.o.Redispatch)
	if res.Ended {
		r.ended(res.Reconcile, a.Verdict) // fenced when the answer dropped the reconcile
	}
	if err != nil {
		return claim.ReconcileResult{}, err
	}
	return res, nil
}

// Open counts the open reconciles by state (waiting, calling, gave_up)
// of claims still unknown, for the claimd_reconcile_open gauge. Errors:
// the database's.
func (r *Runner) Open(ctx context.Context) (map[string]int, error) {
	out := map[string]int{string(claim.ReconcileWaiting): 0, string(claim.ReconcileCalling): 0, string(claim.ReconcileGaveUp): 0}
	if r.o.Pool == nil {
		return out, nil
	}
	rows, err := queries.OpenReconciles(ctx, r.o.Pool)
	if err != nil {
		return nil, err
	}
	for _, row := range rows {
		out[row.State] = int(row.Count)
	}
	return out, nil
}

// queries runs the package's statements (sidecar/db/queries/reconcile.sql).
var queries = dbsqlc.New()
