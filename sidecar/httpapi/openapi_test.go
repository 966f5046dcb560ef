package httpapi_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/gofiber/fiber/v2"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/backfill"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/httpapi"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/metrics"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// loadDoc parses and validates openapi.yaml as served by the package.
func loadDoc(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(httpapi.OpenAPI())
	require.NoError(t, err, "openapi.yaml does not parse")
	require.NoError(t, doc.Validate(context.Background()), "openapi.yaml is not a valid OpenAPI document")
	return doc
}

// strictSpec is the document with every named object schema closed
// (additionalProperties: false unless it says otherwise), so that a response
// field missing from the document fails the check. The published document
// stays open: clients must accept added fields.
var strictSpec = sync.OnceValues(func() (routers.Router, error) {
	doc, err := openapi3.NewLoader().LoadFromData(httpapi.OpenAPI())
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, err
	}
	closed := false
	for _, ref := range doc.Components.Schemas {
		s := ref.Value
		if len(s.Properties) > 0 && s.AdditionalProperties.Has == nil && s.AdditionalProperties.Schema == nil {
			s.AdditionalProperties.Has = &closed
		}
	}
	return gorillamux.NewRouter(doc)
})

// conform checks one exchange against the document: the route and method
// must be documented, the status documented for the operation, the headers
// and body valid against its schema; a successful request must also be
// valid against the request schemas (unless c.lax). It records the
// operation, status, outcomes and error codes seen.
func (b *bundle) conform(t *testing.T, c call, raw []byte, r reply) {
	t.Helper()
	router, err := strictSpec()
	require.NoError(t, err)
	req := c.request(raw)
	route, params, err := router.FindRoute(req)
	require.NoError(t, err, "%s %s is not documented in openapi.yaml", c.method, c.path)
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
		IncludeResponseStatus: true, MultiError: true}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: r.status, Header: r.header, Options: opts}
	out.SetBodyBytes(r.body)
	require.NoError(t, openapi3filter.ValidateResponse(b.ctx, out),
		"%s %s answered %d %s, which openapi.yaml does not describe", c.method, c.path, r.status, r.body)
	if r.status < 300 && !c.lax {
		req := c.request(raw)
		in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
		require.NoError(t, openapi3filter.ValidateRequest(b.ctx, in),
			"the sidecar accepted %s %s %s, which openapi.yaml rejects", c.method, c.path, raw)
	}
	b.cov.record(route.Operation.OperationID, r)
}

// coverage records what the exchanges of a test produced.
type coverage struct {
	mu   sync.Mutex
	seen map[string]bool
}

func newCoverage() *coverage { return &coverage{seen: map[string]bool{}} }

func (c *coverage) record(op string, r reply) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen["op "+op+" "+strconv.Itoa(r.status)] = true
	c.seen["status "+strconv.Itoa(r.status)] = true
	var in struct {
		Received []struct {
			Status string `json:"status"`
		} `json:"received"`
		Filtered *string `json:"filtered"`
	}
	if json.Unmarshal(r.body, &in) == nil {
		for _, x := range in.Received {
			c.seen["receipt "+x.Status] = true
		}
		if in.Filtered != nil {
			c.seen["ingest filtered"] = true
		}
	}
	var a answer
	if json.Unmarshal(r.body, &a) != nil {
		return
	}
	for i, x := range append([]answer{a}, a.Results...) {
		if x.Outcome != "" {
			c.seen["outcome "+x.Outcome] = true
		}
		if x.Error != nil {
			c.seen["code "+x.Error.Code] = true
			if i > 0 {
				c.seen["batch item error"] = true
			}
		}
	}
}

var pathParam = regexp.MustCompile(`:[A-Za-z0-9_]+|\{[^}]+\}`)

func routeKey(method, path string) string {
	return method + " " + pathParam.ReplaceAllString(path, "{}")
}

func TestOpenAPIDocumentIsValid(t *testing.T) {
	t.Parallel()
	doc := loadDoc(t)
	require.Equal(t, "3.0.3", doc.OpenAPI)
	require.Contains(t, doc.Components.SecuritySchemes, "bearerAuth")
	enum := func(name string) []string {
		var out []string
		for _, v := range doc.Components.Schemas[name].Value.Enum {
			out = append(out, v.(string))
		}
		return out
	}
	require.ElementsMatch(t, []string{"won", "duplicate", "in_progress", "retry_later", "conflict", "stale",
		"dead_lettered", "unknown"}, enum("Outcome"))
	require.ElementsMatch(t, []string{"received", "processing", "completed", "retryable_failed", "dead_lettered",
		"unknown", "stale"}, enum("State"))
	require.ElementsMatch(t, []string{"retryable", "permanent", "unknown"}, enum("FailKind"))
	// ErrorCode: TestOpenAPIErrorCodes, against claimd's own table.
}

func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	t.Parallel()
	b := setupWithInbox(t)
	registered := map[string]bool{}
	for _, r := range b.server.App().GetRoutes(true) {
		if r.Method == fiber.MethodHead {
			continue // Fiber adds HEAD to every GET route
		}
		registered[routeKey(r.Method, r.Path)] = true
	}
	documented := map[string]bool{}
	for path, item := range loadDoc(t).Paths.Map() {
		for method := range item.Operations() {
			documented[routeKey(method, path)] = true
		}
	}
	keys := func(m map[string]bool) []string {
		out := make([]string, 0, len(m))
		for k := range m {
			out = append(out, k)
		}
		sort.Strings(out)
		return out
	}
	require.Equal(t, keys(registered), keys(documented), "registered routes (left) vs openapi.yaml (right)")
}

