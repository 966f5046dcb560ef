package httpapi_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// Tests of the GET and HEAD handshakes of /ingest/{source} and
// /v1/trigger/{source}, through the real handler on a real PostgreSQL,
// with a provider registered here for the tests only ("test-handshake",
// below): a provider that lists GET and HEAD in its Methods has them
// reach its verifier and answered with its handshake, nothing stored;
// every other source (and an unknown one) answers those methods 405, as
// the router does.

// testHandshakeType is the test-only provider: it authenticates with the
// source's secret in X-Token (POST) or the token query parameter (GET),
// answers GET ?challenge=c&token=… with 200 text/plain c, HEAD with 200
// and X-Handshake: head (and a body a HEAD answer must not carry), and
// takes a POST's event id from X-Id. GET ?events=1 returns an event
// instead of a handshake, which claimd must refuse (a GET carries none).
const testHandshakeType verify.Type = "test-handshake"

func init() {
	verify.Register(verify.Provider{
		Type:    testHandshakeType,
		Name:    "Handshake test provider",
		Docs:    []string{"https://www.rfc-editor.org/rfc/rfc9110#section-9.3.2"},
		Methods: []string{http.MethodGet, http.MethodHead},
		Build: func(c verify.Core, _ any) (verify.Verifier, error) {
			return testHandshakeVerifier{secrets: c.Secrets}, nil
		},
		CredentialHeaders: func(any) []string { return []string{"X-Token"} },
		Setup:             verify.Setup{Secrets: "the token the test sends in X-Token"},
		Redelivery:        verify.Redelivery{Key: "`X-Id`", Retries: "none", Horizon: "forever", Batches: "no", Resends: "no"},
	})
}

type testHandshakeVerifier struct{ secrets []string }

func (testHandshakeVerifier) Type() verify.Type { return testHandshakeType }

func (v testHandshakeVerifier) Verify(r verify.Request) (verify.Result, error) {
	q, _ := url.ParseQuery(r.RawQuery)
	bad := &verify.Error{Code: verify.CodeBadSignature, In: verify.InHeader, Field: "X-Token", Reason: "no such token"}
	switch r.Method {
	case http.MethodHead:
		return verify.Result{Handshake: &verify.Handshake{Status: http.StatusOK,
			Header: http.Header{"Content-Type": {"text/plain"}, "X-Handshake": {"head"}}, Body: []byte("never sent")}}, nil
	case http.MethodGet:
		if q.Get("token") != v.secrets[0] {
			return verify.Result{}, bad
		}
		if q.Get("events") != "" {
			return verify.Result{Events: []verify.Event{{ID: "from-a-get"}}}, nil
		}
		return verify.Result{Handshake: &verify.Handshake{Status: http.StatusOK,
			Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, Body: []byte(q.Get("challenge"))}}, nil
	}
	if r.Header.Get("X-Token") != v.secrets[0] {
		return verify.Result{}, bad
	}
	return verify.Result{Events: []verify.Event{{ID: r.Header.Get("X-Id")}}}, nil
}

const handshakeSources = `
sources:
  hs: {tenant: acme, provider: test-handshake, secrets: ["hs-token-0001"], forward: {url: "http://127.0.0.1:9/never"}}
  hs-trigger: {tenant: acme, provider: test-handshake, secrets: ["hs-token-0001"]}
  hs-stripe: {tenant: acme, provider: stripe, secrets: ["whsec_hs_0001"], forward: {url: "http://127.0.0.1:9/never"}}
  hs-stripe-trigger: {tenant: acme, provider: stripe, secrets: ["whsec_hs_0001"]}
`

// request sends method to the ingest door of source with query.
func (e *ingestEnv) request(t *testing.T, method, source, query string) ingestAnswer {
	t.Helper()
	u := e.base + "/ingest/" + source
	if query != "" {
		u += "?" + query
	}
	req, err := http.NewRequest(method, u, nil)
	require.NoError(t, err)
	return e.do(t, req)
}

