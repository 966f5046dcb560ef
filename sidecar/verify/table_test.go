package verify_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// ProviderTableWriteEnv, set to 1, makes TestReadmeProviderTableIsCurrent
// rewrite README.md's provider table instead of failing.
const providerTableWriteEnv = "IC_WRITE_PROVIDER_TABLE"

// The README's provider table is generated from the registry; this keeps
// it true. IC_WRITE_PROVIDER_TABLE=1 go test ./sidecar/verify -run
// TestReadmeProviderTableIsCurrent rewrites it.
func TestReadmeProviderTableIsCurrent(t *testing.T) {
	const path = "../../README.md"
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	readme := string(raw)
	begin := strings.Index(readme, verify.ProviderTableBegin)
	require.GreaterOrEqual(t, begin, 0, "README.md has no provider table marker %q", verify.ProviderTableBegin)
	start := begin + len(verify.ProviderTableBegin)
	n := strings.Index(readme[start:], verify.ProviderTableEnd)
	require.GreaterOrEqual(t, n, 0, "README.md's provider table has no end marker %q", verify.ProviderTableEnd)
	want := verify.MarkdownProviderTable()
	if readme[start:start+n] == want {
		return
	}
	if os.Getenv(providerTableWriteEnv) == "1" {
		require.NoError(t, os.WriteFile(path, []byte(readme[:start]+want+readme[start+n:]), 0o644))
		t.Logf("README.md's provider table rewritten")
		return
	}
	t.Fatalf("README.md's provider table differs from the registry's: regenerate it with\n\t%s=1 go test ./sidecar/verify -run TestReadmeProviderTableIsCurrent", providerTableWriteEnv)
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
