package main

import (
	"io"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/backfill"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// A source with backfill has its gap detection series from the start
// (counters at 0, its scan interval), with no scan run yet, so the alerts
// on them can tell "nothing missed" from "never looked"; a reload that
// takes its backfill away removes its interval (the stale alert stops
// watching it) and keeps its counters. No scan runs here (maintenance is
// off and nothing asks for one): no provider is called.
func TestBackfillSeriesFollowTheSourcesFile(t *testing.T) {
	t.Parallel()
	withBackfill := `sources:
  st:
    tenant: t1
    provider: stripe
    secrets: ["${ST_HOOK_SECRET}"]
    backfill: {credentials: ["${ST_EVENTS_KEY}"], mode: report, interval_minutes: 20, base_url: "http://127.0.0.1:1"}
`
	without := `sources:
  st:
    tenant: t1
    provider: stripe
    secrets: ["${ST_HOOK_SECRET}"]
`
	b := &reloadBundle{t: t, path: filepath.Join(t.TempDir(), "sources.yaml")}
	b.write(withBackfill)
	b.p = startServe(t, map[string]string{
		"DATABASE_URL": pgtest.NewDatabase(t), "CLAIMD_API_KEYS": "t1:" + reloadKey,
		"CLAIMD_SOURCES_FILE": b.path, "CLAIMD_RELOAD_INTERVAL_SECONDS": "0",
		"ST_HOOK_SECRET": "whsec_backfill_metrics_test", "ST_EVENTS_KEY": "rk_test_backfill_metrics",
	})
	require.EqualValues(t, 1200, b.metric(`claimd_backfill_interval_seconds{source="st"}`))
	for _, r := range []string{backfill.ResultOK, backfill.ResultPartial, backfill.ResultRateLimited,
		backfill.ResultCredentialRefused, backfill.ResultError} {
		require.EqualValues(t, 0, b.metric(`claimd_backfill_scans_total{result="`+r+`",source="st"}`), r)
	}
	require.EqualValues(t, 0, b.metric(`claimd_backfill_missed_total{source="st"}`))
	require.EqualValues(t, 0, b.metric(`claimd_backfill_recovered_total{how="fetched",source="st"}`))
	require.EqualValues(t, 0, b.metric(`claimd_backfill_recovered_total{how="redelivered",source="st"}`))
	require.NotContains(t, b.metricsText(), "claimd_backfill_last_success_timestamp_seconds{",
		"no last success before a scan succeeded")

	b.write(without)
	b.hup()
	b.waitMessages(msgReloaded, 1)
	require.NotContains(t, b.metricsText(), "claimd_backfill_interval_seconds{")
	require.EqualValues(t, 0, b.metric(`claimd_backfill_missed_total{source="st"}`), "counters stay")

	b.write(withBackfill)
	b.hup()
	b.waitMessages(msgReloaded, 2)
	require.EqualValues(t, 1200, b.metric(`claimd_backfill_interval_seconds{source="st"}`))
}

// metricsText returns the whole /metrics exposition.
func (b *reloadBundle) metricsText() string {
	resp, err := http.Get(b.p.url + "/metrics")
	require.NoError(b.t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(b.t, err)
	require.Equal(b.t, http.StatusOK, resp.StatusCode)
	return string(body)
}
