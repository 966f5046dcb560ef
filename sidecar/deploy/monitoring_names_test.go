package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/short"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Every metric the alerting rules and the dashboard read must be one a
// running claimd exports: a misspelled or renamed metric would leave a
// rule that never fires and a panel that stays empty, without any error.

// PromQL words that read like metric names: binary and set operators,
// grouping modifiers, and the literals inf and nan.
var promqlKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "atan2": true, "bool": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"offset": true, "inf": true, "nan": true,
}

var (
	promqlString   = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promqlMatchers = regexp.MustCompile(`\{[^{}]*\}`)
	promqlRange    = regexp.MustCompile(`\[[^\[\]]*\]`)
	promqlGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	promqlNumber   = regexp.MustCompile(`^(?:0[xX][0-9a-fA-F]+|[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)[a-zA-Z]*`)
	promqlIdent    = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*`)
	grafanaVar     = regexp.MustCompile(`^\$(?:\{[^}]*\}|[a-zA-Z0-9_]+)`)
)

// promqlMetricNames returns the metric names expr selects, sorted, each
// once. It reads PromQL as its grammar allows: string literals, label
// matchers ({…}), ranges and subqueries ([…]), grouping label lists
// (by (…), on (…), group_left (…)…) and numbers name no metric; an
// identifier followed by "(" is a function or an aggregation; the operator
// keywords are not names; Grafana variables ($job, ${datasource}) are
// skipped. A selector by __name__ is refused rather than guessed.
func promqlMetricNames(expr string) ([]string, error) {
	s := promqlString.ReplaceAllString(expr, `""`)
	for _, m := range promqlMatchers.FindAllString(s, -1) {
		if strings.Contains(m, "__name__") {
			return nil, fmt.Errorf("selector by __name__ in %q: name the metric instead", expr)
		}
	}
	s = promqlMatchers.ReplaceAllString(s, " ")
	s = promqlRange.ReplaceAllString(s, " ")
	s = promqlGrouping.ReplaceAllString(s, " ")
	if i := strings.IndexAny(s, "{}[]"); i >= 0 {
		return nil, fmt.Errorf("unbalanced %q in %q", s[i], expr)
	}
	seen := map[string]bool{}
	for i := 0; i < len(s); {
		rest := s[i:]
		if m := grafanaVar.FindString(rest); m != "" {
			i += len(m)
			continue
		}
		if m := promqlNumber.FindString(rest); m != "" && (rest[0] >= '0' && rest[0] <= '9' || rest[0] == '.') {
			i += len(m)
			continue
		}
		m := promqlIdent.FindString(rest)
		if m == "" {
			i++
			continue
		}
		i += len(m)
		after := strings.TrimLeft(s[i:], " \t\r\n")
		if strings.HasPrefix(after, "(") || promqlKeywords[strings.ToLower(m)] {
			continue // a function, an aggregation, or an operator
		}
		seen[m] = true
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

func TestPromQLMetricNames(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		expr string
		want []string
	}{
		{`claimd_stats_up == 0`, []string{"claimd_stats_up"}},
		{`sum by (outcome) (rate(claimd_claims_total{job=~"$job"}[$__rate_interval]))`, []string{"claimd_claims_total"}},
		{`sum(rate(a_total[5m])) by (job) / sum without (instance, outcome) (rate(b_total{outcome="won"}[5m]))`, []string{"a_total", "b_total"}},
		{"histogram_quantile(0.95,\n  sum without (instance, code) (rate(h_bucket{method=\"POST\", route=\"/v1/claims\"}[5m]))\n) > 0.25", []string{"h_bucket"}},
		{`max without (instance, state) (m{state="pending"}) > 0 unless sum without (instance, source, result) (rate(n{result="dispatched"}[10m])) > 0`, []string{"m", "n"}},
		{`a * on (job) group_left (version) b or c and ignoring (x) d`, []string{"a", "b", "c", "d"}},
		{`a / on(job) group_left b`, []string{"a", "b"}},
		{`x > bool 1 and y atan2 z`, []string{"x", "y", "z"}},
		{`1e3 * x + 0x1F - Inf + NaN + .5 - 2.5e-3 + -inf`, []string{"x"}},
		{`rate(x[5m] offset 1h) + y @ 1609746000 + z @ start()`, []string{"x", "y", "z"}},
		{`max_over_time(rate(x[5m])[30m:1m])`, []string{"x"}},
		{`label_replace(up, "dst", "$1 {by} [x] \" inner_metric", "src", '(.*)') + ` + "`raw_metric`", []string{"up"}},
		{`x{a="}", b!~"{["}`, []string{"x"}},
		{`sum by (kind) (rate(g_sum{le="1"}[$__rate_interval])) / sum by (kind) (rate(g_count[${__rate_interval}]))`, []string{"g_count", "g_sum"}},
		{`x:recorded:rate5m + x:recorded:rate5m`, []string{"x:recorded:rate5m"}},
		{`vector(1) + time()`, []string{}},
	} {
		got, err := promqlMetricNames(c.expr)
		require.NoError(t, err, c.expr)
		require.Equal(t, c.want, got, c.expr)
	}
	for _, bad := range []string{`{__name__="x"}`, `x{a="1"`, `rate(x[5m)`} {
		_, err := promqlMetricNames(bad)
		require.Error(t, err, bad)
	}
}

// monitoringExprs returns every PromQL expression of the rules file (by
// alert) and of the dashboard (by panel title and refId), keyed by where
// it is.
func monitoringExprs(t *testing.T, rulesYAML, dashboardJSON []byte) map[string]string {
	t.Helper()
	exprs := map[string]string{}
	var rules struct {
		Groups []struct {
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(rulesYAML, &rules))
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs[rulesFile+": "+r.Alert] = r.Expr
		}
	}
	var dash struct {
		Panels []dashboardPanel `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(dashboardJSON, &dash))
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				exprs[fmt.Sprintf("%s: panel %q %s", dashboardFile, p.Title, tg.RefID)] = tg.Expr
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	return exprs
}

