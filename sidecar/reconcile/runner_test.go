package reconcile_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/metrics"
	"github.com/idempotent-claim/idempotent-claim/sidecar/reconcile"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// reconciler is a real HTTP server standing in for the n8n reconcile
// workflow's webhook: it records every call and answers with answer.
type reconciler struct {
	srv *httptest.Server
	mu  sync.Mutex
	// calls are the bodies received, by claim id; headers the last call's.
	calls   map[string][]map[string]any
	headers http.Header
	answer  func(w http.ResponseWriter, r *http.Request, body map[string]any)
}

func newReconciler(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, body map[string]any)) *reconciler {
	t.Helper()
	rc := &reconciler{calls: map[string][]map[string]any{}, answer: answer}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var body map[string]any
		if err := json.Unmarshal(b, &body); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		id, _ := body["claim_id"].(string)
		rc.mu.Lock()
		rc.calls[id] = append(rc.calls[id], body)
		rc.headers = r.Header.Clone()
		answer := rc.answer
		rc.mu.Unlock()
		answer(w, r, body)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *reconciler) callsOf(id string) []map[string]any {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]map[string]any(nil), rc.calls[id]...)
}

func (rc *reconciler) setAnswer(a func(w http.ResponseWriter, r *http.Request, body map[string]any)) {
	rc.mu.Lock()
	rc.answer = a
	rc.mu.Unlock()
}

// answerJSON answers every call 200 with body.
func answerJSON(body string) func(http.ResponseWriter, *http.Request, map[string]any) {
	return func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	}
}

// env is a ledger with the sources file spec (its reconcilers), a runner
// over it and the reconciler's metrics.
type env struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	cfg    sources.Config
	ledger *claim.Ledger
	met    *metrics.Metrics
	runner *reconcile.Runner
}

// setupEnv loads a sources file whose reconciler crm calls rc (extra:
// its other settings; delay_seconds 0 unless extra sets it), with source
// orders defaulting to it; jitter is the ledger's (0: the next call is
// due at once).
func setupEnv(t *testing.T, rc *reconciler, extra string, jitter float64) *env {
	t.Helper()
	if !strings.Contains(extra, "delay_seconds") {
		extra += "\n    delay_seconds: 0"
	}
	spec := `reconcilers:
  crm:
    url: "` + rc.srv.URL + `/webhook/reconcile"
    headers: {X-Reconcile-Token: "${RT}"}
    ` + extra + `
sources:
  orders: {reconciler: crm}
  plain: {}
`
	cfg, err := sources.Parse([]byte(spec), func(string) string { return "reconcile-header-secret" })
	require.NoError(t, err)
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 20 })
	return newEnv(t, pool, cfg, jitter)
}

func newEnv(t *testing.T, pool *pgxpool.Pool, cfg sources.Config, jitter float64) *env {
	t.Helper()
	ledger, err := claim.New(pool, claim.Config{Policies: claim.Policies{BySource: cfg.Policies,
		Reconcilers: cfg.ReconcilerPolicies()}, Jitter: func() float64 { return jitter }})
	require.NoError(t, err)
	e := &env{ctx: t.Context(), pool: pool, cfg: cfg, ledger: ledger, met: metrics.New(nil)}
	e.runner = e.newRunner(nil)
	names := make([]string, 0, len(cfg.Reconcilers))
	for n := range cfg.Reconcilers {
		names = append(names, n)
	}
	e.met.Reconcile().Configure(names)
	return e
}

func (e *env) newRunner(redispatch claim.Redispatch) *reconcile.Runner {
	return reconcile.New(reconcile.Options{Ledger: e.ledger, Pool: e.pool, Reconcilers: e.cfg.Reconcilers,
		Redispatch: redispatch, Observer: e.met.Reconcile(), Logger: zerolog.Nop()})
}

