package httpapi_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/httpapi"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Tests of POST /v1/trigger/{source}: the n8n trigger node hands claimd a
// provider request n8n received; claimd decides it with the source's rules
// (the same as /ingest/{source}) and claims its events, storing nothing in
// the inbox. Same harness as ingest_test.go (a real listener, a fresh
// database per test).

const (
	trigStripeSecret = "whsec_trigger_stripe_0001"
	trigGraphState   = "trigger-graph-client-state-0001"
	trigToken        = "trigger-shared-token-0001"
	trigCEToken      = "trigger-ce-token-0001"
)

// trigSources: t-* are trigger sources (no forward); door-stripe is an
// ingest door with the same rules as t-stripe, to compare the answers of
// the two routes; far-stripe belongs to another tenant.
var trigSources = `
sources:
  t-stripe: {tenant: acme, provider: stripe, secrets: ["` + trigStripeSecret + `"], max_body_bytes: 4096}
  door-stripe: {tenant: acme, provider: stripe, secrets: ["` + trigStripeSecret + `"], max_body_bytes: 4096, forward: {url: "http://n8n.invalid/webhook/x"}}
  far-stripe: {tenant: other, provider: stripe, secrets: ["` + trigStripeSecret + `"]}
  t-filtered: {tenant: acme, provider: stripe, secrets: ["` + trigStripeSecret + `"], allowed_event_types: ["invoice.*"]}
  t-graph: {tenant: acme, provider: msgraph, secrets: ["` + trigGraphState + `"]}
  t-ce: {tenant: acme, provider: cloudevents, secrets: ["` + trigCEToken + `"]}
  t-header-key:
    tenant: acme
    provider: token
    secrets: ["` + trigToken + `"]
    options: {header: X-Api-Key, key: {id_header: X-Event-Id}}
  t-body-key:
    tenant: acme
    provider: token
    secrets: ["` + trigToken + `"]
    options: {header: X-Api-Key, key: {id_pointers: ["/id"]}}
`

func setupTrigger(t *testing.T) *ingestEnv {
	t.Helper()
	return setupIngest(t, trigSources, ingestOptions{maxConns: 12})
}

// trigEvent is one event of a trigger answer (the fields the tests read).
type trigEvent struct {
	Outcome           string          `json:"outcome"`
	ClaimToken        string          `json:"claim_token"`
	ClaimID           string          `json:"claim_id"`
	IdempotencyKey    string          `json:"idempotency_key"`
	Source            string          `json:"source"`
	EventID           string          `json:"event_id"`
	EventType         string          `json:"event_type"`
	State             string          `json:"state"`
	Attempt           int             `json:"attempt"`
	LeasePolicy       string          `json:"lease_policy"`
	RetryAfterSeconds *int            `json:"retry_after_seconds"`
	ResultRef         string          `json:"result_ref"`
	PayloadHash       string          `json:"payload_hash"`
	Payload           json.RawMessage `json:"payload"`
	KeyExpiresAt      string          `json:"key_expires_at"`
}

// trigReply is the answer of POST /v1/trigger/{source}.
type trigReply struct {
	Decision string      `json:"decision"`
	Events   []trigEvent `json:"events"`
	Response struct {
		Status     int               `json:"status"`
		Headers    map[string]string `json:"headers"`
		Body       *string           `json:"body"`
		BodyBase64 string            `json:"body_base64"`
	} `json:"response"`
}

// trigCall is the trigger request for d: d's headers as raw pairs, its
// query and its body in base64.
func trigCall(d ingestDelivery, requestID string) map[string]any {
	hs := make([][]string, 0, len(d.header))
	for _, kv := range d.header {
		hs = append(hs, []string{kv[0], kv[1]})
	}
	m := map[string]any{"method": "POST", "headers": hs, "query": d.query,
		"body": base64.StdEncoding.EncodeToString(d.body)}
	if requestID != "" {
		m["request_id"] = requestID
	}
	return m
}

