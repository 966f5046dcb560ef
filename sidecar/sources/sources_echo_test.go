package sources_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// TestSourcesFileErrorsQuoteNoValue loads sources files with a marker in
// each string-valued setting made invalid, and asserts the error names the
// place but never repeats the marker (a secret pasted on the wrong line
// must not reach stderr or the reload log line).
func TestSourcesFileErrorsQuoteNoValue(t *testing.T) {
	t.Parallel()
	const m = "sk_live_MARKER"
	tok := `tenant: acme, provider: token, secrets: [s], options: {key: {id_pointers: ["/id"]}}, ` + fwd
	for _, tc := range []struct{ spec, want string }{
		{`{tenant: acme, provider: ` + m + `, secrets: [s], ` + fwd + `}`, "sources.x1.provider must be one of: "},
		{`{tenant: acme, provider: github, secrets: [s], volatile_fields: ["` + m + `"], ` + fwd + `}`, "volatile_fields[0]: is not a JSON pointer"},
		{`{tenant: acme, provider: github, secrets: [s], lease_policy: ` + m + `, ` + fwd + `}`, "lease_policy must be"},
		{`{tenant: acme, provider: github, secrets: [s], dedupe_scope: "` + m + ` x", ` + fwd + `}`, "dedupe_scope must match"},
		{`{tenant: "` + m + ` x", provider: github, secrets: [s], ` + fwd + `}`, "tenant is required"},
		{`{tenant: acme, provider: github, secrets: [s], key: {headers: ["` + m + ` bad:hdr"]}, ` + fwd + `}`, "key.headers[0]: must be an HTTP header name"},
		{`{tenant: acme, provider: github, secrets: [s], key: {fields: ["` + m + `"]}, ` + fwd + `}`, "key.fields[0]"},
		{`{tenant: acme, provider: github, secrets: [s], allowed_event_types: ["` + m + `*x"], ` + fwd + `}`, "allowed_event_types[0]"},
		{`{tenant: acme, provider: github, secrets: [s], forward: {url: "ftp://` + m + `/x"}}`, "forward.url must be"},
		{`{tenant: acme, provider: github, secrets: [s], forward: {url: "http://127.0.0.1:99999/` + m + `"}}`, "forward.url must be"},
		{`{tenant: acme, provider: github, secrets: [s], forward: {url: "http://n8n/x", headers: {"` + m + ` bad:hdr": v}}}`, "forward.headers: a header name must be an HTTP header name"},
		{`{tenant: acme, provider: github, secrets: [s], forward: {url: "http://n8n/x", headers: {"X-A": "` + m + `\r\nv"}}}`, "forward.headers.X-A: the value must not contain CR, LF or NUL"},
		{`{tenant: acme, provider: github, secrets: [s], forward: {url: "http://n8n/x", headers: {"X-A": "` + m + `\nv"}}}`, "forward.headers.X-A: the value must not contain CR, LF or NUL"},
		{`{tenant: acme, provider: github, secrets: [s], forward: {url: "http://n8n/x", headers: {"X-A": "` + m + `\0v"}}}`, "forward.headers.X-A: the value must not contain CR, LF or NUL"},
		{`{` + strings.Replace(tok, "options: {", `options: {header: "`+m+` hdr:", `, 1) + `}`, "options.header must be an HTTP header name"},
		{`{` + strings.Replace(tok, `key: {id_pointers: ["/id"]}`, `key: {id_pointers: ["/id"], type_header: "`+m+`\r\nX"}`, 1) + `}`, "options.key.type_header must be an HTTP header name"},
		{`{tenant: acme, provider: hmac, secrets: [s], options: {signature: {header: X-Sig}, signed_content: "{` + m + `}.{body}", key: {id_pointers: ["/id"]}}, ` + fwd + `}`, "options.signed_content: has an unknown placeholder"},
		{`{tenant: acme, provider: hmac, secrets: [s], options: {signature: {header: X-Sig}, key: {id_pointers: ["` + m + `"]}}, ` + fwd + `}`, "options.key.id_pointers[0]"},
		{`{tenant: acme, provider: hmac, secrets: [s], options: {signature: {header: "` + m + ` x"}, key: {id_pointers: ["/id"]}}, ` + fwd + `}`, "options.signature.header must be an HTTP header name"},
	} {
		_, err := sources.Parse([]byte("sources:\n  x1: "+tc.spec+"\n"), envOf(nil))
		require.Error(t, err, tc.spec)
		require.Contains(t, err.Error(), tc.want, tc.spec)
		require.NotContains(t, err.Error(), "MARKER", tc.spec)
	}

	// A header value from an environment variable is checked as a literal one.
	_, err := sources.Parse([]byte("sources:\n  x1: {tenant: acme, provider: github, secrets: [s], forward: {url: \"http://n8n/x\", headers: {X-A: \"${HV}\"}}}\n"),
		envOf(map[string]string{"HV": m + "\r\nX-Injected: 1"}))
	require.ErrorContains(t, err, "forward.headers.X-A: the value must not contain CR, LF or NUL")
	require.NotContains(t, err.Error(), "MARKER")

	// A source name that is not one is not repeated either.
	_, err = sources.Parse([]byte("sources:\n  \""+m+" x\": {tenant: acme, provider: github, secrets: [s], "+fwd+"}\n"), envOf(nil))
	require.ErrorContains(t, err, "a source name must match")
	require.NotContains(t, err.Error(), "MARKER")
}
