package httpapi_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// A token in the webhook URL's query (Mollie's classic webhookUrl,
// Pub/Sub's query_token, Meta's hub.verify_token) is a credential: the
// provider names it (verify.Provider.CredentialQueryParams) and claimd
// never stores, logs, forwards or echoes it.

const (
	cqMollieToken = "mollie-cq-url-token-5d1e8b"
	cqPubSubToken = "pubsub-cq-url-token-93af07"
	cqMetaToken   = "meta-cq-verify-token-61c2d4"
	cqMetaSecret  = "meta-cq-app-secret"
)

// TestIngestCredentialQueryNeverStoredOrForwarded: a classic Mollie nudge
// whose webhook URL carries the token reaches claimd through a reverse
// proxy that repeats that URL in X-Original-URL, X-Forwarded-Uri and
// Referer. The stored record (inbox row, claim, dispatch job), the request
// forwarded to n8n and claimd's log hold the token nowhere; the headers
// are kept with the token parameter left out, other parameters as they
// were.
func TestIngestCredentialQueryNeverStoredOrForwarded(t *testing.T) {
	t.Parallel()
	target := newIngestTarget(t, nil)
	sources, err := json.Marshal(map[string]any{"sources": map[string]any{
		"mollie-cq": map[string]any{"tenant": ingestTenant, "provider": "mollie", "secrets": []string{cqMollieToken},
			"forward": map[string]any{"url": target.srv.URL + "/webhook/mollie"}},
	}})
	require.NoError(t, err)
	e := setupIngest(t, string(sources), ingestOptions{dispatch: true})

	query := "shop=eu&token=" + url.QueryEscape(cqMollieToken) + "&ref=a%2Fb"
	d := verifytest.MollieNudge(cqMollieToken, "tr_WDqYK6vllg")
	req, err := http.NewRequest(http.MethodPost, e.base+"/ingest/mollie-cq?"+query, bytes.NewReader(d.Body))
	require.NoError(t, err)
	req.Header = d.Header.Clone()
	req.Header.Set("X-Original-URL", "/ingest/mollie-cq?"+query)
	req.Header.Set("X-Forwarded-Uri", "/ingest/mollie-cq?token="+url.QueryEscape(cqMollieToken))
	req.Header.Set("Referer", "https://hooks.example.test/ingest/mollie-cq?"+query+"#top")
	a := e.do(t, req)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.NotContains(t, string(a.body), cqMollieToken, "not echoed")
	rs, _ := a.receipts(t)
	require.Len(t, rs, 1)

	// Stored: nowhere in the inbox row, the claim or the dispatch job.
	for _, sql := range []string{
		`SELECT count(*)::text FROM inbox_events e WHERE e.source = 'mollie-cq' AND e::text LIKE '%' || $1 || '%'`,
		`SELECT count(*)::text FROM claims c WHERE c.source = 'mollie-cq' AND c::text LIKE '%' || $1 || '%'`,
		`SELECT count(*)::text FROM river_job j WHERE j::text LIKE '%' || $1 || '%'`,
	} {
		require.Equal(t, "0", e.scalar(t, sql, cqMollieToken), sql)
	}

	// Forwarded: the proxy's headers without the token parameter.
	e.eventually(t, "the nudge forwarded", func() bool { return len(target.requests()) >= 1 })
	fwd := target.requests()[0]
	require.Equal(t, "id=tr_WDqYK6vllg", string(fwd.body))
	for k, vs := range fwd.header {
		for _, v := range vs {
			require.NotContains(t, v, cqMollieToken, "forwarded header %s", k)
		}
	}
	require.Equal(t, "/ingest/mollie-cq?shop=eu&ref=a%2Fb", fwd.header.Get("X-Original-URL"))
	require.Equal(t, "/ingest/mollie-cq?", fwd.header.Get("X-Forwarded-Uri"))
	require.Equal(t, "https://hooks.example.test/ingest/mollie-cq?shop=eu&ref=a%2Fb#top", fwd.header.Get("Referer"))
	require.NotContains(t, e.logs.String(), cqMollieToken, "not logged")
}

