package config_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/config"
)

// The configuration table of sidecar/docs/manual.md#configuration is
// generated; this keeps it true.
func TestReadmeConfigTableIsCurrent(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../docs/manual.md")
	require.NoError(t, err)
	require.True(t, strings.Contains(string(readme), config.MarkdownTable()),
		"sidecar/docs/manual.md's configuration table (## Configuration) is stale: replace it with the output of `go run ./sidecar/cmd/claimd settings -markdown`")
}

func TestLoadDefaultsAndErrors(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/db"}
	get := func(k string) string { return env[k] }
	c, err := config.Load(nil, get)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:8080", c.Addr)
	require.True(t, c.Migrate)
	require.Equal(t, 5, c.Policies.Default.MaxAttempts)
	require.Equal(t, claim.Review, c.Policies.Default.LeasePolicy, "safe by default: an expired lease goes to review")
	require.False(t, c.RequireSyncReplication, "synchronous replication is reported, required only when asked")

	c, err = config.Load(map[string]string{"CLAIMD_ADDR": "0.0.0.0:9000"}, get)
	require.NoError(t, err)
	require.Equal(t, "0.0.0.0:9000", c.Addr, "flags win over the environment")

	for k, v := range map[string]string{
		"CLAIMD_MAX_ATTEMPTS": "many", "CLAIMD_LEASE_POLICY": "sometimes", "CLAIMD_MIGRATE": "perhaps",
		"CLAIMD_API_KEYS": "nokey", "CLAIMD_LOG_FORMAT": "xml", "CLAIMD_REQUIRE_SYNC_REPLICATION": "sometimes",
	} {
		bad := map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/db", k: v}
		_, err := config.Load(nil, func(s string) string { return bad[s] })
		require.Error(t, err, k)
	}
	c, err = config.Load(map[string]string{"CLAIMD_REQUIRE_SYNC_REPLICATION": "true"}, get)
	require.NoError(t, err)
	require.True(t, c.RequireSyncReplication)

	_, err = config.Load(nil, func(string) string { return "" })
	require.ErrorContains(t, err, "DATABASE_URL")
}