// unknown makes a claim of source/event and fails it unknown; it
// returns the record.
func (e *env) unknown(t *testing.T, source, event string) claim.Record {
	t.Helper()
	res, err := e.ledger.Claim(e.ctx, claim.Request{Tenant: "acme", Key: claim.Key{Source: source, EventID: event, Action: "create_invoice"},
		EventType: "order.paid", PayloadHash: strings.Repeat("ab", 32)})
	require.NoError(t, err)
	require.Equal(t, claim.Won, res.Outcome)
	rec, err := e.ledger.Fail(e.ctx, "acme", res.ID, res.Token, claim.UnknownOutcome, "socket hang up")
	require.NoError(t, err)
	require.Equal(t, claim.StateUnknown, rec.State)
	return rec
}

func (e *env) record(t *testing.T, id string) claim.Record {
	t.Helper()
	rec, err := e.ledger.Get(e.ctx, "acme", id)
	require.NoError(t, err)
	return rec
}

func (e *env) reconcile(t *testing.T, id string) claim.ReconcileState {
	t.Helper()
	st, err := e.ledger.ReconcileOf(e.ctx, "acme", id)
	require.NoError(t, err)
	require.NotNil(t, st)
	return *st
}

// due makes the next call of claim id due now (as if its backoff had
// passed).
func (e *env) due(t *testing.T, id string) {
	t.Helper()
	_, err := e.pool.Exec(e.ctx, `UPDATE reconciles SET next_call_at = now() WHERE claim_id = $1 AND state = 'waiting'`, id)
	require.NoError(t, err)
}

// pastDeadline moves the deadline of claim id's call in flight into the
// past (as if answer_by had passed).
func (e *env) pastDeadline(t *testing.T, id string) {
	t.Helper()
	tag, err := e.pool.Exec(e.ctx, `UPDATE reconciles SET call_deadline = now() - interval '1 second'
		WHERE claim_id = $1 AND state = 'calling'`, id)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
}

func (e *env) runOnce(t *testing.T) int {
	t.Helper()
	n, err := e.runner.RunOnce(e.ctx)
	require.NoError(t, err)
	return n
}

func (e *env) calls(reconciler, result string) float64 {
	return testutil.ToFloat64(e.met.Reconcile().Calls().WithLabelValues(reconciler, result))
}

func (e *env) gaveUp(reconciler string) float64 {
	return testutil.ToFloat64(e.met.Reconcile().GaveUp().WithLabelValues(reconciler))
}