// trigger posts body (a map, sent as JSON, or a string sent as is) to
// POST /v1/trigger/{source}.
func (e *ingestEnv) trigger(t *testing.T, source string, body any) ingestAnswer {
	t.Helper()
	raw, ok := body.(string)
	if !ok {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		raw = string(b)
	}
	return e.apiPost(t, "/v1/trigger/"+source, raw)
}

// decided posts a trigger request that must be answered 200 and returns its reply.
func (e *ingestEnv) decided(t *testing.T, source string, body any) trigReply {
	t.Helper()
	a := e.trigger(t, source, body)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	var r trigReply
	require.NoError(t, json.Unmarshal(a.body, &r), "%s", a.body)
	return r
}

// trigStripe is a Stripe delivery signed at at (unix seconds).
func trigStripe(at int64, body string) ingestDelivery {
	return ingestDelivery{header: jsonHeaders("Stripe-Signature", verifytest.StripeHeader(at, []byte(body), trigStripeSecret)), body: []byte(body)}
}

func stripeEvent(id string, amount int) string {
	return fmt.Sprintf(`{"id":%q,"object":"event","type":"invoice.paid","data":{"object":{"id":"in_1","amount":%d}}}`, id, amount)
}

// trigCounts is what the trigger must never write besides claims: inbox
// rows and dispatch jobs, and the claims of all sources.
func (e *ingestEnv) trigCounts(t *testing.T) [3]int {
	t.Helper()
	var c [3]int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT (SELECT count(*) FROM claims), (SELECT count(*) FROM inbox_events),
		(SELECT count(*) FROM river_job WHERE kind = 'claimd_inbox_dispatch')`).Scan(&c[0], &c[1], &c[2]))
	return c
}

// TestTriggerClaimLifecycle: a signed Stripe delivery is won (with a
// token, never in the provider's answer); the same request again gets
// its win back; another delivery of it is in_progress (503 with
// Retry-After) until Complete, then duplicate (2xx); a changed payload
// under the same id is a conflict. Only claims are written.
func TestTriggerClaimLifecycle(t *testing.T) {
	t.Parallel()
	e := setupTrigger(t)
	d := trigStripe(signNow(), stripeEvent("evt_life", 100))

	won := e.decided(t, "t-stripe", trigCall(d, "req-1"))
	require.Equal(t, "won", won.Decision)
	require.Len(t, won.Events, 1)
	w := won.Events[0]
	require.Equal(t, "won", w.Outcome)
	require.NotEmpty(t, w.ClaimToken)
	require.Equal(t, 1, w.Attempt)
	require.Equal(t, "t-stripe", w.Source, "the claim's source is the source's scope")
	require.Equal(t, "evt_life", w.EventID)
	require.Equal(t, "invoice.paid", w.EventType)
	require.Equal(t, "review", w.LeasePolicy, "the source's (default) lease policy")
	require.Regexp(t, `^[0-9a-f]{64}$`, w.PayloadHash)
	require.Nil(t, w.Payload, "a single-event delivery carries no payload")
	require.Equal(t, http.StatusOK, won.Response.Status)
	require.NotContains(t, *won.Response.Body, w.ClaimToken, "no claim token in the provider's answer")
	require.JSONEq(t, `{"received":[{"event_id":"evt_life","claim_id":"`+w.ClaimID+`","outcome":"won","key_expires_at":"`+
		w.KeyExpiresAt+`","key_expiry":"not_before"}],"rejected_items":0}`, *won.Response.Body)
	require.Equal(t, [3]int{1, 0, 0}, e.trigCounts(t), "one claim, no inbox row, no dispatch job")

	// The same request again (its answer was lost): the same win.
	again := e.decided(t, "t-stripe", trigCall(d, "req-1"))
	require.Equal(t, "won", again.Decision)
	require.Equal(t, w.ClaimToken, again.Events[0].ClaimToken, "a retried request gets its token back")
	require.Equal(t, 1, again.Events[0].Attempt)

	// Another delivery of the event while the first runs.
	busy := e.decided(t, "t-stripe", trigCall(trigStripe(signNow(), stripeEvent("evt_life", 100)), "req-2"))
	require.Equal(t, "in_progress", busy.Decision)
	require.Empty(t, busy.Events[0].ClaimToken)
	require.NotNil(t, busy.Events[0].RetryAfterSeconds)
	require.Equal(t, http.StatusServiceUnavailable, busy.Response.Status)
	ra, err := strconv.Atoi(busy.Response.Headers["Retry-After"])
	require.NoError(t, err)
	require.GreaterOrEqual(t, ra, 1)
	require.Equal(t, *busy.Events[0].RetryAfterSeconds, ra)

	// Complete through the claims API; the next delivery is a duplicate.
	c := e.apiPost(t, "/v1/claims/"+w.ClaimID+"/complete", `{"claim_token":"`+w.ClaimToken+`","result_ref":"inv_1"}`)
	require.Equal(t, http.StatusOK, c.status, "%s", c.body)
	dup := e.decided(t, "t-stripe", trigCall(trigStripe(signNow(), stripeEvent("evt_life", 100)), "req-3"))
	require.Equal(t, "duplicate", dup.Decision)
	require.Equal(t, "inv_1", dup.Events[0].ResultRef)
	require.Equal(t, http.StatusOK, dup.Response.Status)
	require.Empty(t, dup.Response.Headers["Retry-After"])

	// Same id, another payload.
	con := e.decided(t, "t-stripe", trigCall(trigStripe(signNow(), stripeEvent("evt_life", 999)), "req-4"))
	require.Equal(t, "conflict", con.Decision)
	require.Equal(t, http.StatusOK, con.Response.Status)
	require.Equal(t, [3]int{1, 0, 0}, e.trigCounts(t))
}

// TestTriggerConcurrentCopiesOneWin: 20 identical deliveries at once (each
// its own provider request) make exactly one win.
func TestTriggerConcurrentCopiesOneWin(t *testing.T) {
	t.Parallel()
	e := setupTrigger(t)
	d := trigStripe(signNow(), stripeEvent("evt_race", 100))
	const n = 20
	var wg sync.WaitGroup
	outcomes := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := e.trigger(t, "t-stripe", trigCall(d, "race-"+strconv.Itoa(i)))
			var r trigReply
			if a.status == http.StatusOK && json.Unmarshal(a.body, &r) == nil {
				outcomes[i] = r.Decision
			} else {
				outcomes[i] = fmt.Sprintf("%d %s", a.status, a.body)
			}
		}()
	}
	wg.Wait()
	count := map[string]int{}
	for _, o := range outcomes {
		count[o]++
	}
	require.Equal(t, map[string]int{"won": 1, "in_progress": n - 1}, count)
	require.Equal(t, [3]int{1, 0, 0}, e.trigCounts(t))
}

