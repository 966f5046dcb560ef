package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

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
)

// Shadow mode: a shadow claim is decided by the real statement on the real
// record and answered won, with shadow.would_be what claimd decided; a
// claim token only where it would have won. Turning enforcement on (a
// reload without shadow) decides the very next copy against the records
// written in shadow: no gap.

// shadowSources: a trigger source and a claim-only source in shadow, and
// their enforcing twins (the per-request option is tested on those).
func shadowSources(shadow bool) string {
	s := "false"
	if shadow {
		s = "true"
	}
	return `
sources:
  t-shadow: {tenant: acme, provider: stripe, secrets: ["` + causeStripeSecret + `"], shadow: ` + s + `}
  t-enforce: {tenant: acme, provider: stripe, secrets: ["` + causeStripeSecret + `"]}
  w-shadow: {shadow: ` + s + `}
  w-enforce: {}
`
}

type shadowEnv struct {
	*causeEnv
	ledger *claim.Ledger
}

func setupShadow(t *testing.T) *shadowEnv {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 8 })
	cfg, err := sources.Parse([]byte(shadowSources(true)), func(string) string { return "" })
	require.NoError(t, err)
	logs := &ingestLogBuffer{}
	log := zerolog.New(logs).Level(zerolog.DebugLevel).With().Timestamp().Logger()
	var ledger *claim.Ledger
	met := metrics.New(func(ctx context.Context) (claim.Stats, error) { return ledger.Stats(ctx) })
	ledger, err = claim.New(pool, claim.Config{Policies: claim.Policies{BySource: cfg.Policies}, Observer: met})
	require.NoError(t, err)
	in, err := inbox.New(inbox.Options{Pool: pool, Ledger: ledger, Config: cfg, Logger: log, Observer: met})
	require.NoError(t, err)
	srv := httpapi.New(httpapi.Config{Ledger: ledger, Logger: log, Inbox: in, Metrics: met,
		Keys: auth.NewKeys(pool, []auth.StaticKey{{Tenant: ingestTenant, Key: ingestAPIKey}}, time.Minute)})
	ln := serveAPI(t, srv)
	return &shadowEnv{causeEnv: &causeEnv{ingestEnv: &ingestEnv{ctx: ctx, pool: pool, inbox: in,
		base: "http://" + ln.Addr().String(), logs: logs, server: srv, client: &http.Client{Timeout: ingestWait}}, met: met},
		ledger: ledger}
}

// enforce reloads the sources file with shadow off, as claimd's reload
// installs it (inbox, then the ledger's policies).
func (e *shadowEnv) enforce(t *testing.T) {
	t.Helper()
	cfg, err := sources.Parse([]byte(shadowSources(false)), func(string) string { return "" })
	require.NoError(t, err)
	require.NoError(t, e.inbox.Reload(e.ctx, cfg))
	require.NoError(t, e.ledger.SetPolicies(claim.Policies{BySource: cfg.Policies}))
}

// shadowAnswer is a claim answer with its shadow member.
type shadowAnswer struct {
	Outcome       string `json:"outcome"`
	ClaimID       string `json:"claim_id"`
	ClaimToken    string `json:"claim_token"`
	Cause         string `json:"cause"`
	State         string `json:"state"`
	Attempt       int    `json:"attempt"`
	ConflictCount int    `json:"conflict_count"`
	Shadow        *struct {
		WouldBe string `json:"would_be"`
		Cause   string `json:"cause"`
	} `json:"shadow"`
}

func (e *shadowEnv) shadowClaim(t *testing.T, body map[string]any) shadowAnswer {
	t.Helper()
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	ans := e.apiPost(t, "/v1/claims", string(raw))
	require.Equal(t, http.StatusOK, ans.status, "%s", ans.body)
	var a shadowAnswer
	require.NoError(t, json.Unmarshal(ans.body, &a))
	return a
}

