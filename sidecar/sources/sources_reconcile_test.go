package sources_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// Reconcilers are named at the top of the sources file; a source names its
// default one. Defaults and ${VAR} expansion as for forward.
func TestSourcesFileReconcilers(t *testing.T) {
	t.Parallel()
	cfg, err := sources.Parse([]byte(`reconcilers:
  crm:
    url: https://n8n.example.com/webhook/reconcile-crm
    headers: {X-Reconcile-Token: "${RT}"}
  fast:
    url: http://n8n:5678/webhook/r
    delay_seconds: 0
    timeout_seconds: 5
    answer_seconds: 600
    max_calls: 2
    backoff_base_seconds: 1
    backoff_cap_seconds: 10
sources:
  orders: {reconciler: crm}
  stripe: {tenant: acme, provider: stripe, secrets: [s], reconciler: fast, `+fwd+`}
  plain: {}
`), envOf(map[string]string{"RT": "tok-123"}))
	require.NoError(t, err)
	require.Len(t, cfg.Reconcilers, 2)
	crm := cfg.Reconcilers["crm"]
	require.Equal(t, sources.Reconciler{Name: "crm", URL: "https://n8n.example.com/webhook/reconcile-crm",
		Headers: map[string]string{"X-Reconcile-Token": "tok-123"}, Delay: 60 * time.Second, Timeout: 30 * time.Second, Answer: 30 * time.Second,
		MaxCalls: 6, BackoffBase: 30 * time.Second, BackoffCap: time.Hour}, *crm)
	fast := cfg.Reconcilers["fast"]
	require.Equal(t, sources.Reconciler{Name: "fast", URL: "http://n8n:5678/webhook/r", Headers: map[string]string{},
		Timeout: 5 * time.Second, Answer: 600 * time.Second, MaxCalls: 2, BackoffBase: time.Second, BackoffCap: 10 * time.Second}, *fast)
	require.Equal(t, "crm", cfg.Policies["orders"].Reconciler)
	require.Equal(t, "fast", cfg.Policies["stripe"].Reconciler)
	require.Empty(t, cfg.Policies["plain"].Reconciler)
	ps := cfg.ReconcilerPolicies()
	require.Equal(t, 2, ps["fast"].MaxCalls)
	require.Equal(t, 5*time.Second, ps["fast"].Call)
	require.Equal(t, 600*time.Second, ps["fast"].Answer)
	require.Equal(t, time.Second, ps["fast"].BackoffBase)
	require.Equal(t, 10*time.Second, ps["fast"].BackoffCap)
	require.Zero(t, ps["fast"].Delay, "delay_seconds: 0 is no delay")
	require.Equal(t, 60*time.Second, ps["crm"].Delay, "delay_seconds unset: 60")

	// No reconcilers: an empty map, not nil.
	cfg, err = sources.Parse([]byte("sources: {}\n"), envOf(nil))
	require.NoError(t, err)
	require.NotNil(t, cfg.Reconcilers)
	require.Empty(t, cfg.Reconcilers)
}