// TestTriggerUnauthenticatedIsIngestsAnswer: a bad or missing signature and
// a stale timestamp are unauthenticated, write nothing, and get exactly the
// answer the ingest door gives (status, type, body); the reason is logged.
func TestTriggerUnauthenticatedIsIngestsAnswer(t *testing.T) {
	t.Parallel()
	e := setupTrigger(t)
	body := stripeEvent("evt_auth", 100)
	for _, c := range []struct {
		name string
		d    ingestDelivery
		code string
	}{
		{"bad signature", ingestDelivery{header: jsonHeaders("Stripe-Signature", verifytest.StripeHeader(signNow(), []byte(body), "whsec_wrong")), body: []byte(body)}, "bad_signature"},
		{"missing signature", ingestDelivery{header: jsonHeaders(), body: []byte(body)}, "missing_header"},
		{"stale timestamp", trigStripe(signNow()-3600, body), "timestamp_outside_tolerance"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.decided(t, "t-stripe", trigCall(c.d, ""))
			require.Equal(t, "unauthenticated", r.Decision)
			require.Empty(t, r.Events)
			ing := e.send(t, "door-stripe", c.d)
			require.Equal(t, http.StatusUnauthorized, ing.status)
			require.Equal(t, ing.status, r.Response.Status, "the ingest door's status")
			require.Equal(t, ing.header.Get("Content-Type"), r.Response.Headers["Content-Type"])
			require.Equal(t, string(ing.body), *r.Response.Body, "the ingest door's body, word for word")
			require.NotContains(t, *r.Response.Body, c.code, "the reason is not in the answer")
			require.Equal(t, [3]int{0, 0, 0}, e.trigCounts(t), "nothing written")
		})
	}
	require.Contains(t, e.logs.String(), `"door":"trigger","code":"bad_signature"`, "the reason is in the log")
	require.NotContains(t, e.logs.String(), trigStripeSecret)
}

