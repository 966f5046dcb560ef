package sources_test

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// envOf returns a getenv over m.
func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

const fwd = `forward: {url: "http://n8n.internal:5678/webhook/x"}`

func TestSourcesFileExpandsEnvironment(t *testing.T) {
	t.Parallel()
	cfg, err := sources.Parse([]byte(`
sources:
  stripe:
    tenant: acme
    provider: stripe
    secrets: ["${STRIPE_OLD}", "prefix-${STRIPE_NEW}-suffix"]
    forward:
      url: "${N8N_URL}/webhook/stripe"
      headers: {Authorization: "Bearer ${N8N_TOKEN}"}
`), envOf(map[string]string{
		"STRIPE_OLD": "whsec_old", "STRIPE_NEW": "new", "N8N_URL": "http://n8n:5678", "N8N_TOKEN": "tok-1",
	}))
	require.NoError(t, err)
	src := cfg.Sources["stripe"]
	require.NotNil(t, src)
	require.Equal(t, "http://n8n:5678/webhook/stripe", src.Forward.URL)
	require.Equal(t, map[string]string{"Authorization": "Bearer tok-1"}, src.Forward.Headers)
	require.Equal(t, verify.TypeStripe, src.Provider)
	require.Equal(t, "acme", src.Tenant)
}

func TestSourcesFileMissingEnvNamesTheVariable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yaml, field string }{
		{`secrets: ["${GH_SECRET}"], ` + fwd, "secrets[0]"},
		{`secrets: ["s"], forward: {url: "${HOOK_URL}"}`, "forward.url"},
		{`secrets: ["s"], forward: {url: "http://n8n/x", headers: {Authorization: "Bearer ${HOOK_TOKEN}"}}`, "forward.headers.Authorization"},
	} {
		_, err := sources.Parse([]byte("sources:\n  gh: {tenant: acme, provider: github, "+tc.yaml+"}\n"),
			envOf(map[string]string{"UNRELATED": "x"}))
		require.Error(t, err, tc.yaml)
		require.Contains(t, err.Error(), `source "gh"`)
		require.Contains(t, err.Error(), tc.field)
		require.Regexp(t, `environment variable (GH_SECRET|HOOK_URL|HOOK_TOKEN) is not set`, err.Error())
	}
	// An empty variable counts as missing: an empty secret must never load.
	_, err := sources.Parse([]byte("sources:\n  gh: {tenant: acme, provider: github, secrets: [\"${EMPTY}\"], "+fwd+"}\n"),
		envOf(map[string]string{"EMPTY": ""}))
	require.ErrorContains(t, err, "environment variable EMPTY is not set")
}

func TestSourcesFileRejectsUnknownFields(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yaml, want string }{
		{"sources:\n  gh: {tenant: acme, provider: github, secrets: [s], secret: s, " + fwd + "}\n",
			"sources file line 2: unknown setting under sources.gh (allowed: "},
		{"sources:\n  gh: {tenant: acme, provider: github, secrets: [s], forward: {url: \"http://n8n/x\", retries: 3}}\n",
			"sources file line 2: unknown setting under sources.gh.forward (allowed: backoff_base_seconds, "},
		{"source:\n  gh: {tenant: acme}\n", "sources file line 1: unknown setting at the top of the file (allowed: reconcilers, sources)"},
		{"sources:\n  gh: {tenant: acme, provider: github, secrets: [s], options: {client_state: x}, " + fwd + "}\n", "options: provider github takes no options"},
		{"sources:\n  gh: {tenant: acme, provider: msgraph, secrets: [s], tolerance_seconds: 60, " + fwd + "}\n", "tolerance does not apply to provider msgraph"},
	} {
		_, err := sources.Parse([]byte(tc.yaml), envOf(nil))
		require.Error(t, err, tc.yaml)
		require.Contains(t, err.Error(), tc.want, tc.yaml)
	}
}

