package sources_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// Provider options for providers' resends, as a sources file writes them: the generic
// hmac source's header layouts and Slack's message key parse, and a bad
// value is an error naming the field as written in the file.
func TestSourcesFileProviderOptionsOfLayoutsAndKeys(t *testing.T) {
	t.Parallel()
	_, err := sources.Parse([]byte(`
sources:
  stripe-style:
    tenant: acme
    provider: hmac
    secrets: [s]
    options:
      signature: {header: X-Signature, layout: elements}
      timestamp_unit: ms
      key: {id_pointers: ["/id"]}
    `+fwd+`
  paddle-style:
    tenant: acme
    provider: hmac
    secrets: [s]
    options:
      signature: {header: X-Signature, layout: elements, timestamp_element: ts, signature_element: h1, separator: ";"}
      signed_content: "{timestamp}:{body}"
      key: {id_pointers: ["/id"]}
    `+fwd+`
  slack-messages: {tenant: acme, provider: slack, secrets: [s], options: {key: message}, `+fwd+`}
`), envOf(nil))
	require.NoError(t, err)

	for _, tc := range []struct{ spec, want string }{
		{`{tenant: acme, provider: hmac, secrets: [s], options: {signature: {header: X-Sig, layout: stripe}, key: {id_header: X-Id}}, ` + fwd + `}`, "options.signature.layout: must be plain or elements"},
		{`{tenant: acme, provider: hmac, secrets: [s], options: {signature: {header: X-Sig, layout: elements, prefix: "v1="}, key: {id_header: X-Id}}, ` + fwd + `}`, "options.signature.prefix"},
		{`{tenant: acme, provider: hmac, secrets: [s], options: {signature: {header: X-Sig, layout: elements}, timestamp_header: X-Ts, key: {id_header: X-Id}}, ` + fwd + `}`, "options.timestamp_header"},
		{`{tenant: acme, provider: hmac, secrets: [s], options: {signature: {header: X-Sig, timestamp_element: t}, key: {id_header: X-Id}}, ` + fwd + `}`, "options.signature.timestamp_element"},
		{`{tenant: acme, provider: hmac, secrets: [s], options: {signature: {header: X-Sig, layout: elements}, signed_content: "{body}", key: {id_header: X-Id}}, ` + fwd + `}`, "options.signed_content"},
		{`{tenant: acme, provider: cloudevents, secrets: [s], options: {auth: hmac, signature: {header: X-Sig, layout: elements}}, ` + fwd + `}`, "options.signature.layout: must be plain for this provider"},
		{`{tenant: acme, provider: slack, secrets: [s], options: {key: ts}, ` + fwd + `}`, "options.key: must be event_id (the default) or message"},
	} {
		_, err := sources.Parse([]byte("sources:\n  bad: "+tc.spec+"\n"), envOf(nil))
		require.Error(t, err, tc.spec)
		require.Contains(t, err.Error(), `source "bad"`, tc.spec)
		require.Contains(t, err.Error(), tc.want, tc.spec)
	}
}