type dashboardPanel struct {
	Title   string           `json:"title"`
	Type    string           `json:"type"`
	Targets []dashboardQuery `json:"targets"`
	Panels  []dashboardPanel `json:"panels"` // of a collapsed row
}

type dashboardQuery struct {
	RefID string `json:"refId"`
	Expr  string `json:"expr"`
}

// missingMetrics lists, for each expression, the metric names it reads
// that fams (a /metrics scrape) does not export. A histogram's
// name_bucket, name_sum and name_count, and a summary's name_sum and
// name_count, are its family's.
func missingMetrics(t *testing.T, exprs map[string]string, fams map[string]*dto.MetricFamily) []string {
	t.Helper()
	exported := func(name string) bool {
		if fams[name] != nil {
			return true
		}
		for suffix, types := range map[string][]dto.MetricType{
			"_bucket": {dto.MetricType_HISTOGRAM},
			"_sum":    {dto.MetricType_HISTOGRAM, dto.MetricType_SUMMARY},
			"_count":  {dto.MetricType_HISTOGRAM, dto.MetricType_SUMMARY},
		} {
			if base, ok := strings.CutSuffix(name, suffix); ok && fams[base] != nil && slices.Contains(types, fams[base].GetType()) {
				return true
			}
		}
		return false
	}
	var missing []string
	for where, expr := range exprs {
		names, err := promqlMetricNames(expr)
		require.NoError(t, err, where)
		require.NotEmpty(t, names, "%s reads no metric: %s", where, expr)
		for _, n := range names {
			if !exported(n) {
				missing = append(missing, where+": "+n)
			}
		}
	}
	sort.Strings(missing)
	return missing
}

func parseExposition(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	require.NoError(t, err)
	return fams
}

// TestMissingMetricsTellsMisspelled: the check itself, on a small
// exposition: a histogram's suffixes map to its family, a counter has
// none, and a misspelled name is reported with where it is.
func TestMissingMetricsTellsMisspelled(t *testing.T) {
	t.Parallel()
	fams := parseExposition(t, `# TYPE claimd_group_calls histogram
claimd_group_calls_bucket{kind="claim",le="1"} 1
claimd_group_calls_bucket{kind="claim",le="+Inf"} 1
claimd_group_calls_sum{kind="claim"} 1
claimd_group_calls_count{kind="claim"} 1
# TYPE claimd_claims_total counter
claimd_claims_total{outcome="won"} 1
`)
	missing := missingMetrics(t, map[string]string{
		"ok":         `sum(rate(claimd_group_calls_bucket[5m])) / sum(rate(claimd_group_calls_count[5m])) + sum(claimd_claims_total)`,
		"misspelled": `sum(rate(claimd_claim_total[5m]))`,
		"no suffix":  `claimd_claims_total_count`,
		"no family":  `claimd_group_calls_total`,
	}, fams)
	require.Equal(t, []string{"misspelled: claimd_claim_total", "no family: claimd_group_calls_total", "no suffix: claimd_claims_total_count"}, missing)
}

