package inbox

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/rs/zerolog"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
	"github.com/idempotent-claim/idempotent-claim/sidecar/strictjson"
)

// DispatchArgs is the River job that posts one inbox event to its target.
type DispatchArgs struct {
	ClaimID string `json:"claim_id"`
	Source  string `json:"source"`
}

// Kind implements river.JobArgs.
func (DispatchArgs) Kind() string { return "claimd_inbox_dispatch" }

// Headers the dispatcher adds to every forwarded event.
const (
	HeaderIdempotencyKey = "Idempotency-Key"      // the record's stable idempotency key
	HeaderInboxID        = "X-Inbox-Id"           // the inbox record (claim) id
	HeaderSource         = "X-Idempotency-Source" // the source name: the node's "source"
	HeaderEventID        = "X-Idempotency-Event-Id"
	HeaderEventType      = "X-Idempotency-Event-Type"
	HeaderAttempt        = "X-Dispatch-Attempt"
)

// Options configures New.
type Options struct {
	Pool   *pgxpool.Pool
	Ledger *claim.Ledger
	Config sources.Config
	Logger zerolog.Logger
	// Observer receives metrics events; default none.
	Observer Observer
	// Dispatch runs dispatch workers in this process. False makes an
	// ingest-only replica: it stores and enqueues, others dispatch.
	Dispatch bool
	// HTTPClient posts to targets; default a client without a global timeout
	// (each source's forward timeout applies per request). Its
	// CheckRedirect is replaced: the dispatcher never follows redirects.
	// Without a Transport of its own, it gets a copy of
	// http.DefaultTransport keeping up to MaxIdleConnsPerTarget idle
	// connections per target host (the default keeps 2, so that 16
	// concurrent dispatches to one n8n opened a new connection for most
	// posts).
	HTTPClient *http.Client
	// Jitter returns a uniform number in [0, 1) for the backoff; default math/rand/v2.
	Jitter func() float64
	// PollInterval is River's fallback fetch interval; default 1s.
	PollInterval time.Duration
	// RiverLogger receives River's own log records; default none.
	RiverLogger *slog.Logger
	// Group sets group commit of Receive (receipt_groups.go); nil follows the
	// Ledger's (claim.Ledger.GroupConfig), Workers 0 turns it off (every
	// delivery its own transaction).
	Group *claim.GroupConfig
	// Workers, when set, adds River workers of other kinds (the backfill
	// scan, package backfill); their jobs run on River's default queue,
	// in a process with Dispatch (see Inbox.Enqueue).
	Workers func(*river.Workers)
}

// MaxIdleConnsPerTarget is how many idle keep-alive connections the
// default dispatch client keeps per target host: up to this forward
// concurrency (summed over the sources posting to one host) every post
// reuses a connection; above it some open new ones.
const MaxIdleConnsPerTarget = 64

// New builds the inbox and its River client. Call Start to run dispatch
// workers (when Options.Dispatch) and Stop on shutdown.
func New(o Options) (*Inbox, error) {
	in := &Inbox{pool: o.Pool, ledger: o.Ledger, log: o.Logger, obs: o.Observer, client: o.HTTPClient, jitter: o.Jitter}
	if in.obs == nil {
		in.obs = nopObserver{}
	}
	// The dispatcher never follows a redirect (see Work): a 3xx is the
	// answer of the attempt. A copy, so the caller's client keeps its own.
	hc := http.Client{}
	if o.HTTPClient != nil {
		hc = *o.HTTPClient
	}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if hc.Transport == nil {
		if dt, ok := http.DefaultTransport.(*http.Transport); ok {
			t := dt.Clone()
			t.MaxIdleConnsPerHost = MaxIdleConnsPerTarget
			t.MaxIdleConns = max(t.MaxIdleConns, 4*MaxIdleConnsPerTarget)
			hc.Transport = t
		}
	}
	in.client = &hc
	if in.jitter == nil {
		in.jitter = rand.Float64
	}
	cfg := o.Config
	if cfg.Sources == nil {
		cfg.Sources = map[string]*sources.Source{}
	}
	in.cfg.Store(&cfg)
	gc := o.Ledger.GroupConfig()
	if o.Group != nil {
		gc = *o.Group
	}
	in.newGroupers(gc)
	workers := river.NewWorkers()
	river.AddWorker(workers, &dispatchWorker{in: in})
	if o.Workers != nil {
		o.Workers(workers)
	}
	rc := &river.Config{
		Workers:     workers,
		RetryPolicy: &retryPolicy{in: in},
		Logger:      cmp.Or(o.RiverLogger, slog.New(slog.DiscardHandler)),
		// A dispatch is bounded by its source's timeout (Timeout below, at
		// most sources.MaxForwardTimeout); a job still running well after that
		// belongs to a crashed process.
		RescueStuckJobsAfter: sources.RescueStuckAfter,
		FetchPollInterval:    o.PollInterval,
		// River fetches at most once per cooldown and at most MaxWorkers
		// jobs per fetch, so its 100 ms default caps a source at
		// 10 × forward.concurrency dispatches per second. 5 ms lifts that
		// to 200 × concurrency while LISTEN/NOTIFY keeps idle fetches rare.
		FetchCooldown: 5 * time.Millisecond,
	}
	if rc.FetchPollInterval == 0 {
		rc.FetchPollInterval = time.Second
	}
	if o.Dispatch {
		rc.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}}
		for name, s := range cfg.Sources {
			rc.Queues[sources.QueueName(name)] = river.QueueConfig{MaxWorkers: s.Forward.Concurrency}
		}
	}
	client, err := river.NewClient(riverpgxv5.New(o.Pool), rc)
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	in.river = client
	in.dispatching = o.Dispatch
	return in, nil
}