// TestTriggerDecisionsBeforeClaims: every way a delivery ends before its
// events are claimed, each with the ingest door's answer and nothing
// written.
func TestTriggerDecisionsBeforeClaims(t *testing.T) {
	t.Parallel()
	e := setupTrigger(t)

	// A Microsoft Graph endpoint validation: the token echoed as text.
	hs := e.decided(t, "t-graph", map[string]any{"method": "POST", "query": "validationToken=Validation%3A+token+1",
		"headers": [][]string{{"Content-Type", "text/plain"}}})
	require.Equal(t, "handshake", hs.Decision)
	require.Equal(t, http.StatusOK, hs.Response.Status)
	require.Equal(t, "Validation: token 1", *hs.Response.Body)
	require.Equal(t, "nosniff", hs.Response.Headers["X-Content-Type-Options"])
	require.Equal(t, "text/plain; charset=utf-8", hs.Response.Headers["Content-Type"])

	// A type the source filters out: acknowledged, nothing claimed.
	fil := e.decided(t, "t-filtered", trigCall(trigStripe(signNow(), `{"id":"evt_f","type":"customer.created"}`), ""))
	require.Equal(t, "filtered", fil.Decision)
	require.Equal(t, http.StatusOK, fil.Response.Status)
	require.Contains(t, *fil.Response.Body, `"filtered":`)

	// Authentic, but the key rule's field is absent: 422 not_stored, as ingest.
	ns := e.decided(t, "t-body-key", trigCall(ingestDelivery{header: jsonHeaders("X-Api-Key", trigToken), body: []byte(`{"type":"x"}`)}, ""))
	require.Equal(t, "not_stored", ns.Decision)
	require.Equal(t, http.StatusUnprocessableEntity, ns.Response.Status)
	var nsBody httpapi.ErrorBody
	require.NoError(t, json.Unmarshal([]byte(*ns.Response.Body), &nsBody))
	require.Equal(t, "not_stored", string(nsBody.Error.Code))
	require.Equal(t, "/id", nsBody.Error.Field)

	// A compressed body: 415 before verification.
	gz := trigStripe(signNow(), stripeEvent("evt_gz", 100))
	gz.header = append(gz.header, [2]string{"Content-Encoding", "gzip"})
	enc := e.decided(t, "t-stripe", trigCall(gz, ""))
	require.Equal(t, "unsupported_encoding", enc.Decision)
	require.Equal(t, http.StatusUnsupportedMediaType, enc.Response.Status)
	require.Contains(t, *enc.Response.Body, `"field":"Content-Encoding"`)

	// A header the key rule reads, sent twice with different values,
	// names two events: refused naming it. The same value twice is one.
	twice := ingestDelivery{header: jsonHeaders("X-Api-Key", trigToken, "X-Event-Id", "ev-1", "X-Event-Id", "ev-2"), body: []byte(`{}`)}
	rep := e.decided(t, "t-header-key", trigCall(twice, ""))
	require.Equal(t, "not_stored", rep.Decision)
	require.Contains(t, *rep.Response.Body, `"field":"X-Event-Id"`)

	// Not POST: the ingest door takes POST only.
	get := trigCall(trigStripe(signNow(), stripeEvent("evt_get", 100)), "")
	get["method"] = "GET"
	m := e.decided(t, "t-stripe", get)
	require.Equal(t, "method_not_allowed", m.Decision)
	require.Equal(t, http.StatusMethodNotAllowed, m.Response.Status)

	// HEAD: a reachability check (Trello's on registration), answered 200
	// with no body, even unsigned; nothing verified or written.
	head := trigCall(ingestDelivery{header: jsonHeaders()}, "")
	head["method"] = "HEAD"
	hd := e.decided(t, "t-stripe", head)
	require.Equal(t, "handshake", hd.Decision)
	require.Equal(t, http.StatusOK, hd.Response.Status)
	require.Empty(t, hd.Events)
	require.Empty(t, *hd.Response.Body)

	// n8n's test URL: verified and keyed, nothing claimed.
	test := trigCall(trigStripe(signNow(), stripeEvent("evt_test", 100)), "")
	test["test"] = true
	tr := e.decided(t, "t-stripe", test)
	require.Equal(t, "test", tr.Decision)
	require.Len(t, tr.Events, 1)
	require.Equal(t, "evt_test", tr.Events[0].EventID)
	require.Equal(t, "invoice.paid", tr.Events[0].EventType)
	require.Empty(t, tr.Events[0].Outcome)
	require.Empty(t, tr.Events[0].ClaimToken)
	require.Regexp(t, `^ik_[0-9a-f]{64}$`, tr.Events[0].IdempotencyKey)

	require.Equal(t, [3]int{0, 0, 0}, e.trigCounts(t), "no decision before the claims writes anything")

	// The repeated header with one value is one event: won.
	same := ingestDelivery{header: jsonHeaders("X-Api-Key", trigToken, "X-Event-Id", "ev-1", "X-Event-Id", "ev-1"), body: []byte(`{}`)}
	require.Equal(t, "won", e.decided(t, "t-header-key", trigCall(same, "")).Decision)
}