func TestSourcesFileBadProviderNamesTheSource(t *testing.T) {
	t.Parallel()
	_, err := sources.Parse([]byte(`
sources:
  good: {tenant: acme, provider: github, secrets: [s], `+fwd+`}
  orders: {tenant: acme, provider: stripey, secrets: [s], `+fwd+`}
`), envOf(nil))
	require.Error(t, err)
	require.Contains(t, err.Error(), `sources.orders.provider must be one of: `)
	require.Contains(t, err.Error(), `line 4`)
	require.NotContains(t, err.Error(), `stripey`, "the value is not repeated")
	require.ErrorIs(t, err, verify.ErrUnknownType)

	for _, tc := range []struct{ spec, want string }{
		{`{provider: github, secrets: [s], ` + fwd + `}`, "tenant is required"},
		{`{tenant: acme, provider: github, ` + fwd + `}`, "at least one secret"},
		{`{tenant: acme, provider: github, secrets: [s], forward: {concurrency: 4}}`, "forward.url is required when forward sets anything else"},
		{`{tenant: acme, provider: github, secrets: [s], forward: {url: "n8n/x"}}`, "forward.url must be an absolute http(s) URL"},
		{`{tenant: acme, provider: github, secrets: [s], forward: {url: "ftp://x/y"}}`, "forward.url"},
		{`{tenant: acme, provider: github, secrets: [s], max_body_bytes: 99999999999, ` + fwd + `}`, "max_body_bytes"},
		{`{tenant: acme, provider: github, secrets: [s], unauthenticated_status: 302, ` + fwd + `}`, "unauthenticated_status"},
		{`{tenant: acme, provider: github, secrets: [s], forward: {url: "http://n8n/x", backoff_base_seconds: 10, backoff_cap_seconds: 5}}`, "backoff_cap_seconds"},
		{`{tenant: acme, provider: github, secrets: [s], forward: {url: "http://n8n/x", timeout_seconds: 600}}`, "timeout_seconds must be at most 240"},
		{`{tenant: acme, provider: hmac, secrets: [s], options: {signature: {algorithm: md5}}, ` + fwd + `}`, "options.signature.header"},
	} {
		_, err := sources.Parse([]byte("sources:\n  bad: "+tc.spec+"\n"), envOf(nil))
		require.Error(t, err, tc.spec)
		require.Contains(t, err.Error(), `source "bad"`, tc.spec)
		require.Contains(t, err.Error(), tc.want, tc.spec)
	}
	_, err = sources.Parse([]byte("sources:\n  Bad_Name: {tenant: acme, provider: github, secrets: [s], "+fwd+"}\n"), envOf(nil))
	require.ErrorContains(t, err, `a source name must match`)
	require.NotContains(t, err.Error(), "Bad_Name", "a name that is not one is not repeated")
}