// Start runs the dispatch workers (no-op for an ingest-only inbox). Pending
// events of a source the configuration no longer names get a dispatch queue
// too, so they are seen and wait visibly (see Work) instead of sitting
// unnoticed in a queue nobody works.
func (in *Inbox) Start(ctx context.Context) error {
	if !in.dispatching {
		return nil
	}
	pending, err := queries.PendingDispatchSources(ctx, in.pool)
	if err != nil {
		return fmt.Errorf("read pending dispatches: %w", err)
	}
	cfg := in.cfg.Load()
	for _, name := range pending {
		if cfg.Sources[name] != nil {
			continue
		}
		err := in.river.Queues().Add(sources.QueueName(name), river.QueueConfig{MaxWorkers: 1})
		var dup *river.QueueAlreadyAddedError
		if err != nil && !errors.As(err, &dup) {
			return fmt.Errorf("source %q: add dispatch queue: %w", name, err)
		}
		in.log.Warn().Str("source", name).Msg("pending dispatches of a source the sources file does not configure: they wait until it is configured again")
	}
	return in.river.Start(ctx)
}

// StopCancelGrace is the part of Stop's deadline kept for cancelling the
// dispatches still running then: their POSTs end, each attempt is recorded
// as failed (the event stays pending) and River stores its job for a
// retry, so the next dispatcher, this one restarted or another replica,
// takes it after its backoff instead of after sources.RescueStuckAfter.
const StopCancelGrace = 3 * time.Second

// Stop stops taking dispatch jobs and waits for the running ones to finish
// until ctx's deadline less StopCancelGrace (half the time left, when that
// is less than twice the grace); then it cancels the ones still running and
// waits for them to be recorded until the deadline. A dispatch whose POST
// was cut may have reached the target; its retry is a duplicate delivery,
// which the workflow's claim answers as such. Without a deadline it waits
// until ctx ends. It returns ctx's error when even the cancelled
// dispatches were not recorded in time (their jobs are then rescued after
// sources.RescueStuckAfter).
func (in *Inbox) Stop(ctx context.Context) error {
	if !in.dispatching {
		return nil
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		return in.river.Stop(ctx)
	}
	grace := StopCancelGrace
	if left := time.Until(deadline); left < 2*grace {
		grace = left / 2
	}
	soft, cancel := context.WithDeadline(ctx, deadline.Add(-grace))
	defer cancel()
	err := in.river.Stop(soft)
	if err == nil || ctx.Err() != nil {
		return err
	}
	in.log.Warn().Msg("dispatches still running at the shutdown deadline: cancelling them (each is retried)")
	return in.river.StopAndCancel(ctx)
}

// Reload swaps the source configuration, whole or not at all: on error the
// running configuration is kept. New sources get their dispatch queue; a
// changed concurrency of an existing source applies after restart. A
// source the new configuration no longer names keeps its stored events:
// their dispatches wait (see Work) and are never dead-lettered for it. The
// waiting dispatches of a source that is configured again are made due at
// once (errors doing so are logged; they resume at their next check
// anyway, at most SourceWaitCap later).
func (in *Inbox) Reload(ctx context.Context, cfg sources.Config) error {
	if cfg.Sources == nil {
		cfg.Sources = map[string]*sources.Source{}
	}
	if in.dispatching {
		for name, s := range cfg.Sources {
			err := in.river.Queues().Add(sources.QueueName(name), river.QueueConfig{MaxWorkers: s.Forward.Concurrency})
			var dup *river.QueueAlreadyAddedError
			if err != nil && !errors.As(err, &dup) {
				return fmt.Errorf("source %q: add dispatch queue: %w", name, err)
			}
		}
	}
	old := in.cfg.Swap(&cfg)
	if !in.dispatching {
		return nil
	}
	for name := range cfg.Sources {
		if old != nil && old.Sources[name] != nil {
			continue
		}
		n, err := in.resumeWaiting(ctx, name)
		switch {
		case err != nil:
			in.log.Warn().Err(err).Str("source", name).Msg("waiting dispatches not resumed at once; they resume at their next check")
		case n > 0:
			in.log.Info().Str("source", name).Int("dispatches", n).Msg("source configured again: its waiting dispatches resume")
		}
	}
	return nil
}