// shadowMetric is claimd_shadow_decisions_total{source,would_be}.
func (e *shadowEnv) shadowMetric(t *testing.T, source, wouldBe string) float64 {
	t.Helper()
	families, err := e.met.Registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "claimd_shadow_decisions_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["source"] == source && labels["would_be"] == wouldBe {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// shadowLog is the delivery log of id: outcome and shadow of each entry.
func (e *shadowEnv) shadowLog(t *testing.T, id string) []string {
	t.Helper()
	ans := e.api(t, http.MethodGet, "/v1/claims/"+id)
	require.Equal(t, http.StatusOK, ans.status, "%s", ans.body)
	var r struct {
		Deliveries []struct {
			Outcome string `json:"outcome"`
			Shadow  bool   `json:"shadow"`
		} `json:"deliveries"`
	}
	require.NoError(t, json.Unmarshal(ans.body, &r))
	var out []string
	for _, d := range r.Deliveries {
		if d.Shadow {
			out = append(out, d.Outcome+" (shadow)")
		} else {
			out = append(out, d.Outcome)
		}
	}
	return out
}

// TestShadowClaims: claims of a source in shadow through POST /v1/claims.
// Every copy is answered won; would_be says in_progress, duplicate,
// conflict as enforcement would have; the record is left exactly as
// enforcement leaves it (attempt 1, completed, one conflict counted); only
// the first claim gets a token (a copy holds nothing and cannot settle).
// After a reload without shadow, the next copy is a duplicate.
func TestShadowClaims(t *testing.T) {
	t.Parallel()
	e := setupShadow(t)
	body := func(req string, payload map[string]any) map[string]any {
		return map[string]any{"source": "w-shadow", "event_id": "order-1", "payload": payload, "request_id": req}
	}
	first := e.shadowClaim(t, body("r1", map[string]any{"n": 1}))
	require.Equal(t, "won", first.Outcome)
	require.NotNil(t, first.Shadow)
	require.Equal(t, "won", first.Shadow.WouldBe)
	require.NotEmpty(t, first.ClaimToken, "a shadow claim that would win holds the lease")

	copy1 := e.shadowClaim(t, body("r2", map[string]any{"n": 1}))
	require.Equal(t, "won", copy1.Outcome, "a copy in shadow proceeds")
	require.Equal(t, "in_progress", copy1.Shadow.WouldBe)
	require.NotEmpty(t, copy1.Shadow.Cause)
	require.Empty(t, copy1.Cause, "the cause is the shadow decision's")
	require.Empty(t, copy1.ClaimToken, "a copy holds nothing")
	require.Equal(t, "processing", copy1.State)
	require.Equal(t, 1, copy1.Attempt, "the copy took no attempt")

	e.complete(t, causeClaim{ClaimID: first.ClaimID, ClaimToken: first.ClaimToken})

	dup := e.shadowClaim(t, body("r3", map[string]any{"n": 1}))
	require.Equal(t, "won", dup.Outcome)
	require.Equal(t, "duplicate", dup.Shadow.WouldBe)
	require.Equal(t, "upstream_repeat", dup.Shadow.Cause)
	require.Empty(t, dup.ClaimToken)
	require.Equal(t, "completed", dup.State)

	conflict := e.shadowClaim(t, body("r4", map[string]any{"n": 2}))
	require.Equal(t, "won", conflict.Outcome)
	require.Equal(t, "conflict", conflict.Shadow.WouldBe)
	require.Empty(t, conflict.ClaimToken)
	require.Equal(t, 1, conflict.ConflictCount, "the conflict is counted as enforcement counts it")
	require.Equal(t, "completed", conflict.State)

	require.Equal(t, []string{"won (shadow)", "in_progress (shadow)", "completed", "duplicate (shadow)", "conflict (shadow)"},
		e.shadowLog(t, first.ClaimID))
	for _, w := range []string{"won", "in_progress", "duplicate", "conflict"} {
		require.Equal(t, 1.0, e.shadowMetric(t, "w-shadow", w), w)
	}
	require.Zero(t, e.metric(t, "w-shadow", claim.CauseUpstreamRepeat), "a shadow copy was not stopped")

	// Enforcement on: the next copy is decided against the shadow records.
	e.enforce(t)
	after := e.shadowClaim(t, body("r5", map[string]any{"n": 1}))
	require.Equal(t, "duplicate", after.Outcome, "no gap after the switch")
	require.Nil(t, after.Shadow)
	require.Equal(t, "upstream_repeat", after.Cause)
	require.Equal(t, 1.0, e.shadowMetric(t, "w-shadow", "duplicate"), "an enforced claim is no shadow decision")
	require.Equal(t, 1.0, e.metric(t, "w-shadow", claim.CauseUpstreamRepeat))
	log := e.shadowLog(t, first.ClaimID)
	require.Equal(t, "duplicate", log[len(log)-1])
}

// TestShadowRequestOption: the per-claim option (the Claim node's
// "Shadow Mode") on an enforcing source, alone and in a batch: the copy
// is answered won with would_be duplicate, without a token; a claim
// without the option on the same record is enforced.
func TestShadowRequestOption(t *testing.T) {
	t.Parallel()
	e := setupShadow(t)
	c := e.claim(t, map[string]any{"source": "w-enforce", "event_id": "inv-1"})
	require.Equal(t, "won", c.Outcome)
	e.complete(t, c)

	one := e.shadowClaim(t, map[string]any{"source": "w-enforce", "event_id": "inv-1", "shadow": true})
	require.Equal(t, "won", one.Outcome)
	require.Equal(t, "duplicate", one.Shadow.WouldBe)
	require.Empty(t, one.ClaimToken)

	ans := e.apiPost(t, "/v1/claims/batch", `{"claims":[
		{"source":"w-enforce","event_id":"inv-1","shadow":true},
		{"source":"w-enforce","event_id":"inv-2","shadow":true},
		{"source":"w-enforce","event_id":"inv-1"},
		{"source":"w-shadow","event_id":"inv-3"}]}`)
	require.Equal(t, http.StatusOK, ans.status, "%s", ans.body)
	var b struct {
		Results []shadowAnswer `json:"results"`
	}
	require.NoError(t, json.Unmarshal(ans.body, &b))
	require.Len(t, b.Results, 4)
	require.Equal(t, "won", b.Results[0].Outcome)
	require.Equal(t, "duplicate", b.Results[0].Shadow.WouldBe)
	require.Empty(t, b.Results[0].ClaimToken)
	require.Equal(t, "won", b.Results[1].Outcome)
	require.Equal(t, "won", b.Results[1].Shadow.WouldBe)
	require.NotEmpty(t, b.Results[1].ClaimToken)
	require.Equal(t, "duplicate", b.Results[2].Outcome, "without the option the claim is enforced")
	require.Nil(t, b.Results[2].Shadow)
	require.Equal(t, "won", b.Results[3].Shadow.WouldBe, "a source in shadow needs no option")
	require.Equal(t, 2.0, e.shadowMetric(t, "w-enforce", "duplicate"))
	require.Equal(t, []string{"won", "completed", "duplicate (shadow)", "duplicate (shadow)", "duplicate"},
		e.shadowLog(t, c.ClaimID))
}

// TestShadowTrigger: every copy of a delivery to a trigger source in
// shadow starts an execution (decision won, 2xx to the provider), each
// item saying what it would have been; only the first holds a token. The
// trigger's own option does the same on an enforcing source. After a
// reload without shadow the next copy is a duplicate.
func TestShadowTrigger(t *testing.T) {
	t.Parallel()
	e := setupShadow(t)
	now := signNow()
	var first trigReply
	for i, run := range []string{"run-1", "run-2", "run-3"} {
		d := causeStripe(now+int64(i), stripeEvent("evt_shadow_1", 100))
		r := e.decided(t, "t-shadow", trigCall(d, run))
		require.Equal(t, "won", r.Decision, "copy %d starts an execution", i)
		require.Equal(t, "won", r.Events[0].Outcome)
		require.Less(t, r.Response.Status, 300, "the provider gets a 2xx")
		if i == 0 {
			first = r
			require.NotEmpty(t, r.Events[0].ClaimToken)
		} else {
			require.Empty(t, r.Events[0].ClaimToken, "copy %d holds nothing", i)
		}
	}
	raw := e.trigger(t, "t-shadow", trigCall(causeStripe(now+5, stripeEvent("evt_shadow_1", 100)), "run-4"))
	require.Equal(t, http.StatusOK, raw.status)
	require.True(t, strings.Contains(string(raw.body), `"shadow":{"would_be":"in_progress","cause":"provider_retry"}`), "%s", raw.body)
	require.Equal(t, 1.0, e.shadowMetric(t, "t-shadow", "won"))
	require.Equal(t, 3.0, e.shadowMetric(t, "t-shadow", "in_progress"))

	id := first.Events[0].ClaimID
	e.complete(t, causeClaim{ClaimID: id, ClaimToken: first.Events[0].ClaimToken})
	r := e.decided(t, "t-shadow", trigCall(causeStripe(now+6, stripeEvent("evt_shadow_1", 100)), "run-5"))
	require.Equal(t, "won", r.Decision)
	require.Equal(t, 1.0, e.shadowMetric(t, "t-shadow", "duplicate"))

	// The trigger node's option on an enforcing source.
	opt := trigCall(causeStripe(now, stripeEvent("evt_opt_1", 100)), "o-1")
	opt["shadow"] = true
	require.Equal(t, "won", e.decided(t, "t-enforce", opt).Decision)
	opt = trigCall(causeStripe(now+1, stripeEvent("evt_opt_1", 100)), "o-2")
	opt["shadow"] = true
	again := e.decided(t, "t-enforce", opt)
	require.Equal(t, "won", again.Decision)
	require.Empty(t, again.Events[0].ClaimToken)
	require.Equal(t, 1.0, e.shadowMetric(t, "t-enforce", "in_progress"))

	e.enforce(t)
	after := e.decided(t, "t-shadow", trigCall(causeStripe(now+7, stripeEvent("evt_shadow_1", 100)), "run-6"))
	require.Equal(t, "duplicate", after.Decision, "no gap after the switch")
	require.Equal(t, []string{"won (shadow)", "in_progress (shadow)", "in_progress (shadow)", "in_progress (shadow)",
		"completed", "duplicate (shadow)", "duplicate"}, e.shadowLog(t, id))
}

// TestShadowIngestDoorSettings: shadow on a source with forward.url is
// taken (a pass-through, TestIngestShadowPassThrough), except with a
// setting that would act instead of observe, or that the pass-through
// cannot honour; each refusal names the setting.
func TestShadowIngestDoorSettings(t *testing.T) {
	t.Parallel()
	parse := func(extra string) error {
		_, err := sources.Parse([]byte(`
sources:
  door: {tenant: acme, provider: stripe, secrets: ["x"], shadow: true, forward: {url: "http://n8n.invalid/webhook/x"}`+extra+`}
`), func(k string) string { return map[string]string{"EVENTS_KEY": "rk_test"}[k] })
		return err
	}
	require.NoError(t, parse(""))
	require.NoError(t, parse(`, backfill: {credentials: ["${EVENTS_KEY}"], mode: report}`))
	require.NoError(t, parse(`, max_lease_seconds: 35`), "forward.timeout_seconds 30 plus 5")
	require.ErrorContains(t, parse(`, backfill: {credentials: ["${EVENTS_KEY}"]}`), `source "door": shadow: true on a source with forward.url takes backfill.mode report only (mode auto`)
	require.ErrorContains(t, parse(`, backfill: {credentials: ["${EVENTS_KEY}"], mode: fetch}`), "backfill.mode report only (mode fetch")
	require.ErrorContains(t, parse(`, max_lease_seconds: 34`), "needs max_lease_seconds of at least 35")
}
