package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/httpapi"
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
	require.ElementsMatch(t, []string{"malformed", "invalid", "unauthorized", "not_found", "lease_lost",
		"invalid_state", "too_large", "unavailable", "internal"}, enum("ErrorCode"))
}

func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	t.Parallel()
	b := setup(t)
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
	b := setup(t)
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

	// won → in_progress → complete → duplicate; conflict on another payload.
	payload := map[string]any{"amount": 100, "currency": "eur"}
	w := claims(map[string]any{"source": "stripe", "event_id": "evt_1", "event_type": "invoice.paid",
		"payload": payload, "lease_seconds": 120, "execution_id": "exec_1"})
	require.Equal(t, "won", w.Outcome)
	ip := claims(map[string]any{"source": "stripe", "event_id": "evt_1",
		"payload": map[string]any{"currency": "eur", "amount": 100}})
	require.Equal(t, "in_progress", ip.Outcome, "key order does not change the payload hash")
	require.NotNil(t, ip.RetryAfterSeconds)
	post(id(w)+"/extend", map[string]any{"claim_token": w.ClaimToken, "lease_seconds": 600})
	post(id(w)+"/complete", map[string]any{"claim_token": w.ClaimToken, "result_ref": "inv_1"})
	d := claims(map[string]any{"source": "stripe", "event_id": "evt_1", "payload_hash": w.PayloadHash})
	require.Equal(t, "duplicate", d.Outcome)
	require.Equal(t, "inv_1", d.ResultRef)
	c := claims(map[string]any{"source": "stripe", "event_id": "evt_1", "payload": map[string]any{"amount": 999}})
	require.Equal(t, "conflict", c.Outcome)

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
	require.Equal(t, []string{"won", "in_progress", "lease_extended", "completed", "duplicate", "conflict"}, log)
	require.Equal(t, "exec_1", rec.Deliveries[0].ExecutionID)
	found := b.ok(t, call{method: "GET", path: "/v1/claims?source=mail&event_id=5:order%7C2:42&action=send-email", key: keyA})
	require.Equal(t, r.ClaimID, found.ClaimID)

	// Batch with an item error.
	res := b.ok(t, call{method: "POST", path: "/v1/claims/batch", key: keyA, lax: true, body: map[string]any{"claims": []any{
		map[string]any{"source": "stripe", "event_id": "evt_b1"},
		map[string]any{"source": "stripe"},
		map[string]any{"source": "stripe", "event_id": "evt_1"},
	}}})
	require.Len(t, res.Results, 3)
	require.Equal(t, "claims[1].event_id", res.Results[1].Error.Field)

	// Error statuses.
	b.fails(t, call{method: "POST", path: "/v1/claims", key: keyA, body: `{"source":`}, http.StatusBadRequest, "malformed", "")
	b.fails(t, call{method: "POST", path: "/v1/claims", key: keyA, body: map[string]any{"source": "stripe"}},
		http.StatusUnprocessableEntity, "invalid", "event_id")
	b.fails(t, call{method: "GET", path: "/v1/claims/" + w.ClaimID, key: "nope-0123456789abcdef"}, http.StatusUnauthorized, "unauthorized", "")
	b.fails(t, call{method: "GET", path: "/v1/claims/00000000-0000-4000-8000-000000000000", key: keyA}, http.StatusNotFound, "not_found", "")
	b.fails(t, call{method: "GET", path: "/v1/claims?source=stripe&event_id=nope", key: keyA}, http.StatusNotFound, "not_found", "")
	b.fails(t, call{method: "POST", path: id(w) + "/fail", key: keyA,
		body: map[string]any{"claim_token": w.ClaimToken, "error": "late", "retry": "retryable"}}, http.StatusConflict, "lease_lost", "")
	b.fails(t, call{method: "POST", path: "/v1/claims", key: keyA,
		body: `{"source":"stripe","event_id":"big","payload":"` + strings.Repeat("x", 70<<10) + `"}`},
		http.StatusRequestEntityTooLarge, "too_large", "")

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
			want("op " + op.OperationID + " 200")
			for status := range op.Responses.Map() {
				want("status " + status)
			}
		}
	}
	for schema, prefix := range map[string]string{"Outcome": "outcome ", "ErrorCode": "code "} {
		for _, v := range doc.Components.Schemas[schema].Value.Enum {
			want(prefix + fmt.Sprint(v))
		}
	}
	want("batch item error")
	slices.Sort(missing)
	require.Empty(t, slices.Compact(missing), "documented but never produced by this test")
}
