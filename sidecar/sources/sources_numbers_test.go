package sources_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// A whole-number setting written with a fraction or an exponent is
// refused naming its line and path, never the value: yaml.v3 would cut
// the fraction (backfill.interval_minutes: 0.5 would become 0, on demand
// only; lease_seconds: 0.5 would become 0, the default lease). Written as
// a whole number, in any YAML spelling of one, it still parses.
func TestSourcesFileWholeNumbers(t *testing.T) {
	t.Parallel()
	stripe := func(extra string) string {
		return "sources:\n  stripe:\n    tenant: acme\n    provider: stripe\n    secrets: [\"whsec_numbers\"]\n" + extra
	}
	for _, tc := range []struct{ name, file, want string }{
		{"a claim-only policy", "sources:\n  payments:\n    lease_seconds: 1.5\n", "line 3: sources.payments.lease_seconds must be a whole number"},
		{"a zero fraction", "sources:\n  payments: {max_attempts: 2.0}\n", "line 2: sources.payments.max_attempts must be a whole number"},
		{"an exponent", "sources:\n  payments: {retention_days: 3e1}\n", "sources.payments.retention_days must be a whole number"},
		{"a whole number past the type's range", "sources:\n  payments: {max_attempts: 1e30}\n", "line 2: sources.payments.max_attempts must be a whole number (64 bits); the number written is out of range"},
		{"infinity", "sources:\n  payments: {max_attempts: .inf}\n", "sources.payments.max_attempts must be a whole number (64 bits); the number written is out of range"},
		{"past the range inside forward", stripe("    forward: {url: \"http://127.0.0.1:9/h\", max_attempts: -1e30}\n"),
			"line 6: sources.stripe.forward.max_attempts must be a whole number"},
		{"a leading dot", "sources:\n  payments: {key_retention_days: .5}\n", "sources.payments.key_retention_days must be a whole number"},
		{"an ingest setting", stripe("    max_body_bytes: 1048576.5\n    forward: {url: \"http://127.0.0.1:9/h\"}\n"),
			"line 6: sources.stripe.max_body_bytes must be a whole number"},
		{"inside forward", stripe("    forward: {url: \"http://127.0.0.1:9/h\", max_attempts: 7.5}\n"),
			"line 6: sources.stripe.forward.max_attempts must be a whole number"},
		{"inside backfill", stripe("    forward: {url: \"http://127.0.0.1:9/h\"}\n    backfill: {credentials: [\"${K}\"], interval_minutes: 0.5}\n"),
			"line 7: sources.stripe.backfill.interval_minutes must be a whole number"},
	} {
		_, err := sources.Parse([]byte(tc.file), envOf(map[string]string{"K": "rk_test_numbers"}))
		require.Error(t, err, tc.name)
		require.Contains(t, err.Error(), tc.want, tc.name)
		for _, v := range []string{"1.5", "2.0", "3e1", ".5", "0.5", "7.5", "1048576.5", "1e30", "inf"} {
			require.NotContains(t, err.Error(), v, "%s: the value is not echoed", tc.name)
		}
	}
	for _, file := range []string{
		"sources:\n  payments: {lease_seconds: 90, max_attempts: 3, retention_days: 30, key_retention_days: 400}\n",
		"sources:\n  payments: {lease_seconds: 0x5A}\n",
		stripe("    forward: {url: \"http://127.0.0.1:9/h\", max_attempts: 7}\n    backfill: {credentials: [\"${K}\"], interval_minutes: 15}\n"),
	} {
		_, err := sources.Parse([]byte(file), envOf(map[string]string{"K": "rk_test_numbers"}))
		require.NoError(t, err, file)
	}
}