// TestOpenAPIResponsesConform drives every outcome and every documented
// status through the real app and database; do checks each exchange
// against the document. The test then requires that everything the
// document promises was produced at least once.
func TestOpenAPIResponsesConform(t *testing.T) {
	t.Parallel()
	b := setupWithInbox(t)
	claims := func(body map[string]any) answer { return b.claim(t, keyA, body) }
	post := func(path string, body any) answer {
		return b.ok(t, call{method: "POST", path: path, key: keyA, body: body})
	}
	id := func(a answer) string { return "/v1/claims/" + a.ClaimID }

	// Operations.
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/openapi.yaml"} {
		r := b.do(t, call{method: "GET", path: path})
		require.Equal(t, http.StatusOK, r.status, "%s: %s", path, r)
	}
	require.True(t, bytes.Equal(httpapi.OpenAPI(), b.do(t, call{method: "GET", path: "/openapi.yaml"}).body))
	b.ok(t, call{method: "GET", path: "/v1/whoami", key: keyA})

	// Backfill: a scan queued (the job is not worked here: nothing
	// dispatches), queued again while it waits, the scans and findings
	// listed; a bad mode and state named; another tenant's source 404.
	var scanAt string
	for _, already := range []bool{false, true} {
		a := b.do(t, call{method: "POST", path: "/v1/sources/bf/backfill/scans", key: keyA, body: map[string]any{"mode": "report"}})
		require.Equal(t, http.StatusAccepted, a.status, "%s", a)
		require.Contains(t, string(a.body), fmt.Sprintf(`"already_running":%t`, already))
		scanAt = a.header.Get("Location")
	}
	require.NotEmpty(t, scanAt)
	b.ok(t, call{method: "GET", path: scanAt, key: keyA})
	b.fails(t, call{method: "GET", path: "/v1/sources/bf/backfill/scans/987654321", key: keyA}, http.StatusNotFound, "not_found", "")
	b.ok(t, call{method: "GET", path: "/v1/sources/bf/backfill/scans?limit=1", key: keyA})
	b.ok(t, call{method: "GET", path: "/v1/sources/bf/backfill/events?state=missed&limit=5", key: keyA})
	b.fails(t, call{method: "GET", path: "/v1/sources/bf/backfill/scans?limit=0", key: keyA}, http.StatusBadRequest, "malformed", "limit")
	b.fails(t, call{method: "POST", path: "/v1/sources/bf/backfill/scans", key: keyA, body: map[string]any{"from": "2001-01-01T00:00:00Z"}},
		http.StatusBadRequest, "malformed", "from")
	b.fails(t, call{method: "POST", path: "/v1/sources/bf/backfill/scans", key: keyA, body: map[string]any{"mode": "sometimes"}},
		http.StatusUnprocessableEntity, "invalid", "mode")
	b.fails(t, call{method: "POST", path: "/v1/sources/bf/backfill/scans", key: keyA, body: map[string]any{"mode": "redeliver"}},
		http.StatusUnprocessableEntity, "invalid", "mode")
	b.fails(t, call{method: "GET", path: "/v1/sources/bf/backfill/events?state=gone", key: keyA}, http.StatusUnprocessableEntity, "invalid", "state")
	b.fails(t, call{method: "GET", path: "/v1/sources/bf/backfill/scans", key: keyB}, http.StatusNotFound, "not_found", "")
	b.fails(t, call{method: "GET", path: "/v1/sources/hooks/backfill/scans", key: keyA}, http.StatusConflict, "invalid_state", "source")
	b.fails(t, call{method: "GET", path: "/v1/sources/bf/backfill/scans/abc", key: keyA}, http.StatusBadRequest, "malformed", "id")
	b.fails(t, call{method: "GET", path: "/v1/sources/bf/backfill/events?state=", key: keyA}, http.StatusBadRequest, "malformed", "state")

	// won → in_progress → complete → duplicate; conflict on another payload.
	payload := map[string]any{"amount": 100, "currency": "eur"}
	w := claims(map[string]any{"source": "stripe", "event_id": "evt_1", "event_type": "invoice.paid",
		"payload": payload, "lease_seconds": 120, "execution_id": "exec_1"})
	require.Equal(t, "won", w.Outcome)
	ip := b.ok(t, call{method: "POST", path: "/v1/claims", key: keyA,
		body: `{"source":"stripe","event_id":"evt_1","payload":{"currency":"eur","amount":1e2}}`})
	require.Equal(t, "in_progress", ip.Outcome, "key order and number spelling do not change the payload hash")
	require.NotNil(t, ip.RetryAfterSeconds)
	post(id(w)+"/extend", map[string]any{"claim_token": w.ClaimToken, "lease_seconds": 600})
	post(id(w)+"/complete", map[string]any{"claim_token": w.ClaimToken, "result_ref": "inv_1"})
	d := claims(map[string]any{"source": "stripe", "event_id": "evt_1", "payload_hash": w.PayloadHash})
	require.Equal(t, "duplicate", d.Outcome)
	require.Equal(t, "inv_1", d.ResultRef)
	c := claims(map[string]any{"source": "stripe", "event_id": "evt_1", "payload": map[string]any{"amount": 999}})
	require.Equal(t, "conflict", c.Outcome)
	// Shadow mode: a copy answered won without a token, a new key won
	// with one; the log marks the shadow entries.
	sd := claims(map[string]any{"source": "stripe", "event_id": "evt_1", "payload_hash": w.PayloadHash, "shadow": true})
	require.Equal(t, "won", sd.Outcome)
	require.Empty(t, sd.ClaimToken)
	sw := claims(map[string]any{"source": "stripe", "event_id": "evt_shadow", "shadow": true})
	require.Equal(t, "won", sw.Outcome)
	require.NotEmpty(t, sw.ClaimToken)
	require.Contains(t, string(b.do(t, call{method: "GET", path: id(w), key: keyA}).body), `"shadow":true`)

	// retry_later, then won again at attempt 2.
	r := claims(map[string]any{"source": "mail", "key_parts": []string{"order", "42"}, "action": "send-email"})
	require.Equal(t, "5:order|2:42", r.EventID)
	post(id(r)+"/fail", map[string]any{"claim_token": r.ClaimToken, "error": "smtp 451", "retry": "retryable"})
	rl := claims(map[string]any{"source": "mail", "key_parts": []string{"order", "42"}, "action": "send-email"})
	require.Equal(t, "retry_later", rl.Outcome)
	require.NotNil(t, rl.RetryAfterSeconds)
	b.dueNow(t, r.ClaimID)
	r2 := claims(map[string]any{"source": "mail", "key_parts": []string{"order", "42"}, "action": "send-email"})
	require.Equal(t, "won", r2.Outcome)
	require.Equal(t, 2, r2.Attempt)

	// dead_lettered, then resolved as completed; resolving again is invalid_state.
	dl := claims(map[string]any{"source": "stripe", "key_fields": map[string]any{"email": "a@example.com", "order": 7}})
	require.True(t, strings.HasPrefix(dl.EventID, "sha256:"), dl.EventID)
	post(id(dl)+"/fail", map[string]any{"claim_token": dl.ClaimToken, "error": "422 invalid address", "retry": "permanent"})
	require.Equal(t, "dead_lettered", claims(map[string]any{"source": "stripe", "event_id": dl.EventID}).Outcome)
	post(id(dl)+"/resolve", map[string]any{"outcome": "completed", "result_ref": "manual_1", "note": "sent by hand"})
	b.fails(t, call{method: "POST", path: id(dl) + "/resolve", key: keyA,
		body: map[string]any{"outcome": "retry", "note": "again"}}, http.StatusConflict, "invalid_state", "")

	// unknown, then resolved as retry and won again.
	u := claims(map[string]any{"source": "stripe", "event_id": "evt_u"})
	post(id(u)+"/fail", map[string]any{"claim_token": u.ClaimToken, "error": "timeout", "retry": "unknown"})
	require.Equal(t, "unknown", claims(map[string]any{"source": "stripe", "event_id": "evt_u"}).Outcome)
	post(id(u)+"/resolve", map[string]any{"outcome": "retry", "note": "checked: not sent"})
	require.Equal(t, "won", claims(map[string]any{"source": "stripe", "event_id": "evt_u"}).Outcome)

	// processing, released to unknown by an operator; releasing again is
	// invalid_state; resolved as completed.
	rel := claims(map[string]any{"source": "stripe", "event_id": "evt_rel"})
	post(id(rel)+"/release", map[string]any{"note": "worker gone"})
	b.fails(t, call{method: "POST", path: id(rel) + "/release", key: keyA,
		body: map[string]any{"note": "again"}}, http.StatusConflict, "invalid_state", "")
	post(id(rel)+"/resolve", map[string]any{"outcome": "completed", "note": "checked: sent"})

	// stale: a version not newer than the last completed one.
	v5 := claims(map[string]any{"source": "crm", "event_id": "evt_v5", "object_id": "cus_1", "object_version": 5})
	post(id(v5)+"/complete", map[string]any{"claim_token": v5.ClaimToken})
	st := claims(map[string]any{"source": "crm", "event_id": "evt_v3", "object_id": "cus_1", "object_version": 3})
	require.Equal(t, "stale", st.Outcome)

	// Lookups with the delivery log.
	rec := b.ok(t, call{method: "GET", path: id(w), key: keyA})
	var log []string
	for _, d := range rec.Deliveries {
		log = append(log, d.Outcome)
	}
	require.Equal(t, []string{"won", "in_progress", "lease_extended", "completed", "duplicate", "conflict", "duplicate"}, log, "the last one a shadow entry")
	require.Equal(t, "exec_1", rec.Deliveries[0].ExecutionID)
	found := b.ok(t, call{method: "GET", path: "/v1/claims?source=mail&event_id=5:order%7C2:42&action=send-email", key: keyA})
	require.Equal(t, r.ClaimID, found.ClaimID)

	// Listing open records by state, one page at a time.
	first := decodeAs[listReply](t, b.do(t, call{method: "GET", path: "/v1/claims/list?state=processing&limit=1", key: keyA}))
	require.Len(t, first.Claims, 1)
	require.NotEmpty(t, first.NextCursor)
	rest := decodeAs[listReply](t, b.do(t, call{method: "GET", key: keyA,
		path: "/v1/claims/list?state=processing&source=mail&limit=500&cursor=" + first.NextCursor}))
	require.Empty(t, rest.NextCursor)
	b.fails(t, call{method: "GET", path: "/v1/claims/list?state=completed", key: keyA}, http.StatusUnprocessableEntity, "invalid", "state")
	b.fails(t, call{method: "GET", path: "/v1/claims/list?state=unknown&limit=0", key: keyA}, http.StatusUnprocessableEntity, "invalid", "limit")
	b.fails(t, call{method: "GET", path: "/v1/claims/list?state=unknown&cursor=nope", key: keyA}, http.StatusUnprocessableEntity, "invalid", "cursor")

	// A claim's own lease policy; the records of an execution, listed in
	// any state, and failed while processing.
	xr := claims(map[string]any{"source": "stripe", "event_id": "evt_x1", "execution_id": "exec_9", "lease_policy": "review"})
	require.Equal(t, "review", xr.LeasePolicy)
	xc := claims(map[string]any{"source": "mail", "event_id": "evt_x2", "execution_id": "exec_9", "lease_policy": "reclaim"})
	require.Equal(t, "reclaim", xc.LeasePolicy)
	post(id(xc)+"/complete", map[string]any{"claim_token": xc.ClaimToken, "result_ref": "msg_x2"})
	byExec := decodeAs[listReply](t, b.do(t, call{method: "GET", path: "/v1/claims/list?execution_id=exec_9", key: keyA}))
	require.Len(t, byExec.Claims, 2)
	byExec = decodeAs[listReply](t, b.do(t, call{method: "GET", key: keyA,
		path: "/v1/claims/list?execution_id=exec_9&state=completed&source=mail&limit=1"}))
	require.Len(t, byExec.Claims, 1)
	require.Equal(t, xc.ClaimID, byExec.Claims[0].ClaimID)
	xf := post("/v1/claims/fail/execution", map[string]any{"execution_id": "exec_9", "retry": "unknown", "error": "execution crashed"})
	require.Len(t, xf.Claims, 1)
	require.Equal(t, xr.ClaimID, xf.Claims[0].ClaimID)
	require.Equal(t, "unknown", xf.Claims[0].State)
	require.Empty(t, post("/v1/claims/fail/execution", map[string]any{"execution_id": "exec_9", "retry": "unknown",
		"error": "execution crashed"}).Claims, "nothing is held any more")
	b.fails(t, call{method: "POST", path: "/v1/claims/fail/execution", key: keyA,
		body: map[string]any{"execution_id": "", "retry": "unknown", "error": "x"}}, http.StatusUnprocessableEntity, "invalid", "execution_id")
	b.fails(t, call{method: "GET", path: "/v1/claims/list?execution_id=", key: keyA}, http.StatusUnprocessableEntity, "invalid", "execution_id")
	// The workflow version an execution ran, told after its claims.
	xw := b.do(t, call{method: "POST", path: "/v1/executions/workflow", key: keyA, body: map[string]any{
		"executions": []map[string]any{{"execution_id": "exec_9", "workflow_id": "wf-9", "workflow_version": "v-9"}}}})
	require.Equal(t, http.StatusOK, xw.status, "%s", xw)
	require.Contains(t, string(xw.body), `"entries":2`)
	b.fails(t, call{method: "POST", path: "/v1/executions/workflow", key: keyA, body: map[string]any{
		"executions": []map[string]any{{"execution_id": "exec_9", "workflow_id": "wf-9"}}}},
		http.StatusUnprocessableEntity, "invalid", "executions[0].workflow_version")
	b.fails(t, call{method: "POST", path: "/v1/claims", key: keyA,
		body: map[string]any{"source": "stripe", "event_id": "evt_x3", "lease_policy": "Review"}}, http.StatusUnprocessableEntity, "invalid", "lease_policy")

	// Batch with an item error.
	res := b.ok(t, call{method: "POST", path: "/v1/claims/batch", key: keyA, lax: true, body: map[string]any{"claims": []any{
		map[string]any{"source": "stripe", "event_id": "evt_b1"},
		map[string]any{"source": "stripe"},
		map[string]any{"source": "stripe", "event_id": "evt_1"},
	}}})
	require.Len(t, res.Results, 3)
	require.Equal(t, "claims[1].event_id", res.Results[1].Error.Field)

	// Complete and fail in batches, one item each way.
	cb := claims(map[string]any{"source": "stripe", "event_id": "evt_cb"})
	fb := claims(map[string]any{"source": "stripe", "event_id": "evt_fb"})
	settled := post("/v1/claims/complete/batch", map[string]any{"claims": []any{
		map[string]any{"claim_id": cb.ClaimID, "claim_token": cb.ClaimToken, "result_ref": "inv_cb"},
		map[string]any{"claim_id": fb.ClaimID, "claim_token": cb.ClaimToken},
	}})
	require.Equal(t, "completed", settled.Results[0].State)
	require.Equal(t, "lease_lost", settled.Results[1].Error.Code)
	settled = post("/v1/claims/fail/batch", map[string]any{"claims": []any{
		map[string]any{"claim_id": fb.ClaimID, "claim_token": fb.ClaimToken, "error": "smtp 451", "retry": "retryable"},
	}})
	require.Equal(t, "retryable_failed", settled.Results[0].State)

	// Error statuses.
	b.fails(t, call{method: "POST", path: "/v1/claims", key: keyA, body: `{"source":`}, http.StatusBadRequest, "malformed", "")
	b.fails(t, call{method: "POST", path: "/v1/claims", key: keyA, body: map[string]any{"source": "stripe"}},
		http.StatusUnprocessableEntity, "invalid", "event_id")
	// Strict bodies: a duplicate member, anywhere, is malformed and named by its path.
	b.fails(t, call{method: "POST", path: "/v1/claims", key: keyA,
		body: `{"source":"stripe","event_id":"evt_d1","event_id":"evt_d2"}`}, http.StatusBadRequest, "malformed", "event_id")
	b.fails(t, call{method: "POST", path: "/v1/claims", key: keyA,
		body: `{"source":"stripe","event_id":"evt_d","payload":{"items":[{"id":1,"id":2}]}}`},
		http.StatusBadRequest, "malformed", "payload/items/0/id")
	b.fails(t, call{method: "POST", path: "/v1/claims", key: keyA,
		body: `{"source":"stripe","event_id":"evt_d","Event_ID":"evt_e"}`}, http.StatusBadRequest, "malformed", "Event_ID")
	strict := b.ok(t, call{method: "POST", path: "/v1/claims/batch", key: keyA, lax: true,
		body: `{"claims":[{"source":"stripe","event_id":"evt_d"},{"source":"stripe","event_id":"evt_d","Event_ID":"evt_e"}]}`})
	require.Equal(t, "malformed", strict.Results[1].Error.Code)
	require.Equal(t, "claims[1].Event_ID", strict.Results[1].Error.Field)
	// No empty identity part.
	b.fails(t, call{method: "POST", path: "/v1/claims", key: keyA,
		body: map[string]any{"source": "mail", "key_parts": []string{"order", ""}}}, http.StatusUnprocessableEntity, "invalid", "key_parts[1]")
	b.fails(t, call{method: "POST", path: "/v1/claims", key: keyA,
		body: map[string]any{"source": "mail", "key_fields": map[string]any{"order": map[string]any{"email": ""}}}},
		http.StatusUnprocessableEntity, "invalid", "key_fields/order/email")
	b.fails(t, call{method: "GET", path: "/v1/claims/" + w.ClaimID, key: "nope-0123456789abcdef"}, http.StatusUnauthorized, "unauthorized", "")
	b.fails(t, call{method: "GET", path: "/v1/claims/00000000-0000-4000-8000-000000000000", key: keyA}, http.StatusNotFound, "not_found", "")
	b.fails(t, call{method: "GET", path: "/v1/claims?source=stripe&event_id=nope", key: keyA}, http.StatusNotFound, "not_found", "")
	b.fails(t, call{method: "POST", path: id(w) + "/fail", key: keyA,
		body: map[string]any{"claim_token": w.ClaimToken, "error": "late", "retry": "retryable"}}, http.StatusConflict, "lease_lost", "")
	b.fails(t, call{method: "POST", path: "/v1/claims", key: keyA,
		body: `{"source":"stripe","event_id":"big","payload":"` + strings.Repeat("x", 70<<10) + `"}`},
		http.StatusRequestEntityTooLarge, "body_too_large", "")

	// A source's hourly numbers: its records make it known; a bad range
	// and an unknown source are named.
	b.ok(t, call{method: "GET", path: "/v1/sources/stripe/stats?range=7d", key: keyA})
	b.fails(t, call{method: "GET", path: "/v1/sources/stripe/stats?range=1y", key: keyA}, http.StatusBadRequest, "malformed", "range")
	b.fails(t, call{method: "GET", path: "/v1/sources/stripe/stats", key: keyB}, http.StatusNotFound, "not_found", "source")

	// Ingest: provider deliveries, handshakes, rejections and the inbox.
	conformIngest(t, b)
	// The trigger's deliveries.
	conformTrigger(t, b)
	// A reconciler's answers.
	conformReconcile(t, b)

	// 500: the delivery log table is gone. 503: the database is closed, so a
	// database API key cannot be checked, and readiness fails.
	dbKey, _, err := auth.Create(b.ctx, b.pool, tenantA, "conformance")
	require.NoError(t, err)
	b.ok(t, call{method: "GET", path: "/v1/whoami", key: dbKey})
	_, err = b.pool.Exec(b.ctx, `ALTER TABLE claim_deliveries RENAME TO claim_deliveries_gone`)
	require.NoError(t, err)
	b.fails(t, call{method: "POST", path: "/v1/claims", key: keyA, body: map[string]any{"source": "stripe", "event_id": "evt_500"}},
		http.StatusInternalServerError, "internal", "")
	b.pool.Close()
	b.fails(t, call{method: "POST", path: "/v1/claims", key: dbKey, body: map[string]any{"source": "stripe", "event_id": "evt_503"}},
		http.StatusServiceUnavailable, "unavailable", "")
	rr := b.do(t, call{method: "GET", path: "/readyz"})
	require.Equal(t, http.StatusServiceUnavailable, rr.status, "%s", rr)
	// An authentic delivery that cannot be stored is 503, so the provider retries.
	b.fails(t, hookDelivery(t, "msg_503", time.Now().Unix(), `{"type":"invoice.paid"}`, hooksSecret),
		http.StatusServiceUnavailable, "unavailable", "")

	// 429: wrong keys until the failure limit (all from app.Test's one
	// address); keys that are not claimd's cost no query, so the closed
	// database does not matter.
	for i := 0; ; i++ {
		r := b.do(t, call{method: "GET", path: "/v1/whoami", key: fmt.Sprintf("wrong-key-%d-0123456789", i)})
		if r.status == http.StatusTooManyRequests {
			require.Regexp(t, `^[1-9][0-9]*$`, r.header.Get("Retry-After"), "%s", r)
			break
		}
		require.Equal(t, http.StatusUnauthorized, r.status, "%s", r)
		require.Less(t, i, auth.DefaultFailureLimit, "no 429 after the default failure limit")
	}

	// The edge's own answers, over a raw socket: no HTTP client sends
	// these requests. Conformed as the documented operation of the path.
	conformRaw := func(b *bundle, method, path, raw string, status int) {
		t.Helper()
		rs := rawExchange(t, b.addr, raw, 5*time.Second)
		require.Len(t, rs, 1)
		r := reply{status: rs[0].status, header: rs[0].header, body: rs[0].body}
		require.Equal(t, status, r.status, "%s", r)
		b.conform(t, call{method: method, path: path}, nil, r)
	}
	withKey := "Host: x\r\nAuthorization: Bearer " + keyA + "\r\n"
	conformRaw(b, "POST", "/v1/claims", "POST /v1/claims HTTP/1.1\r\n"+withKey+
		"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", http.StatusBadRequest)
	conformRaw(b, "GET", "/v1/whoami", "GET /v1/whoami HTTP/1.1\r\n"+withKey+"X-Pad: "+strings.Repeat("p", 9000)+"\r\n\r\n",
		http.StatusRequestHeaderFieldsTooLarge)
	conformRaw(b, "GET", "/v1/whoami", "DELETE /v1/whoami HTTP/1.1\r\n"+withKey+"\r\n", http.StatusMethodNotAllowed)
	slow := setup(t, func(o *options) { o.server = func(c *httpapi.Config) { c.ReadTimeout = time.Second } })
	slow.cov = b.cov
	conformRaw(slow, "POST", "/v1/claims", "POST /v1/claims HTTP/1.1\r\n"+withKey+"Content-Length: 10\r\n\r\n{", http.StatusRequestTimeout)

	// Everything the document promises was produced.
	doc := loadDoc(t)
	var missing []string
	want := func(k string) {
		if !b.cov.seen[k] {
			missing = append(missing, k)
		}
	}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			ok := "200"
			if op.Responses.Value("200") == nil && op.Responses.Value("202") != nil {
				ok = "202" // a job queued (POST …/backfill/scans)
			}
			want("op " + op.OperationID + " " + ok)
			for status := range op.Responses.Map() {
				if status != "default" { // the edge's answers: their codes are wanted below
					want("status " + status)
				}
			}
		}
	}
	for schema, prefix := range map[string]string{"Outcome": "outcome ", "ErrorCode": "code "} {
		for _, v := range doc.Components.Schemas[schema].Value.Enum {
			want(prefix + fmt.Sprint(v))
		}
	}
	for _, v := range doc.Components.Schemas["ReceiptStatus"].Value.Enum {
		want("receipt " + fmt.Sprint(v))
	}
	want("batch item error")
	want("ingest filtered")
	slices.Sort(missing)
	require.Empty(t, slices.Compact(missing), "documented but never produced by this test")
}

