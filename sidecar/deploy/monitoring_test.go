package deploy

import (
	"encoding/json"
	"net"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// Files of the monitoring profile that another change writes: the alert
// rules and the Grafana dashboard. The compose file mounts them from here.
const (
	composeRulesPath     = "sidecar/deploy/monitoring/claimd-rules.yml"
	composeDashboardPath = "sidecar/deploy/monitoring/grafana-dashboard.json"
)

// readYAML decodes a repository file (relative path) strictly into v.
func readYAML(t *testing.T, rel string, v any) {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot(t), filepath.FromSlash(rel)))
	require.NoError(t, err)
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(v), rel)
}

// mountedFile returns the read-only bind mount of s at target, its source
// relative to the repository root (the file need not exist yet).
func mountedFile(t *testing.T, s types.ServiceConfig, target string) string {
	t.Helper()
	m := bindMount(t, s, target)
	require.True(t, m.ReadOnly, "service %s: %s is mounted read-only", s.Name, target)
	rel, err := filepath.Rel(repoRoot(t), m.Source)
	require.NoError(t, err)
	require.False(t, strings.HasPrefix(rel, ".."), "%s is outside the repository", m.Source)
	return filepath.ToSlash(rel)
}

// present requires a repository file to exist (the files the monitoring
// profile mounts).
func present(t *testing.T, rel string) bool {
	t.Helper()
	_, err := os.Stat(filepath.Join(repoRoot(t), filepath.FromSlash(rel)))
	require.NoError(t, err, "%s is mounted by the monitoring profile and must exist", rel)
	return true
}