// A claim left unknown is reconciled: the reconciler receives exactly the
// designed body (no secret in it) with the configured header, and its
// answer in the response settles the claim: done → completed with the
// result_ref found; not_done → retryable_failed, claimable at once;
// still_unknown → asked again after the backoff.
func TestRunOnceAnswersInTheResponse(t *testing.T) {
	t.Parallel()
	rc := newReconciler(t, func(w http.ResponseWriter, _ *http.Request, body map[string]any) {
		w.Header().Set("Content-Type", "application/json")
		switch body["event_id"] {
		case "evt-done":
			_, _ = io.WriteString(w, `{"verdict":"done","result_ref":"inv_42","note":"found invoice"}`)
		case "evt-not":
			_, _ = io.WriteString(w, `[{"verdict":"not_done"}]`) // n8n's "All Entries" response
		default:
			_, _ = io.WriteString(w, `{"verdict":"still_unknown","note":"CRM is syncing"}`)
		}
	})
	e := setupEnv(t, rc, "max_calls: 3", 1)
	done, notDone, later := e.unknown(t, "orders", "evt-done"), e.unknown(t, "orders", "evt-not"), e.unknown(t, "orders", "evt-later")
	plain := e.unknown(t, "plain", "evt-plain") // no reconciler: left alone

	require.Equal(t, 3, e.runOnce(t))
	require.Empty(t, rc.callsOf(plain.ID))

	calls := rc.callsOf(done.ID)
	require.Len(t, calls, 1)
	body := calls[0]
	token, _ := body["reconcile_token"].(string)
	require.Len(t, token, 36)
	answerBy, err := time.Parse(time.RFC3339, body["answer_by"].(string))
	require.NoError(t, err)
	require.Equal(t, map[string]any{
		"type": "idempotent_claim.reconcile", "claim_id": done.ID, "reconcile_token": token, "tenant": "acme",
		"source": "orders", "event_id": "evt-done", "action": "create_invoice", "event_type": "order.paid",
		"attempt": float64(1), "last_error": "socket hang up", "payload_hash": done.PayloadHash, "result_ref": "",
		"idempotency_key": done.IdempotencyKey, "call": float64(1), "max_calls": float64(3),
		"answer_by": body["answer_by"], "answer_path": "/v1/claims/" + done.ID + "/reconcile",
	}, body)
	require.WithinDuration(t, time.Now().Add(60*time.Second), answerBy, 30*time.Second, "timeout 30 s plus answer 30 s")
	raw, _ := json.Marshal(body)
	require.NotContains(t, string(raw), "reconcile-header-secret", "the configured header value is never in the body")
	require.Equal(t, "reconcile-header-secret", rc.headers.Get("X-Reconcile-Token"))
	require.Equal(t, "application/json", rc.headers.Get("Content-Type"))
	require.Equal(t, "claimd-reconcile", rc.headers.Get("User-Agent"))

	rec := e.record(t, done.ID)
	require.Equal(t, claim.StateCompleted, rec.State)
	require.Equal(t, "inv_42", rec.ResultRef)
	st := e.reconcile(t, done.ID)
	require.Equal(t, claim.ReconcileAnswered, st.State)
	require.Equal(t, claim.ReconcileDone, st.Verdict)
	require.Equal(t, 1, st.Calls)

	rec = e.record(t, notDone.ID)
	require.Equal(t, claim.StateRetryableFailed, rec.State)
	res, err := e.ledger.Claim(e.ctx, claim.Request{Tenant: "acme", Key: claim.Key{Source: "orders", EventID: "evt-not", Action: "create_invoice"},
		EventType: "order.paid", PayloadHash: strings.Repeat("ab", 32)})
	require.NoError(t, err)
	require.Equal(t, claim.Won, res.Outcome, "not_done: claimable at once")
	require.Equal(t, 2, res.Attempt)

	require.Equal(t, claim.StateUnknown, e.record(t, later.ID).State)
	st = e.reconcile(t, later.ID)
	require.Equal(t, claim.ReconcileWaiting, st.State)
	require.Equal(t, claim.ReconcileStillUnknown, st.Verdict)
	require.Equal(t, "CRM is syncing", st.Note)
	require.True(t, st.NextCallAt.After(time.Now()), "asked again after the backoff, not at once")
	require.Equal(t, 0, e.runOnce(t), "not due yet")
	e.due(t, later.ID)
	require.Equal(t, 1, e.runOnce(t))
	require.Len(t, rc.callsOf(later.ID), 2)
	require.Equal(t, float64(2), rc.callsOf(later.ID)[1]["call"])

	require.Equal(t, float64(1), e.calls("crm", "done"))
	require.Equal(t, float64(1), e.calls("crm", "not_done"))
	require.Equal(t, float64(2), e.calls("crm", "still_unknown"))
}