// Secrets of the conformance bundle's ingest sources (test values only).
var (
	hooksSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("conformance-hooks-key-0123456789"))
	otherSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("conformance-other-key-0123456789"))
)

const (
	ghSecret    = "conformance-github-secret"
	graphState  = "conformance-graph-client-state"
	slackSecret = "conformance-slack-secret"
	zoomSecret  = "conformance-zoom-secret"
	tokSecret   = "conformance-token-secret"
)

// conformanceSources are the ingest sources of setupWithInbox, one per
// documented ingest behaviour: hooks (Standard Webhooks, an event type
// filter and a small body limit), gh (GitHub; bad signatures 403), graph
// (Microsoft Graph; 202 and the validationToken handshake), slack
// (url_verification; bad signatures 400) and zoom (url_validation; bad
// signatures answered silently with 200) and tok (a shared token, the event
// id read from the body's /id, so a body without it is not stored), and
// trig, a trigger source (no forward) for POST /v1/trigger/{source}.
// Nothing is dispatched: the forward URLs are never contacted.
var conformanceSources = strings.NewReplacer("TENANT", tenantA, "HOOKS", hooksSecret).Replace(`
reconcilers:
  crm: {url: "http://n8n.invalid/webhook/reconcile", max_calls: 2, delay_seconds: 0}
sources:
  recon: {reconciler: crm}
  bf:
    tenant: TENANT
    provider: stripe
    secrets: ["whsec_conformance_backfill"]
    forward: {url: "http://n8n.invalid/webhook/bf"}
    backfill: {credentials: ["${BF_KEY}"], base_url: "http://127.0.0.1:9", interval_minutes: 0}
  hooks:
    tenant: TENANT
    provider: standard-webhooks
    secrets: ["HOOKS"]
    allowed_event_types: ["invoice.*"]
    max_body_bytes: 4096
    forward: {url: "http://n8n.invalid/webhook/hooks"}
  gh:
    tenant: TENANT
    provider: github
    secrets: ["${GH_SECRET}"]
    unauthenticated_status: 403
    forward: {url: "http://n8n.invalid/webhook/gh"}
  graph:
    tenant: TENANT
    provider: msgraph
    secrets: ["` + graphState + `"]
    forward: {url: "http://n8n.invalid/webhook/graph"}
  slack:
    tenant: TENANT
    provider: slack
    secrets: ["` + slackSecret + `"]
    unauthenticated_status: 400
    forward: {url: "http://n8n.invalid/webhook/slack"}
  zoom:
    tenant: TENANT
    provider: zoom
    secrets: ["` + zoomSecret + `"]
    unauthenticated_status: 200
    forward: {url: "http://n8n.invalid/webhook/zoom"}
  tok:
    tenant: TENANT
    provider: token
    secrets: ["` + tokSecret + `"]
    options: {header: X-Api-Key, key: {id_pointers: ["/id"], type_pointer: "/type"}}
    forward: {url: "http://n8n.invalid/webhook/tok"}
  trig:
    tenant: TENANT
    provider: standard-webhooks
    secrets: ["HOOKS"]
    max_body_bytes: 4096
  handshake:
    tenant: TENANT
    provider: test-handshake
    secrets: ["hs-token-0001"]
    forward: {url: "http://n8n.invalid/webhook/handshake"}
  discord:
    tenant: TENANT
    provider: discord
    options: {public_keys: ["` + verifytest.DiscordPublicKey(verifytest.DiscordKey) + `"]}
    forward: {url: "http://n8n.invalid/webhook/discord"}
  shadow-down:
    tenant: TENANT
    provider: standard-webhooks
    secrets: ["HOOKS"]
    shadow: true
    forward: {url: "${SHADOW_DOWN}"}
  shadow-slow:
    tenant: TENANT
    provider: standard-webhooks
    secrets: ["HOOKS"]
    shadow: true
    forward: {url: "${SHADOW_SLOW}", timeout_seconds: 1}
`)