// TestTriggerBatchClaimsEachItem: a Microsoft Graph batch is one claim per
// notification, in order, each with its own JSON (without clientState);
// answered 202 as Graph expects. A CloudEvents batch likewise.
func TestTriggerBatchClaimsEachItem(t *testing.T) {
	t.Parallel()
	e := setupTrigger(t)
	item := func(id, user string) string {
		return `{"id":"` + id + `","subscriptionId":"sub-1","clientState":"` + trigGraphState +
			`","changeType":"created","resource":"users/` + user + `","tenantId":"t1","resourceData":{"id":"` + user + `"}}`
	}
	d := ingestDelivery{header: jsonHeaders(), body: []byte(`{"value":[` + item("n-1", "u1") + `,` + item("n-2", "u2") + `]}`)}
	r := e.decided(t, "t-graph", trigCall(d, "graph-1"))
	require.Equal(t, "won", r.Decision)
	require.Len(t, r.Events, 2)
	for i, ev := range r.Events {
		require.Equal(t, "won", ev.Outcome, "item %d", i)
		require.NotEmpty(t, ev.ClaimToken)
		require.NotNil(t, ev.Payload, "a batch item carries its own JSON")
		require.NotContains(t, string(ev.Payload), trigGraphState, "never the clientState")
		require.Contains(t, string(ev.Payload), fmt.Sprintf(`"users/u%d"`, i+1), "in delivery order")
	}
	require.NotEqual(t, r.Events[0].ClaimID, r.Events[1].ClaimID)
	require.Equal(t, http.StatusAccepted, r.Response.Status, "Microsoft Graph expects 202")
	require.Equal(t, [3]int{2, 0, 0}, e.trigCounts(t))

	// The batch again under the same request id: both wins back.
	again := e.decided(t, "t-graph", trigCall(d, "graph-1"))
	for i := range again.Events {
		require.Equal(t, r.Events[i].ClaimToken, again.Events[i].ClaimToken)
	}

	ce := func(id string) string {
		return `{"specversion":"1.0","id":"` + id + `","source":"/orders","type":"order.paid","data":{"n":1}}`
	}
	batch := ingestDelivery{header: ingestHeaders{{"Content-Type", "application/cloudevents-batch+json"}, {"Authorization", "Bearer " + trigCEToken}},
		body: []byte("[" + ce("c1") + "," + ce("c2") + "," + ce("c3") + "]")}
	cr := e.decided(t, "t-ce", trigCall(batch, ""))
	require.Equal(t, "won", cr.Decision)
	require.Len(t, cr.Events, 3)
	for _, ev := range cr.Events {
		require.Equal(t, "won", ev.Outcome)
		require.Equal(t, "order.paid", ev.EventType)
		require.NotNil(t, ev.Payload)
	}
	require.Equal(t, [3]int{5, 0, 0}, e.trigCounts(t))
}

