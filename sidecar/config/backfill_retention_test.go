package config_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/config"
)

// A backfill window that reaches past the key retention of the source's
// records is refused at start when that retention is the environment's
// default (CLAIMD_KEY_RETENTION_DAYS): a key purged within the window
// would look missed, and the scan would dispatch its event again. (The
// source's own key_retention_days, which every source of its dedupe_scope
// shares, is refused by the sources file's own check in ingest.) The error names the source, the
// window and where the retention comes from, never a secret.
func TestBackfillWindowFitsKeyRetention(t *testing.T) {
	t.Parallel()
	const cred = "rk_test_backfill_retention_0001"
	stripe := `  stripe-bf:
    tenant: acme
    provider: stripe
    secrets: ["whsec_backfill_retention"]
    forward: {url: "http://127.0.0.1:9/hook"}
    backfill: {credentials: ["${STRIPE_EVENTS_KEY}"], window_hours: 72}
`
	for _, tc := range []struct {
		name, file, keyDays, want string
	}{
		{"fits the default retention", "sources:\n" + stripe, "", ""},
		{"fits a longer environment retention", "sources:\n" + stripe, "4", ""},
		{"the environment's retention is shorter", "sources:\n" + stripe, "2",
			`source "stripe-bf": backfill.window_hours (72 h) must be shorter than the key retention of its records (48 h, from CLAIMD_KEY_RETENTION_DAYS)`},
		{"as long as the window", "sources:\n" + stripe, "3", `(72 h, from CLAIMD_KEY_RETENTION_DAYS)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sources.yaml")
			require.NoError(t, os.WriteFile(path, []byte(tc.file), 0o600))
			env := map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/db", "CLAIMD_SOURCES_FILE": path,
				"CLAIMD_KEY_RETENTION_DAYS": tc.keyDays, "CLAIMD_RETENTION_DAYS": "1", "STRIPE_EVENTS_KEY": cred}
			_, err := config.Load(nil, func(k string) string { return env[k] })
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), "CLAIMD_SOURCES_FILE: ")
			require.Contains(t, err.Error(), tc.want)
			require.NotContains(t, err.Error(), cred)
		})
	}
}