// TestMonitoringMetricsExist starts the real claimd binary against a fresh
// database, makes it claim, complete, ingest a signed delivery and
// dispatch it, and run one gap detection scan (so the labelled series
// exist), and checks that every
// metric the rules file and the dashboard read is in its /metrics. The
// same check on the rules file with one name misspelled must fail.
func TestMonitoringMetricsExist(t *testing.T) {
	t.Parallel()
	rulesYAML, err := os.ReadFile(filepath.Join(monitoringDir(t), rulesFile))
	require.NoError(t, err)
	dashboardJSON, err := os.ReadFile(filepath.Join(monitoringDir(t), dashboardFile))
	require.NoError(t, err)
	exprs := monitoringExprs(t, rulesYAML, dashboardJSON)

	base := startMonitoredClaimd(t)
	var fams map[string]*dto.MetricFamily
	var missing []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Some series appear only once the dispatcher, the replication
		// check and the backfill scan have run: scrape until none is
		// missing (or the bound).
		fams = parseExposition(t, getText(t, base+"/metrics"))
		missing = missingMetrics(t, exprs, fams)
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.Empty(t, missing, "metrics the monitoring files read that claimd does not export")

	misspelled := strings.Replace(string(rulesYAML), "claimd_conflicts_total", "claimd_conflict_total", 1)
	require.NotEqual(t, string(rulesYAML), misspelled)
	require.Equal(t, []string{rulesFile + ": ClaimdConflicts: claimd_conflict_total"},
		missingMetrics(t, monitoringExprs(t, []byte(misspelled), []byte(`{"panels":[]}`)), fams))
}