// SourceWaitCap bounds the delay between two checks of a dispatch whose
// source is not configured.
const SourceWaitCap = time.Minute

// waitingReason is last_dispatch_error (and the delivery-log detail) of a
// dispatch waiting for its source.
func waitingReason(source string) string {
	return fmt.Sprintf("source %q is not configured; waiting (the dispatch resumes when the sources file configures it again)", source)
}

// resumeWaiting makes the dispatch jobs waiting for source (see Work) due
// now and returns how many it woke. Other scheduled jobs of the source (a
// target's Retry-After) keep their time.
func (in *Inbox) resumeWaiting(ctx context.Context, source string) (int, error) {
	ids, err := queries.WaitingDispatches(ctx, in.pool, dbsqlc.WaitingDispatchesParams{Source: source, Reason: waitingReason(source)})
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	waiting := make(map[string]bool, len(ids))
	for _, id := range ids {
		waiting[id] = true
	}
	n := 0
	params := river.NewJobListParams().Kinds(DispatchArgs{}.Kind()).Queues(sources.QueueName(source)).
		States(rivertype.JobStateScheduled, rivertype.JobStateRetryable).First(1000)
	for {
		res, err := in.river.JobList(ctx, params)
		if err != nil {
			return n, err
		}
		for _, j := range res.Jobs {
			var a DispatchArgs
			if json.Unmarshal(j.EncodedArgs, &a) != nil || a.Source != source || !waiting[a.ClaimID] {
				continue
			}
			if _, err := in.river.JobRetry(ctx, j.ID); err != nil {
				return n, err
			}
			n++
		}
		if len(res.Jobs) < 1000 {
			return n, nil
		}
		params = params.After(res.LastCursor)
	}
}

// transportError describes a failed POST without the target URL: the URL
// may carry a token (an n8n webhook path, ?token=…), and the description is
// logged and stored as last_dispatch_error.
func transportError(err error) string {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	return err.Error()
}

// backoff is full jitter: uniform in [0, min(cap, base·2^(attempt-1))].
func backoff(base, cap time.Duration, attempt int, jitter float64) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := float64(base) * math.Pow(2, float64(attempt-1))
	if d > float64(cap) || math.IsInf(d, 0) {
		d = float64(cap)
	}
	return time.Duration(jitter * d)
}

type retryPolicy struct{ in *Inbox }

// NextRetry implements river.ClientRetryPolicy with the source's backoff.
func (p *retryPolicy) NextRetry(job *rivertype.JobRow) time.Time {
	base, cap := sources.DefaultDispatchBase, sources.DefaultDispatchCap
	var args DispatchArgs
	if json.Unmarshal(job.EncodedArgs, &args) == nil {
		if s := p.in.Source(args.Source); s != nil {
			base, cap = s.Forward.BackoffBase, s.Forward.BackoffCap
		}
	}
	return time.Now().Add(backoff(base, cap, job.Attempt, p.in.jitter()))
}

type dispatchWorker struct {
	river.WorkerDefaults[DispatchArgs]
	in *Inbox
}

// Timeout bounds one run of a dispatch job: the source's forward timeout
// plus sources.DispatchLeaseGrace. River's rescuer leaves a running job alone
// until this much has passed since it started, and at least
// sources.RescueStuckAfter.
func (w *dispatchWorker) Timeout(job *river.Job[DispatchArgs]) time.Duration {
	if s := w.in.Source(job.Args.Source); s != nil {
		return s.Forward.Timeout + sources.DispatchLeaseGrace
	}
	return sources.DefaultForwardTimeout
}

type stored struct {
	// keySource is the claim's source: the source's dedupe scope, which
	// the workflow claims with (X-Idempotency-Source).
	tenant, keySource, eventID, eventType, contentType, state string
	body                                                      []byte
	headers                                                   map[string]string
	attempts                                                  int
	receivedAt                                                time.Time
}

// recordTimeout bounds the statement that records an attempt's answer. It
// runs even when the job's context has ended: the answer is known, and an
// attempt left unrecorded would only be taken for one of unknown outcome
// once its lease passes.
const recordTimeout = 10 * time.Second