func TestIngestHandshakeMethods(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, handshakeSources, ingestOptions{})
	before := e.trigCounts(t)

	// GET: the provider's challenge, answered as its handshake says.
	a := e.request(t, http.MethodGet, "hs", "challenge=c-123&token=hs-token-0001")
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.Equal(t, "c-123", string(a.body))
	require.Equal(t, "text/plain; charset=utf-8", a.header.Get("Content-Type"))

	// GET with a wrong token: the source's unauthenticated answer.
	a = e.request(t, http.MethodGet, "hs", "challenge=c-123&token=wrong")
	require.Equal(t, http.StatusUnauthorized, a.status, "%s", a.body)
	require.NotContains(t, string(a.body), "c-123")

	// A verifier that answers a GET with an event is refused: a GET
	// carries none, and nothing is stored.
	a = e.request(t, http.MethodGet, "hs", "events=1&token=hs-token-0001")
	require.Equal(t, http.StatusUnauthorized, a.status, "%s", a.body)

	// HEAD: the handshake's status and headers, no body.
	a = e.request(t, http.MethodHead, "hs", "")
	require.Equal(t, http.StatusOK, a.status)
	require.Equal(t, "head", a.header.Get("X-Handshake"))
	require.Empty(t, a.body)

	// The provider's POST still stores its event.
	post := e.send(t, "hs", ingestDelivery{header: jsonHeaders("X-Token", "hs-token-0001", "X-Id", "ev-1"), body: []byte(`{}`)})
	require.Equal(t, http.StatusOK, post.status, "%s", post.body)
	rs, _ := post.receipts(t)
	require.Len(t, rs, 1)
	require.Equal(t, "ev-1", rs[0].EventID)
	after := e.trigCounts(t)
	require.Equal(t, [3]int{before[0] + 1, before[1] + 1, before[2] + 1}, after, "only the POST stored anything")

	// A provider without handshake methods, an unknown source, and a
	// trigger source (no ingest door): 405, as the router answers.
	for _, src := range []string{"hs-stripe", "no-such-source", "hs-trigger"} {
		for _, m := range []string{http.MethodGet, http.MethodHead} {
			a := e.request(t, m, src, "challenge=x&token=hs-token-0001")
			require.Equal(t, http.StatusMethodNotAllowed, a.status, "%s %s: %s", m, src, a.body)
		}
	}
	// The router's own answer to a method a route does not take, for
	// comparison: the same.
	req, err := http.NewRequest(http.MethodPost, e.base+"/healthz", nil)
	require.NoError(t, err)
	ref := e.do(t, req)
	a = e.request(t, http.MethodGet, "hs-stripe", "")
	require.Equal(t, ref.status, a.status)
	require.Equal(t, string(ref.body), string(a.body))
	require.Equal(t, after, e.trigCounts(t), "no handshake stores anything")
}

func TestTriggerHandshakeMethods(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, handshakeSources, ingestOptions{})
	before := e.trigCounts(t)
	call := func(method, query string) map[string]any {
		m := trigCall(ingestDelivery{header: jsonHeaders(), query: query}, "")
		m["method"] = method
		return m
	}

	r := e.decided(t, "hs-trigger", call(http.MethodGet, "challenge=c-9&token=hs-token-0001"))
	require.Equal(t, "handshake", r.Decision)
	require.Empty(t, r.Events)
	require.Equal(t, http.StatusOK, r.Response.Status)
	require.NotNil(t, r.Response.Body)
	require.Equal(t, "c-9", *r.Response.Body)

	r = e.decided(t, "hs-trigger", call(http.MethodGet, "challenge=c-9&token=wrong"))
	require.Equal(t, "unauthenticated", r.Decision)
	require.Equal(t, http.StatusUnauthorized, r.Response.Status)

	r = e.decided(t, "hs-trigger", call(http.MethodGet, "events=1&token=hs-token-0001"))
	require.Equal(t, "unauthenticated", r.Decision)

	r = e.decided(t, "hs-trigger", call(http.MethodHead, ""))
	require.Equal(t, "handshake", r.Decision)
	require.Equal(t, http.StatusOK, r.Response.Status)
	require.Equal(t, "head", r.Response.Headers["X-Handshake"])
	require.True(t, r.Response.Body == nil || *r.Response.Body == "", "a HEAD answer has no body")
	require.Empty(t, r.Response.BodyBase64)

	// A source whose provider sends no GET: as before, method_not_allowed.
	r = e.decided(t, "hs-stripe-trigger", call(http.MethodGet, "challenge=c-9"))
	require.Equal(t, "method_not_allowed", r.Decision)
	require.Equal(t, http.StatusMethodNotAllowed, r.Response.Status)
	require.Equal(t, before, e.trigCounts(t), "a handshake claims and stores nothing")
}
