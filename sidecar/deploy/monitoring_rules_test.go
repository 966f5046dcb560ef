package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/docref"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/short"
)

// The monitoring files: Prometheus alerting rules, their promtool unit
// tests, and the Grafana dashboard.
const (
	rulesFile     = "claimd-rules.yml"
	rulesTestFile = "claimd-rules.test.yml"
	dashboardFile = "grafana-dashboard.json"
)

func monitoringDir(t *testing.T) string {
	return filepath.Join(repoRoot(t), "sidecar", "deploy", "monitoring")
}

// promtoolPath finds Prometheus's promtool: PROMTOOL, else on PATH. It is
// skipped only under -short: a missing promtool fails the test with how to
// install it (.ci/run installs it; make doctor lists it).
func promtoolPath(t *testing.T) string {
	t.Helper()
	short.Skip(t, "promtool")
	if p := os.Getenv("PROMTOOL"); p != "" {
		return p
	}
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found (%v): install it (Debian/Ubuntu: apt-get install --no-install-recommends prometheus; "+
			"macOS: brew install prometheus) or set PROMTOOL to its path", err)
	}
	return p
}

// promtool runs promtool with args in the monitoring folder and fails the
// test, with promtool's output, unless it exits 0.
func promtool(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(promtoolPath(t), args...)
	cmd.Dir = monitoringDir(t)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

// TestAlertRulesPassPromtool: the rules file is valid for Prometheus
// (promtool check rules: syntax, PromQL, templates), and its unit tests
// pass (promtool test rules: when each alert fires, with which labels and
// text, and when it stops).
func TestAlertRulesPassPromtool(t *testing.T) {
	t.Parallel()
	require.Contains(t, promtool(t, "check", "rules", rulesFile), "SUCCESS")
	require.Contains(t, promtool(t, "test", "rules", rulesTestFile), "SUCCESS")
}

// alertRule is one rule of claimd-rules.yml.
type alertRule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func loadAlertRules(t *testing.T) []alertRule {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(monitoringDir(t), rulesFile))
	require.NoError(t, err)
	var doc struct {
		Groups []struct {
			Name  string      `yaml:"name"`
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&doc))
	var rules []alertRule
	for _, g := range doc.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules
}

// TestAlertRulesSayWhatToDo: every alert waits (for), has a severity an
// Alertmanager route can match, and annotations that say what it means
// and where it is settled (a runbook: a document of the repository and a
// heading it has); every alert is exercised by the unit tests; and
// the alerts cover what the design asks to watch.
func TestAlertRulesSayWhatToDo(t *testing.T) {
	t.Parallel()
	rules := loadAlertRules(t)
	docs := &docref.Checker{Root: repoRoot(t)}
	tests, err := os.ReadFile(filepath.Join(monitoringDir(t), rulesTestFile))
	require.NoError(t, err)
	var names []string
	for _, r := range rules {
		require.NotEmpty(t, r.Alert, "only alerting rules here (record: %q)", r.Record)
		names = append(names, r.Alert)
		require.NotEmpty(t, r.For, "%s: for", r.Alert)
		require.Contains(t, []string{"critical", "warning", "info"}, r.Labels["severity"], "%s: severity", r.Alert)
		require.NotEmpty(t, r.Annotations["summary"], "%s: summary", r.Alert)
		d := r.Annotations["description"]
		require.GreaterOrEqual(t, len(d), 200, "%s: the description says what it means and what to do", r.Alert)
		_, runbook, ok := strings.Cut(d, "Runbook: ")
		require.True(t, ok, "%s: the description ends with \"Runbook: \" and the document that explains it", r.Alert)
		refs := docref.Find(runbook)
		require.NotEmpty(t, refs, "%s: the runbook names a document by its path from the repository's root", r.Alert)
		for _, ref := range refs {
			require.Contains(t, ref, "#", "%s: the runbook %s names a section", r.Alert, ref)
			require.NoError(t, docs.Check(ref), "%s: the runbook's document and section", r.Alert)
		}
		require.True(t, strings.Contains(string(tests), "alertname: "+r.Alert+"\n"), "%s has no promtool unit test", r.Alert)
	}
	require.Len(t, slices.Compact(slices.Sorted(slices.Values(names))), len(names), "alert names are unique")

	// What the design calls out, by the metric each alert reads.
	for _, want := range []struct{ what, metric string }{
		{"oldest unclaimed event age", "claimd_oldest_dispatch_pending_seconds"},
		{"growth of unknown", `claimd_records_open{state="unknown"}`},
		{"growth of dead letters", `claimd_records_open{state="dead_lettered"}`},
		{"dead-lettered dispatches", `claimd_dispatch_total{result="dead_lettered"}`},
		{"conflict rate", "claimd_conflicts_total"},
		{"dispatch backlog", `claimd_inbox_dispatch_open{state="pending"}`},
		{"retry rate", "claimd_retries_total"},
		{"p95 claim latency", `claimd_http_request_duration_seconds_bucket{method="POST", route="/v1/claims"}`},
		{"missed events not recovered", "claimd_backfill_missed_total"},
		{"refused backfill credentials", `claimd_backfill_scans_total{result="credential_refused"}`},
		{"gap detection that stopped succeeding", "claimd_backfill_last_success_timestamp_seconds"},
	} {
		found := slices.ContainsFunc(rules, func(r alertRule) bool { return strings.Contains(r.Expr, want.metric) })
		require.True(t, found, "no alert on %s (%s)", want.what, want.metric)
	}
}
