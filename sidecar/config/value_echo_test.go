package config_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/config"
)

// A setting of the wrong form is refused naming the variable, never its
// value: a secret set in the wrong variable by mistake must not reach the
// logs.
func TestSettingErrorsQuoteNoValue(t *testing.T) {
	t.Parallel()
	const secret = "sk_live_51Hs3cr3tV4lu3"
	env := map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/db"}
	for _, name := range []string{"CLAIMD_AUTH_FAILURE_LIMIT", "CLAIMD_MAX_CONNS_PER_IP", "CLAIMD_LOG_FORMAT", "CLAIMD_KEY_CACHE_SECONDS", "CLAIMD_MIGRATE"} {
		_, err := config.Load(map[string]string{name: secret}, func(k string) string { return env[k] })
		require.Error(t, err, name)
		require.Contains(t, err.Error(), name)
		require.NotContains(t, err.Error(), "s3cr3t", name)
	}
}
