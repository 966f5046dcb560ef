package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Per-key expiry on the wire: every answer that carries a claim record says
// when its key may be forgotten, key_expires_at and key_expiry, from
// claim.Ledger.KeyExpiry; an answer without a record (a batch item's error,
// a trigger test event) carries neither.

// stableRecord is a record's JSON without key_expires_at when its
// key_expiry is not_before: an open record's date is "not before now +
// key retention" and moves with every read, so a test comparing two reads
// of an unchanged record compares the rest.
func stableRecord(t *testing.T, body []byte) string {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(body, &m), "%s", body)
	if m["key_expiry"] == claim.ExpiryNotBefore {
		delete(m, "key_expires_at")
	}
	out, err := json.Marshal(m)
	require.NoError(t, err)
	return string(out)
}

const expiryStripeSecret = "whsec_expiry_stripe_0001"

// expirySources: kept (an ingest door, which API claims share as their
// source) and t-kept (a trigger source) keep keys 40 days; t-plain and
// the API's "free" follow the default policy (400 days).
var expirySources = `
sources:
  kept: {tenant: acme, provider: stripe, secrets: ["` + expiryStripeSecret + `"], retention_days: 10, key_retention_days: 40, forward: {url: "http://n8n.invalid/webhook/x"}}
  t-kept: {tenant: acme, provider: stripe, secrets: ["` + expiryStripeSecret + `"], key_retention_days: 40}
  t-plain: {tenant: acme, provider: stripe, secrets: ["` + expiryStripeSecret + `"]}
`

const (
	keptKR    = 40 * 24 * time.Hour
	defaultKR = claim.DefaultKeyRetention
)

type wire = map[string]any

// expiryCase is one answer that must carry the key expiry of its record.
type expiryCase struct {
	route string
	obj   wire
	kr    time.Duration
	kind  string // the scenario's key_expiry
}