// Work posts the stored event to the source's target. 2xx → dispatched
// (with require_claim, once the event was claimed since the dispatch was
// armed; an unclaimed 2xx is retried); a status in forward.delivered_statuses → dispatched (the
// target says it has the event already: an n8n resume URL's 409); a status
// in forward.retry_statuses and transport errors → retry with backoff, or
// after Retry-After when the target sent one; any other status → dead
// letter at once; attempt cap → dead letter naming the last answer. Every
// retry and dead letter is a delivery-log row with its reason.
//
// Each attempt is reserved before its POST is sent (reserve): the attempt
// is counted and the event gets a holder token and a lease in a committed
// statement, and the answer is recorded only while that token still holds
// the event. A second run of the job (River rescued it while the first
// may still be posting) finds the live lease and snoozes until it ends;
// it never posts beside an attempt that may be in flight. An attempt whose
// lease ended without an answer recorded has an unknown outcome; see
// takeOver for what happens to it.
//
// Redirects are never followed: the event is posted to forward.url and
// nowhere else. Following one would turn the POST into a GET without the
// event (301/302/303: a 2xx there would count as delivered, the event
// lost) and would carry forward.headers to whatever Location names. A 3xx
// is the attempt's answer, judged by forward.retry_statuses like any
// other (not in the defaults: dead letter at once), with a reason naming
// the status and the Location (userinfo, query and fragment removed) and
// saying to fix forward.url.
//
// A source the configuration does not name (removed from the sources
// file, or not yet back) is no reason to give up on its events: the
// dispatch waits, retried with backoff up to SourceWaitCap without using
// an attempt, visible as last_dispatch_error and one dispatch_failed
// delivery-log row, and resumes when the source is configured again.
//
// Work completes the job (returns nil) only when the event is final
// (dispatched, dead-lettered or purged): when two runs of one job overlap,
// River keeps the result of the run that ends first, so a run that ends
// with the event still pending must leave the job scheduled.
func (w *dispatchWorker) Work(ctx context.Context, job *river.Job[DispatchArgs]) error {
	in := w.in
	ld, err := in.load(ctx, job.Args.ClaimID)
	if err != nil {
		return err
	}
	if !ld.found {
		return nil // purged by retention
	}
	st := ld.st
	if st.state != "pending" {
		return nil // dispatched already (a rescued duplicate job) or dead-lettered
	}
	src := in.Source(job.Args.Source)
	if src == nil {
		return in.waitForSource(ctx, job, st)
	}
	// The POST's deadline counts from before the reservation's
	// transaction starts, so it ends before the lease (the database's
	// now() in that transaction plus Timeout plus sources.DispatchLeaseGrace)
	// whatever the reservation's latency.
	deadline := time.Now().Add(src.Forward.Timeout)
	rv, err := in.reserve(ctx, job.Args, src)
	if err != nil || rv.done {
		return err
	}
	if rv.wait > 0 {
		in.obs.Dispatched(src.Name, "in_flight", 0)
		in.log.Info().Str("source", src.Name).Str("claim_id", job.Args.ClaimID).Int("attempt", rv.attempt).
			Dur("wait", rv.wait).Msg("dispatch attempt in flight elsewhere; checking again when its lease ends")
		return river.JobSnooze(rv.wait)
	}
	attempt, holder := rv.attempt, rv.holder
	ans, derr := in.post(ctx, src, job.Args, st, attempt, deadline)
	// The answer is known: record it even if the job's context ended.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	status, retryAfter := ans.status, ans.retryAfter
	switch {
	case derr == nil && src.Forward.DeliveredStatuses.Has(status):
		return in.markDelivered(ctx, src, job.Args, st, mark{claimID: job.Args.ClaimID, holder: holder, attempt: attempt,
			status: status, detail: deliveredDetail(src, status, ans.conflict)})
	case derr == nil && status >= 300 && status < 400:
		reason := redirectReason(src.Forward.URL, status, ans.location)
		if !src.Forward.RetryStatuses.Has(status) {
			return in.deadLetter(ctx, job.Args, holder, attempt, status, reason)
		}
		derr = errors.New(reason + " (retryable for this source: in forward.retry_statuses)")
	case derr == nil && status >= 200 && status < 300:
		// With require_claim, a 2xx counts only once the workflow has
		// claimed the event since the dispatch was armed
		// (claimed_since_armed, in sidecar/db/queries/inbox.sql): n8n
		// answers 200 "n8n is starting up" while it boots and runs
		// nothing, and a workflow that answers before its claim may still
		// fail. Otherwise it is retried like a 5xx.
		marked, err := in.markDispatched(ctx, mark{claimID: job.Args.ClaimID, holder: holder, attempt: attempt, status: status,
			detail: "HTTP " + strconv.Itoa(status), requireClaim: src.Forward.RequireClaim})
		if err != nil {
			return err
		}
		if marked {
			in.obs.Dispatched(src.Name, "dispatched", time.Since(st.receivedAt))
			in.log.Info().Str("source", src.Name).Str("claim_id", job.Args.ClaimID).Int("attempt", attempt).Int("status", status).Msg("dispatched")
			return nil
		}
		derr = fmt.Errorf("HTTP %d but the event was not claimed (n8n still starting, or the workflow answers before its Idempotent Claim node)", status)
	case derr == nil && !src.Forward.RetryStatuses.Has(status):
		return in.deadLetter(ctx, job.Args, holder, attempt, status,
			fmt.Sprintf("target answered HTTP %d (not retryable for this source: not in forward.retry_statuses)", status))
	}
	reason := fmt.Sprintf("target answered HTTP %d (retryable for this source)", status)
	switch {
	case derr != nil && status >= 300 && status < 400: // a redirect listed in forward.retry_statuses
		reason = derr.Error()
	case derr != nil && status != 0: // a 2xx the workflow did not claim
		reason = "target answered " + derr.Error() + "; for a target that does not claim, set forward.require_claim: false"
	case derr != nil:
		reason = "target unreachable: " + transportError(derr)
	}
	if attempt >= src.Forward.MaxAttempts {
		return in.deadLetter(ctx, job.Args, holder, attempt, status, reason+fmt.Sprintf("; attempt cap %d reached", src.Forward.MaxAttempts))
	}
	if retryAfter > 0 {
		reason += fmt.Sprintf("; next attempt after its Retry-After of %s", retryAfter)
	}
	n, err := queries.FailDispatch(ctx, in.pool, dbsqlc.FailDispatchParams{ClaimID: job.Args.ClaimID, Attempt: int32(attempt),
		Status: int32(status), Reason: reason, Holder: holder})
	if err != nil {
		return err
	}
	if n == 0 {
		return in.lostReservation(src.Name, job.Args.ClaimID, attempt)
	}
	in.obs.Dispatched(src.Name, "retry", 0)
	in.log.Warn().Str("source", src.Name).Str("claim_id", job.Args.ClaimID).Int("attempt", attempt).Str("reason", reason).Msg("dispatch failed; will retry")
	if retryAfter > 0 {
		return river.JobSnooze(retryAfter)
	}
	return errors.New(reason)
}