func TestSourcesFileDefaultsAndPolicies(t *testing.T) {
	t.Parallel()
	cfg, err := sources.Parse([]byte(`
sources:
  gh: {tenant: acme, provider: github, secrets: [s], lease_policy: review, max_attempts: 7, retention_days: 90, `+fwd+`}
  claims-only: {lease_seconds: 60}
`), envOf(nil))
	require.NoError(t, err)
	require.Len(t, cfg.Sources, 1, "a source without provider is claim-only")
	src := cfg.Sources["gh"]
	require.Equal(t, sources.DefaultMaxBodyBytes, src.MaxBodyBytes)
	require.Equal(t, 401, src.UnauthenticatedStatus)
	require.Equal(t, sources.Forward{URL: "http://n8n.internal:5678/webhook/x", Headers: map[string]string{},
		Timeout: sources.DefaultForwardTimeout, Concurrency: sources.DefaultConcurrency, MaxAttempts: sources.DefaultDispatchMax,
		BackoffBase: sources.DefaultDispatchBase, BackoffCap: sources.DefaultDispatchCap, RequireClaim: true,
		RetryStatuses: sources.DefaultRetryStatuses()}, src.Forward)
	require.Equal(t, claim.LeasePolicy("review"), cfg.Policies["gh"].LeasePolicy)
	require.Equal(t, 7, cfg.Policies["gh"].MaxAttempts)
	require.Equal(t, 90*24*time.Hour, cfg.Policies["gh"].Retention)
	require.Equal(t, time.Minute, cfg.Policies["claims-only"].DefaultLease)

	// JSON is YAML too; ReadFile reads a file.
	path := filepath.Join(t.TempDir(), "sources.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"sources": {"gh": {"tenant": "acme", "provider": "github", "secrets": ["${S}"], "forward": {"url": "http://n8n/x", "max_attempts": 3}}}}`), 0o600))
	cfg, err = sources.ReadFile(path, envOf(map[string]string{"S": "secret"}))
	require.NoError(t, err)
	require.Equal(t, 3, cfg.Sources["gh"].Forward.MaxAttempts)
	_, err = sources.ReadFile(filepath.Join(t.TempDir(), "missing.yaml"), envOf(nil))
	require.ErrorContains(t, err, "sources file")
}

// The sources file is one more route an ambiguous identity could take: no
// key or option may be given twice, or in two spellings of one name.
func TestSourcesFileRefusesAmbiguousKeys(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ file, want string }{
		"duplicate source": {`
sources:
  a: {tenant: t, provider: token, secrets: ["x-secret-0123456789"], options: {key: {id_pointers: ["/id"]}}, ` + fwd + `}
  a: {tenant: t, provider: token, secrets: ["y-secret-0123456789"], options: {key: {id_pointers: ["/id"]}}, ` + fwd + `}
`, `a key is written twice in one map (first at line `},
		"duplicate option": {`
sources:
  a: {tenant: t, provider: token, secrets: ["x-secret-0123456789"], options: {key: {id_pointers: ["/id"], id_pointers: ["/other"]}}, ` + fwd + `}
`, `a key is written twice in one map (first at line `},
		"case variant of an option": {`
sources:
  a: {tenant: t, provider: token, secrets: ["x-secret-0123456789"], options: {key: {id_header: X-A, Id_header: X-B}}, ` + fwd + `}
`, `unknown option under sources.a.options.key (allowed: id_header, `},
		"camel-case option": {`
sources:
  a: {tenant: t, provider: token, secrets: ["x-secret-0123456789"], options: {key: {IDHeader: X-A}}, ` + fwd + `}
`, `unknown option under sources.a.options.key (allowed: id_header, `},
		"empty key rule": {`
sources:
  a: {tenant: t, provider: stripe, secrets: ["whsec_x"], key: {}, ` + fwd + `}
`, `key: name at least one of key.fields and key.headers`},
		"bad key pointer": {`
sources:
  a: {tenant: t, provider: stripe, secrets: ["whsec_x"], key: {fields: ["id"]}, ` + fwd + `}
`, `key.fields[0]`},
		"bad volatile pointer on a claim-only source": {`
sources:
  a: {volatile_fields: ["createdAt"]}
`, ``},
	} {
		_, err := sources.Parse([]byte(tc.file), envOf(nil))
		if tc.want == "" {
			continue // checked by the ledger's policy validation below
		}
		require.Error(t, err, name)
		require.Contains(t, err.Error(), tc.want, name)
	}
	cfg, err := sources.Parse([]byte("sources:\n  a: {volatile_fields: [\"createdAt\"]}\n"), envOf(nil))
	require.NoError(t, err)
	require.ErrorContains(t, claim.Policies{BySource: cfg.Policies}.WithDefaults().Validate(), `volatile_fields[0] must be a JSON pointer`)
}