// A call that fails (no answer in time, a 500, a 2xx body that is not an
// answer, a redirect) counts as a call with its fixed error class and is
// retried after the backoff; after max_calls calls the reconcile gives
// up: the claim stays unknown for an operator, logged, counted.
func TestRunOnceFailedCallsGiveUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, class string
		answer      func(http.ResponseWriter, *http.Request, map[string]any)
	}{
		{"no answer in time", "timeout", func(_ http.ResponseWriter, r *http.Request, _ map[string]any) { <-r.Context().Done() }},
		{"500", "status_5xx", func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, "reconciler-body-MARKER")
		}},
		{"404", "status_4xx", func(w http.ResponseWriter, _ *http.Request, _ map[string]any) { w.WriteHeader(http.StatusNotFound) }},
		{"garbage", "bad_answer", answerJSON(`{"verdict":"done",`)},
		{"another verdict", "bad_answer", answerJSON(`{"verdict":"maybe"}`)},
		{"duplicate member", "bad_answer", answerJSON(`{"verdict":"done","verdict":"not_done"}`)},
		{"result_ref with not_done", "bad_answer", answerJSON(`{"verdict":"not_done","result_ref":"x"}`)},
		{"not JSON", "bad_answer", answerJSON(`OK`)},
		{"past 64 KiB", "bad_answer", answerJSON(`{"verdict":"done","note":"` + strings.Repeat("x", 70<<10) + `"}`)},
		{"redirect", "bad_answer", func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
			http.Redirect(w, r, "http://elsewhere.invalid/?token=secret", http.StatusFound)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rc := newReconciler(t, tc.answer)
			timeout := ""
			if tc.class == "timeout" {
				// The server never answers: the call ends at the client's
				// timeout (a whole second is the least configurable).
				timeout = "timeout_seconds: 1\n    "
			}
			e := setupEnv(t, rc, timeout+"max_calls: 2\n    backoff_base_seconds: 60", 1)
			rec := e.unknown(t, "orders", "evt-1")

			require.Equal(t, 1, e.runOnce(t))
			st := e.reconcile(t, rec.ID)
			require.Equal(t, claim.ReconcileWaiting, st.State)
			require.Equal(t, tc.class, st.LastError)
			require.Equal(t, 1, st.Calls)
			require.True(t, st.NextCallAt.After(time.Now().Add(30*time.Second)), "the backoff (jitter 1: 60 s)")
			require.Equal(t, 0, e.runOnce(t), "no call before the backoff ends")

			e.due(t, rec.ID)
			require.Equal(t, 1, e.runOnce(t))
			st = e.reconcile(t, rec.ID)
			require.Equal(t, claim.ReconcileGaveUp, st.State)
			require.Equal(t, 2, st.Calls)
			require.Equal(t, tc.class, st.LastError)
			require.Equal(t, claim.StateUnknown, e.record(t, rec.ID).State, "the claim stays unknown for an operator")
			require.Equal(t, 0, e.runOnce(t), "no call after giving up")
			require.Len(t, rc.callsOf(rec.ID), 2)
			require.Equal(t, float64(2), e.calls("crm", tc.class))
			require.Equal(t, float64(1), e.gaveUp("crm"))

			full, err := e.ledger.Get(e.ctx, "acme", rec.ID)
			require.NoError(t, err)
			last := full.Deliveries[len(full.Deliveries)-1]
			require.Equal(t, claim.DeliveryReconcileGaveUp, last.Outcome)
			require.NotContains(t, last.Detail, "MARKER")
			require.NotContains(t, last.Detail, "secret")
		})
	}
}

// A 2xx without a verdict is an asynchronous answer: the call stays in
// flight until its deadline and the answer comes through Runner.Answer
// (the API) with the call's token; one that never comes ends the call at
// its deadline as a timeout, and the next call follows.
func TestAsyncAnswer(t *testing.T) {
	t.Parallel()
	rc := newReconciler(t, answerJSON(`{"message":"Workflow was started"}`))
	e := setupEnv(t, rc, "max_calls: 3", 0)
	rec, silent := e.unknown(t, "orders", "evt-async"), e.unknown(t, "orders", "evt-silent")

	require.Equal(t, 2, e.runOnce(t))
	require.Equal(t, claim.ReconcileCalling, e.reconcile(t, rec.ID).State)
	open, err := e.runner.Open(e.ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"waiting": 0, "calling": 2, "gave_up": 0}, open)
	require.Equal(t, 0, e.runOnce(t), "a second call is never taken while one is in flight")

	token := rc.callsOf(rec.ID)[0]["reconcile_token"].(string)
	res, err := e.runner.Answer(e.ctx, "acme", rec.ID, token, reconcile.Answer{Verdict: "done", ResultRef: "inv_7"})
	require.NoError(t, err)
	require.Equal(t, claim.StateCompleted, res.Record.State)
	require.Equal(t, "inv_7", res.Record.ResultRef)
	_, err = e.runner.Answer(e.ctx, "acme", rec.ID, token, reconcile.Answer{Verdict: "not_done"})
	require.ErrorContains(t, err, "another verdict")
	require.Equal(t, float64(1), e.calls("crm", "done"))
	require.Zero(t, e.calls("crm", "fenced"), "another verdict to a call counted already is not counted again")

	// No answer by answer_by: a timeout, then the next call.
	e.pastDeadline(t, silent.ID)
	require.Equal(t, 1, e.runOnce(t))
	require.Len(t, rc.callsOf(silent.ID), 2)
	st := e.reconcile(t, silent.ID)
	require.Equal(t, claim.ReconcileCalling, st.State)
	require.Equal(t, 2, st.Calls)
	require.Equal(t, float64(1), e.calls("crm", "timeout"))
	// The first call's token answers nothing any more.
	old := rc.callsOf(silent.ID)[0]["reconcile_token"].(string)
	_, err = e.runner.Answer(e.ctx, "acme", silent.ID, old, reconcile.Answer{Verdict: "done"})
	require.Error(t, err)
	require.Zero(t, e.calls("crm", "fenced"), "the call was counted when it timed out")
	require.Equal(t, float64(1), e.calls("crm", "timeout"))
	require.Equal(t, claim.StateUnknown, e.record(t, silent.ID).State)
}