// lostReservation is Work's answer when an attempt's answer could not be
// recorded because the attempt no longer holds the event: its lease ended
// and another run took the event over (only a stall of this process past
// the lease does that), or an operator changed the record. The job stays
// scheduled; its next run reads what the record says now.
func (in *Inbox) lostReservation(source, claimID string, attempt int) error {
	in.obs.Dispatched(source, "reservation_lost", 0)
	in.log.Warn().Str("source", source).Str("claim_id", claimID).Int("attempt", attempt).
		Msg("dispatch attempt's answer not recorded: its reservation was taken over after its lease ended")
	return fmt.Errorf("attempt %d no longer holds the dispatch (its lease ended and another run took it over)", attempt)
}

// reservation is reserve's answer.
type reservation struct {
	// holder and attempt identify the attempt reserved: post it.
	holder  string
	attempt int
	// wait > 0: another attempt holds a live lease; check again after
	// wait (attempt is that attempt's number).
	wait time.Duration
	// done: post nothing; Work returns reserve's error (nil when the
	// event is final).
	done bool
}

// leaseSlack is added to the wait for another attempt's lease: the check
// after it finds the lease ended, not a few milliseconds short of it.
const leaseSlack = 250 * time.Millisecond

// reserve reserves the dispatch's next attempt for this run. The lease is
// the source's forward timeout plus sources.DispatchLeaseGrace from the
// database's now(); the POST's own deadline (Work) ends before it, so a
// lease never ends while its POST may still be in flight (now() is the
// start of the transaction, which begins after Work took the deadline's
// start). Usually one statement (ReserveDispatch, grouped with concurrent
// reservations as the marks are); when an attempt holds the event, a transaction
// that locks the record decides: the holder's lease is live → wait for it;
// it has ended → takeOver.
func (in *Inbox) reserve(ctx context.Context, a DispatchArgs, src *sources.Source) (reservation, error) {
	lease := src.Forward.Timeout + sources.DispatchLeaseGrace
	holder := uuid.NewString()
	fast, err := in.reserveFast(ctx, reserveReq{claimID: a.ClaimID, holder: holder, leaseMS: lease.Milliseconds()})
	if err != nil {
		return reservation{}, err
	}
	if fast.ok {
		return reservation{holder: holder, attempt: fast.attempt}, nil
	}
	var rv reservation
	var settled func() error // Work's answer once the transaction committed
	var unknown int          // the attempt of unknown outcome taken over, if any
	err = db.RunTx(ctx, in.pool, func(tx pgx.Tx) error {
		rv, settled, unknown = reservation{}, nil, 0
		row, err := queries.LockDispatch(ctx, tx, a.ClaimID)
		rv.attempt = int(row.DispatchAttempts)
		held, live := row.Held, row.Live
		claimed := row.Claimed != nil && *row.Claimed
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			rv.done = true // purged by retention
			return nil
		case err != nil:
			return err
		case row.DispatchState != "pending":
			rv.done = true
			return nil
		case held && live:
			remaining, _ := row.RemainingMs.Float64Value()
			rv.wait = time.Duration(remaining.Float64*float64(time.Millisecond)) + leaseSlack
			return nil
		case held:
			var proceed bool
			proceed, settled, err = in.takeOver(ctx, tx, a, src, rv.attempt, claimed)
			if err != nil || !proceed {
				rv.done = true
				return err
			}
			unknown = rv.attempt
		}
		// No holder (the last one recorded its answer since the first
		// statement) or one taken over: reserve here.
		rv.holder = holder
		attempt, err := queries.ReserveLockedDispatch(ctx, tx, dbsqlc.ReserveLockedDispatchParams{ClaimID: a.ClaimID,
			Holder: holder, LeaseMs: float64(lease.Milliseconds())})
		rv.attempt = int(attempt)
		return err
	})
	if err != nil {
		return reservation{}, err
	}
	if settled != nil {
		return rv, settled()
	}
	if unknown > 0 {
		in.obs.Dispatched(src.Name, "retry", 0)
		in.log.Warn().Str("source", src.Name).Str("claim_id", a.ClaimID).Int("attempt", unknown).
			Str("reason", unknownReason(unknown)).Msg("dispatch attempt of unknown outcome; posting again")
	}
	return rv, nil
}

