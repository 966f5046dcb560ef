package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/httpapi"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/metrics"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Every duplicate explained: each cause of a duplicate copy, produced
// through the real routes on a real PostgreSQL database (the ingest door,
// POST /v1/claims, the trigger route, the operator's inbox replay, the
// dispatcher), is written to the delivery log by the statement that logs
// the copy, answered in GET /v1/claims/{id} (deliveries[].cause, door,
// cause_note) and counted in claimd_duplicates_total{source,cause}.

const causeStripeSecret = "whsec_causes_stripe_0001"

// causeSources: two ingest doors of one dedupe_scope (pay), a Square door,
// a GitHub door forwarding to the test's n8n stand-in, and a trigger
// source.
func causeSources() string {
	return `
sources:
  pay-a: {tenant: acme, provider: stripe, secrets: ["` + causeStripeSecret + `"], dedupe_scope: pay, forward: {url: "http://n8n.invalid/webhook/a"}}
  pay-b: {tenant: acme, provider: stripe, secrets: ["` + causeStripeSecret + `"], dedupe_scope: pay, forward: {url: "http://n8n.invalid/webhook/b"}}
  sq:
    tenant: acme
    provider: square
    secrets: ["` + verifytest.SquareSignatureKey + `"]
    options: {notification_url: "` + verifytest.SquareNotificationURL + `"}
    forward: {url: "http://n8n.invalid/webhook/sq"}
  hooks:
    tenant: acme
    provider: github
    secrets: ["` + dispatchSecret + `"]
    forward: {require_claim: false, url: "${TARGET_URL}", backoff_base_seconds: 1, backoff_cap_seconds: 1}
  t-pay: {tenant: acme, provider: stripe, secrets: ["` + causeStripeSecret + `"]}
`
}

// causeEnv is ingestEnv with the metrics wired into the ledger and the
// inbox, as claimd wires them.
type causeEnv struct {
	*ingestEnv
	met *metrics.Metrics
}

func setupCauses(t *testing.T, target string, dispatch bool) *causeEnv {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 8 })
	cfg, err := sources.Parse([]byte(causeSources()), func(k string) string {
		if k == "TARGET_URL" {
			return target
		}
		return ""
	})
	require.NoError(t, err)
	logs := &ingestLogBuffer{}
	log := zerolog.New(logs).Level(zerolog.DebugLevel).With().Timestamp().Logger()
	var ledger *claim.Ledger
	met := metrics.New(func(ctx context.Context) (claim.Stats, error) { return ledger.Stats(ctx) })
	ledger, err = claim.New(pool, claim.Config{Policies: claim.Policies{BySource: cfg.Policies}, Observer: met})
	require.NoError(t, err)
	in, err := inbox.New(inbox.Options{Pool: pool, Ledger: ledger, Config: cfg, Logger: log, Observer: met,
		Dispatch: dispatch, PollInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, in.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, in.Stop(sctx))
	})
	srv := httpapi.New(httpapi.Config{Ledger: ledger, Logger: log, Inbox: in, Metrics: met,
		Keys: auth.NewKeys(pool, []auth.StaticKey{{Tenant: ingestTenant, Key: ingestAPIKey}}, time.Minute)})
	ln := serveAPI(t, srv)
	return &causeEnv{ingestEnv: &ingestEnv{ctx: ctx, pool: pool, inbox: in, base: "http://" + ln.Addr().String(),
		logs: logs, server: srv, client: &http.Client{Timeout: ingestWait}}, met: met}
}

// causeDelivery is one delivery-log entry as GET /v1/claims/{id} answers it.
type causeDelivery struct {
	Outcome     string `json:"outcome"`
	ExecutionID string `json:"execution_id"`
	Detail      string `json:"detail"`
	Actor       string `json:"actor"`
	Door        string `json:"door"`
	Cause       string `json:"cause"`
	CauseNote   string `json:"cause_note"`
	// WorkflowID and WorkflowVersion: the claim's workflow.
	WorkflowID      string `json:"workflow_id"`
	WorkflowVersion string `json:"workflow_version"`
}

// log returns the delivery log of record id through the API.
func (e *causeEnv) log(t *testing.T, id string) []causeDelivery {
	t.Helper()
	ans := e.api(t, http.MethodGet, "/v1/claims/"+id)
	require.Equal(t, http.StatusOK, ans.status, "%s", ans.body)
	var r struct {
		Deliveries []causeDelivery `json:"deliveries"`
	}
	require.NoError(t, json.Unmarshal(ans.body, &r))
	return r.Deliveries
}