// setupWithInbox is setup with the ingest routes: an inbox over
// conformanceSources (parsed by sources.Parse, as in production), without
// dispatch workers.
func setupWithInbox(t *testing.T) *bundle {
	t.Helper()
	const bodyLimit = 64 << 10
	// Shadow doors' targets: a closed port (502) and a listener that
	// never answers (its backlog takes the connection; 504).
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, closed.Close())
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = silent.Close() })
	cfg, err := sources.Parse([]byte(conformanceSources), func(k string) string {
		return map[string]string{"GH_SECRET": ghSecret, "BF_KEY": "rk_test_conformance",
			"SHADOW_DOWN": "http://" + closed.Addr().String() + "/webhook/down",
			"SHADOW_SLOW": "http://" + silent.Addr().String() + "/webhook/slow"}[k]
	})
	require.NoError(t, err)
	pool := pgtest.NewPool(t)
	l, err := claim.New(pool, claim.Config{Jitter: func() float64 { return 1 }, Policies: claim.Policies{BySource: cfg.Policies,
		Reconcilers: cfg.ReconcilerPolicies()}})
	require.NoError(t, err)
	m := metrics.New(l.Stats)
	logs := &lockedBuffer{}
	in, err := inbox.New(inbox.Options{Pool: pool, Ledger: l, Config: cfg, Logger: zerolog.New(logs), Observer: m,
		Workers: backfill.Workers(&backfill.Scanner{})})
	require.NoError(t, err)
	srv := httpapi.New(httpapi.Config{
		Ledger: l,
		Keys: auth.NewKeys(pool, []auth.StaticKey{{Tenant: tenantA, Key: keyA}, {Tenant: tenantB, Key: keyB},
			{Tenant: "*", Key: keyAdmin, Admin: true}}, 0),
		Metrics: m,
		Ready: func(ctx context.Context) error {
			if err := pool.Ping(ctx); err != nil {
				return errors.New("database unreachable")
			}
			return nil
		},
		Logger:    zerolog.New(logs),
		BodyLimit: bodyLimit,
		MaxBatch:  8,
		Inbox:     in,
	})
	addr := serve(t, srv)
	return &bundle{ctx: context.Background(), pool: pool, ledger: l, server: srv, logs: logs, cov: newCoverage(),
		addr: addr, bodyLimit: bodyLimit}
}

