package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/backfill"
	"github.com/idempotent-claim/idempotent-claim/sidecar/metrics"
)

// TestBackfillConfigureStartsSeries: the sources with backfill have their
// counters at 0 and their interval from the start, the last success stays
// absent until a scan succeeds, and a source that loses its backfill loses
// its interval (its counters stay: they are history).
func TestBackfillConfigureStartsSeries(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{backfill.ResultOK, backfill.ResultPartial, backfill.ResultRateLimited, backfill.ResultCredentialRefused, backfill.ResultError},
		metrics.BackfillScanResults, "every result a scan ends with")

	m := metrics.New(nil)
	b := m.Backfill()
	b.Configure(map[string]time.Duration{"stripe": 15 * time.Minute, "gh": 0})
	require.NoError(t, testutil.GatherAndCompare(m.Registry, strings.NewReader(`
# HELP claimd_backfill_interval_seconds The scheduled scan interval of each source with backfill in the running sources file (backfill.interval_minutes, in seconds; 0: on demand only).
# TYPE claimd_backfill_interval_seconds gauge
claimd_backfill_interval_seconds{source="gh"} 0
claimd_backfill_interval_seconds{source="stripe"} 900
`), "claimd_backfill_interval_seconds"))
	for _, src := range []string{"gh", "stripe"} {
		for _, r := range metrics.BackfillScanResults {
			require.Equal(t, 0.0, gathered(t, m, "claimd_backfill_scans_total", "source", src, "result", r), "%s %s", src, r)
		}
		require.Equal(t, 0.0, gathered(t, m, "claimd_backfill_missed_total", "source", src))
		for _, h := range metrics.BackfillRecoveredHows {
			require.Equal(t, 0.0, gathered(t, m, "claimd_backfill_recovered_total", "source", src, "how", h), "%s %s", src, h)
		}
	}
	n, err := testutil.GatherAndCount(m.Registry, "claimd_backfill_scans_total", "claimd_backfill_missed_total",
		"claimd_backfill_recovered_total", "claimd_backfill_last_success_timestamp_seconds", "claimd_backfill_provider_requests_total")
	require.NoError(t, err)
	require.Equal(t, 2*5+2+2*2, n, "no last success and no provider request before there was one")

	at := time.Unix(1_700_000_000, 0)
	b.Scanned("stripe", backfill.ResultOK, at)
	b.Missed("stripe", 2)
	b.Configure(map[string]time.Duration{"stripe": time.Hour}) // gh has no backfill any more; a reload keeps counts
	require.NoError(t, testutil.GatherAndCompare(m.Registry, strings.NewReader(`
# HELP claimd_backfill_interval_seconds The scheduled scan interval of each source with backfill in the running sources file (backfill.interval_minutes, in seconds; 0: on demand only).
# TYPE claimd_backfill_interval_seconds gauge
claimd_backfill_interval_seconds{source="stripe"} 3600
`), "claimd_backfill_interval_seconds"))
	require.Equal(t, 1.0, gathered(t, m, "claimd_backfill_scans_total", "source", "stripe", "result", backfill.ResultOK))
	require.Equal(t, float64(at.Unix()), gathered(t, m, "claimd_backfill_last_success_timestamp_seconds", "source", "stripe"))
	require.Equal(t, 2.0, gathered(t, m, "claimd_backfill_missed_total", "source", "stripe"))
	require.Equal(t, 0.0, gathered(t, m, "claimd_backfill_missed_total", "source", "gh"))
}

// gathered returns the value of the one series of family name with the
// given label pairs (name, value, …); the test fails without one.
func gathered(t *testing.T, m *metrics.Metrics, name string, labels ...string) float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, s := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range s.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			if c := s.GetCounter(); c != nil {
				return c.GetValue()
			}
			return s.GetGauge().GetValue()
		}
	}
	require.Failf(t, "no series", "%s %v", name, labels)
	return 0
}