// A runner that stops mid-call (claimd restarted) leaves the call in
// flight: a new runner on the same database makes no second call until
// the call's deadline, then exactly one next call.
func TestRestartedRunnerMidCall(t *testing.T) {
	t.Parallel()
	arrived := make(chan string, 4)
	rc := newReconciler(t, func(_ http.ResponseWriter, r *http.Request, body map[string]any) {
		arrived <- body["claim_id"].(string)
		<-r.Context().Done()
	})
	e := setupEnv(t, rc, "max_calls: 3", 0)
	rec := e.unknown(t, "orders", "evt-1")

	ctx, stop := context.WithCancel(e.ctx)
	first := make(chan error, 1)
	go func() { _, err := e.runner.RunOnce(ctx); first <- err }()
	require.Equal(t, rec.ID, <-arrived)
	stop() // the first claimd stops while its call is in flight
	require.ErrorIs(t, <-first, context.Canceled)
	st := e.reconcile(t, rec.ID)
	require.Equal(t, claim.ReconcileCalling, st.State, "nothing recorded: the call may have been answered")

	rc.setAnswer(answerJSON(`{"verdict":"done","result_ref":"inv_1"}`))
	second := e.newRunner(nil)
	n, err := second.RunOnce(e.ctx)
	require.NoError(t, err)
	require.Equal(t, 0, n, "no second call before the deadline")
	require.Len(t, rc.callsOf(rec.ID), 1)

	e.pastDeadline(t, rec.ID)
	n, err = second.RunOnce(e.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Len(t, rc.callsOf(rec.ID), 2, "exactly one next call")
	require.Equal(t, float64(2), rc.callsOf(rec.ID)[1]["call"])
	require.Equal(t, claim.StateCompleted, e.record(t, rec.ID).State)
	require.Equal(t, float64(1), e.calls("crm", "timeout"))
	require.Equal(t, float64(1), e.calls("crm", "done"))
}

// Two runners (two claimd replicas) at once: one call per claim.
func TestTwoRunnersOneCallPerClaim(t *testing.T) {
	t.Parallel()
	rc := newReconciler(t, answerJSON(`{"verdict":"done"}`))
	e := setupEnv(t, rc, "", 0)
	var ids []string
	for i := range 12 {
		ids = append(ids, e.unknown(t, "orders", "evt-"+string(rune('a'+i))).ID)
	}
	other := e.newRunner(nil)
	var wg sync.WaitGroup
	total := make([]int, 2)
	for i, r := range []*reconcile.Runner{e.runner, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := r.RunOnce(e.ctx)
			require.NoError(t, err)
			total[i] = n
		}()
	}
	wg.Wait()
	// What one runner skipped (locked by the other) the next run takes.
	for total[0]+total[1] < len(ids) {
		n := e.runOnce(t)
		require.NotZero(t, n, "calls left but none taken")
		total[0] += n
	}
	require.Equal(t, len(ids), total[0]+total[1])
	for _, id := range ids {
		require.Len(t, rc.callsOf(id), 1, "one call per claim")
		require.Equal(t, claim.StateCompleted, e.record(t, id).State)
	}
	require.Equal(t, float64(len(ids)), e.calls("crm", "done"))
}