type prometheusConfig struct {
	Global struct {
		ScrapeInterval     string `yaml:"scrape_interval"`
		EvaluationInterval string `yaml:"evaluation_interval"`
	} `yaml:"global"`
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string         `yaml:"job_name"`
		MetricsPath   string         `yaml:"metrics_path"`
		Scheme        string         `yaml:"scheme"`
		Authorization map[string]any `yaml:"authorization"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

// TestComposePrometheus: the monitoring profile's Prometheus reads the
// repository's prometheus.yml, scrapes claimd's /metrics where claimd
// serves it (without a token, as the compose file sets none), and loads the
// claimd alert rules from where the compose file mounts them.
func TestComposePrometheus(t *testing.T) {
	t.Parallel()
	p := loadCompose(t, nil, "monitoring")
	prom := service(t, p, "prometheus")

	var configFile string
	for _, arg := range prom.Command {
		if v, ok := strings.CutPrefix(arg, "--config.file="); ok {
			configFile = v
		}
	}
	require.NotEmpty(t, configFile, "prometheus is started with --config.file: %q", prom.Command)
	require.Equal(t, "sidecar/deploy/monitoring/prometheus.yml", mountedFile(t, prom, configFile))
	var cfg prometheusConfig
	readYAML(t, "sidecar/deploy/monitoring/prometheus.yml", &cfg)
	require.NotEmpty(t, cfg.Global.EvaluationInterval, "rules are evaluated at a set interval")

	// claimd's /metrics: its own listener when CLAIMD_METRICS_ADDR is set,
	// else CLAIMD_ADDR.
	ce := env(t, service(t, p, "claimd"))
	addr := ce["CLAIMD_METRICS_ADDR"]
	if addr == "" {
		addr = ce["CLAIMD_ADDR"]
	}
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err, "claimd's metrics address %q", addr)
	require.Len(t, cfg.ScrapeConfigs, 1, "one job: claimd")
	job := cfg.ScrapeConfigs[0]
	require.Equal(t, "claimd", job.JobName)
	require.Contains(t, []string{"", "/metrics"}, job.MetricsPath)
	require.Contains(t, []string{"", "http"}, job.Scheme)
	require.Len(t, job.StaticConfigs, 1)
	require.Equal(t, []string{"claimd:" + port}, job.StaticConfigs[0].Targets, "the scrape target is claimd's metrics listener")
	require.NotContains(t, ce, "CLAIMD_METRICS_TOKEN", "the compose file's /metrics needs no token")
	require.Nil(t, job.Authorization, "no token to send")

	// rule_files name the rules file mounted from the repository.
	require.Equal(t, []string{"/etc/prometheus/rules/claimd-rules.yml"}, cfg.RuleFiles)
	require.Equal(t, composeRulesPath, mountedFile(t, prom, cfg.RuleFiles[0]))
	if present(t, composeRulesPath) {
		var rules struct {
			Groups []struct {
				Name  string           `yaml:"name"`
				Rules []map[string]any `yaml:"rules"`
			} `yaml:"groups"`
		}
		b, err := os.ReadFile(filepath.Join(repoRoot(t), composeRulesPath))
		require.NoError(t, err)
		require.NoError(t, yaml.Unmarshal(b, &rules), composeRulesPath)
		require.NotEmpty(t, rules.Groups, "%s has rule groups", composeRulesPath)
		for _, g := range rules.Groups {
			for _, r := range g.Rules {
				require.NotEmpty(t, r["expr"], "%s: group %s: every rule has an expr", composeRulesPath, g.Name)
			}
		}
	}

	// Data in a volume; the server on its default port, published on loopback.
	var data bool
	for _, v := range prom.Volumes {
		data = data || (v.Type == types.VolumeTypeVolume && v.Target == "/prometheus")
	}
	require.True(t, data, "prometheus keeps its data in a volume")
	require.Len(t, prom.Ports, 1)
	require.Equal(t, uint32(9090), prom.Ports[0].Target)
}

// TestComposeGrafana: Grafana's provisioning (data source and dashboard
// provider) comes from sidecar/deploy/monitoring/grafana/, the data source
// is the prometheus service, and the provider loads the folder the
// dashboard is mounted in.
func TestComposeGrafana(t *testing.T) {
	t.Parallel()
	p := loadCompose(t, nil, "monitoring")
	g := service(t, p, "grafana")
	prom := service(t, p, "prometheus")

	var ds struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			Name      string `yaml:"name"`
			UID       string `yaml:"uid"`
			Type      string `yaml:"type"`
			Access    string `yaml:"access"`
			URL       string `yaml:"url"`
			IsDefault bool   `yaml:"isDefault"`
			Editable  bool   `yaml:"editable"`
		} `yaml:"datasources"`
	}
	rel := mountedFile(t, g, "/etc/grafana/provisioning/datasources/claimd.yml")
	require.Equal(t, "sidecar/deploy/monitoring/grafana/datasources.yml", rel)
	readYAML(t, rel, &ds)
	require.Equal(t, 1, ds.APIVersion)
	require.Len(t, ds.Datasources, 1)
	require.Equal(t, "prometheus", ds.Datasources[0].Type)
	require.Equal(t, "http://"+prom.Name+":"+"9090", ds.Datasources[0].URL, "the data source is the prometheus service")
	require.Equal(t, uint32(9090), prom.Ports[0].Target, "prometheus listens on 9090")
	require.True(t, ds.Datasources[0].IsDefault, "dashboards without a data source use it")
	require.NotEmpty(t, ds.Datasources[0].UID, "a fixed uid dashboards can name")

	var dash struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Name            string `yaml:"name"`
			Type            string `yaml:"type"`
			Folder          string `yaml:"folder"`
			DisableDeletion bool   `yaml:"disableDeletion"`
			AllowUIUpdates  bool   `yaml:"allowUiUpdates"`
			Options         struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	rel = mountedFile(t, g, "/etc/grafana/provisioning/dashboards/claimd.yml")
	require.Equal(t, "sidecar/deploy/monitoring/grafana/dashboards.yml", rel)
	readYAML(t, rel, &dash)
	require.Len(t, dash.Providers, 1)
	require.Equal(t, "file", dash.Providers[0].Type)
	const target = "/etc/grafana/dashboards/claimd.json"
	require.Equal(t, path.Dir(target), dash.Providers[0].Options.Path, "the provider loads the mounted dashboard's folder")
	require.Equal(t, composeDashboardPath, mountedFile(t, g, target))
	if present(t, composeDashboardPath) {
		b, err := os.ReadFile(filepath.Join(repoRoot(t), composeDashboardPath))
		require.NoError(t, err)
		var d map[string]any
		require.NoError(t, json.Unmarshal(b, &d), composeDashboardPath)
		require.NotEmpty(t, d["title"], "%s has a title", composeDashboardPath)
	}

	// No anonymous access; the admin password is a required secret
	// (TestComposeSecretsRequired).
	e := env(t, g)
	require.Equal(t, "false", e["GF_AUTH_ANONYMOUS_ENABLED"])
	require.Equal(t, testSecrets["GRAFANA_ADMIN_PASSWORD"], e["GF_SECURITY_ADMIN_PASSWORD"])
	require.Contains(t, g.DependsOn, "prometheus")
}
