package sources_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

const bfKey = "rk_test_spec_0123456789"

func bfSources(provider, options, forward, extra, backfill string) string {
	return fmt.Sprintf(`sources:
  s:
    tenant: acme
    provider: %s
    secrets: ["whsec_x"]
    %s
    %s
    %s
    backfill: %s
`, provider, options, forward, extra, backfill)
}

const bfForward = `forward: {url: "http://n8n:5678/webhook/x"}`

// TestBackfillSpecDefaults: a minimal backfill takes the provider's
// window, auto mode, 15 min interval, 600 s grace, 100 pages, 300 s wait,
// the provider's public API; the credential comes from the environment
// and prints as [redacted] every way.
func TestBackfillSpecDefaults(t *testing.T) {
	cfg, err := sources.Parse([]byte(bfSources("stripe", "", bfForward, "", `{credentials: ["${K}"]}`)),
		envOf(map[string]string{"K": bfKey}))
	require.NoError(t, err)
	b := cfg.Sources["s"].Backfill
	require.NotNil(t, b)
	require.Equal(t, sources.BackfillAuto, b.Mode)
	require.Equal(t, 30*24*time.Hour, b.Window)
	require.Equal(t, 15*time.Minute, b.Interval)
	require.Equal(t, 10*time.Minute, b.Grace)
	require.Equal(t, 100, b.MaxPages)
	require.Equal(t, 5*time.Minute, b.MaxWait)
	require.Equal(t, sources.StripeAPIBase, b.BaseURL)
	require.Equal(t, bfKey, b.Credentials[0].Reveal())
	for _, s := range []string{fmt.Sprint(b.Credentials), fmt.Sprintf("%v %+v %#v %s %q", b, *b, *b, b.Credentials[0], b.Credentials[0])} {
		require.NotContains(t, s, bfKey)
	}

	cfg, err = sources.Parse([]byte(bfSources("github", "", bfForward, "",
		`{credentials: ["${K}"], mode: redeliver, window_hours: 24, github: {hook: repos/acme/shop/hooks/42}}`)), envOf(map[string]string{"K": bfKey}))
	require.NoError(t, err)
	require.Equal(t, "repos/acme/shop/hooks/42", cfg.Sources["s"].Backfill.GitHubHook)
	require.Equal(t, 24*time.Hour, cfg.Sources["s"].Backfill.Window)
}

