package sources_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// A value of the wrong type in the sources file is refused naming its
// line, its path and the type the setting takes, never the value: the
// file holds secrets and credentials, and yaml.v3's own error quotes the
// start of the value ("cannot unmarshal !!str `sk_live…` into int").
func TestSourcesFileTypeErrorsQuoteNoValue(t *testing.T) {
	t.Parallel()
	const secret = "sk_live_51Hs3cr3tV4lu3"
	stripe := func(extra string) string {
		return "sources:\n  stripe:\n    tenant: acme\n    provider: stripe\n    secrets: [\"whsec_types\"]\n" + extra
	}
	fwd := "    forward: {url: \"http://127.0.0.1:9/h\"}\n"
	for _, tc := range []struct{ name, file, want string }{
		{"secret in a number", "sources:\n  payments:\n    lease_seconds: " + secret + "\n",
			"sources file line 3: sources.payments.lease_seconds must be a whole number (64 bits), not text"},
		{"secrets as one string", "sources:\n  stripe:\n    tenant: acme\n    provider: stripe\n    secrets: " + secret + "\n",
			"sources file line 5: sources.stripe.secrets must be a list, not text"},
		{"a secret list item as a map", "sources:\n  stripe:\n    tenant: acme\n    provider: stripe\n    secrets: [{" + secret + ": 1}]\n",
			"sources file line 5: sources.stripe.secrets[0] must be text (a string), not a map"},
		{"credentials as one string", stripe(fwd + "    backfill: {credentials: " + secret + "}\n"),
			"sources file line 7: sources.stripe.backfill.credentials must be a list, not text"},
		{"a secret in a flag", stripe(fwd + "    shadow: " + secret + "\n"),
			"sources file line 7: sources.stripe.shadow must be true or false"},
		{"headers as one string", stripe("    forward: {url: \"http://127.0.0.1:9/h\", headers: \"Bearer " + secret + "\"}\n"),
			"sources file line 6: sources.stripe.forward.headers must be a map (key: value), not text"},
		{"a number too large", "sources:\n  payments: {max_attempts: 99999999999999999999" + strings.Repeat("9", 5) + "}\n",
			"sources file line 2: sources.payments.max_attempts is out of range: it takes a whole number from "},
		{"a secret in a backfill number", stripe(fwd + "    backfill: {credentials: [\"${K}\"], max_pages: " + secret + "}\n"),
			"sources file line 7: sources.stripe.backfill.max_pages must be a whole number"},
		{"the whole file a list", "- " + secret + "\n", "sources file line 1: the file must be a map (key: value), not a list"},
		{"a number in a text option", "sources:\n  sq:\n    tenant: acme\n    provider: square\n    secrets: [\"k\"]\n" +
			"    options: {notification_url: 99999999123}\n" + fwd,
			"options.notification_url: must be a string, not a JSON number"},
	} {
		_, err := sources.Parse([]byte(tc.file), envOf(map[string]string{"K": "rk_test_types"}))
		require.Error(t, err, tc.name)
		require.Contains(t, err.Error(), tc.want, tc.name)
		for _, part := range []string{"sk_live", "s3cr3t", "9999999", "Bearer", "`"} {
			require.NotContains(t, err.Error(), part, "%s: the value is not echoed: %s", tc.name, err)
		}
	}
}
