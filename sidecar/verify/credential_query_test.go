package verify_test

import (
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// TestCredentialQueryParamsAreTheCredentials: each provider that takes a
// token in the query names the parameter in Provider.CredentialQueryParams
// for its options, and that parameter is the credential: the request
// verifies with it and is refused, unauthenticated, without it. Options
// that take no token in the query name none.
func TestCredentialQueryParamsAreTheCredentials(t *testing.T) {
	t.Parallel()
	const token = "query-credential-token-0001"
	nudge := verifytest.MollieNudge(token, "tr_d0b0E3EA3v")
	push := verifytest.PubSubBody("projects/p/subscriptions/s", "2070443601311540", nil, 0)
	for _, c := range []struct {
		name    string
		typ     verify.Type
		secrets []string
		opts    map[string]any
		want    []string
		d       verifytest.Delivery
	}{
		{"mollie classic", verify.TypeMollie, []string{token}, nil, []string{"token"}, nudge},
		{"mollie classic, token_parameter", verify.TypeMollie, []string{token}, map[string]any{"token_parameter": "k"}, []string{"k"},
			verifytest.Delivery{Header: nudge.Header, RawQuery: "k=" + url.QueryEscape(token), Body: nudge.Body}},
		{"pubsub query_token", "pubsub", []string{token}, map[string]any{"auth": "query_token"}, []string{"token"},
			verifytest.Delivery{Header: http.Header{"Content-Type": {"application/json"}}, RawQuery: "token=" + token, Body: push}},
		{"meta verification", "meta", []string{"app-secret"}, map[string]any{"verify_token": token}, []string{"hub.verify_token"},
			verifytest.Delivery{Method: http.MethodGet, Header: http.Header{}, RawQuery: verifytest.MetaVerificationQuery(token, "42")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, ok := verify.Lookup(c.typ)
			require.True(t, ok)
			require.NotNil(t, p.CredentialQueryParams)
			opts, err := p.DecodeOptions(c.opts)
			require.NoError(t, err)
			require.Equal(t, c.want, p.CredentialQueryParams(opts))
			v, err := verify.New(c.typ, verify.Core{Secrets: c.secrets, Now: time.Now}, opts)
			require.NoError(t, err)
			_, err = v.Verify(deliveryRequest(c.d))
			require.NoError(t, err, "with the parameter")
			q, err := url.ParseQuery(c.d.RawQuery)
			require.NoError(t, err)
			for _, name := range c.want {
				q.Del(name)
			}
			without := c.d
			without.RawQuery = q.Encode()
			_, err = v.Verify(deliveryRequest(without))
			var verr *verify.Error
			require.True(t, errors.As(err, &verr), "without the parameter: %v", err)
			require.False(t, verr.Authenticated, "refused as unauthenticated")
		})
	}

	for _, c := range []struct {
		typ  verify.Type
		opts map[string]any
	}{
		{verify.TypeMollie, map[string]any{"webhooks": "next-gen"}},
		{"pubsub", map[string]any{"auth": "oidc"}},
	} {
		p, _ := verify.Lookup(c.typ)
		opts, err := p.DecodeOptions(c.opts)
		require.NoError(t, err)
		require.Empty(t, p.CredentialQueryParams(opts), "%s %v", c.typ, c.opts)
	}
	for _, typ := range []verify.Type{verify.TypeStripe, verify.TypeMSGraph, verify.TypeTwilio} {
		p, _ := verify.Lookup(typ)
		require.Nil(t, p.CredentialQueryParams, "%s: its query carries no token (Graph's validationToken is echoed by design, Twilio signs the URL)", typ)
	}
}
