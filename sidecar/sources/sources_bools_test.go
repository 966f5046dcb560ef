package sources_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// TestSourcesFileBooleansPlainOnly: every boolean setting of the sources
// file takes true and false written plainly, and nothing else: yaml.v3
// would decode the YAML 1.1 words (yes, no, on, off, y, n), quoted or
// not, and True or FALSE into a bool, so `shadow: "yes"` turned shadow
// on while `shadow: "true"` was refused. The error names the line and the
// setting, never the value written.
func TestSourcesFileBooleansPlainOnly(t *testing.T) {
	t.Parallel()
	settings := []struct {
		name, file, path string
		line             int
	}{
		{"shadow", "sources:\n  pay:\n    shadow: %s\n", "sources.pay.shadow", 3},
		{"forward.require_claim", "sources:\n  gh:\n    tenant: acme\n    provider: github\n    secrets: [s]\n" +
			"    forward:\n      url: \"http://n8n:5678/webhook/x\"\n      require_claim: %s\n", "sources.gh.forward.require_claim", 8},
		{"backfill.only_failed", "sources:\n  st:\n    tenant: acme\n    provider: stripe\n    secrets: [whsec_x]\n" +
			"    forward: {url: \"http://n8n:5678/webhook/x\"}\n    backfill:\n      credentials: [\"${K}\"]\n" +
			"      only_failed: %s\n", "sources.st.backfill.only_failed", 9},
	}
	env := envOf(map[string]string{"K": "rk_test_bools"})
	refused := []string{"yes", "no", "on", "off", "y", "n", "Y", "N", "YES", "On",
		`"yes"`, `"no"`, `"on"`, `"off"`, `"y"`, `"n"`, `'yes'`, `'off'`,
		"True", "FALSE", "TRUE", "False", `"true"`, `"false"`, `'true'`, "1", "0", "!!bool true"}
	for _, s := range settings {
		for _, v := range refused {
			_, err := sources.Parse(fmt.Appendf(nil, s.file, v), env)
			require.Error(t, err, "%s: %s", s.name, v)
			want := fmt.Sprintf("sources file line %d: %s must be true or false, written plainly", s.line, s.path)
			if v == "1" || v == "0" {
				want = fmt.Sprintf("sources file line %d: %s must be true or false", s.line, s.path)
			}
			require.Contains(t, err.Error(), want, "%s: %s", s.name, v)
			if w := strings.Trim(v, `"'`); len(w) > 1 {
				require.NotContains(t, err.Error(), ": "+w, "%s: the value is not echoed", s.name)
			}
		}
		for _, v := range []string{"true", "false"} {
			_, err := sources.Parse(fmt.Appendf(nil, s.file, v), env)
			require.NoError(t, err, "%s: %s", s.name, v)
		}
	}
	cfg, err := sources.Parse([]byte("sources:\n  pay:\n    shadow: true\n"), env)
	require.NoError(t, err)
	require.True(t, cfg.Policies["pay"].Shadow)
	cfg, err = sources.Parse([]byte("sources:\n  pay:\n    shadow: false\n"), env)
	require.NoError(t, err)
	require.False(t, cfg.Policies["pay"].Shadow)
}

// TestSourcesFileKeyErrorsQuoteNoKey: a key that names no setting, at
// any depth, or a key written twice, is refused naming the line and the
// place, never the key (a secret pasted as a key) nor a Go type.
func TestSourcesFileKeyErrorsQuoteNoKey(t *testing.T) {
	t.Parallel()
	const key = "rk_live_KEYNAMESECRET"
	for _, tc := range []struct{ file, want string }{
		{key + ": 1\nsources: {}\n", "sources file line 1: unknown setting at the top of the file (allowed: reconcilers, sources)"},
		{"sources:\n  pay:\n    " + key + ": 1\n", "sources file line 3: unknown setting under sources.pay (allowed: "},
		{"sources:\n  gh:\n    tenant: acme\n    provider: github\n    secrets: [s]\n    forward: {url: \"http://n8n/x\", " + key + ": 1}\n",
			"sources file line 6: unknown setting under sources.gh.forward (allowed: "},
		{"sources:\n  gh:\n    tenant: acme\n    provider: github\n    secrets: [s]\n    key: {" + key + ": 1}\n",
			"sources file line 6: unknown setting under sources.gh.key (allowed: "},
		{"sources:\n  pay:\n    lease_seconds: 30\n    lease_seconds: 40\n", "line 4: a key is written twice in one map (first at line 3)"},
		{"sources:\n  pay:\n    " + key + ": 1\n    " + key + ": 2\n", "sources file line 3: unknown setting under sources.pay"},
	} {
		_, err := sources.Parse([]byte(tc.file), envOf(nil))
		require.Error(t, err, tc.file)
		require.Contains(t, err.Error(), tc.want, tc.file)
		for _, part := range []string{"KEYNAMESECRET", "lease_seconds\"", "ingest.", "not found in type"} {
			require.NotContains(t, err.Error(), part, tc.file)
		}
	}
}
