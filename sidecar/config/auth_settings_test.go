package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/config"
)

// The documented defaults of the key caches and the failure limit are the
// auth package's.
func TestAuthSettings(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/db"}
	c, err := config.Load(nil, func(k string) string { return env[k] })
	require.NoError(t, err)
	d := auth.DefaultOptions()
	require.Equal(t, d.CacheTTL, c.KeyCacheTTL)
	require.Equal(t, d.NegativeTTL, c.KeyNegativeTTL)
	require.Equal(t, d.FailureLimit, c.AuthFailureLimit)
	require.Equal(t, d.FailureWindow, c.AuthFailureWindow)

	c, err = config.Load(map[string]string{"CLAIMD_AUTH_FAILURE_LIMIT": "0", "CLAIMD_AUTH_FAILURE_WINDOW_SECONDS": "0",
		"CLAIMD_KEY_NEGATIVE_CACHE_SECONDS": "0"}, func(k string) string { return env[k] })
	require.NoError(t, err, "0 turns the limit and the negative cache off; the window then does not matter")
	require.Zero(t, c.AuthFailureLimit)
	require.Zero(t, c.KeyNegativeTTL)

	c, err = config.Load(nil, func(k string) string {
		return map[string]string{"DATABASE_URL": env["DATABASE_URL"], "CLAIMD_AUTH_FAILURE_LIMIT": "5",
			"CLAIMD_AUTH_FAILURE_WINDOW_SECONDS": "300", "CLAIMD_KEY_NEGATIVE_CACHE_SECONDS": "2"}[k]
	})
	require.NoError(t, err)
	require.Equal(t, 5, c.AuthFailureLimit)
	require.Equal(t, 5*time.Minute, c.AuthFailureWindow)
	require.Equal(t, 2*time.Second, c.KeyNegativeTTL)

	for args, msg := range map[[2]string]string{
		{"CLAIMD_AUTH_FAILURE_LIMIT", "-1"}:          "CLAIMD_AUTH_FAILURE_LIMIT cannot be negative (0 = no limit)",
		{"CLAIMD_AUTH_FAILURE_LIMIT", "many"}:        `CLAIMD_AUTH_FAILURE_LIMIT must be an integer`,
		{"CLAIMD_AUTH_FAILURE_WINDOW_SECONDS", "0"}:  "CLAIMD_AUTH_FAILURE_WINDOW_SECONDS must be at least 1 while CLAIMD_AUTH_FAILURE_LIMIT is set",
		{"CLAIMD_KEY_NEGATIVE_CACHE_SECONDS", "-1"}:  "CLAIMD_KEY_NEGATIVE_CACHE_SECONDS cannot be negative",
		{"CLAIMD_KEY_CACHE_SECONDS", "-5"}:           "CLAIMD_KEY_CACHE_SECONDS cannot be negative",
		{"CLAIMD_KEY_NEGATIVE_CACHE_SECONDS", "1.5"}: `CLAIMD_KEY_NEGATIVE_CACHE_SECONDS must be an integer`,
	} {
		_, err := config.Load(map[string]string{args[0]: args[1]}, func(k string) string { return env[k] })
		require.EqualError(t, err, msg, args)
	}
}