// TestBackfillSpecRefusals: each bad backfill setting is refused naming
// the field, and never quoting a credential.
func TestBackfillSpecRefusals(t *testing.T) {
	env := envOf(map[string]string{"K": bfKey, "BAD": "rk_with space\n"})
	sq := `options: {notification_url: "https://example.com/hook"}`
	for _, tc := range []struct {
		name, provider, options, forward, extra, backfill, want string
	}{
		{"literal credential", "stripe", "", bfForward, "", `{credentials: ["` + bfKey + `"]}`, "backfill.credentials[0]: must be one ${VAR}"},
		{"no credential", "stripe", "", bfForward, "", `{mode: fetch}`, "backfill.credentials: is required"},
		{"missing variable", "stripe", "", bfForward, "", `{credentials: ["${NOPE}"]}`, "backfill.credentials[0]: environment variable NOPE is not set"},
		{"bad credential value", "stripe", "", bfForward, "", `{credentials: ["${BAD}"]}`, "backfill.credentials[0]: the variable's value"},
		{"mode", "stripe", "", bfForward, "", `{credentials: ["${K}"], mode: sometimes}`, "backfill.mode: must be report, fetch, redeliver or auto"},
		{"redeliver on stripe", "stripe", "", bfForward, "", `{credentials: ["${K}"], mode: redeliver}`, "backfill.mode: redeliver needs"},
		{"fetch on a trigger source", "stripe", "", "", "", `{credentials: ["${K}"], mode: fetch}`, "backfill.mode: fetch stores"},
		{"auto on a stripe trigger source", "stripe", "", "", "", `{credentials: ["${K}"]}`, "backfill.mode: auto stores"},
		{"window too long", "stripe", "", bfForward, "", `{credentials: ["${K}"], window_hours: 721}`, "backfill.window_hours: must be between 1 and 720"},
		{"github window", "github", "", bfForward, "", `{credentials: ["${K}"], window_hours: 73, github: {hook: orgs/acme/hooks/1}}`, "backfill.window_hours: must be between 1 and 72"},
		{"grace", "stripe", "", bfForward, "", `{credentials: ["${K}"], window_hours: 1, grace_seconds: 3600}`, "backfill.grace_seconds"},
		{"interval", "stripe", "", bfForward, "", `{credentials: ["${K}"], interval_minutes: -1}`, "backfill.interval_minutes"},
		{"pages", "stripe", "", bfForward, "", `{credentials: ["${K}"], max_pages: 10001}`, "backfill.max_pages"},
		{"wait", "stripe", "", bfForward, "", `{credentials: ["${K}"], max_wait_seconds: 3601}`, "backfill.max_wait_seconds"},
		{"plain http base", "stripe", "", bfForward, "", `{credentials: ["${K}"], base_url: "http://api.example.com"}`, "backfill.base_url: must be an absolute https URL"},
		{"port past 65535", "stripe", "", bfForward, "", `{credentials: ["${K}"], base_url: "http://127.0.0.1:99999"}`, "backfill.base_url: must be an absolute https URL"},
		{"port zero", "stripe", "", bfForward, "", `{credentials: ["${K}"], base_url: "https://api.example.com:0"}`, "port (if any) from 1 to 65535"},
		{"port left out", "stripe", "", bfForward, "", `{credentials: ["${K}"], base_url: "https://api.example.com:"}`, "port (if any) from 1 to 65535"},
		{"only_failed on square", "square", sq, bfForward, "", `{credentials: ["${K}"], only_failed: true}`, "backfill.only_failed"},
		{"github hook missing", "github", "", bfForward, "", `{credentials: ["${K}"]}`, "backfill.github.hook: is required"},
		{"github hook shape", "github", "", bfForward, "", `{credentials: ["${K}"], github: {hook: "repos/acme/hooks/x"}}`, "backfill.github.hook: must be"},
		{"square version", "square", sq, bfForward, "", `{credentials: ["${K}"], square: {version: "latest"}}`, "backfill.square.version"},
		{"square block on stripe", "stripe", "", bfForward, "", `{credentials: ["${K}"], square: {version: "2025-01-23"}}`, "backfill.square: is for a square source"},
		{"key headers", "stripe", "", bfForward, `key: {headers: ["X-Shop"]}`, `{credentials: ["${K}"]}`, "key.headers cannot be read from the provider's event list"},
		{"key retention within window", "stripe", "", bfForward, "key_retention_days: 30\n    retention_days: 30", `{credentials: ["${K}"]}`, "backfill.window_hours: the window (720 h) must be shorter than key_retention_days"},
		{"unsupported provider", "shopify", "", bfForward, "", `{credentials: ["${K}"]}`, "backfill: provider shopify has no event list"},
		{"unknown field", "stripe", "", bfForward, "", `{credentials: ["${K}"], windw_hours: 2}`,
			"sources file line 9: unknown setting under sources.s.backfill (allowed: base_url, credentials, "},
		{"a secret as a key", "stripe", "", bfForward, "", `{credentials: ["${K}"], rk_live_KEYNAMESECRET: 2}`,
			"unknown setting under sources.s.backfill (allowed: "},
		{"user info in base", "stripe", "", bfForward, "", `{credentials: ["${K}"], base_url: "https://user:sk_live_pw@api.example.com"}`,
			"backfill.base_url: must not carry user info (credentials in the URL"},
		{"a user in base", "stripe", "", bfForward, "", `{credentials: ["${K}"], base_url: "https://sk_live_pw@api.example.com"}`,
			"backfill.base_url: must not carry user info"},
		{"window out of range", "stripe", "", bfForward, "", `{credentials: ["${K}"], window_hours: 99999999999999999999}`,
			"sources file line 9: sources.s.backfill.window_hours is out of range: it takes a whole number from -9223372036854775808 to 9223372036854775807"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sources.Parse([]byte(bfSources(tc.provider, tc.options, tc.forward, tc.extra, tc.backfill)), env)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			if !strings.HasPrefix(tc.want, "sources file line") && !strings.HasPrefix(tc.want, "unknown setting") {
				require.Contains(t, err.Error(), `source "s"`, "names the source")
			}
			require.NotContains(t, err.Error(), bfKey)
			for _, part := range []string{"windw", "KEYNAMESECRET", "sk_live", "@api", "99999999", "BackfillSpec", "ingest."} {
				require.NotContains(t, err.Error(), part, "neither a key or value written nor a Go type")
			}
			require.False(t, strings.Contains(err.Error(), "rk_with"), "never the variable's value")
		})
	}
}