// deliveryReply is the JSON answer of POST /ingest/{source}.
type deliveryReply struct {
	Received []struct {
		EventID string `json:"event_id"`
		ClaimID string `json:"claim_id"`
		Status  string `json:"status"`
	} `json:"received"`
	RejectedItems int     `json:"rejected_items"`
	Filtered      *string `json:"filtered"`
}

// listReply is the JSON answer of GET /v1/claims/list.
type listReply struct {
	Claims     []answer `json:"claims"`
	NextCursor string   `json:"next_cursor"`
}

// inboxReply is an InboxEvent.
type inboxReply struct {
	ClaimID           string `json:"claim_id"`
	Source            string `json:"source"`
	EventID           string `json:"event_id"`
	ClaimState        string `json:"claim_state"`
	DispatchState     string `json:"dispatch_state"`
	DispatchAttempts  int    `json:"dispatch_attempts"`
	LastDispatchError string `json:"last_dispatch_error"`
}

func decodeAs[T any](t *testing.T, r reply) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(r.body, &v), "%s", r)
	return v
}

// hookDelivery is a Standard Webhooks delivery to source hooks, signed with secret.
func hookDelivery(t *testing.T, id string, ts int64, body, secret string) call {
	t.Helper()
	sig, err := verifytest.StandardWebhooks(secret, id, ts, []byte(body))
	require.NoError(t, err)
	return call{method: "POST", path: "/ingest/hooks", body: body, header: map[string]string{
		verify.StandardWebhookIDHeader:        id,
		verify.StandardWebhookTimestampHeader: strconv.FormatInt(ts, 10),
		verify.StandardWebhookSignatureHeader: sig,
	}}
}