// unknownReason is last_dispatch_error (and the delivery-log detail) of an
// attempt whose outcome is unknown.
func unknownReason(attempt int) string {
	return fmt.Sprintf("attempt %d's outcome is unknown: its dispatcher stopped before recording an answer "+
		"(a crash, or a stall past its lease); the target may have received it", attempt)
}

// takeOver settles, in tx (the record locked), the attempt that holds the
// dispatch but whose lease has ended without an answer recorded: its POST
// may or may not have reached the target, and none can still be in
// flight (its deadline ended before the lease). It is logged as a
// dispatch_failed attempt with unknownReason, and then:
//   - with forward.require_claim, if the workflow has claimed the event
//     since the dispatch was armed (claimed, see claimed_since_armed in
//     sidecar/db/queries/inbox.sql), the attempt did reach it:
//     dispatched (delivery-log detail says so);
//   - at forward.max_attempts: dead letter, the reason naming the unknown
//     outcome and the cap;
//   - otherwise it counts as a failed attempt, like a timeout: proceed is
//     true and the caller reserves and posts the next attempt at once
//     (the lease wait already outlasted the attempt's timeout). A target
//     that does not claim may then receive the event twice; it carries
//     the same Idempotency-Key and a higher X-Dispatch-Attempt.
//
// settled, when not nil, is what Work returns after the commit (it also
// signals the observer and logs).
func (in *Inbox) takeOver(ctx context.Context, tx pgx.Tx, a DispatchArgs, src *sources.Source, attempt int, claimed bool) (proceed bool, settled func() error, err error) {
	reason := unknownReason(attempt)
	if src.Forward.RequireClaim && claimed {
		const detail = "attempt's outcome unknown, but the workflow has claimed the event: it was received"
		err := queries.MarkUnknownDispatched(ctx, tx, dbsqlc.MarkUnknownDispatchedParams{ClaimID: a.ClaimID,
			Attempt: int32(attempt), Detail: detail})
		return false, func() error {
			in.obs.Dispatched(src.Name, "dispatched", 0)
			in.log.Info().Str("source", src.Name).Str("claim_id", a.ClaimID).Int("attempt", attempt).Msg("dispatched (" + detail + ")")
			return nil
		}, err
	}
	if attempt >= src.Forward.MaxAttempts {
		reason += fmt.Sprintf("; attempt cap %d reached", src.Forward.MaxAttempts)
		err := queries.DeadLetterUnknown(ctx, tx, dbsqlc.DeadLetterUnknownParams{ClaimID: a.ClaimID,
			Attempt: int32(attempt), Reason: reason})
		return false, func() error { return in.deadLettered(a, reason) }, err
	}
	err = queries.FailUnknown(ctx, tx, dbsqlc.FailUnknownParams{ClaimID: a.ClaimID, Attempt: int32(attempt), Reason: reason})
	return err == nil, nil, err
}