// Each refusal names the place and repeats no configured value: a source
// naming an unknown reconciler, a URL that is not absolute http(s), header
// names and values, ranges, unknown keys.
func TestSourcesFileReconcilerRefusals(t *testing.T) {
	t.Parallel()
	const m = "sk_live_MARKER"
	file := func(rec, src string) string {
		return "reconcilers:\n  crm: " + rec + "\nsources:\n  orders: " + src + "\n"
	}
	ok := `{url: "https://n8n.example.com/webhook/r"}`
	for _, tc := range []struct{ name, file, want string }{
		{"unknown reconciler", file(ok, `{reconciler: "`+m+`"}`),
			"line 4: sources.orders.reconciler must name a reconciler under reconcilers: (configured: crm)"},
		{"unknown reconciler, none configured", "sources:\n  orders: {reconciler: \"" + m + "\"}\n",
			"sources.orders.reconciler must name a reconciler under reconcilers: (none is configured)"},
		{"unknown reconciler on an ingest source", file(ok, `{tenant: acme, provider: stripe, secrets: [s], reconciler: "`+m+`", `+fwd+`}`),
			"sources.orders.reconciler must name a reconciler"},
		{"no url", file(`{timeout_seconds: 3}`, `{}`), "line 2: reconcilers.crm.url is required"},
		{"not http", file(`{url: "ftp://`+m+`/x"}`, `{}`), "reconcilers.crm.url must be an absolute http(s) URL"},
		{"relative", file(`{url: "/webhook/`+m+`"}`, `{}`), "reconcilers.crm.url must be an absolute http(s) URL"},
		{"bad port", file(`{url: "http://n8n:99999/`+m+`"}`, `{}`), "reconcilers.crm.url must be an absolute http(s) URL"},
		{"missing variable", file(`{url: "${NOPE}"}`, `{}`), "reconcilers.crm.url: environment variable NOPE is not set"},
		{"header name", file(`{url: "http://n8n/x", headers: {"`+m+` bad:hdr": v}}`, `{}`),
			"reconcilers.crm.headers: a header name must be an HTTP header name"},
		{"header value CRLF", file(`{url: "http://n8n/x", headers: {X-A: "`+m+`\r\nX-B: 1"}}`, `{}`),
			"reconcilers.crm.headers.X-A: the value must not contain CR, LF or NUL"},
		{"header value NUL", file(`{url: "http://n8n/x", headers: {X-A: "`+m+`\0"}}`, `{}`),
			"reconcilers.crm.headers.X-A: the value must not contain CR, LF or NUL"},
		{"timeout high", file(`{url: "http://n8n/x", timeout_seconds: 301}`, `{}`), "reconcilers.crm.timeout_seconds must be between 1 and 300"},
		{"timeout negative", file(`{url: "http://n8n/x", timeout_seconds: -1}`, `{}`), "reconcilers.crm.timeout_seconds must be between 1 and 300"},
		{"answer high", file(`{url: "http://n8n/x", answer_seconds: 3601}`, `{}`), "reconcilers.crm.answer_seconds must be between 0 and 3600"},
		{"answer negative", file(`{url: "http://n8n/x", answer_seconds: -5}`, `{}`), "reconcilers.crm.answer_seconds must be between 0 and 3600"},
		{"delay high", file(`{url: "http://n8n/x", delay_seconds: 86401}`, `{}`), "reconcilers.crm.delay_seconds must be between 0 and 86400 (unset: 60)"},
		{"delay negative", file(`{url: "http://n8n/x", delay_seconds: -1}`, `{}`), "reconcilers.crm.delay_seconds must be between 0 and 86400"},
		{"delay fraction", file(`{url: "http://n8n/x", delay_seconds: 2.5}`, `{}`), "line 2: reconcilers.crm.delay_seconds must be a whole number"},
		{"delay wrong type", file(`{url: "http://n8n/x", delay_seconds: "`+m+`"}`, `{}`), "reconcilers.crm.delay_seconds must be a whole number"},
		{"max_calls high", file(`{url: "http://n8n/x", max_calls: 101}`, `{}`), "reconcilers.crm.max_calls must be between 1 and 100"},
		{"max_calls negative", file(`{url: "http://n8n/x", max_calls: -1}`, `{}`), "reconcilers.crm.max_calls must be between 1 and 100"},
		{"base high", file(`{url: "http://n8n/x", backoff_base_seconds: 86401}`, `{}`), "reconcilers.crm.backoff_base_seconds must be between 1 and 86400"},
		{"cap below base", file(`{url: "http://n8n/x", backoff_base_seconds: 60, backoff_cap_seconds: 59}`, `{}`),
			"reconcilers.crm.backoff_cap_seconds cannot be shorter than backoff_base_seconds"},
		{"cap huge", file(`{url: "http://n8n/x", backoff_cap_seconds: 9000000000}`, `{}`), "reconcilers.crm.backoff_cap_seconds must be at most 2592000"},
		{"fraction", file(`{url: "http://n8n/x", max_calls: 2.5}`, `{}`), "line 2: reconcilers.crm.max_calls must be a whole number"},
		{"wrong type", file(`{url: "http://n8n/x", max_calls: "`+m+`"}`, `{}`), "reconcilers.crm.max_calls must be a whole number"},
		{"unknown key", file(`{url: "http://n8n/x", "`+m+`": 1}`, `{}`), "unknown setting under reconcilers.crm (allowed: answer_seconds, backoff_base_seconds"},
		{"bad name", "reconcilers:\n  \"" + m + " x\": " + ok + "\nsources: {}\n", "a reconciler name must match"},
		{"not a map", "reconcilers: [\"" + m + "\"]\nsources: {}\n", "line 1: reconcilers must be a map"},
		{"cut short", "reconcilers:\n  crm:\nsources: {}\n", "line 2: reconcilers.crm has no value"},
	} {
		_, err := sources.Parse([]byte(tc.file), envOf(nil))
		require.Error(t, err, tc.name)
		require.Contains(t, err.Error(), tc.want, tc.name)
		require.NotContains(t, err.Error(), "MARKER", tc.name)
		require.NotContains(t, err.Error(), "2.5", tc.name)
	}

	// A header value from an environment variable is checked as a literal one.
	_, err := sources.Parse([]byte(file(`{url: "http://n8n/x", headers: {X-A: "${HV}"}}`, `{}`)),
		envOf(map[string]string{"HV": m + "\r\nX-Injected: 1"}))
	require.ErrorContains(t, err, "reconcilers.crm.headers.X-A: the value must not contain CR, LF or NUL")
	require.NotContains(t, err.Error(), "MARKER")
	// A URL from an environment variable is not repeated either.
	_, err = sources.Parse([]byte(file(`{url: "${U}"}`, `{}`)), envOf(map[string]string{"U": "gopher://" + m}))
	require.ErrorContains(t, err, "reconcilers.crm.url must be an absolute http(s) URL")
	require.NotContains(t, err.Error(), "MARKER")
}

// Sources sharing a dedupe scope share one claim policy, the default
// reconciler included.
func TestSourcesFileReconcilerScope(t *testing.T) {
	t.Parallel()
	_, err := sources.Parse([]byte(`reconcilers:
  a: {url: "http://n8n/a"}
  b: {url: "http://n8n/b"}
sources:
  s1: {tenant: acme, provider: stripe, secrets: [s], dedupe_scope: pay, reconciler: a, `+fwd+`}
  s2: {tenant: acme, provider: stripe, secrets: [t], dedupe_scope: pay, reconciler: b, forward: {url: "http://n8n/y"}}
`), envOf(nil))
	require.ErrorContains(t, err, "claim policy")
}