// TestDashboardShowsEveryAlert: the dashboard imports into any Grafana
// (a datasource variable of type prometheus, every panel and query using
// it) and has a panel per alert whose query is the alert's expression.
func TestDashboardShowsEveryAlert(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(monitoringDir(t), dashboardFile))
	require.NoError(t, err)
	var dash struct {
		UID           string           `json:"uid"`
		Title         string           `json:"title"`
		SchemaVersion int              `json:"schemaVersion"`
		Panels        []dashboardPanel `json:"panels"`
		Templating    struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Inputs []any `json:"__inputs"`
	}
	require.NoError(t, json.Unmarshal(b, &dash))
	require.NotEmpty(t, dash.UID)
	require.NotEmpty(t, dash.Title)
	require.GreaterOrEqual(t, dash.SchemaVersion, 39, "a current Grafana's schema")
	require.Empty(t, dash.Inputs, "no import-time inputs: the datasource is a variable")
	require.True(t, slices.ContainsFunc(dash.Templating.List, func(v struct {
		Name  string `json:"name"`
		Type  string `json:"type"`
		Query any    `json:"query"`
	}) bool {
		return v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus"
	}), "a datasource variable of type prometheus")

	// Every data source reference is the variable (raw: panels and
	// targets alike), never a uid of the machine it was made on.
	var raw struct {
		Panels []map[string]any `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &raw))
	for _, p := range raw.Panels {
		if p["type"] == "row" {
			continue
		}
		require.Equal(t, map[string]any{"type": "prometheus", "uid": "${datasource}"}, p["datasource"], "panel %v", p["title"])
		for _, tg := range p["targets"].([]any) {
			require.Equal(t, map[string]any{"type": "prometheus", "uid": "${datasource}"}, tg.(map[string]any)["datasource"], "panel %v", p["title"])
		}
	}

	byTitle := map[string]dashboardPanel{}
	for _, p := range dash.Panels {
		byTitle[p.Title] = p
	}
	for _, r := range loadAlertRules(t) {
		p, ok := byTitle[r.Alert]
		require.True(t, ok, "no panel for alert %s", r.Alert)
		require.Len(t, p.Targets, 1, r.Alert)
		require.Equal(t, strings.Join(strings.Fields(r.Expr), " "), strings.Join(strings.Fields(p.Targets[0].Expr), " "),
			"panel %s shows the alert's expression", r.Alert)
	}
	for _, want := range []string{"Claims by outcome", "Claim latency (POST /v1/claims)", "Unknown", "Dead-lettered claims",
		"Conflicts", "Ingest deliveries", "Ingest acknowledgement latency", "Dispatch backlog", "Dispatch attempts",
		"Calls per group", "Auth refusals"} {
		require.Contains(t, byTitle, want)
	}
}

func getText(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode, "GET %s: %s", url, b)
	return string(b)
}

// startMonitoredClaimd builds and starts claimd (serve) on a fresh
// database with one API key, one GitHub source forwarding to a test
// target and one Stripe trigger source with backfill whose provider API
// is a loopback stand-in (an empty event list), one reconciler (its
// series start at 0; it is never called), makes one claim and
// completes it, ingests one delivery, waits for its dispatch, asks for a
// scan of the Stripe source (it completes in the background), and returns
// claimd's base URL.
func startMonitoredClaimd(t *testing.T) string {
	t.Helper()
	short.Skip(t, "a build of claimd and PostgreSQL")
	bin := filepath.Join(t.TempDir(), "claimd")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/idempotent-claim/idempotent-claim/sidecar/cmd/claimd").CombinedOutput()
	require.NoError(t, err, "go build claimd: %s", out)

	var mu sync.Mutex
	posts := 0
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		posts++
		mu.Unlock()
	}))
	t.Cleanup(target.Close)
	// Stripe's GET /v1/events, answering an empty list: the scan succeeds
	// without any call leaving the machine.
	stripeAPI := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/events" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[],"has_more":false}`)
	}))
	t.Cleanup(stripeAPI.Close)

	const secret = "monitoring-test-github-secret"
	const apiKey = "monitoring-test-api-key-0001"
	sources := filepath.Join(t.TempDir(), "sources.yaml")
	writeFile(t, sources, `
reconcilers:
  crm: {url: "`+target.URL+`/webhook/reconcile", delay_seconds: 0}
sources:
  gh:
    tenant: acme
    provider: github
    secrets: ["${GH_HOOK_SECRET}"]
    forward: {require_claim: false, url: "`+target.URL+`/webhook/gh"}
  st:
    tenant: acme
    provider: stripe
    secrets: ["${ST_HOOK_SECRET}"]
    backfill: {credentials: ["${ST_EVENTS_KEY}"], mode: report, interval_minutes: 15, base_url: "`+stripeAPI.URL+`"}
`, 0o600)
	cmd := exec.Command(bin, "serve")
	for _, k := range []string{"PATH", "HOME", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.Env = append(cmd.Env, "DATABASE_URL="+pgtest.NewDatabase(t), "CLAIMD_ADDR=127.0.0.1:0",
		"CLAIMD_LOG_FORMAT=json", "CLAIMD_API_KEYS=acme:"+apiKey, "CLAIMD_SOURCES_FILE="+sources,
		"GH_HOOK_SECRET="+secret, "ST_HOOK_SECRET=whsec_monitoring_test", "ST_EVENTS_KEY=rk_test_monitoring", "CLAIMD_RELOAD_INTERVAL_SECONDS=0", "CLAIMD_MAINTENANCE_INTERVAL_SECONDS=0")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	cmd.Stdout = io.Discard
	require.NoError(t, cmd.Start())
	var logMu sync.Mutex
	var logBuf bytes.Buffer
	addr := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			logMu.Lock()
			logBuf.Write(sc.Bytes())
			logBuf.WriteByte('\n')
			logMu.Unlock()
			var l struct {
				Message string `json:"message"`
				Addr    string `json:"addr"`
			}
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Message == "claimd listening" {
				addr <- l.Addr
			}
		}
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // this test's own child, by PID
		<-done
		if t.Failed() {
			logMu.Lock()
			t.Logf("claimd log:\n%s", logBuf.String())
			logMu.Unlock()
		}
	})
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case <-done:
		t.Fatal("claimd exited before listening")
	case <-time.After(60 * time.Second):
		t.Fatal("claimd did not listen within 60 s")
	}

	post := func(path string, header map[string]string, body []byte) map[string]any {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		var a map[string]any
		require.NoError(t, json.NewDecoder(res.Body).Decode(&a))
		require.Equal(t, http.StatusOK, res.StatusCode, "POST %s: %v", path, a)
		return a
	}
	auth := map[string]string{"Authorization": "Bearer " + apiKey}
	won := post("/v1/claims", auth, []byte(`{"source":"stripe","event_id":"evt_monitoring"}`))
	require.Equal(t, "won", won["outcome"])
	post(fmt.Sprintf("/v1/claims/%s/complete", won["claim_id"]), auth,
		[]byte(fmt.Sprintf(`{"claim_token":%q,"result_ref":"inv_1"}`, won["claim_token"])))

	body := []byte(`{"ref":"refs/heads/main","after":"c0ffee"}`)
	post("/ingest/gh", map[string]string{"X-GitHub-Delivery": "monitoring-delivery-1", "X-GitHub-Event": "push",
		"X-Hub-Signature-256": verifytest.GitHub(secret, body)}, body)
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := posts
		mu.Unlock()
		if n > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the ingested event was not dispatched within 30 s")
		time.Sleep(20 * time.Millisecond)
	}

	req, err := http.NewRequest(http.MethodPost, base+"/v1/sources/st/backfill/scans", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+apiKey)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, res.StatusCode, "POST /v1/sources/st/backfill/scans: %s", b)
	return base
}