func TestKeyExpiryOnEveryRoute(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, expirySources, ingestOptions{})
	routes := 0
	// post sends a JSON body to the /v1 API and returns the answer's object.
	post := func(path string, body any, status int) wire {
		t.Helper()
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		a := e.apiPost(t, path, string(raw))
		require.Equal(t, status, a.status, "%s: %s", path, a.body)
		var w wire
		require.NoError(t, json.Unmarshal(a.body, &w), "%s", a.body)
		return w
	}
	get := func(path string) wire {
		t.Helper()
		a := e.api(t, http.MethodGet, path)
		require.Equal(t, http.StatusOK, a.status, "%s: %s", path, a.body)
		var w wire
		require.NoError(t, json.Unmarshal(a.body, &w), "%s", a.body)
		return w
	}
	// add checks an answer against its record as stored right after it.
	add := func(route string, obj wire, kr time.Duration, kind string) {
		t.Helper()
		c := expiryCase{route: route, obj: obj, kr: kr, kind: kind}
		routes++
		t.Run(route, func(t *testing.T) { e.checkExpiry(t, c) })
	}
	claimBody := func(source, id string, extra ...any) map[string]any {
		m := map[string]any{"source": source, "event_id": id}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i].(string)] = extra[i+1]
		}
		return m
	}
	str := func(w wire, k string) string { s, _ := w[k].(string); return s }
	hashA, hashB := "a"+fmt.Sprintf("%063d", 0), "b"+fmt.Sprintf("%063d", 0)

	for _, src := range []struct {
		name string
		kr   time.Duration
	}{{"kept", keptKR}, {"free", defaultKR}} {
		s := src.name
		w := post("/v1/claims", claimBody(s, "life", "payload_hash", hashA, "request_id", "r1", "execution_id", "X"), 200)
		require.Equal(t, "won", w["outcome"])
		add(s+" claim won", w, src.kr, claim.ExpiryNotBefore)
		id, tok := str(w, "claim_id"), str(w, "claim_token")
		add(s+" claim won_replayed", post("/v1/claims", claimBody(s, "life", "payload_hash", hashA, "request_id", "r1"), 200), src.kr, claim.ExpiryNotBefore)
		ip := post("/v1/claims", claimBody(s, "life", "payload_hash", hashA, "request_id", "r2"), 200)
		require.Equal(t, "in_progress", ip["outcome"])
		add(s+" claim in_progress", ip, src.kr, claim.ExpiryNotBefore)
		add(s+" extend", post("/v1/claims/"+id+"/extend", map[string]any{"claim_token": tok, "lease_seconds": 60}, 200), src.kr, claim.ExpiryNotBefore)
		add(s+" get open", get("/v1/claims/"+id), src.kr, claim.ExpiryNotBefore)
		add(s+" find open", get("/v1/claims?source="+s+"&event_id=life"), src.kr, claim.ExpiryNotBefore)
		list := get("/v1/claims/list?state=processing&source=" + s)
		require.NotEmpty(t, list["claims"])
		for _, c := range list["claims"].([]any) {
			add(s+" list", c.(wire), src.kr, claim.ExpiryNotBefore)
		}
		add(s+" complete", post("/v1/claims/"+id+"/complete", map[string]any{"claim_token": tok, "result_ref": "ref"}, 200), src.kr, claim.ExpiryFixed)
		dup := post("/v1/claims", claimBody(s, "life", "payload_hash", hashA), 200)
		require.Equal(t, "duplicate", dup["outcome"])
		add(s+" claim duplicate", dup, src.kr, claim.ExpiryFixed)
		cf := post("/v1/claims", claimBody(s, "life", "payload_hash", hashB), 200)
		require.Equal(t, "conflict", cf["outcome"])
		add(s+" claim conflict (the existing record's)", cf, src.kr, claim.ExpiryFixed)
		add(s+" get fixed", get("/v1/claims/"+id), src.kr, claim.ExpiryFixed)
		add(s+" find fixed", get("/v1/claims?source="+s+"&event_id=life"), src.kr, claim.ExpiryFixed)

		// retry_later, then dead_lettered.
		w = post("/v1/claims", claimBody(s, "rl"), 200)
		add(s+" fail retryable", post("/v1/claims/"+str(w, "claim_id")+"/fail",
			map[string]any{"claim_token": str(w, "claim_token"), "error": "later", "retry": "retryable"}, 200), src.kr, claim.ExpiryNotBefore)
		rl := post("/v1/claims", claimBody(s, "rl"), 200)
		require.Equal(t, "retry_later", rl["outcome"])
		add(s+" claim retry_later", rl, src.kr, claim.ExpiryNotBefore)
		w = post("/v1/claims", claimBody(s, "dl"), 200)
		add(s+" fail permanent", post("/v1/claims/"+str(w, "claim_id")+"/fail",
			map[string]any{"claim_token": str(w, "claim_token"), "error": "no", "retry": "permanent"}, 200), src.kr, claim.ExpiryFixed)
		dl := post("/v1/claims", claimBody(s, "dl"), 200)
		require.Equal(t, "dead_lettered", dl["outcome"])
		add(s+" claim dead_lettered", dl, src.kr, claim.ExpiryFixed)
		add(s+" resolve retry (reopened)", post("/v1/claims/"+str(w, "claim_id")+"/resolve",
			map[string]any{"outcome": "retry", "note": "fixed upstream"}, 200), src.kr, claim.ExpiryNotBefore)

		// unknown through release, then resolved.
		w = post("/v1/claims", claimBody(s, "rel"), 200)
		add(s+" release", post("/v1/claims/"+str(w, "claim_id")+"/release", map[string]any{"note": "gone"}, 200), src.kr, claim.ExpiryNotBefore)
		add(s+" resolve completed", post("/v1/claims/"+str(w, "claim_id")+"/resolve",
			map[string]any{"outcome": "completed", "result_ref": "r", "note": "seen"}, 200), src.kr, claim.ExpiryFixed)

		// stale: an older object version after a newer one completed.
		w = post("/v1/claims", claimBody(s, "v2", "object_id", "o", "object_version", 2), 200)
		post("/v1/claims/"+str(w, "claim_id")+"/complete", map[string]any{"claim_token": str(w, "claim_token")}, 200)
		st := post("/v1/claims", claimBody(s, "v1", "object_id", "o", "object_version", 1), 200)
		require.Equal(t, "stale", st["outcome"])
		add(s+" claim stale", st, src.kr, claim.ExpiryFixed)

		// Batch: a result carries it, an error item does not.
		bt := post("/v1/claims/batch", map[string]any{"claims": []any{claimBody(s, "b1"), map[string]any{"source": s}}}, 200)
		res := bt["results"].([]any)
		add(s+" batch won", res[0].(wire), src.kr, claim.ExpiryNotBefore)
		require.Contains(t, res[1].(wire), "error")
		require.NotContains(t, res[1].(wire), "key_expires_at", "a batch error has no record, so no expiry")
		require.NotContains(t, res[1].(wire), "key_expiry")
		b1 := res[0].(wire)

		// Settle batches: a settled record carries it, an error item not.
		cb := post("/v1/claims/complete/batch", map[string]any{"claims": []any{
			map[string]any{"claim_id": str(b1, "claim_id"), "claim_token": str(b1, "claim_token")},
			map[string]any{"claim_id": str(b1, "claim_id"), "claim_token": "00000000-0000-0000-0000-000000000000"},
		}}, 200)
		res = cb["results"].([]any)
		add(s+" complete batch", res[0].(wire), src.kr, claim.ExpiryFixed)
		require.NotContains(t, res[1].(wire), "key_expires_at")
		w = post("/v1/claims", claimBody(s, "fb"), 200)
		fb := post("/v1/claims/fail/batch", map[string]any{"claims": []any{
			map[string]any{"claim_id": str(w, "claim_id"), "claim_token": str(w, "claim_token"), "error": "e", "retry": "retryable"},
			map[string]any{"claim_id": "nope", "claim_token": "t", "error": "e", "retry": "retryable"},
		}}, 200)
		res = fb["results"].([]any)
		add(s+" fail batch", res[0].(wire), src.kr, claim.ExpiryNotBefore)
		require.NotContains(t, res[1].(wire), "key_expires_at")

		// Fail for an execution.
		post("/v1/claims", claimBody(s, "fx", "execution_id", "EX-"+s), 200)
		fx := post("/v1/claims/fail/execution", map[string]any{"execution_id": "EX-" + s, "error": "crashed", "retry": "unknown"}, 200)
		require.Len(t, fx["claims"], 1)
		add(s+" fail execution", fx["claims"].([]any)[0].(wire), src.kr, claim.ExpiryNotBefore)
	}

	// The ingest door: receipts of a new, a duplicate and a conflicting
	// delivery name the record's expiry; so does the inbox.
	ingestOne := func(body string) wire {
		t.Helper()
		raw := []byte(body)
		a := e.send(t, "kept", ingestDelivery{header: jsonHeaders("Stripe-Signature",
			stripeSig(signNow(), raw)), body: raw})
		require.Equal(t, http.StatusOK, a.status, "%s", a.body)
		var r struct {
			Received []wire `json:"received"`
		}
		require.NoError(t, json.Unmarshal(a.body, &r))
		require.Len(t, r.Received, 1)
		return r.Received[0]
	}
	ev := stripeEvent("evt_exp", 100)
	rc := ingestOne(ev)
	require.Equal(t, "accepted", rc["status"])
	add("ingest accepted", rc, keptKR, claim.ExpiryNotBefore)
	rc = ingestOne(ev)
	require.Equal(t, "duplicate", rc["status"])
	add("ingest duplicate (open)", rc, keptKR, claim.ExpiryNotBefore)
	inboxID := str(rc, "claim_id")
	add("inbox open", get("/v1/inbox/"+inboxID), keptKR, claim.ExpiryNotBefore)
	w := post("/v1/claims", claimBody("kept", "evt_exp"), 200)
	require.Equal(t, "won", w["outcome"], "the workflow claims the ingested event")
	post("/v1/claims/"+str(w, "claim_id")+"/complete", map[string]any{"claim_token": str(w, "claim_token")}, 200)
	rc = ingestOne(ev)
	require.Equal(t, "duplicate", rc["status"])
	add("ingest duplicate (completed)", rc, keptKR, claim.ExpiryFixed)
	rc = ingestOne(stripeEvent("evt_exp", 999))
	require.Equal(t, "conflict", rc["status"])
	add("ingest conflict (the existing record's)", rc, keptKR, claim.ExpiryFixed)
	add("inbox completed", get("/v1/inbox/"+inboxID), keptKR, claim.ExpiryFixed)

	// The trigger: each claimed event carries it, and the provider's
	// answer names it per event; a test delivery claims nothing.
	for _, src := range []struct {
		name string
		kr   time.Duration
	}{{"t-kept", keptKR}, {"t-plain", defaultKR}} {
		d := ingestDelivery{header: jsonHeaders("Stripe-Signature", stripeSig(signNow(), []byte(stripeEvent("evt_t", 1)))),
			body: []byte(stripeEvent("evt_t", 1))}
		test := trigCall(d, "")
		test["test"] = true
		a := e.trigger(t, src.name, test)
		require.Equal(t, http.StatusOK, a.status, "%s", a.body)
		var tr struct {
			Decision string `json:"decision"`
			Events   []wire `json:"events"`
		}
		require.NoError(t, json.Unmarshal(a.body, &tr))
		require.Equal(t, "test", tr.Decision)
		require.Len(t, tr.Events, 1)
		require.NotContains(t, tr.Events[0], "key_expires_at", "a test event claims nothing: no record, no expiry")
		require.NotContains(t, tr.Events[0], "key_expiry")

		won := trigEvents(t, e, src.name, trigCall(d, "tr-1"))
		require.Equal(t, "won", won[0]["outcome"])
		add(src.name+" trigger won", won[0], src.kr, claim.ExpiryNotBefore)
		w := won[0]
		post("/v1/claims/"+str(w, "claim_id")+"/complete", map[string]any{"claim_token": str(w, "claim_token")}, 200)
		dup := trigEvents(t, e, src.name, trigCall(d, "tr-2"))
		require.Equal(t, "duplicate", dup[0]["outcome"])
		add(src.name+" trigger duplicate", dup[0], src.kr, claim.ExpiryFixed)
	}

	require.Equal(t, 2*24+6+2*2, routes, "every answer above was checked")
}

