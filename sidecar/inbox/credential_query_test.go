package inbox_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// TestSourcesNameCredentialQueryParams: a source's credential query
// parameters are its provider's for its options (verify.Provider.
// CredentialQueryParams): a classic Mollie source's token parameter (its
// own name when token_parameter sets one), a Pub/Sub source with
// query_token, Meta's hub.verify_token; none for next-gen Mollie, Pub/Sub
// with OIDC, or a provider that authenticates in headers.
func TestSourcesNameCredentialQueryParams(t *testing.T) {
	t.Parallel()
	cfg, err := sources.Parse([]byte(`
sources:
  mollie: {tenant: acme, provider: mollie, secrets: [s], `+fwd+`}
  mollie-key: {tenant: acme, provider: mollie, secrets: [s], options: {token_parameter: key}, `+fwd+`}
  mollie-next: {tenant: acme, provider: mollie, secrets: [s], options: {webhooks: next-gen}, `+fwd+`}
  pubsub-token: {tenant: acme, provider: pubsub, secrets: [s], options: {auth: query_token, token_param: t}, `+fwd+`}
  pubsub-default: {tenant: acme, provider: pubsub, secrets: [s], options: {auth: query_token}, `+fwd+`}
  meta: {tenant: acme, provider: meta, secrets: [s], options: {verify_token: v}, `+fwd+`}
  stripe: {tenant: acme, provider: stripe, secrets: [s], `+fwd+`}
`), envOf(nil))
	require.NoError(t, err)
	want := map[string][]string{
		"mollie": {"token"}, "mollie-key": {"key"}, "mollie-next": nil,
		"pubsub-token": {"t"}, "pubsub-default": {"token"}, "meta": {"hub.verify_token"}, "stripe": nil,
	}
	for name, ps := range want {
		require.Equal(t, ps, cfg.Sources[name].CredentialQueryParams, name)
	}
}

// TestStoredHeadersLeaveOutCredentialQueryParams: the headers stored and
// forwarded for a delivery to a source whose token travels in the query
// keep every header (less credentials, as ForwardableHeaders), with that
// parameter removed from any value that repeats the URL or a query.
func TestStoredHeadersLeaveOutCredentialQueryParams(t *testing.T) {
	t.Parallel()
	cfg, err := sources.Parse([]byte(`
sources:
  mollie: {tenant: acme, provider: mollie, secrets: [s], `+fwd+`}
  stripe: {tenant: acme, provider: stripe, secrets: [s], `+fwd+`}
`), envOf(nil))
	require.NoError(t, err)
	in := [][2]string{
		{"X-Original-URL", "/ingest/mollie?a=1&token=sekret&b=2"},
		{"Referer", "https://h.test/ingest/mollie?token=sekret#frag"},
		{"X-Original-Query", "token=sekret&x=y"},
		{"X-Request-Id", "abc"},
		{"Forwarded", "for=192.0.2.1;proto=https"},
		{"Content-Type", "application/x-www-form-urlencoded"},
	}
	visit := func(f func(name, value string)) {
		for _, kv := range in {
			f(kv[0], kv[1])
		}
	}
	require.Equal(t, map[string]string{
		"x-original-url":   "/ingest/mollie?a=1&b=2",
		"referer":          "https://h.test/ingest/mollie?#frag",
		"x-original-query": "x=y",
		"x-request-id":     "abc",
		"forwarded":        "for=192.0.2.1;proto=https",
		"content-type":     "application/x-www-form-urlencoded",
	}, inbox.StoredHeaders(cfg.Sources["mollie"], visit))
	require.Equal(t, inbox.ForwardableHeaders(visit, cfg.Sources["stripe"].CredentialHeaders...), inbox.StoredHeaders(cfg.Sources["stripe"], visit),
		"a source without credential query parameters: the headers as ForwardableHeaders keeps them")
}

// TestRedactQueryParams: names compare after percent-decoding, exactly
// (case-sensitive), repeats and empty values included; every other
// parameter and everything outside the query stays as it was.
func TestRedactQueryParams(t *testing.T) {
	t.Parallel()
	ps := []string{"token", "hub.verify_token"}
	for _, c := range []struct{ in, want string }{
		{"/p?token=a", "/p?"},
		{"/p?x=1&token=a&token=b&y=2", "/p?x=1&y=2"},
		{"/p?%74oken=a&x=%2F", "/p?x=%2F"},
		{"/p?hub.mode=subscribe&hub.verify_token=v&hub.challenge=1", "/p?hub.mode=subscribe&hub.challenge=1"},
		{"/p?Token=a", "/p?Token=a"},
		{"/p?tokens=a&token", "/p?tokens=a"},
		{"/p?x=1#token=a", "/p?x=1#token=a"},
		{"/p/token=a", "/p/token=a"},
		{"token=a", ""},
		{"no query here", "no query here"},
		{"", ""},
	} {
		require.Equal(t, c.want, inbox.RedactQueryParams(c.in, ps), c.in)
	}
	require.Equal(t, "/p?token=a", inbox.RedactQueryParams("/p?token=a", nil))
}