// Sources that share a dedupe scope must derive one key and one hash from
// one event, under one claim policy.
func TestSourcesFileDedupeScopes(t *testing.T) {
	t.Parallel()
	door := func(name, secret, extra string) string {
		return "  " + name + ": {tenant: t, provider: standard-webhooks, secrets: [\"" + secret + "\"], dedupe_scope: shop, key: {fields: [\"/order/id\"]}, volatile_fields: [\"/at\"], " + fwd + extra + "}\n"
	}
	const s1, s2 = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
	cfg, err := sources.Parse([]byte("sources:\n"+door("eu", s1, "")+door("us", s2, "")), envOf(nil))
	require.NoError(t, err)
	require.Equal(t, "shop", cfg.Sources["eu"].Scope)
	require.Equal(t, "shop", cfg.Sources["us"].Scope)
	require.Contains(t, cfg.Policies, "shop", "the scope has its members' policy")

	for name, tc := range map[string]struct{ other, want string }{
		"key":          {strings.Replace(door("us", s2, ""), `"/order/id"`, `"/order/number"`, 1), "another key"},
		"volatile":     {strings.Replace(door("us", s2, ""), `"/at"`, `"/sent_at"`, 1), "another volatile_fields"},
		"tenant":       {strings.Replace(door("us", s2, ""), "tenant: t", "tenant: u", 1), "another tenant"},
		"provider":     {"  us: {tenant: t, provider: github, secrets: [\"gh-secret\"], dedupe_scope: shop, key: {fields: [\"/order/id\"]}, volatile_fields: [\"/at\"], " + fwd + "}\n", "another provider"},
		"lease policy": {door("us", s2, ", lease_policy: review"), "another claim policy"},
		"no key":       {strings.Replace(door("us", s2, ""), `key: {fields: ["/order/id"]}, `, "", 1), "another key"},
	} {
		_, err := sources.Parse([]byte("sources:\n"+door("eu", s1, "")+tc.other), envOf(nil))
		require.Error(t, err, name)
		require.Contains(t, err.Error(), tc.want, name)
		require.Contains(t, err.Error(), `"eu"`, name)
		require.Contains(t, err.Error(), `"us"`, name)
	}
	_, err = sources.Parse([]byte("sources:\n"+door("eu", s1, "")+"  shop: {lease_policy: review}\n"), envOf(nil))
	require.ErrorContains(t, err, "claim-only source with another claim policy")
	_, err = sources.Parse([]byte("sources:\n  a: {tenant: t, provider: stripe, secrets: [\"whsec_x\"], dedupe_scope: \"Bad Scope\", "+fwd+"}\n"), envOf(nil))
	require.ErrorContains(t, err, "dedupe_scope must match")
}

// TestSourcesFileExpandsEnvironmentInOptions: ${VAR} is read in every
// string of options too, at any depth (a verify token, public keys), as
// sidecar/docs/ingest.md promises for the whole file: the real token opens Meta's
// handshake and the placeholder text does not; a missing variable is an
// error naming the option, never a placeholder kept as the secret.
func TestSourcesFileExpandsEnvironmentInOptions(t *testing.T) {
	t.Parallel()
	cfg, err := sources.Parse([]byte(`
sources:
  meta:
    tenant: acme
    provider: meta
    secrets: ["app-secret"]
    options: {verify_token: "${META_VERIFY_TOKEN}"}
`+"    "+fwd+"\n"), envOf(map[string]string{"META_VERIFY_TOKEN": "my-verify-token"}))
	require.NoError(t, err)
	v := cfg.Sources["meta"].Verifier
	handshake := func(token string) (verify.Result, error) {
		return v.Verify(verify.Request{Method: http.MethodGet,
			RawQuery: "hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=" + url.QueryEscape(token)})
	}
	res, err := handshake("my-verify-token")
	require.NoError(t, err)
	require.True(t, res.IsHandshake())
	require.Equal(t, "1158201444", string(res.Handshake.Body))
	_, err = handshake("${META_VERIFY_TOKEN}")
	require.Error(t, err, "the placeholder is not the token")

	for _, tc := range []struct{ yaml, field string }{
		{`provider: meta, secrets: ["s"], options: {verify_token: "${META_VERIFY_TOKEN}"}`, "options.verify_token"},
		{`provider: sendgrid, options: {public_keys: ["${SG_KEY_OLD}"]}`, "options.public_keys[0]"},
	} {
		_, err := sources.Parse([]byte("sources:\n  s: {tenant: acme, "+tc.yaml+", "+fwd+"}\n"),
			envOf(map[string]string{"UNRELATED": "x"}))
		require.Error(t, err, tc.yaml)
		require.Contains(t, err.Error(), tc.field)
		require.Regexp(t, `environment variable (META_VERIFY_TOKEN|SG_KEY_OLD) is not set`, err.Error())
	}
}