// trigEvents posts a trigger request that claims, checks that the
// provider's answer names each event's key expiry as the event does, and
// returns the events.
func trigEvents(t *testing.T, e *ingestEnv, source string, body map[string]any) []wire {
	t.Helper()
	a := e.trigger(t, source, body)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	var tr struct {
		Events   []wire `json:"events"`
		Response struct {
			Body *string `json:"body"`
		} `json:"response"`
	}
	require.NoError(t, json.Unmarshal(a.body, &tr))
	require.NotNil(t, tr.Response.Body)
	var answer struct {
		Received []wire `json:"received"`
	}
	require.NoError(t, json.Unmarshal([]byte(*tr.Response.Body), &answer))
	require.Len(t, answer.Received, len(tr.Events))
	for i, ev := range tr.Events {
		require.Equal(t, ev["key_expires_at"], answer.Received[i]["key_expires_at"], "the provider's receipt names the event's date")
		require.Equal(t, ev["key_expiry"], answer.Received[i]["key_expiry"])
	}
	return tr.Events
}

// checkExpiry holds c's answer to its record as stored now (right after
// the answer): a terminal record's date and an open one's are both
// updated_at + the key retention, exactly (fixed for the first, a lower
// bound for the second).
func (e *ingestEnv) checkExpiry(t *testing.T, c expiryCase) {
	t.Helper()
	id, _ := c.obj["claim_id"].(string)
	require.NotEmpty(t, id, "%v", c.obj)
	kind, _ := c.obj["key_expiry"].(string)
	require.Equal(t, c.kind, kind, "%v", c.obj)
	raw, _ := c.obj["key_expires_at"].(string)
	at, err := time.Parse(time.RFC3339Nano, raw)
	require.NoError(t, err, "key_expires_at is RFC 3339: %v", c.obj)
	require.Equal(t, "Z", raw[len(raw)-1:], "in UTC")
	var state string
	var updated time.Time
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT state, updated_at FROM claims WHERE id = $1`, id).Scan(&state, &updated))
	// Either kind: the record's last change + the key retention, exactly,
	// written as every other timestamp of the answers is (RFC 3339 in UTC,
	// microseconds at most, trailing zeros dropped).
	require.True(t, at.Equal(updated.Add(c.kr)), "%s: updated_at %s + %s, got %s", kind, updated, c.kr, at)
	want, err := json.Marshal(updated.Add(c.kr).UTC())
	require.NoError(t, err)
	require.Equal(t, string(want), `"`+raw+`"`, "the precision of the other timestamps")
	if frac, ok := strings.CutPrefix(raw[19:], "."); ok {
		require.LessOrEqual(t, len(frac)-1, 6, "microseconds at most: %s", raw)
	}
	if u, ok := c.obj["updated_at"].(string); ok {
		ut, err := time.Parse(time.RFC3339Nano, u)
		require.NoError(t, err)
		require.True(t, at.Equal(ut.Add(c.kr)), "the answer's own updated_at + %s", c.kr)
	}
	if kind == claim.ExpiryFixed {
		require.Contains(t, claim.KeyPurgedStates, claim.State(state))
		return
	}
	require.NotContains(t, claim.KeyPurgedStates, claim.State(state))
}

// An open record's key_expires_at is the same on every lookup, whenever
// asked and by whichever route: it comes from the record's own last
// change, not from the time of the request.
func TestKeyExpiryOfAnOpenRecordIsStable(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, expirySources, ingestOptions{})
	raw, err := json.Marshal(map[string]any{"source": "kept", "event_id": "stable"})
	require.NoError(t, err)
	a := e.apiPost(t, "/v1/claims", string(raw))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	var won wire
	require.NoError(t, json.Unmarshal(a.body, &won))
	id, _ := won["claim_id"].(string)
	var dates []any
	for _, path := range []string{"/v1/claims/" + id, "/v1/claims/" + id, "/v1/claims?source=kept&event_id=stable",
		"/v1/claims/list?state=processing&source=kept"} {
		a := e.api(t, http.MethodGet, path)
		require.Equal(t, http.StatusOK, a.status, "%s", a.body)
		var w wire
		require.NoError(t, json.Unmarshal(a.body, &w))
		if list, ok := w["claims"].([]any); ok {
			require.Len(t, list, 1)
			w = list[0].(wire)
		}
		require.Equal(t, claim.ExpiryNotBefore, w["key_expiry"])
		dates = append(dates, w["key_expires_at"])
	}
	a = e.apiPost(t, "/v1/claims", string(raw))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	var ip wire
	require.NoError(t, json.Unmarshal(a.body, &ip))
	require.Equal(t, "in_progress", ip["outcome"])
	dates = append(dates, ip["key_expires_at"])
	for _, d := range dates {
		require.Equal(t, won["key_expires_at"], d, "the claim answer, two lookups, find, list and a copy's answer")
	}
}

// stripeSig signs body as Stripe does with expiryStripeSecret.
func stripeSig(at int64, body []byte) string {
	return verifytest.StripeHeader(at, body, expiryStripeSecret)
}

// The contract: every schema of an answer that holds a record requires
// both fields; the answers without a record (a batch item's error, a
// trigger test event) do not name them, and the contract test's closed
// schemas then refuse them there.
func TestOpenAPIKeyExpiry(t *testing.T) {
	t.Parallel()
	doc := loadDoc(t)
	schemas := doc.Components.Schemas
	for _, name := range []string{"ClaimResult", "Record", "IngestReceipt", "InboxEvent"} {
		s := schemas[name].Value
		require.Subset(t, s.Required, []string{"key_expires_at", "key_expiry"}, name)
		require.Equal(t, "#/components/schemas/KeyExpiresAt", s.Properties["key_expires_at"].Ref, name)
		require.Equal(t, "#/components/schemas/KeyExpiry", s.Properties["key_expiry"].Ref, name)
	}
	for _, name := range []string{"BatchItemError", "TriggerTestEvent"} {
		require.NotContains(t, schemas[name].Value.Properties, "key_expires_at", name)
		require.NotContains(t, schemas[name].Value.Properties, "key_expiry", name)
	}
	require.Equal(t, "date-time", schemas["KeyExpiresAt"].Value.Format)
	require.ElementsMatch(t, []any{claim.ExpiryFixed, claim.ExpiryNotBefore}, schemas["KeyExpiry"].Value.Enum)
}