// signedV0 is a Slack- or Zoom-style delivery (v0 HMAC over "v0:ts:body").
func signedV0(path, sigHeader, tsHeader, secret, body string) call {
	ts := time.Now().Unix()
	return call{method: "POST", path: path, body: body, header: map[string]string{
		sigHeader: verifytest.Slack(secret, ts, []byte(body)),
		tsHeader:  strconv.FormatInt(ts, 10),
	}}
}

// conformIngest drives every documented answer of the ingest routes
// through b; do validates each against openapi.yaml.
func conformIngest(t *testing.T, b *bundle) {
	t.Helper()
	now := time.Now().Unix()
	send := func(c call, status int) deliveryReply {
		t.Helper()
		r := b.do(t, c)
		require.Equal(t, status, r.status, "%s %s: %s", c.method, c.path, r)
		return decodeAs[deliveryReply](t, r)
	}

	// accepted → duplicate (same payload) → conflict (another payload).
	paid := `{"type":"invoice.paid","data":{"id":"in_1","amount":100}}`
	acc := send(hookDelivery(t, "msg_1", now, paid, hooksSecret), http.StatusOK)
	require.Len(t, acc.Received, 1)
	require.Equal(t, "accepted", acc.Received[0].Status)
	require.Equal(t, "msg_1", acc.Received[0].EventID)
	id := acc.Received[0].ClaimID
	dup := send(hookDelivery(t, "msg_1", now, `{ "data": {"amount": 100, "id": "in_1"}, "type": "invoice.paid" }`, hooksSecret), http.StatusOK)
	require.Equal(t, "duplicate", dup.Received[0].Status, "the same JSON payload, keys reordered")
	require.Equal(t, id, dup.Received[0].ClaimID)
	con := send(hookDelivery(t, "msg_1", now, `{"type":"invoice.paid","data":{"id":"in_1","amount":999}}`, hooksSecret), http.StatusOK)
	require.Equal(t, "conflict", con.Received[0].Status)
	require.Equal(t, id, con.Received[0].ClaimID)

	// A door in shadow mode passes deliveries through: an unreachable
	// forward.url is 502, one that does not answer in time 504.
	down := hookDelivery(t, "msg_shadow_down", now, paid, hooksSecret)
	down.path = "/ingest/shadow-down"
	b.fails(t, down, http.StatusBadGateway, "bad_gateway", "")
	slow := hookDelivery(t, "msg_shadow_slow", now, paid, hooksSecret)
	slow.path = "/ingest/shadow-slow"
	b.fails(t, slow, http.StatusGatewayTimeout, "gateway_timeout", "")

	// Another provider's scheme: GitHub.
	ghDelivery := func(secret, id, body string) call {
		return call{method: "POST", path: "/ingest/gh", body: body, header: map[string]string{
			verify.GitHubDeliveryHeader:  id,
			verify.GitHubEventHeader:     "pull_request",
			verify.GitHubSignatureHeader: verifytest.GitHub(secret, []byte(body)),
		}}
	}
	ghCall := func(secret string) call {
		return ghDelivery(secret, "0f9a5c1e-0000-4000-8000-000000000001", `{"action":"opened","number":1}`)
	}
	require.Equal(t, "accepted", send(ghCall(ghSecret), http.StatusOK).Received[0].Status)

	// A leading UTF-8 byte order mark is tolerated; the token source still
	// reads the event id from the body.
	bom := send(tokDelivery("\ufeff"+`{"id":"ord_bom","type":"order.created"}`), http.StatusOK)
	require.Len(t, bom.Received, 1, "%+v", bom)
	require.Equal(t, "ord_bom", bom.Received[0].EventID)

	// Authentic but not allowed: acknowledged as filtered, nothing stored.
	inboxRows := b.count(t, "inbox_events")
	claimRows := b.count(t, "claims")
	filtered := send(hookDelivery(t, "msg_2", now, `{"type":"customer.created"}`, hooksSecret), http.StatusOK)
	require.Empty(t, filtered.Received)
	require.NotNil(t, filtered.Filtered)

	// Authentic but not storable as sent: refused with 422 naming the field,
	// never acknowledged, nothing stored. An ambiguous body (a duplicate
	// member), and a body that lacks the pointer its source's key needs.
	b.fails(t, ghDelivery(ghSecret, "0f9a5c1e-0000-4000-8000-000000000002", `{"action":"opened","number":2,"number":3}`),
		http.StatusUnprocessableEntity, "not_stored", "/number")
	b.fails(t, tokDelivery(`{"type":"order.created","order":{"total":1}}`),
		http.StatusUnprocessableEntity, "not_stored", "/id")
	require.Equal(t, "accepted", send(tokDelivery(`{"id":"ord_1","type":"order.created"}`), http.StatusOK).Received[0].Status)
	inboxRows++
	claimRows++

	// Any Content-Encoding: 415 before verification, nothing stored.
	gz := hookDelivery(t, "msg_gz", now, paid, hooksSecret)
	gz.body, gz.header[fiber.HeaderContentEncoding] = gzipped(t, paid), "gzip"
	b.fails(t, gz, http.StatusUnsupportedMediaType, "unsupported_encoding", fiber.HeaderContentEncoding)

	// Failed verification: 401, or the source's configured status.
	// The answer names no field: the reason is in the log only.
	b.fails(t, hookDelivery(t, "msg_3", now, paid, otherSecret), http.StatusUnauthorized, "unauthorized", "")
	b.fails(t, ghCall("not-the-secret"), http.StatusForbidden, "unauthorized", "")
	b.fails(t, signedV0("/ingest/slack", verify.SlackSignatureHeader, verify.SlackTimestampHeader, "not-the-secret",
		`{"type":"url_verification","challenge":"c"}`), http.StatusBadRequest, "unauthorized", "")
	silent := b.do(t, signedV0("/ingest/zoom", verify.ZoomSignatureHeader, verify.ZoomTimestampHeader, "not-the-secret",
		`{"event":"meeting.started","event_ts":1}`))
	require.Equal(t, http.StatusOK, silent.status, "%s", silent)
	require.Equal(t, "OK", string(silent.body))
	require.Equal(t, inboxRows, b.count(t, "inbox_events"), "filtered, refused and unauthenticated deliveries store nothing")
	require.Equal(t, claimRows, b.count(t, "claims"))

	// Unknown source, body over the source's limit.
	b.fails(t, call{method: "POST", path: "/ingest/nope", body: paid}, http.StatusUnauthorized, "unauthorized", "")
	big := `{"type":"invoice.paid","pad":"` + strings.Repeat("x", 4096) + `"}`
	b.fails(t, hookDelivery(t, "msg_big", now, big, hooksSecret), http.StatusRequestEntityTooLarge, "body_too_large", "")

	// Handshakes: Microsoft Graph (text/plain echo), Slack and Zoom (JSON).
	hs := b.do(t, call{method: "POST", path: "/ingest/graph?validationToken=Validation%3A+token+1"})
	require.Equal(t, http.StatusOK, hs.status, "%s", hs)
	require.Equal(t, "Validation: token 1", string(hs.body))
	require.Equal(t, "nosniff", hs.header.Get("X-Content-Type-Options"))
	sc := b.do(t, signedV0("/ingest/slack", verify.SlackSignatureHeader, verify.SlackTimestampHeader, slackSecret,
		`{"token":"t","challenge":"challenge_1","type":"url_verification"}`))
	require.Equal(t, http.StatusOK, sc.status, "%s", sc)
	require.JSONEq(t, `{"challenge":"challenge_1"}`, string(sc.body))
	zv := b.do(t, signedV0("/ingest/zoom", verify.ZoomSignatureHeader, verify.ZoomTimestampHeader, zoomSecret,
		`{"event":"endpoint.url_validation","payload":{"plainToken":"plain_1"},"event_ts":1700000000000}`))
	require.Equal(t, http.StatusOK, zv.status, "%s", zv)
	require.JSONEq(t, `{"plainToken":"plain_1","encryptedToken":"`+verifytest.HexHMACSHA256(zoomSecret, []byte("plain_1"))+`"}`,
		string(zv.body))

	// A provider's GET endpoint check (the test provider of
	// ingest_handshake_test.go): its handshake, or the unauthenticated
	// answer; and 405 on a source whose provider sends no GET.
	gc := b.do(t, call{method: "GET", path: "/ingest/handshake?challenge=c-1&token=hs-token-0001"})
	require.Equal(t, http.StatusOK, gc.status, "%s", gc)
	require.Equal(t, "c-1", string(gc.body))
	b.fails(t, call{method: "GET", path: "/ingest/handshake?challenge=c-1&token=wrong"}, http.StatusUnauthorized, "unauthorized", "")
	b.fails(t, call{method: "GET", path: "/ingest/graph"}, http.StatusMethodNotAllowed, "method_not_allowed", "")
	require.Equal(t, inboxRows, b.count(t, "inbox_events"), "an endpoint check stores nothing")

	// Discord: a PING is {"type":1}; a stored interaction is answered
	// with its deferred interaction response, not the receipts.
	discord := func(body string) call {
		d := verifytest.DiscordDelivery(verifytest.DiscordKey, time.Now(), []byte(body))
		h := map[string]string{}
		for k := range d.Header {
			h[k] = d.Header.Get(k)
		}
		return call{method: "POST", path: "/ingest/discord", body: body, header: h}
	}
	dp := b.do(t, discord(`{"application_id":"1","id":"2","token":"t","type":1,"version":1}`))
	require.Equal(t, http.StatusOK, dp.status, "%s", dp)
	require.JSONEq(t, `{"type":1}`, string(dp.body))
	di := b.do(t, discord(string(verifytest.DiscordCommand("1600000000000000001"))))
	require.Equal(t, http.StatusOK, di.status, "%s", di)
	require.JSONEq(t, `{"type":5}`, string(di.body))

	// Microsoft Graph notifications: 202, one item rejected on its clientState.
	graph := send(call{method: "POST", path: "/ingest/graph", body: map[string]any{"value": []any{
		map[string]any{"subscriptionId": "sub_1", "id": "n_1", "clientState": graphState, "changeType": "created",
			"resource": "users/u_1", "tenantId": "t_1", "resourceData": map[string]any{"id": "u_1"}},
		map[string]any{"subscriptionId": "sub_1", "id": "n_2", "clientState": "forged", "changeType": "created",
			"resource": "users/u_2", "tenantId": "t_1"},
	}}}, http.StatusAccepted)
	require.Len(t, graph.Received, 1)
	require.Equal(t, "accepted", graph.Received[0].Status)
	require.Equal(t, 1, graph.RejectedItems)

	// The inbox: get, tenant isolation, replay only when dead-lettered.
	inbox := "/v1/inbox/" + id
	ev := decodeAs[inboxReply](t, b.do(t, call{method: "GET", path: inbox, key: keyA}))
	require.Equal(t, inboxReply{ClaimID: id, Source: "hooks", EventID: "msg_1", ClaimState: "received", DispatchState: "pending"}, ev)
	b.fails(t, call{method: "GET", path: inbox, key: keyB}, http.StatusNotFound, "not_found", "")
	b.fails(t, call{method: "GET", path: "/v1/inbox/not-a-uuid", key: keyA}, http.StatusNotFound, "not_found", "")
	b.fails(t, call{method: "POST", path: inbox + "/replay", key: keyB}, http.StatusNotFound, "not_found", "")
	b.fails(t, call{method: "POST", path: inbox + "/replay", key: keyA}, http.StatusConflict, "invalid_state", "")

	// A dead letter as the dispatcher leaves it after its attempt cap.
	_, err := b.pool.Exec(b.ctx, `UPDATE inbox_events SET dispatch_state = 'dead_lettered', dispatch_attempts = 10,
		last_dispatch_status = 503, last_dispatch_error = 'target answered HTTP 503 (attempt cap 10 reached)'
		WHERE claim_id = $1`, id)
	require.NoError(t, err)
	dead := decodeAs[inboxReply](t, b.do(t, call{method: "GET", path: inbox, key: keyA}))
	require.Equal(t, "dead_lettered", dead.DispatchState)
	require.Equal(t, 10, dead.DispatchAttempts)
	jobs := func() int {
		var n int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM river_job WHERE args->>'claim_id' = $1`, id).Scan(&n))
		return n
	}
	before := jobs()
	rep := b.do(t, call{method: "POST", path: inbox + "/replay", key: keyA})
	require.Equal(t, http.StatusOK, rep.status, "%s", rep)
	replayed := decodeAs[inboxReply](t, rep)
	require.Equal(t, inboxReply{ClaimID: id, Source: "hooks", EventID: "msg_1", ClaimState: "received", DispatchState: "pending"}, replayed)
	require.Equal(t, before+1, jobs(), "the replay queues one new dispatch job")
	b.fails(t, call{method: "POST", path: inbox + "/replay", key: keyA}, http.StatusConflict, "invalid_state", "")

	// The claim record of the inbox event, with the ingest entries of its delivery log.
	rec := b.ok(t, call{method: "GET", path: "/v1/claims/" + id, key: keyA})
	require.Equal(t, "received", rec.State)
	var log []string
	for _, d := range rec.Deliveries {
		log = append(log, d.Outcome)
	}
	require.Equal(t, []string{"received", "ingest_duplicate", "ingest_conflict", "dispatch_replayed"}, log)

	// Two views of the payload: receipt_hash is ingest's, compared with
	// redeliveries; payload_hash is the claims', absent until a claim
	// carries a payload, then kept.
	type hashes struct {
		Outcome     string `json:"outcome"`
		PayloadHash string `json:"payload_hash"`
		ReceiptHash string `json:"receipt_hash"`
	}
	received := decodeAs[hashes](t, b.do(t, call{method: "GET", path: "/v1/claims/" + id, key: keyA}))
	require.Regexp(t, `^[0-9a-f]{64}$`, received.ReceiptHash)
	require.Empty(t, received.PayloadHash, "no claim carried a payload yet")
	won := decodeAs[hashes](t, b.do(t, call{method: "POST", path: "/v1/claims", key: keyA,
		body: map[string]any{"source": "hooks", "event_id": "msg_1", "payload": map[string]any{"invoice": "in_1"}}}))
	require.Equal(t, "won", won.Outcome)
	require.Regexp(t, `^[0-9a-f]{64}$`, won.PayloadHash)
	require.NotEqual(t, won.ReceiptHash, won.PayloadHash)
	require.Equal(t, received.ReceiptHash, won.ReceiptHash)
}

// tokDelivery is a delivery to source tok (shared token, keyed by /id).
func tokDelivery(body string) call {
	return call{method: "POST", path: "/ingest/tok", body: body, header: map[string]string{"X-Api-Key": tokSecret}}
}

// conformTrigger drives the answers of POST /v1/trigger/{source} through
// b; do validates each against openapi.yaml.
func conformTrigger(t *testing.T, b *bundle) {
	t.Helper()
	now := time.Now().Unix()
	type reply struct {
		Decision string            `json:"decision"`
		Events   []json.RawMessage `json:"events"`
		Response struct {
			Status int `json:"status"`
		} `json:"response"`
	}
	trig := func(source string, d call, extra map[string]any) call {
		hs := [][]string{}
		for k, v := range d.header {
			hs = append(hs, []string{k, v})
		}
		sort.Slice(hs, func(i, j int) bool { return hs[i][0] < hs[j][0] })
		body := map[string]any{"method": "POST", "headers": hs, "body": base64.StdEncoding.EncodeToString(encode(t, d.body))}
		if _, q, ok := strings.Cut(d.path, "?"); ok {
			body["query"] = q
		}
		for k, v := range extra {
			body[k] = v
		}
		return call{method: "POST", path: "/v1/trigger/" + source, key: keyA, body: body}
	}
	decided := func(c call, want string, status int) reply {
		t.Helper()
		r := decodeAs[reply](t, b.do(t, c))
		require.Equal(t, want, r.Decision, "%+v", r)
		require.Equal(t, status, r.Response.Status, "%+v", r)
		return r
	}
	paid := `{"type":"invoice.paid","data":{"id":"in_t1"}}`
	won := decided(trig("trig", hookDelivery(t, "msg_t1", now, paid, hooksSecret), map[string]any{"request_id": "r-1"}), "won", http.StatusOK)
	require.Len(t, won.Events, 1)
	decided(trig("trig", hookDelivery(t, "msg_t1", now, paid, hooksSecret), map[string]any{"request_id": "r-2", "wait_seconds": 0}),
		"in_progress", http.StatusServiceUnavailable)
	// Shadow mode: the copy is answered won (an execution starts) with
	// shadow.would_be and no token.
	shadowCopy := decided(trig("trig", hookDelivery(t, "msg_t1", now, paid, hooksSecret),
		map[string]any{"request_id": "r-3", "shadow": true}), "won", http.StatusOK)
	require.Contains(t, string(shadowCopy.Events[0]), `"would_be":"in_progress"`)
	require.NotContains(t, string(shadowCopy.Events[0]), `claim_token`)
	test := decided(trig("trig", hookDelivery(t, "msg_t2", now, paid, hooksSecret), map[string]any{"test": true}), "test", http.StatusOK)
	require.Len(t, test.Events, 1)
	decided(trig("trig", hookDelivery(t, "msg_t3", now, paid, otherSecret), nil), "unauthenticated", http.StatusUnauthorized)
	decided(trig("hooks", hookDelivery(t, "msg_t4", now, `{"type":"customer.created"}`, hooksSecret), nil), "filtered", http.StatusOK)
	decided(trig("graph", call{path: "/ingest/graph?validationToken=t1"}, nil), "handshake", http.StatusOK)
	graph := decided(trig("graph", call{body: map[string]any{"value": []any{
		map[string]any{"subscriptionId": "sub_t", "id": "n_t1", "clientState": graphState, "changeType": "created",
			"resource": "users/u_t1", "tenantId": "t_1"},
		map[string]any{"subscriptionId": "sub_t", "id": "n_t2", "clientState": graphState, "changeType": "created",
			"resource": "users/u_t2", "tenantId": "t_1"},
	}}}, nil), "won", http.StatusAccepted)
	require.Len(t, graph.Events, 2)

	b.fails(t, call{method: "POST", path: "/v1/trigger/nope", key: keyA, body: map[string]any{"method": "POST"}},
		http.StatusNotFound, "not_found", "")
	b.fails(t, call{method: "POST", path: "/v1/trigger/trig", key: keyB, body: map[string]any{"method": "POST"}},
		http.StatusNotFound, "not_found", "")
	b.fails(t, call{method: "POST", path: "/v1/trigger/trig", key: keyA, body: map[string]any{"method": "POST", "body": "%%"}},
		http.StatusUnprocessableEntity, "invalid", "body")
	b.fails(t, call{method: "POST", path: "/v1/trigger/trig", key: keyA, body: map[string]any{"method": "POST",
		"body": base64.StdEncoding.EncodeToString([]byte(strings.Repeat("x", 4097)))}},
		http.StatusRequestEntityTooLarge, "body_too_large", "body")
	b.fails(t, call{method: "POST", path: "/v1/trigger/trig", key: keyA, body: map[string]any{"method": "POST", "extra": 1}},
		http.StatusBadRequest, "malformed", "extra")
}