// waitForSource records that the dispatch waits for its source to be
// configured again and checks again later. The record and the delivery
// log change only when the wait begins (not on every check), and no
// attempt is used: nothing was sent.
func (in *Inbox) waitForSource(ctx context.Context, job *river.Job[DispatchArgs], st stored) error {
	reason := waitingReason(job.Args.Source)
	n, err := queries.WaitForSource(ctx, in.pool, dbsqlc.WaitForSourceParams{ClaimID: job.Args.ClaimID, Reason: reason,
		Attempt: int32(st.attempts)})
	if err != nil {
		return err
	}
	if n > 0 {
		in.log.Warn().Str("source", job.Args.Source).Str("claim_id", job.Args.ClaimID).Msg("dispatch waits: its source is not configured")
	}
	in.obs.Dispatched(job.Args.Source, "waiting", 0)
	var meta struct {
		Snoozes int `json:"snoozes"`
	}
	_ = json.Unmarshal(job.Metadata, &meta)
	return river.JobSnooze(backoff(sources.DefaultDispatchBase, SourceWaitCap, meta.Snoozes+1, in.jitter()))
}

// deadLetter dead-letters the dispatch whose attempt (holding it as
// holder) got status (0 for none) and records reason.
func (in *Inbox) deadLetter(ctx context.Context, a DispatchArgs, holder string, attempt, status int, reason string) error {
	n, err := queries.DeadLetterDispatch(ctx, in.pool, dbsqlc.DeadLetterDispatchParams{ClaimID: a.ClaimID, Status: int32(status),
		Reason: reason, Holder: holder, Attempt: int32(attempt)})
	if err != nil {
		return err
	}
	if n == 0 {
		return in.lostReservation(a.Source, a.ClaimID, attempt)
	}
	return in.deadLettered(a, reason)
}

// deadLettered reports a dead letter and cancels its job.
func (in *Inbox) deadLettered(a DispatchArgs, reason string) error {
	in.obs.Dispatched(a.Source, "dead_lettered", 0)
	in.log.Error().Str("source", a.Source).Str("claim_id", a.ClaimID).Str("reason", reason).Msg("dispatch dead-lettered; replay with POST /v1/inbox/{id}/replay")
	return river.JobCancel(errors.New(reason))
}

// markDelivered records an answer in forward.delivered_statuses: the
// target has the event already, so the dispatch is done (dispatched, the
// status and detail in its delivery-log row), never retried and never
// dead-lettered. It holds with require_claim too: the target's own answer
// says the event arrived (an n8n resume URL resumes an execution, which
// need not claim).
func (in *Inbox) markDelivered(ctx context.Context, src *sources.Source, a DispatchArgs, st stored, m mark) error {
	marked, err := in.markDispatched(ctx, m)
	if err != nil {
		return err
	}
	if !marked {
		return in.lostReservation(src.Name, a.ClaimID, m.attempt)
	}
	in.obs.Dispatched(src.Name, "dispatched", time.Since(st.receivedAt))
	in.log.Info().Str("source", src.Name).Str("claim_id", a.ClaimID).Int("attempt", m.attempt).Int("status", m.status).
		Str("detail", m.detail).Msg("dispatched: the target has the event already")
	return nil
}

// answer is what the target answered one dispatch attempt.
type answer struct {
	status int
	// retryAfter is the delay the target asked for (Retry-After), or 0.
	retryAfter time.Duration
	// location is the Location header as sent (a redirect's target).
	location string
	// conflict is what an n8n 409 body says of the execution (see
	// n8nConflict), "" for any other answer.
	conflict string
}