// TestTriggerNamesCredentialQueryParams: POST /v1/trigger/{source} names
// the source's credential query parameters in credential_query_params for
// the n8n node to leave out of its items, whatever the decision (a won
// Mollie nudge, a refused one, a Pub/Sub push with query_token, Meta's
// verification GET), and its answer holds the token nowhere; a source
// that takes no token in the query names none.
func TestTriggerNamesCredentialQueryParams(t *testing.T) {
	t.Parallel()
	sources, err := json.Marshal(map[string]any{"sources": map[string]any{
		"t-mollie": map[string]any{"tenant": ingestTenant, "provider": "mollie", "secrets": []string{cqMollieToken},
			"options": map[string]any{"token_parameter": "key"}},
		"t-pubsub": map[string]any{"tenant": ingestTenant, "provider": "pubsub", "secrets": []string{cqPubSubToken},
			"options": map[string]any{"auth": "query_token"}},
		"t-meta": map[string]any{"tenant": ingestTenant, "provider": "meta", "secrets": []string{cqMetaSecret},
			"options": map[string]any{"verify_token": cqMetaToken}},
		"t-stripe": map[string]any{"tenant": ingestTenant, "provider": "stripe", "secrets": []string{trigStripeSecret}},
	}})
	require.NoError(t, err)
	e := setupIngest(t, string(sources), ingestOptions{maxConns: 12})

	decide := func(source string, call map[string]any) (trigReply, []string) {
		t.Helper()
		a := e.trigger(t, source, call)
		require.Equal(t, http.StatusOK, a.status, "%s", a.body)
		for _, tok := range []string{cqMollieToken, cqPubSubToken, cqMetaToken} {
			require.NotContains(t, string(a.body), tok, "%s: the token is not in the trigger's answer", source)
		}
		var r trigReply
		require.NoError(t, json.Unmarshal(a.body, &r))
		var names struct {
			Params []string `json:"credential_query_params"`
		}
		require.NoError(t, json.Unmarshal(a.body, &names))
		require.NotNil(t, names.Params, "%s: always present", source)
		return r, names.Params
	}
	call := func(method, query string, header http.Header, body []byte) map[string]any {
		hs := [][]string{}
		for k, vs := range header {
			for _, v := range vs {
				hs = append(hs, []string{k, v})
			}
		}
		return map[string]any{"method": method, "headers": hs, "query": query, "body": base64.StdEncoding.EncodeToString(body)}
	}

	nudge := verifytest.MollieNudge(cqMollieToken, "tr_WDqYK6vllg")
	r, names := decide("t-mollie", call("POST", "key="+url.QueryEscape(cqMollieToken), nudge.Header, nudge.Body))
	require.Equal(t, "won", r.Decision)
	require.Equal(t, []string{"key"}, names, "the source's token_parameter")
	r, names = decide("t-mollie", call("POST", "key=wrong", nudge.Header, nudge.Body))
	require.Equal(t, "unauthenticated", r.Decision)
	require.Equal(t, []string{"key"}, names)

	push := verifytest.PubSubBody("projects/p/subscriptions/s", "2070443601311540", nil, 0)
	r, names = decide("t-pubsub", call("POST", "token="+url.QueryEscape(cqPubSubToken), http.Header{"Content-Type": {"application/json"}}, push))
	require.Equal(t, "won", r.Decision)
	require.Equal(t, []string{"token"}, names)

	r, names = decide("t-meta", call("GET", verifytest.MetaVerificationQuery(cqMetaToken, "8675309"), http.Header{}, nil))
	require.Equal(t, "handshake", r.Decision)
	require.Equal(t, "8675309", *r.Response.Body)
	require.Equal(t, []string{"hub.verify_token"}, names)

	r, names = decide("t-stripe", trigCall(trigStripe(signNow(), stripeEvent("evt_cq", 100)), "cq-1"))
	require.Equal(t, "won", r.Decision)
	require.Empty(t, names, "stripe takes no token in the query")
}
