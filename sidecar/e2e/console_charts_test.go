package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// consoleChartsScript drives headless Chromium through the source page's
// charts.
const consoleChartsScript = "testdata/console-charts.mjs"

// consoleChartShots are the chart screenshots and their widths (both
// full-page: the height follows the charts).
var consoleChartShots = map[string]int{"source.png": 1280, "source-phone.png": 390}

// consoleChartChecks are the checks the charts script must report.
var consoleChartChecks = []string{"sign_in", "overview_saved", "source_charts", "source_week", "phone_width", "csp_watch_works", "no_csp_violation"}

// chartsExpect is what a source page's charts must show, summed over
// their bars: chart id → series → total.
type chartsExpect map[string]map[string]float64

// TestConsoleCharts seeds two sources of one tenant through claimd's API
// (claims with duplicates and a conflict; ingest deliveries with
// redeliveries, dispatched to a target), lets claimd's maintenance loop
// roll the numbers up (waits until stats_hourly has them), and drives the
// console in headless Chromium (testdata/console-charts.mjs): the
// overview's "what this saved you", each source page's charts present,
// labelled (role=img, title, desc, axis labels) and equal to the seeded
// counts in their bars and tables, the 7-day range, no horizontal scroll
// at 390 px, and no Content-Security-Policy violation on any page. With
// IC_CONSOLE_SCREENSHOTS=1 it writes source.png and source-phone.png to
// sidecar/console/screenshots. Same tools as TestConsoleBrowser.
func TestConsoleCharts(t *testing.T) {
	tools := findBrowserTools(t)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(target.Close)

	tenant, key := "acme", "acme-"+RandomHex(t, 16)
	tokSecret := "tok-" + RandomHex(t, 16)
	dir := LogDir(t, "console-charts")
	sources := filepath.Join(dir, "sources.yaml")
	require.NoError(t, os.WriteFile(sources, []byte(fmt.Sprintf(`sources:
  forms:
    tenant: %s
    provider: token
    secrets: [%q]
    options: {header: %s, key: {id_pointers: ["/id"]}}
    forward:
      url: %q
      require_claim: false
`, tenant, tokSecret, consoleTokHeader, target.URL+"/webhook/forms")), 0o600))
	c := StartClaimd(t, ClaimdConfig{Env: map[string]string{
		"CLAIMD_API_KEYS":                     tenant + ":" + key,
		"CLAIMD_SOURCES_FILE":                 sources,
		"CLAIMD_CONSOLE":                      "true",
		"CLAIMD_MAINTENANCE_INTERVAL_SECONDS": "1",
	}})
	api := consoleAPI{t: t, base: c.URL()}

	// stripe: 5 events won and completed, 3 duplicates, 1 conflict.
	for i := 1; i <= 5; i++ {
		w := api.claim(key, "stripe", fmt.Sprintf("evt_%d", i), map[string]any{"n": i}, 0)
		api.complete(key, w, fmt.Sprintf("ref_%d", i))
	}
	for _, ev := range []int{1, 1, 2} {
		require.Equal(t, "duplicate", api.claimOutcome(key, "stripe", fmt.Sprintf("evt_%d", ev), map[string]any{"n": ev}))
	}
	require.Equal(t, "conflict", api.claimOutcome(key, "stripe", "evt_3", map[string]any{"n": 99}))
	// forms: 4 deliveries accepted and dispatched, 2 provider redeliveries.
	var ids []string
	for i := 1; i <= 4; i++ {
		ids = append(ids, api.ingest(tokSecret, map[string]any{"id": fmt.Sprintf("form_%d", i)}))
	}
	for _, i := range []int{1, 2} {
		api.do("", http.MethodPost, "/ingest/forms", map[string]string{consoleTokHeader: tokSecret},
			map[string]any{"id": fmt.Sprintf("form_%d", i)}, http.StatusOK)
	}
	for _, id := range ids {
		api.waitDispatch(key, id, "dispatched")
	}
	expect := map[string]chartsExpect{
		"stripe": {"chart-deliveries": {"deliveries": 9}, "chart-conflicts": {"conflicts": 1},
			"chart-missed": {"missed": 0, "backfilled": 0}},
		"forms": {"chart-deliveries": {"deliveries": 6}, "chart-conflicts": {"conflicts": 0}},
	}
	dups := map[string]float64{"stripe": 3, "forms": 2}
	dispatched := map[string]float64{"stripe": 0, "forms": 4}

	// Wait for the maintenance loop's rollup to have every seeded row.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := pgx.Connect(ctx, c.DatabaseURL)
	require.NoError(t, err)
	defer db.Close(context.Background())
	for {
		var n, d, x int64
		require.NoError(t, db.QueryRow(ctx, `SELECT COALESCE(sum(deliveries), 0)::bigint, COALESCE(sum(duplicates_stopped), 0)::bigint,
			COALESCE(sum(dispatched), 0)::bigint FROM stats_hourly WHERE tenant = $1`, tenant).Scan(&n, &d, &x))
		if n == 15 && d == 5 && x == 4 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the maintenance loop's rollup has %d deliveries, %d duplicates, %d dispatches; want 15, 5, 4", n, d, x)
		case <-time.After(pollInterval):
		}
	}

	seed := map[string]any{"key": key, "tenant": tenant, "expect": expect, "duplicates": dups, "dispatched": dispatched,
		"saved": map[string]int{"duplicates": 5, "conflicts": 1, "backfilled": 0}}
	seedFile := filepath.Join(dir, "seed.json")
	raw, err := json.Marshal(seed)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(seedFile, raw, 0o600))

	shots := ""
	if os.Getenv("IC_CONSOLE_SCREENSHOTS") == "1" {
		shots = filepath.Join(dir, "screenshots")
	}
	script, err := filepath.Abs(consoleChartsScript)
	require.NoError(t, err)
	env := Env(map[string]string{
		"IC_CONSOLE_URL":         c.URL(),
		"IC_CONSOLE_SEED":        seedFile,
		"IC_CONSOLE_SCREENSHOTS": shots,
		"IC_CONSOLE_DEBUG":       filepath.Join(dir, "failed"),
		"IC_SCREENSHOT_TOOLS":    tools.playwright,
		"CHROMIUM_PATH":          tools.chromium,
	})
	results, exitErr := runConsoleScript(t, dir, env, tools.node, script)
	got := map[string]consoleResult{}
	var last *consoleResult
	for i := range results {
		r := results[i]
		if r.Done || r.Check == "" {
			last = &results[i]
			continue
		}
		got[r.Check] = r
		if !r.OK {
			t.Errorf("browser check %s failed: %s (at %s)", r.Check, r.Error, r.URL)
		}
	}
	require.NotNil(t, last, "the script ended without its summary line (exit: %v); see %s", exitErr, filepath.Join(dir, "console-browser.log"))
	require.True(t, last.Done, "the script stopped: %s", last.Error)
	for _, name := range consoleChartChecks {
		if _, ok := got[name]; !ok {
			t.Errorf("browser check %s was not run", name)
		}
	}
	require.False(t, t.Failed(), "browser checks failed; page screenshots of the failures in %s", filepath.Join(dir, "failed"))
	require.NoError(t, exitErr)
	if shots != "" {
		for name, width := range consoleChartShots {
			raw, err := os.ReadFile(filepath.Join(shots, name))
			require.NoError(t, err, "screenshot %s", name)
			cfg, err := png.DecodeConfig(bytes.NewReader(raw))
			require.NoError(t, err, "screenshot %s is no PNG", name)
			require.Equal(t, width, cfg.Width, "screenshot %s width", name)
			dst := filepath.Join(consoleShotsDir, name)
			require.NoError(t, os.WriteFile(dst+".tmp", raw, 0o644))
			require.NoError(t, os.Rename(dst+".tmp", dst))
			t.Logf("screenshot %s (%d bytes)", dst, len(raw))
		}
	}
}
