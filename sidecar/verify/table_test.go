package verify_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// ProviderTableWriteEnv, set to 1, makes TestReadmeProviderTableIsCurrent
// rewrite sidecar/docs/ingest.md's provider tables instead of failing.
const providerTableWriteEnv = "IC_WRITE_PROVIDER_TABLE"

// The provider table of sidecar/docs/ingest.md and its table of
// sidecar/docs/ingest.md#configuring-each-provider are generated from the
// registry; this keeps them true. IC_WRITE_PROVIDER_TABLE=1 go test
// ./sidecar/verify -run TestReadmeProviderTableIsCurrent rewrites both.
func TestReadmeProviderTableIsCurrent(t *testing.T) {
	checkReadmeSection(t, verify.ProviderTableBegin, verify.ProviderTableEnd, verify.MarkdownProviderTable())
	checkReadmeSection(t, verify.ProviderSetupBegin, verify.ProviderSetupEnd, verify.MarkdownProviderSetup())
}

func TestMarkdownProviderTable(t *testing.T) {
	t.Parallel()
	table := verify.MarkdownProviderTable()
	lines := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
	require.Len(t, lines, 2+len(verify.Providers()), "a header, a rule and one row per provider")
	for _, p := range verify.Providers() {
		require.Contains(t, table, "| `"+string(p.Type)+"` | ["+p.Name+"]("+p.Docs[0]+")")
	}
	require.Contains(t, table, "`/pending_webhooks`", "Stripe's retry counter is volatile by default")
}
