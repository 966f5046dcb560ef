package sources_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// B15: what a file being rewritten in place looks like part way (empty,
// cut after `sources:`) is never a configuration; a configuration without
// sources says so with `sources: {}`.

var notAConfiguration = []struct{ name, file, want string }{
	{"empty", "", "sources file is empty"},
	{"blank", "\n  \n", "sources file is empty"},
	{"comments only", "# claimd sources\n", "sources file is empty"},
	{"document marker only", "---\n", "has no `sources:` mapping"},
	{"cut after sources:", "sources:\n", "has no `sources:` mapping"},
	{"sources null", "sources: ~\n", "has no `sources:` mapping"},
	{"empty mapping", "{}\n", "has no `sources:` mapping"},
	{"null document", "null\n", "has no `sources:` mapping"},
	{"cut inside a flow list", "sources:\n  gh: {tenant: acme, provider: github, secrets: [\"whsec_ab", "sources file: yaml"},
	{"cut after a source name", "sources:\n  orders: {tenant: acme, provider: github, secrets: [s], " + fwd + "}\n  payments:",
		"line 3: sources.payments has no value"},
	{"cut after a key", "sources:\n  payments:\n    lease_policy:", "line 3: sources.payments.lease_policy has no value"},
	{"cut before the provider", "sources:\n  orders:\n    tenant: acme\n", `source "orders": tenant set without provider`},
	{"cut inside a lease policy", "sources:\n  payments:\n    lease_policy: rev", `source "payments": lease_policy must be "reclaim" or "review"`},
}

func TestSourcesFileEmptyOrCutShortIsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range notAConfiguration {
		_, err := sources.Parse([]byte(tc.file), envOf(nil))
		require.Error(t, err, tc.name)
		require.Contains(t, err.Error(), tc.want, tc.name)
		if strings.HasPrefix(tc.want, "sources file is empty") || strings.HasPrefix(tc.want, "has no `sources:`") {
			require.Contains(t, err.Error(), "`sources: {}`", "%s: the error says how to write no sources", tc.name)
		}
	}
}

func TestSourcesFileExplicitlyWithoutSources(t *testing.T) {
	t.Parallel()
	for _, file := range []string{"sources: {}\n", `{"sources": {}}`, "# none for now\nsources: {}\n"} {
		cfg, err := sources.Parse([]byte(file), envOf(nil))
		require.NoError(t, err, file)
		require.Empty(t, cfg.Sources, file)
		require.Empty(t, cfg.Policies, file)
		require.Len(t, cfg.Digest, 64, file)
	}
}

// A claim-only source with the default policy is written `name: {}`; a
// null written out stays what the field documents (retry_statuses: null
// is the default list).
func TestSourcesFileExplicitValuesStillParse(t *testing.T) {
	t.Parallel()
	cfg, err := sources.Parse([]byte("sources:\n  audit: {}\n  gh:\n    tenant: acme\n    provider: github\n    secrets: [s]\n"+
		"    forward: {url: \"http://n8n/x\", retry_statuses: null}\n"), envOf(nil))
	require.NoError(t, err)
	require.Contains(t, cfg.Policies, "audit")
	require.Equal(t, sources.DefaultRetryStatuses(), cfg.Sources["gh"].Forward.RetryStatuses)
}

func TestSourcesFileDigestFollowsTheBytes(t *testing.T) {
	t.Parallel()
	a, err := sources.Parse([]byte("sources:\n  pay: {lease_policy: review}\n"), envOf(nil))
	require.NoError(t, err)
	b, err := sources.Parse([]byte("sources:\n  pay: {lease_policy: review}\n"), envOf(nil))
	require.NoError(t, err)
	c, err := sources.Parse([]byte("sources:\n  pay: {lease_policy: review} # changed\n"), envOf(nil))
	require.NoError(t, err)
	require.Equal(t, a.Digest, b.Digest)
	require.NotEqual(t, a.Digest, c.Digest)
}

// FuzzParseSourcesFile: any input either is refused or gives a complete
// configuration, never a panic or a configuration without its maps.
func FuzzParseSourcesFile(f *testing.F) {
	for _, tc := range notAConfiguration {
		f.Add(tc.file)
	}
	f.Add("sources: {}\n")
	f.Add("sources:\n  pay: {lease_policy: review}\n")
	f.Add("sources:\n  gh: {tenant: acme, provider: github, secrets: [s], forward: {url: \"http://n8n/x\"}}\n")
	f.Fuzz(func(t *testing.T, file string) {
		cfg, err := sources.Parse([]byte(file), envOf(nil))
		if err != nil {
			return
		}
		require.NotNil(t, cfg.Sources)
		require.NotNil(t, cfg.Policies)
		require.Len(t, cfg.Digest, 64)
	})
}