// TestTriggerSourceIsTheTenants: an unknown source and another tenant's
// answer the same 404, naming neither; a trigger source is no ingest door:
// /ingest answers for it exactly as for an unknown source.
func TestTriggerSourceIsTheTenants(t *testing.T) {
	t.Parallel()
	e := setupTrigger(t)
	d := trigStripe(signNow(), stripeEvent("evt_iso", 100))
	unknown := e.trigger(t, "no-such-source", trigCall(d, ""))
	other := e.trigger(t, "far-stripe", trigCall(d, ""))
	require.Equal(t, http.StatusNotFound, unknown.status, "%s", unknown.body)
	require.Equal(t, unknown.status, other.status)
	require.Equal(t, string(unknown.body), string(other.body))
	require.NotContains(t, string(other.body), "far-stripe")
	require.Equal(t, [3]int{0, 0, 0}, e.trigCounts(t))

	viaIngest := e.send(t, "t-stripe", d)
	notThere := e.send(t, "no-such-source", d)
	require.Equal(t, notThere.status, viaIngest.status)
	require.Equal(t, string(notThere.body), string(viaIngest.body))
	require.Equal(t, [3]int{0, 0, 0}, e.trigCounts(t))
}

// TestTriggerRequestValidation: a request that is not valid is refused
// naming the field, quoting nothing of it, and writes nothing.
func TestTriggerRequestValidation(t *testing.T) {
	t.Parallel()
	e := setupTrigger(t)
	const marker = "zzmarker"
	good := func() map[string]any { return trigCall(trigStripe(signNow(), stripeEvent("evt_v", 100)), "") }
	with := func(k string, v any) map[string]any {
		m := good()
		m[k] = v
		return m
	}
	manyHeaders := make([][]string, 257)
	for i := range manyHeaders {
		manyHeaders[i] = []string{"X-H" + strconv.Itoa(i), marker}
	}
	bigHeaders := make([][]string, 6)
	for i := range bigHeaders {
		bigHeaders[i] = []string{"X-Big" + strconv.Itoa(i), strings.Repeat(marker, 1600)}
	}
	for _, c := range []struct {
		name   string
		body   any
		status int
		code   string
		field  string
	}{
		{"invalid base64", with("body", marker+"!!"), 422, "invalid", "body"},
		{"base64 with a newline", with("body", "YWJj\nZGVm"), 422, "invalid", "body"},
		{"unpadded base64", with("body", "YWJjZA"), 422, "invalid", "body"},
		{"body over the source's limit", with("body", base64.StdEncoding.EncodeToString([]byte(strings.Repeat(marker, 600)))), 413, "body_too_large", "body"},
		{"too many headers", with("headers", manyHeaders), 422, "invalid", "headers"},
		{"headers too large in all", with("headers", bigHeaders), 422, "invalid", "headers"},
		{"a header value too long", with("headers", [][]string{{"X-A", strings.Repeat(marker, 3000)}}), 422, "invalid", "headers[0][1]"},
		{"a header name that is no token", with("headers", [][]string{{"X-A", "1"}, {marker + " x", "1"}}), 422, "invalid", "headers[1][0]"},
		{"an empty header name", with("headers", [][]string{{"", "1"}}), 422, "invalid", "headers[0][0]"},
		{"a header value with CR LF", with("headers", [][]string{{"X-A", marker + "\r\nX-B: 1"}}), 422, "invalid", "headers[0][1]"},
		{"not a pair", with("headers", [][]string{{"X-A"}}), 422, "invalid", "headers[0]"},
		{"bad method", with("method", marker), 422, "invalid", "method"},
		{"no method", with("method", ""), 422, "invalid", "method"},
		{"request id too long", with("request_id", strings.Repeat(marker, 30)), 422, "invalid", "request_id"},
		{"wait too long", with("wait_seconds", 26), 422, "invalid", "wait_seconds"},
		{"query too long", with("query", strings.Repeat(marker, 3000)), 422, "invalid", "query"},
		{"unknown member", with(marker, 1), 400, "malformed", marker},
		{"duplicate member", `{"method":"POST","method":"GET"}`, 400, "malformed", "method"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := e.trigger(t, "t-stripe", c.body)
			require.Equal(t, c.status, a.status, "%s", a.body)
			var eb httpapi.ErrorBody
			require.NoError(t, json.Unmarshal(a.body, &eb), "%s", a.body)
			require.Equal(t, c.code, string(eb.Error.Code), "%s", a.body)
			require.Equal(t, c.field, eb.Error.Field, "%s", a.body)
			if c.field != marker {
				require.NotContains(t, string(a.body), marker, "caller input is never echoed")
			}
		})
	}
	require.Equal(t, [3]int{0, 0, 0}, e.trigCounts(t))
}