// last is the last entry of the log of id with outcome.
func (e *causeEnv) last(t *testing.T, id, outcome string) causeDelivery {
	t.Helper()
	log := e.log(t, id)
	for i := len(log) - 1; i >= 0; i-- {
		if log[i].Outcome == outcome {
			return log[i]
		}
	}
	t.Fatalf("no %s entry in the log of %s: %+v", outcome, id, log)
	return causeDelivery{}
}

// metric is claimd_duplicates_total{source,cause}.
func (e *causeEnv) metric(t *testing.T, source string, cause claim.Cause) float64 {
	t.Helper()
	families, err := e.met.Registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "claimd_duplicates_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["source"] == source && labels["cause"] == string(cause) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// accepted posts d to door and returns its one receipt.
func (e *causeEnv) ingestOne(t *testing.T, door string, d ingestDelivery, status string) string {
	t.Helper()
	ans := e.send(t, door, d)
	require.Equal(t, http.StatusOK, ans.status, "%s", ans.body)
	rs, _ := ans.receipts(t)
	require.Len(t, rs, 1)
	require.Equal(t, status, rs[0].Status)
	return rs[0].ClaimID
}

// claimResult is the part of a POST /v1/claims answer the tests read.
type causeClaim struct {
	Outcome    string `json:"outcome"`
	ClaimID    string `json:"claim_id"`
	ClaimToken string `json:"claim_token"`
	Cause      string `json:"cause"`
}

// claim posts a workflow's claim.
func (e *causeEnv) claim(t *testing.T, body map[string]any) causeClaim {
	t.Helper()
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	ans := e.apiPost(t, "/v1/claims", string(raw))
	require.Equal(t, http.StatusOK, ans.status, "%s", ans.body)
	var c causeClaim
	require.NoError(t, json.Unmarshal(ans.body, &c))
	return c
}

func (e *causeEnv) complete(t *testing.T, c causeClaim) {
	t.Helper()
	ans := e.apiPost(t, "/v1/claims/"+c.ClaimID+"/complete", `{"claim_token":"`+c.ClaimToken+`"}`)
	require.Equal(t, http.StatusOK, ans.status, "%s", ans.body)
}

func causeStripe(at int64, body string) ingestDelivery {
	return ingestDelivery{header: jsonHeaders("Stripe-Signature", verifytest.StripeHeader(at, []byte(body), causeStripeSecret)),
		body: []byte(body)}
}

func causeSquare(body []byte, retry int) ingestDelivery {
	d := verifytest.SquareDelivery(verifytest.SquareSignatureKey, verifytest.SquareNotificationURL, body, retry, time.Now())
	var h ingestHeaders
	for k, vs := range d.Header {
		for _, v := range vs {
			h = append(h, [2]string{k, v})
		}
	}
	return ingestDelivery{header: h, body: d.Body}
}

// TestCauseProviderRetry: the provider sends an event again through the
// same door: Stripe re-signed (a new request), Square with its retry
// headers (named in the note), GitHub byte for byte.
func TestCauseProviderRetry(t *testing.T) {
	t.Parallel()
	e := setupCauses(t, "http://n8n.invalid/webhook/hooks", false)
	now := signNow()

	body := stripeEvent("evt_retry_1", 100)
	id := e.ingestOne(t, "pay-a", causeStripe(now, body), "accepted")
	require.Equal(t, id, e.ingestOne(t, "pay-a", causeStripe(now+1, body), "duplicate"))
	d := e.last(t, id, "ingest_duplicate")
	require.Equal(t, "provider_retry", d.Cause)
	require.Equal(t, "pay-a", d.Door)
	require.Contains(t, d.CauseNote, "new request")
	require.Equal(t, "received", e.log(t, id)[0].Outcome)
	require.Empty(t, e.log(t, id)[0].Cause, "a first delivery has no cause")

	sq := verifytest.SquarePayment("sq-evt-1", "payment.updated", "pay-1", "COMPLETED", time.Now())
	sid := e.ingestOne(t, "sq", causeSquare(sq, 0), "accepted")
	require.Equal(t, sid, e.ingestOne(t, "sq", causeSquare(sq, 3), "duplicate"))
	d = e.last(t, sid, "ingest_duplicate")
	require.Equal(t, "provider_retry", d.Cause)
	require.Contains(t, d.CauseNote, "square-retry-number: 3")
	require.Contains(t, d.CauseNote, "square-retry-reason: http_timeout")

	gh := githubDelivery(dispatchSecret, "gh-same-1", []byte(`{"ref":"refs/heads/main"}`))
	gid := e.ingestOne(t, "hooks", gh, "accepted")
	require.Equal(t, gid, e.ingestOne(t, "hooks", gh, "duplicate"))
	d = e.last(t, gid, "ingest_duplicate")
	require.Equal(t, "provider_retry", d.Cause)
	require.Contains(t, d.CauseNote, "identical request bytes")

	require.Equal(t, 1.0, e.metric(t, "pay-a", claim.CauseProviderRetry))
	require.Equal(t, 1.0, e.metric(t, "sq", claim.CauseProviderRetry))
	require.Equal(t, 1.0, e.metric(t, "hooks", claim.CauseProviderRetry))
	var n int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM claim_deliveries
		WHERE outcome = 'ingest_duplicate' AND length(fingerprint) = 32`).Scan(&n))
	require.Equal(t, 3, n, "every provider delivery keeps its request fingerprint")
}

// TestCauseAnotherDoor: two doors of one dedupe_scope deliver one event.
func TestCauseAnotherDoor(t *testing.T) {
	t.Parallel()
	e := setupCauses(t, "http://n8n.invalid/webhook/hooks", false)
	body := stripeEvent("evt_door_1", 100)
	id := e.ingestOne(t, "pay-a", causeStripe(signNow(), body), "accepted")
	require.Equal(t, id, e.ingestOne(t, "pay-b", causeStripe(signNow(), body), "duplicate"))
	d := e.last(t, id, "ingest_duplicate")
	require.Equal(t, "another_door", d.Cause)
	require.Equal(t, "pay-b", d.Door)
	require.Contains(t, d.CauseNote, "pay-a")
	require.Contains(t, d.CauseNote, "pay-b")
	require.Equal(t, 1.0, e.metric(t, "pay-b", claim.CauseAnotherDoor))
	require.Equal(t, 0.0, e.metric(t, "pay-a", claim.CauseAnotherDoor))
}

// TestCauseTrigger: through POST /v1/trigger, the very same provider
// request handed to the trigger twice (two trigger runs) is n8n_twice; a
// re-signed copy is the provider's retry. The claim answer says the cause.
func TestCauseTrigger(t *testing.T) {
	t.Parallel()
	e := setupCauses(t, "http://n8n.invalid/webhook/hooks", false)
	d := causeStripe(signNow(), stripeEvent("evt_trig_1", 100))
	first := e.decided(t, "t-pay", trigCall(d, "run-1"))
	require.Equal(t, "won", first.Events[0].Outcome)
	id := first.Events[0].ClaimID

	a := e.trigger(t, "t-pay", trigCall(d, "run-2"))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	var again struct {
		Events []struct {
			Outcome string `json:"outcome"`
			Cause   string `json:"cause"`
		} `json:"events"`
	}
	require.NoError(t, json.Unmarshal(a.body, &again))
	require.Equal(t, "in_progress", again.Events[0].Outcome)
	require.Equal(t, "n8n_twice", again.Events[0].Cause)
	entry := e.last(t, id, "in_progress")
	require.Equal(t, "n8n_twice", entry.Cause)
	require.Equal(t, "t-pay", entry.Door)
	require.Contains(t, entry.CauseNote, "identical request bytes")

	resigned := causeStripe(signNow()+2, stripeEvent("evt_trig_1", 100))
	third := e.decided(t, "t-pay", trigCall(resigned, "run-3"))
	require.Equal(t, "in_progress", third.Events[0].Outcome)
	require.Equal(t, "provider_retry", e.last(t, id, "in_progress").Cause)

	require.Equal(t, 1.0, e.metric(t, "t-pay", claim.CauseN8nTwice), "a claim counts under its record's source")
	require.Equal(t, 1.0, e.metric(t, "t-pay", claim.CauseProviderRetry))
}

// causeTarget is the n8n stand-in of the dispatch tests: for request n
// it claims the forwarded event as execution exec-n would (POST
// /v1/claims), completes the win, and answers what respond says.
func causeTarget(t *testing.T, base *atomic.Value, respond func(n int) int) *ingestTarget {
	t.Helper()
	tg := newIngestTarget(t, func(n int) (int, http.Header) { return respond(n), nil })
	tg.before = func(n int, r *http.Request) {
		e := base.Load().(*causeEnv)
		c := e.claim(t, map[string]any{"source": r.Header.Get(inbox.HeaderSource), "event_id": r.Header.Get(inbox.HeaderEventID),
			"execution_id": fmt.Sprintf("exec-%d", n), "execution_mode": "webhook"})
		if c.Outcome == "won" {
			e.complete(t, c)
		}
	}
	return tg
}

// TestCauseDispatchRetry: claimd's dispatcher posts the event twice (the
// first answer was a 503 after n8n had run it): the second execution's
// claim is a dispatch_retry copy, naming both executions.
func TestCauseDispatchRetry(t *testing.T) {
	t.Parallel()
	var base atomic.Value
	target := causeTarget(t, &base, func(n int) int {
		if n == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	e := setupCauses(t, target.srv.URL, true)
	base.Store(e)
	id := e.receiveOne(t, "gh-dispatch-1")
	e.waitDispatchState(t, id, "dispatched")
	require.Len(t, target.requests(), 2)
	d := e.last(t, id, "duplicate")
	require.Equal(t, "exec-2", d.ExecutionID)
	require.Equal(t, "dispatch_retry", d.Cause)
	require.Contains(t, d.CauseNote, "2 times")
	require.Contains(t, d.CauseNote, "exec-1 and exec-2")
	require.Empty(t, d.Door, "a workflow's claim came through no door")
	require.Equal(t, 1.0, e.metric(t, "hooks", claim.CauseDispatchRetry))
}

// TestCauseN8nTwice: claimd dispatched the event once and n8n ran it in
// two executions (the forwarded request run again): the second claim is
// n8n_twice and names both executions. The same claim without any
// dispatch behind it is upstream_repeat.
func TestCauseN8nTwice(t *testing.T) {
	t.Parallel()
	var base atomic.Value
	target := causeTarget(t, &base, func(int) int { return http.StatusOK })
	e := setupCauses(t, target.srv.URL, true)
	base.Store(e)
	id := e.receiveOne(t, "gh-twice-1")
	e.waitDispatchState(t, id, "dispatched")
	require.Len(t, target.requests(), 1)

	c := e.claim(t, map[string]any{"source": "hooks", "event_id": "gh-twice-1", "execution_id": "exec-9",
		"execution_mode": "webhook"})
	require.Equal(t, "duplicate", c.Outcome)
	require.Equal(t, "n8n_twice", c.Cause)
	d := e.last(t, id, "duplicate")
	require.Equal(t, "n8n_twice", d.Cause)
	require.Contains(t, d.CauseNote, "exec-1 and exec-9")
	require.Equal(t, 1.0, e.metric(t, "hooks", claim.CauseN8nTwice))

	w := e.claim(t, map[string]any{"source": "orders", "event_id": "o-1", "execution_id": "exec-a"})
	require.Equal(t, "won", w.Outcome)
	c = e.claim(t, map[string]any{"source": "orders", "event_id": "o-1", "execution_id": "exec-b"})
	require.Equal(t, "in_progress", c.Outcome)
	require.Equal(t, "upstream_repeat", c.Cause)
	require.Contains(t, e.last(t, w.ClaimID, "in_progress").CauseNote, "exec-b")
	require.Equal(t, 1.0, e.metric(t, "orders", claim.CauseUpstreamRepeat))
}

// TestCauseN8nTwoVersions: claimd dispatched the event once; execution
// exec-1 of version v1 of workflow wf-1 claimed and completed it, and a
// second execution claims it too. Of another version (v2): the copy is
// n8n_two_versions, naming both executions and both versions; of the
// same version: n8n_twice as before, its note naming the version both
// ran; naming no version: n8n_twice, the note saying it is not known.
func TestCauseN8nTwoVersions(t *testing.T) {
	t.Parallel()
	var base atomic.Value
	target := newIngestTarget(t, func(int) (int, http.Header) { return http.StatusOK, nil })
	target.before = func(n int, r *http.Request) {
		e := base.Load().(*causeEnv)
		c := e.claim(t, map[string]any{"source": r.Header.Get(inbox.HeaderSource), "event_id": r.Header.Get(inbox.HeaderEventID),
			"execution_id": fmt.Sprintf("exec-%d", n), "execution_mode": "webhook",
			"workflow_id": "wf-1", "workflow_version": "v1"})
		if c.Outcome == "won" {
			e.complete(t, c)
		}
	}
	e := setupCauses(t, target.srv.URL, true)
	base.Store(e)
	id := e.receiveOne(t, "gh-versions-1")
	e.waitDispatchState(t, id, "dispatched")
	require.Len(t, target.requests(), 1)
	won := e.last(t, id, "won")
	require.Equal(t, "wf-1", won.WorkflowID)
	require.Equal(t, "v1", won.WorkflowVersion)

	c := e.claim(t, map[string]any{"source": "hooks", "event_id": "gh-versions-1", "execution_id": "exec-7",
		"execution_mode": "trigger", "workflow_id": "wf-1", "workflow_version": "v2"})
	require.Equal(t, "duplicate", c.Outcome)
	require.Equal(t, "n8n_two_versions", c.Cause)
	d := e.last(t, id, "duplicate")
	require.Equal(t, "n8n_two_versions", d.Cause)
	require.Equal(t, "v2", d.WorkflowVersion)
	require.Contains(t, d.CauseNote, "execution exec-1 ran workflow wf-1 version v1 and execution exec-7 ran workflow wf-1 version v2")
	require.Equal(t, 1.0, e.metric(t, "hooks", claim.CauseN8nTwoVersions))

	c = e.claim(t, map[string]any{"source": "hooks", "event_id": "gh-versions-1", "execution_id": "exec-8",
		"execution_mode": "webhook", "workflow_id": "wf-1", "workflow_version": "v1"})
	require.Equal(t, "n8n_twice", c.Cause)
	d = e.last(t, id, "duplicate")
	require.Contains(t, d.CauseNote, "executions exec-1 and exec-8 both ran the one delivery")
	require.Contains(t, d.CauseNote, "execution exec-1 ran workflow wf-1 version v1, execution exec-8 ran workflow wf-1 version v1")

	c = e.claim(t, map[string]any{"source": "hooks", "event_id": "gh-versions-1", "execution_id": "exec-9",
		"execution_mode": "webhook", "workflow_id": "wf-1"})
	require.Equal(t, "n8n_twice", c.Cause, "a version not known is no second version")
	require.Contains(t, e.last(t, id, "duplicate").CauseNote, "execution exec-9 ran workflow wf-1 (version not known)")
	require.Equal(t, 2.0, e.metric(t, "hooks", claim.CauseN8nTwice))
	require.Equal(t, 1.0, e.metric(t, "hooks", claim.CauseN8nTwoVersions))
}

// TestCauseWorkflowFieldsRefused: workflow_id and workflow_version are
// bounded and printable, on a claim, in a batch and on the trigger; the
// 400 names the field and quotes nothing of the value.
func TestCauseWorkflowFieldsRefused(t *testing.T) {
	t.Parallel()
	e := setupCauses(t, "http://n8n.invalid/webhook/hooks", false)
	secretish := "sk_live_SECRET_looking_value"
	for _, tc := range []struct{ field, value string }{
		{"workflow_id", strings.Repeat("w", claim.MaxWorkflowFieldLen+1)},
		{"workflow_id", secretish + " with space"},
		{"workflow_version", secretish + `\u00e9`},
		{"workflow_version", `\u0007` + secretish},
	} {
		body := `{"source":"orders","event_id":"o-wf","` + tc.field + `":"` + tc.value + `"}`
		ans := e.apiPost(t, "/v1/claims", body)
		require.Equal(t, http.StatusUnprocessableEntity, ans.status, "%s", ans.body)
		require.Contains(t, string(ans.body), `"field":"`+tc.field+`"`)
		require.NotContains(t, string(ans.body), "SECRET")

		ans = e.apiPost(t, "/v1/claims/batch", `{"claims":[`+body+`]}`)
		require.Equal(t, http.StatusOK, ans.status, "%s", ans.body)
		require.Contains(t, string(ans.body), `"field":"claims[0].`+tc.field+`"`)
		require.NotContains(t, string(ans.body), "SECRET")
	}
	d := causeStripe(signNow(), stripeEvent("evt_trig_wf", 100))
	call := trigCall(d, "run-wf")
	call["workflow_version"] = secretish + " x"
	ans := e.trigger(t, "t-pay", call)
	require.Equal(t, http.StatusUnprocessableEntity, ans.status, "%s", ans.body)
	require.Contains(t, string(ans.body), `"field":"workflow_version"`)
	require.NotContains(t, string(ans.body), "SECRET")
}

// TestCauseOperatorReplay: an operator's replay of a dead-lettered
// dispatch that n8n had in fact run (it answered 400 after claiming) makes
// the replayed run's claim an operator_replay copy; so does a claim from
// an n8n execution in retry mode.
func TestCauseOperatorReplay(t *testing.T) {
	t.Parallel()
	var base atomic.Value
	target := causeTarget(t, &base, func(n int) int {
		if n == 1 {
			return http.StatusBadRequest
		}
		return http.StatusOK
	})
	e := setupCauses(t, target.srv.URL, true)
	base.Store(e)
	id := e.receiveOne(t, "gh-replay-1")
	e.waitDispatchState(t, id, "dead_lettered")
	ans := e.api(t, http.MethodPost, "/v1/inbox/"+id+"/replay")
	require.Equal(t, http.StatusOK, ans.status, "%s", ans.body)
	e.waitDispatchState(t, id, "dispatched")
	d := e.last(t, id, "duplicate")
	require.Equal(t, "exec-2", d.ExecutionID)
	require.Equal(t, "operator_replay", d.Cause)
	require.Contains(t, d.CauseNote, "dispatch_replayed by operator")
	require.Equal(t, 1.0, e.metric(t, "hooks", claim.CauseOperatorReplay))

	w := e.claim(t, map[string]any{"source": "orders", "event_id": "o-2", "execution_id": "exec-a", "execution_mode": "webhook"})
	e.complete(t, w)
	c := e.claim(t, map[string]any{"source": "orders", "event_id": "o-2", "execution_id": "exec-r", "execution_mode": "retry"})
	require.Equal(t, "duplicate", c.Outcome)
	require.Equal(t, "operator_replay", c.Cause)
	require.Contains(t, e.last(t, w.ClaimID, "duplicate").CauseNote, "retry mode")
	require.Equal(t, 1.0, e.metric(t, "orders", claim.CauseOperatorReplay))

	// execution_mode is bounded, and named when it is not.
	ans = e.apiPost(t, "/v1/claims", `{"source":"orders","event_id":"o-3","execution_mode":"`+strings.Repeat("m", 65)+`"}`)
	require.Equal(t, http.StatusUnprocessableEntity, ans.status, "%s", ans.body)
	require.Contains(t, string(ans.body), `"field":"execution_mode"`)
}

// TestCauseBackfill: claimd stored an event from the provider's own list
// (backfill, as a scan does: Source.IdentifyUnsigned, Inbox.StoreBackfilled);
// the provider's real delivery through the ingest door afterwards is a
// backfill copy, and a retry of it after that the provider's retry.
func TestCauseBackfill(t *testing.T) {
	t.Parallel()
	e := setupCauses(t, "http://n8n.invalid/webhook/hooks", false)
	body := stripeEvent("evt_backfilled_1", 100)
	src := e.inbox.Source("pay-a")
	evs, err := src.IdentifyUnsigned(nil, []byte(body), "application/json")
	require.NoError(t, err)
	require.Len(t, evs, 1)
	id, stored, err := e.inbox.StoreBackfilled(e.ctx, src, evs[0], nil, "backfilled from provider event list (scan 1)",
		func(pgx.Tx, string) error { return nil })
	require.NoError(t, err)
	require.True(t, stored)

	require.Equal(t, id, e.ingestOne(t, "pay-a", causeStripe(signNow(), body), "duplicate"))
	d := e.last(t, id, "ingest_duplicate")
	require.Equal(t, "backfill", d.Cause)
	require.Equal(t, "pay-a", d.Door)
	require.Equal(t, id, e.ingestOne(t, "pay-a", causeStripe(signNow()+1, body), "duplicate"))
	require.Equal(t, "provider_retry", e.last(t, id, "ingest_duplicate").Cause)
	require.Equal(t, 1.0, e.metric(t, "pay-a", claim.CauseBackfill))
	require.Equal(t, 1.0, e.metric(t, "pay-a", claim.CauseProviderRetry))
}