// An operator (or the holder's Complete) first: the reconciler's answer
// writes nothing and is counted fenced.
func TestAnswerAfterOperatorIsFenced(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	rc := newReconciler(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
		arrived <- struct{}{}
		<-release
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"verdict":"not_done"}`)
	})
	e := setupEnv(t, rc, "", 0)
	rec := e.unknown(t, "orders", "evt-1")
	done := make(chan int, 1)
	go func() { n, _ := e.runner.RunOnce(e.ctx); done <- n }()
	<-arrived
	_, err := e.ledger.ResolveAs(e.ctx, "acme", rec.ID, claim.ResolveOutcome("completed"), "inv_op", "checked by hand", "op")
	require.NoError(t, err)
	close(release)
	require.Equal(t, 1, <-done)
	got := e.record(t, rec.ID)
	require.Equal(t, claim.StateCompleted, got.State)
	require.Equal(t, "inv_op", got.ResultRef)
	require.Equal(t, claim.ReconcileDropped, e.reconcile(t, rec.ID).State)
	require.Equal(t, float64(1), e.calls("crm", "fenced"))
}

// An ingested event answered not_done has its dispatch re-armed in the
// answer's transaction: pending, fresh attempts, a new dispatch job.
func TestNotDoneRedispatchesIngestedEvent(t *testing.T) {
	t.Parallel()
	rc := newReconciler(t, answerJSON(`{"verdict":"not_done","note":"no invoice in the CRM"}`))
	spec := `reconcilers:
  crm: {url: "` + rc.srv.URL + `/r", delay_seconds: 0}
sources:
  orders:
    tenant: acme
    provider: token
    secrets: [tok]
    options: {key: {id_header: X-Id}}
    reconciler: crm
    forward: {url: "http://127.0.0.1:9/hook", require_claim: true}
`
	cfg, err := sources.Parse([]byte(spec), func(string) string { return "" })
	require.NoError(t, err)
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 20 })
	e := newEnv(t, pool, cfg, 0)
	in, err := inbox.New(inbox.Options{Pool: pool, Ledger: e.ledger, Config: cfg, Logger: zerolog.Nop()})
	require.NoError(t, err)
	e.runner = e.newRunner(in.RedispatchTx)

	rs, err := in.Receive(e.ctx, cfg.Sources["orders"], []verify.Event{{ID: "ord-1"}}, []byte(`{"id":"ord-1"}`), "application/json", nil)
	require.NoError(t, err)
	id := rs[0].ClaimID
	// Dispatched to n8n, claimed by the workflow, which failed unknown.
	_, err = pool.Exec(e.ctx, `UPDATE inbox_events SET dispatch_state = 'dispatched', dispatch_attempts = 1 WHERE claim_id = $1`, id)
	require.NoError(t, err)
	res, err := e.ledger.Claim(e.ctx, claim.Request{Tenant: "acme", Key: claim.Key{Source: "orders", EventID: "ord-1"}})
	require.NoError(t, err)
	require.Equal(t, claim.Won, res.Outcome)
	_, err = e.ledger.Fail(e.ctx, "acme", id, res.Token, claim.UnknownOutcome, "timeout calling the CRM")
	require.NoError(t, err)
	jobs := func() int {
		var n int
		require.NoError(t, pool.QueryRow(e.ctx, `SELECT count(*) FROM river_job WHERE kind = 'claimd_inbox_dispatch'
			AND args->>'claim_id' = $1`, id).Scan(&n))
		return n
	}
	require.Equal(t, 1, jobs())

	require.Equal(t, 1, e.runOnce(t))
	require.Equal(t, claim.StateRetryableFailed, e.record(t, id).State)
	var state string
	var attempts int
	require.NoError(t, pool.QueryRow(e.ctx, `SELECT dispatch_state, dispatch_attempts FROM inbox_events WHERE claim_id = $1`, id).
		Scan(&state, &attempts))
	require.Equal(t, "pending", state)
	require.Zero(t, attempts)
	require.Equal(t, 2, jobs(), "a new dispatch job")
	full := e.record(t, id)
	var outcomes []string
	for _, d := range full.Deliveries {
		outcomes = append(outcomes, d.Outcome)
	}
	require.Contains(t, strings.Join(outcomes, ","), "reconciled_not_done,dispatch_replayed")
}