// TestTriggerWaitsForTheHolder: a copy delivered while the first runs,
// sent with wait_seconds, waits for the holder and answers what the claim
// is once it completed: duplicate with its result, 2xx for the provider.
func TestTriggerWaitsForTheHolder(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, trigSources, ingestOptions{maxConns: 12, waiter: true})
	d := trigStripe(signNow(), stripeEvent("evt_wait", 100))
	w := e.decided(t, "t-stripe", trigCall(d, "w-1")).Events[0]
	require.Equal(t, "won", w.Outcome)
	waiting := trigCall(d, "w-2")
	waiting["wait_seconds"] = 20
	done := make(chan trigReply, 1)
	start := time.Now()
	go func() { done <- e.decided(t, "t-stripe", waiting) }()
	e.eventually(t, "the copy answered in_progress and waiting", func() bool {
		log := e.deliveryLog(t, w.ClaimID)
		return len(log) > 0 && log[len(log)-1] == "in_progress"
	})
	c := e.apiPost(t, "/v1/claims/"+w.ClaimID+"/complete", `{"claim_token":"`+w.ClaimToken+`","result_ref":"inv_w"}`)
	require.Equal(t, http.StatusOK, c.status, "%s", c.body)
	r := <-done
	require.Equal(t, "duplicate", r.Decision)
	require.Equal(t, "inv_w", r.Events[0].ResultRef)
	require.Equal(t, http.StatusOK, r.Response.Status)
	require.Less(t, time.Since(start), 15*time.Second, "woken by the Complete, not at the end of its wait")
}

// TestTriggerBodyLimitAdmitsTheLargestSource: the /v1 limit of the
// trigger route admits the base64 of the largest source body, although
// it is above the limit of every other /v1 route.
func TestTriggerBodyLimitAdmitsTheLargestSource(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, `
sources:
  big: {tenant: acme, provider: stripe, secrets: ["`+trigStripeSecret+`"], max_body_bytes: 3000000}
`, ingestOptions{server: func(c *httpapi.Config) { c.BodyLimit = 64 << 10 }})
	pad := strings.Repeat("p", 2_900_000)
	d := trigStripe(signNow(), `{"id":"evt_big","type":"invoice.paid","pad":"`+pad+`"}`)
	r := e.decided(t, "big", trigCall(d, ""))
	require.Equal(t, "won", r.Decision)
	// Another /v1 route keeps its own limit.
	a := e.apiPost(t, "/v1/claims", `{"source":"big","event_id":"x","payload":"`+strings.Repeat("p", 70<<10)+`"}`)
	require.Equal(t, http.StatusRequestEntityTooLarge, a.status)
	// Past the source's limit: 413 naming no limit.
	over := trigStripe(signNow(), `{"id":"evt_over","type":"invoice.paid","pad":"`+pad+strings.Repeat("p", 200_000)+`"}`)
	o := e.trigger(t, "big", trigCall(over, ""))
	require.Equal(t, http.StatusRequestEntityTooLarge, o.status, "%s", o.body)
	require.NotContains(t, string(o.body), "3000000")
}