// post sends one dispatch attempt, never following a redirect. It returns
// the answer (the Retry-After delay parsed as seconds or HTTP date, RFC
// 9110 §10.2.3) or a transport error.
func (in *Inbox) post(ctx context.Context, src *sources.Source, a DispatchArgs, st stored, attempt int, deadline time.Time) (answer, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	body := st.body
	if trimmed := strictjson.TrimBOM(body); len(trimmed) != len(body) && sources.LooksJSON(st.contentType, trimmed) {
		// Stored as received (signatures cover it), forwarded without a
		// leading BOM, which JSON parsers may refuse (RFC 8259 §8.1).
		body = trimmed
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, src.Forward.URL, bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	for k, v := range st.headers {
		if sendableHeaderValue(v) { // a provider header no HTTP client can send again is left out
			req.Header.Set(k, v)
		}
	}
	// The idempotency headers are the dispatcher's own: a provider header
	// of the same name (the event type is optional) never passes through.
	for _, h := range []string{HeaderIdempotencyKey, HeaderInboxID, HeaderSource, HeaderEventID, HeaderEventType, HeaderAttempt} {
		req.Header.Del(h)
	}
	if st.contentType != "" {
		req.Header.Set("Content-Type", st.contentType)
	}
	for k, v := range src.Forward.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set(HeaderIdempotencyKey, claim.IdempotencyKey(st.tenant, claim.Key{Source: st.keySource, EventID: st.eventID}))
	req.Header.Set(HeaderInboxID, a.ClaimID)
	req.Header.Set(HeaderSource, st.keySource)
	// Both are header-safe (printable ASCII): the event id by construction
	// (eventID), so the workflow reads back exactly the stored id; the
	// informational event type is percent-encoded the same way here.
	req.Header.Set(HeaderEventID, sources.HeaderValue(st.eventID))
	if st.eventType != "" {
		req.Header.Set(HeaderEventType, sources.HeaderValue(st.eventType))
	}
	req.Header.Set(HeaderAttempt, strconv.Itoa(attempt))
	// The transport, not the client: a client parses a redirect's Location
	// before any redirect policy is asked, and its parse error would quote
	// the Location (a token in its query or userinfo) as a transport error.
	// Redirects are never followed anyway (see redirectReason).
	rt := in.client.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	ans := answer{status: resp.StatusCode, retryAfter: retryAfter(resp.Header.Get("Retry-After")),
		location: resp.Header.Get("Location")}
	if resp.StatusCode == http.StatusConflict {
		head, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		ans.conflict = n8nConflict(head)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return ans, nil
}

// n8nConflict names what n8n's 409 answer to a resume URL says of the
// waiting execution, from the first bytes of its body: "running" (another
// call resumed it and it runs), "finished", "finished with error", or ""
// when the body is none of these. n8n (packages/cli/src/webhooks/
// waiting-webhooks.ts, 2.x) answers 409 with a ConflictError whose message
// says `The execution "<id>" is running already.`, `… has finished with
// error.` or `… has finished already.`; a fixed word is kept, never the
// body itself.
func n8nConflict(head []byte) string {
	switch {
	case bytes.Contains(head, []byte("is running already")):
		return "running"
	case bytes.Contains(head, []byte("has finished with error")):
		return "finished with error"
	case bytes.Contains(head, []byte("has finished already")):
		return "finished"
	}
	return ""
}

// deliveredDetail is the delivery-log detail of an answer in
// forward.delivered_statuses.
func deliveredDetail(src *sources.Source, status int, conflict string) string {
	d := fmt.Sprintf("HTTP %d: delivered already (in forward.delivered_statuses)", status)
	if src.Forward.ResumeURL && status == http.StatusConflict {
		d = fmt.Sprintf("HTTP %d from an n8n resume URL: the execution was resumed already", status)
		if conflict != "" {
			d += " (n8n: " + conflict + ")"
		}
	}
	return d
}

// maxLocationLen bounds the redirect target quoted in a reason, in bytes.
const maxLocationLen = 300

// redirectReason describes a 3xx answer to forward.url: the status, where
// it points (resolved against forward.url; userinfo, query and fragment
// removed, as they may carry a token; "another origin" when scheme, host
// or port differ) and what to do.
func redirectReason(forwardURL string, status int, location string) string {
	where := "without a Location"
	if location != "" {
		where = "to an unparsable Location"
		base, berr := url.Parse(forwardURL)
		loc, lerr := url.Parse(location)
		if berr == nil && lerr == nil {
			u := base.ResolveReference(loc)
			u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
			where = "to " + sources.Truncate(u.String(), maxLocationLen)
			if !sameOrigin(base, u) {
				where += " (another origin)"
			}
		}
	}
	return fmt.Sprintf("target answered HTTP %d redirect %s — fix forward.url: redirects are not followed "+
		"(a redirected POST can arrive as a GET without the event, and forward.headers never leave forward.url's origin)", status, where)
}

// sameOrigin reports whether a and b share scheme, host and port (RFC
// 6454), default ports made explicit.
func sameOrigin(a, b *url.URL) bool {
	port := func(u *url.URL) string {
		if p := u.Port(); p != "" {
			return p
		}
		if strings.EqualFold(u.Scheme, "https") {
			return "443"
		}
		return "80"
	}
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Hostname(), b.Hostname()) && port(a) == port(b)
}

// sendableHeaderValue reports whether v can be sent as an HTTP field value
// (RFC 9110 §5.5): no control characters but horizontal tab.
func sendableHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
		return min(time.Duration(n)*time.Second, time.Hour)
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return min(d, time.Hour)
		}
	}
	return 0
}

// riverMaxAttempts is River's own cap. The dispatcher enforces the source's
// forward.max_attempts itself (counting snoozed Retry-After attempts too) and
// cancels the job when it dead-letters, so River's cap only bounds retries
// of the dispatcher's own database errors.
const riverMaxAttempts = 1000
