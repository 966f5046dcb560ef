package sources_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// A source's volatile fields are its provider's defaults (the fields the
// provider changes on every retry) followed by its own, each once; its
// claims' policy has the same list, so a claim and an ingested event hash
// alike.
func TestSourceVolatileFieldsAddToTheProvidersDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := sources.Parse([]byte(`
sources:
  st: {tenant: acme, provider: stripe, secrets: [s], volatile_fields: ["/createdAt", "/pending_webhooks"], `+fwd+`}
  gh: {tenant: acme, provider: github, secrets: [s], volatile_fields: ["/createdAt"], `+fwd+`}
`), envOf(nil))
	require.NoError(t, err)
	require.Equal(t, []string{"/pending_webhooks", "/createdAt"}, cfg.Policies["st"].VolatileFields)
	require.Equal(t, []string{"/createdAt"}, cfg.Policies["gh"].VolatileFields)

	// A bad pointer of the source's own is named by its own index.
	_, err = sources.Parse([]byte("sources:\n  st: {tenant: acme, provider: stripe, secrets: [s], volatile_fields: [\"/a\", \"b\"], "+fwd+"}\n"), envOf(nil))
	require.ErrorContains(t, err, "volatile_fields[1]")
}

// Options are decoded into the provider's own options struct: keys name
// its fields in snake_case, by their json tags where they have them, and
// errors name the field as the file writes it.
func TestSourceOptionsDecodeIntoTheProvidersStruct(t *testing.T) {
	t.Parallel()
	cfg, err := sources.Parse([]byte(`
sources:
  tok: {tenant: acme, provider: token, secrets: [s], options: {header: X-Api-Key, key: {id_header: X-Id}}, `+fwd+`}
  dc: {tenant: acme, provider: discord, options: {public_keys: ["d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"]}, `+fwd+`}
`), envOf(nil))
	require.NoError(t, err)
	require.Equal(t, []string{"x-api-key"}, cfg.Sources["tok"].CredentialHeaders, "the configured token header is a credential")
	require.NotNil(t, cfg.Sources["dc"], "public_keys names a field by its json tag")

	for _, tc := range []struct{ spec, want string }{
		{`{tenant: acme, provider: stripe, secrets: [s], options: {url: x}, ` + fwd + `}`, "options: provider stripe takes no options"},
		// An unknown option is refused by line and place, with the
		// options the provider takes, never quoted (a secret pasted as a
		// key) nor named as the Go field it would map to.
		{`{tenant: acme, provider: sendgrid, options: {public_key: abc}, ` + fwd + `}`, "sources file line 2: unknown option under sources.bad.options (allowed: public_keys, key)"},
		{`{tenant: acme, provider: token, secrets: [s], options: {key: {id_headr: X}}, ` + fwd + `}`, "sources file line 2: unknown option under sources.bad.options.key (allowed: id_header, "},
		{`{tenant: acme, provider: token, secrets: [s], options: {key: {id_header: X, id_pointers: ["/id"]}}, ` + fwd + `}`, "options.key.id_header: exactly one"},
		{`{tenant: acme, provider: token, secrets: [s], options: {Key: {id_header: X}}, ` + fwd + `}`, "unknown option under sources.bad.options (allowed: "},
		{`{tenant: acme, provider: github, secrets: [s], tolerance_seconds: 60, ` + fwd + `}`, "tolerance does not apply to provider github"},
		{`{tenant: acme, provider: stripe, secrets: [s], tolerance_seconds: -1, ` + fwd + `}`, "tolerance_seconds: must not be negative"},
	} {
		_, err := sources.Parse([]byte("sources:\n  bad: "+tc.spec+"\n"), envOf(nil))
		require.Error(t, err, tc.spec)
		require.Contains(t, err.Error(), tc.want, tc.spec)
		if strings.Contains(tc.want, "unknown option") {
			for _, k := range []string{"public_key:", "id_headr", "Key:", "PublicKey", "IDHeader"} {
				require.NotContains(t, err.Error(), k, tc.spec)
			}
		}
	}
}

// TestSourceOptionOfTheWrongShape: an option of the wrong shape (a single
// certificate where a list is taken, a list where a string is) is named
// as the file writes it, with the shape it takes, never by the Go field.
func TestSourceOptionOfTheWrongShape(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ spec, want string }{
		{`{tenant: acme, provider: paypal, options: {webhook_id: W, certificates: "-----BEGIN CERTIFICATE-----"}, ` + fwd + `}`,
			"options.certificates: must be a list, not a JSON string"},
		{`{tenant: acme, provider: token, secrets: [s], options: {header: [X-A, X-B]}, ` + fwd + `}`,
			"options.header: must be a string, not a JSON array"},
	} {
		_, err := sources.Parse([]byte("sources:\n  bad: "+tc.spec+"\n"), envOf(nil))
		require.Error(t, err, tc.spec)
		require.Contains(t, err.Error(), tc.want, tc.spec)
		require.NotContains(t, err.Error(), "Go struct field", tc.spec)
	}
}
