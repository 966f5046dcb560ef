package deploy

import (
	"context"
	"encoding/json"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/config"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// repoRoot is the directory holding go.mod, found upwards from the package.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "go.mod not found above the test directory")
		dir = parent
	}
}

// testSecrets are values for the secrets docker-compose.yml requires
// (${NAME:?…}, no default): what make compose-env would write to .env.
var testSecrets = map[string]string{
	"POSTGRES_PASSWORD":      "test-postgres-password",
	"N8N_DB_PASSWORD":        "test-n8n-db-password",
	"N8N_ENCRYPTION_KEY":     "test-n8n-encryption-key",
	"N8N_RUNNERS_AUTH_TOKEN": "test-runners-auth-token",
	"CLAIMD_API_KEYS":        "demo:test-api-key-0123456789",
	"IC_HOOK_API_KEY":        "test-hook-api-key-0123456789",
	"STRIPE_WEBHOOK_SECRET":  "whsec_test-stripe-secret",
	"GITHUB_WEBHOOK_SECRET":  "test-github-secret",
	"N8N_HOOK_TOKEN":         "test-n8n-hook-token",
	"GRAFANA_ADMIN_PASSWORD": "test-grafana-admin-password",
}

// allProfiles are the compose file's profiles, all at once.
var allProfiles = []string{"queue", "monitoring"}

// loadCompose parses docker-compose.yml the way `docker compose` does:
// interpolation from testSecrets and env only (no process environment, no
// .env file, so the result does not depend on the machine), normalisation,
// consistency checks, paths resolved against the repository root, the given
// profiles active.
func loadCompose(t *testing.T, env map[string]string, profiles ...string) *types.Project {
	t.Helper()
	p, err := loadComposeErr(t, withSecrets(env), profiles...)
	require.NoError(t, err, "docker-compose.yml does not load with profiles %v", profiles)
	return p
}

// withSecrets is env over testSecrets.
func withSecrets(env map[string]string) map[string]string {
	out := maps.Clone(testSecrets)
	maps.Copy(out, env)
	return out
}

// loadComposeErr is loadCompose with exactly env (no testSecrets) and the
// loader's error returned.
func loadComposeErr(t *testing.T, env map[string]string, profiles ...string) (*types.Project, error) {
	t.Helper()
	root := repoRoot(t)
	kv := make([]string, 0, len(env))
	for k, v := range env {
		kv = append(kv, k+"="+v)
	}
	opts, err := cli.NewProjectOptions(
		[]string{filepath.Join(root, "docker-compose.yml")},
		cli.WithWorkingDirectory(root),
		cli.WithEnv(kv),
		cli.WithProfiles(profiles),
		cli.WithInterpolation(true),
		cli.WithNormalization(true),
		cli.WithConsistency(true),
		cli.WithResolvedPaths(true),
	)
	require.NoError(t, err)
	return opts.LoadProject(context.Background())
}

func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, err := p.GetService(name)
	require.NoError(t, err, "service %s", name)
	return s
}

// env returns a service's resolved environment; a variable listed without
// a value (or interpolated from an unset variable) fails the test.
func env(t *testing.T, s types.ServiceConfig) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, v := range s.Environment {
		require.NotNil(t, v, "service %s: %s has no value", s.Name, k)
		require.NotEmpty(t, *v, "service %s: %s is empty", s.Name, k)
		out[k] = *v
	}
	return out
}

func sortedNames(names []string) []string {
	names = slices.Clone(names)
	sort.Strings(names)
	return names
}

// bindMount returns the bind mount of s whose target is target.
func bindMount(t *testing.T, s types.ServiceConfig, target string) types.ServiceVolumeConfig {
	t.Helper()
	for _, v := range s.Volumes {
		if v.Target == target {
			require.Equal(t, types.VolumeTypeBind, v.Type, "service %s: %s", s.Name, target)
			return v
		}
	}
	require.Failf(t, "mount missing", "service %s mounts nothing at %s", s.Name, target)
	return types.ServiceVolumeConfig{}
}

// requireRepoFile checks that path (absolute, as resolved by the loader) is
// a regular file inside the repository and returns it relative to the root.
func requireRepoFile(t *testing.T, root, path string) string {
	t.Helper()
	rel, err := filepath.Rel(root, path)
	require.NoError(t, err)
	require.False(t, rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)), "%s is outside the repository", path)
	st, err := os.Stat(path)
	require.NoError(t, err, "%s must exist in the repository", rel)
	require.True(t, st.Mode().IsRegular(), "%s must be a file", rel)
	return filepath.ToSlash(rel)
}

func TestComposeProfiles(t *testing.T) {
	t.Parallel()
	def := loadCompose(t, nil)
	require.Equal(t, "idempotent-claim", def.Name)
	require.Equal(t, []string{"claimd", "n8n", "n8n-runner", "postgres"}, sortedNames(def.ServiceNames()),
		"the default profile runs PostgreSQL, claimd, n8n and n8n's task runner")
	require.Equal(t, []string{"grafana", "n8n-worker", "n8n-worker-runner", "prometheus", "redis"}, sortedNames(def.DisabledServiceNames()),
		"Redis, the worker and its runner belong to the queue profile only, Prometheus and Grafana to monitoring")

	queue := loadCompose(t, map[string]string{"N8N_EXECUTIONS_MODE": "queue"}, "queue")
	require.Equal(t, []string{"claimd", "n8n", "n8n-runner", "n8n-worker", "n8n-worker-runner", "postgres", "redis"}, sortedNames(queue.ServiceNames()))
	require.Equal(t, []string{"grafana", "prometheus"}, sortedNames(queue.DisabledServiceNames()))
	for _, name := range []string{"redis", "n8n-worker", "n8n-worker-runner"} {
		require.Equal(t, []string{"queue"}, service(t, queue, name).Profiles, name)
	}

	mon := loadCompose(t, nil, "monitoring")
	require.Equal(t, []string{"claimd", "grafana", "n8n", "n8n-runner", "postgres", "prometheus"}, sortedNames(mon.ServiceNames()))
	for _, name := range []string{"prometheus", "grafana"} {
		require.Equal(t, []string{"monitoring"}, service(t, mon, name).Profiles, name)
	}
	require.Empty(t, loadCompose(t, map[string]string{"N8N_EXECUTIONS_MODE": "queue"}, allProfiles...).DisabledServiceNames())
}

// n8nVersion is the n8n release n8n-node/Dockerfile builds on (its
// N8N_VERSION ARG).
func n8nVersion(t *testing.T) string {
	t.Helper()
	v := parseDockerfile(t, "n8n-node/Dockerfile").Args["N8N_VERSION"]
	require.Regexp(t, `^\d+\.\d+\.\d+$`, v, "n8n-node/Dockerfile pins N8N_VERSION")
	return v
}

func TestComposeServicesBuildOrPinnedImage(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	p := loadCompose(t, map[string]string{"N8N_EXECUTIONS_MODE": "queue"}, allProfiles...)
	dockerfiles := map[string]string{}
	for _, s := range p.Services {
		if s.Build == nil {
			require.NotEmpty(t, s.Image, "service %s has neither image nor build", s.Name)
			_, tag, ok := strings.Cut(s.Image, ":")
			require.True(t, ok && tag != "" && tag != "latest", "service %s: image %q must be pinned to a tag", s.Name, s.Image)
			continue
		}
		require.Equal(t, root, s.Build.Context, "service %s: the build context is the repository root", s.Name)
		rel := requireRepoFile(t, root, filepath.Join(s.Build.Context, s.Build.Dockerfile))
		dockerfiles[s.Name] = rel
	}
	require.Equal(t, map[string]string{
		"claimd":     "sidecar/Dockerfile",
		"n8n":        "n8n-node/Dockerfile",
		"n8n-worker": "n8n-node/Dockerfile",
	}, dockerfiles)
	require.Equal(t, "postgres:16-alpine", service(t, p, "postgres").Image)
	require.Equal(t, "redis:7-alpine", service(t, p, "redis").Image)
	require.Equal(t, service(t, p, "n8n").Image, service(t, p, "n8n-worker").Image,
		"main and worker run the same image")
	// A runner speaks the broker protocol of its own n8n release.
	for _, name := range []string{"n8n-runner", "n8n-worker-runner"} {
		require.Equal(t, "n8nio/runners:"+n8nVersion(t), service(t, p, name).Image,
			"%s runs the task runners of the n8n release the n8n image is built on", name)
	}
	// Monitoring images: an exact release, not a moving major tag.
	for _, name := range []string{"prometheus", "grafana"} {
		_, tag, _ := strings.Cut(service(t, p, name).Image, ":")
		require.Regexp(t, `^v?\d+\.\d+\.\d+$`, tag, "%s: image pinned to a release", name)
	}
}

// TestComposePortsLoopbackOnly: every published port, in every profile, is
// bound to 127.0.0.1, and the broker and claimd's metrics listener are not
// published at all.
func TestComposePortsLoopbackOnly(t *testing.T) {
	t.Parallel()
	p := loadCompose(t, map[string]string{"N8N_EXECUTIONS_MODE": "queue"}, allProfiles...)
	published := map[string]string{}
	for _, s := range p.Services {
		for _, port := range s.Ports {
			require.Equal(t, "127.0.0.1", port.HostIP, "service %s publishes %d on %q", s.Name, port.Target, port.HostIP)
			published[s.Name] = port.Published
		}
	}
	require.Equal(t, map[string]string{
		"claimd": "8080", "n8n": "5678", "prometheus": "9090", "grafana": "3000",
	}, published, "what the stack publishes (n8n's task broker 5679 and claimd's metrics listener stay on the compose network)")
}

func TestComposePostgres(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	p := loadCompose(t, nil)
	pg := service(t, p, "postgres")
	require.NotNil(t, pg.HealthCheck)
	require.Contains(t, strings.Join(pg.HealthCheck.Test, " "), "pg_isready")

	var data *types.ServiceVolumeConfig
	for i, v := range pg.Volumes {
		if v.Target == "/var/lib/postgresql/data" {
			data = &pg.Volumes[i]
		}
	}
	require.NotNil(t, data, "postgres keeps its data in a volume")
	require.Equal(t, types.VolumeTypeVolume, data.Type)
	require.Contains(t, p.Volumes, data.Source, "the postgres volume is declared")

	init := bindMount(t, pg, "/docker-entrypoint-initdb.d/10-n8n-database.sh")
	require.True(t, init.ReadOnly)
	require.Equal(t, "sidecar/deploy/postgres/10-n8n-database.sh", requireRepoFile(t, root, init.Source))
	require.Contains(t, env(t, pg), "N8N_DB_PASSWORD", "the init script reads N8N_DB_PASSWORD")
}

func TestComposeClaimd(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	p := loadCompose(t, nil)
	c := service(t, p, "claimd")
	pgEnv := env(t, service(t, p, "postgres"))
	e := env(t, c)

	require.NotNil(t, c.HealthCheck, "claimd has a health check")
	require.Equal(t, []string{"CMD", "/claimd", "healthcheck"}, []string(c.HealthCheck.Test))
	dep, ok := c.DependsOn["postgres"]
	require.True(t, ok, "claimd depends on postgres")
	require.Equal(t, types.ServiceConditionHealthy, dep.Condition)
	require.True(t, dep.Required)

	require.Equal(t, "0.0.0.0:8080", e["CLAIMD_ADDR"])
	u, err := url.Parse(e["DATABASE_URL"])
	require.NoError(t, err)
	require.Equal(t, "postgres", u.Scheme)
	require.Equal(t, "postgres:5432", u.Host, "DATABASE_URL points at the postgres service")
	require.Equal(t, "/"+pgEnv["POSTGRES_DB"], u.Path)
	require.Equal(t, pgEnv["POSTGRES_USER"], u.User.Username())
	pw, _ := u.User.Password()
	require.Equal(t, pgEnv["POSTGRES_PASSWORD"], pw)

	keys, err := auth.ParseStaticKeys(e["CLAIMD_API_KEYS"])
	require.NoError(t, err)
	require.Equal(t, []auth.StaticKey{
		{Tenant: "demo", Key: "test-api-key-0123456789"},
		{Tenant: "demo", Key: testSecrets["IC_HOOK_API_KEY"]},
	}, keys, "claimd's keys: CLAIMD_API_KEYS, then the settle hook's IC_HOOK_API_KEY as tenant demo")

	var published bool
	for _, port := range c.Ports {
		published = published || (port.Target == 8080 && port.Published == "8080")
	}
	require.True(t, published, "claimd publishes port 8080")

	src := bindMount(t, c, e["CLAIMD_SOURCES_FILE"])
	require.True(t, src.ReadOnly)
	require.Equal(t, "sidecar/deploy/sources.example.yaml", requireRepoFile(t, root, src.Source))

	// The whole claimd configuration loads from this environment, with the
	// sources file read from the repository: every ${VAR} of the sources
	// file is provided, keys and policies are valid.
	getenv := func(k string) string {
		if k == "CLAIMD_SOURCES_FILE" {
			return src.Source
		}
		return e[k]
	}
	cfg, err := config.Load(nil, getenv)
	require.NoError(t, err, "claimd would not start with the compose environment")
	require.Equal(t, []string{"github", "stripe"}, sortedNames(keysOf(cfg.Ingest.Sources)))
	for name, s := range cfg.Ingest.Sources {
		fu, err := url.Parse(s.Forward.URL)
		require.NoError(t, err)
		require.Equal(t, "n8n:5678", fu.Host, "source %s forwards to the n8n service", name)
		require.True(t, strings.HasPrefix(fu.Path, "/webhook/"), "source %s forwards to a production webhook", name)
	}
	// The trigger source: served by POST /v1/trigger/stripe-trigger only.
	require.Equal(t, []string{"stripe-trigger"}, sortedNames(keysOf(cfg.Ingest.Triggers)))
	// Every key claimd takes is of the sources' tenant, so the trigger's
	// credential (a key of CLAIMD_API_KEYS) and the settle hook's key may
	// use any source and settle each other's claims.
	for _, k := range cfg.APIKeys {
		for name, s := range cfg.Ingest.Sources {
			require.Equal(t, s.Tenant, k.Tenant, "source %s", name)
		}
		for name, s := range cfg.Ingest.Triggers {
			require.Equal(t, s.Tenant, k.Tenant, "trigger source %s", name)
		}
	}
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestComposeN8N(t *testing.T) {
	t.Parallel()
	p := loadCompose(t, nil)
	n := service(t, p, "n8n")
	e := env(t, n)
	pgEnv := env(t, service(t, p, "postgres"))

	require.Equal(t, "postgresdb", e["DB_TYPE"])
	require.Equal(t, "postgres", e["DB_POSTGRESDB_HOST"])
	require.Equal(t, "5432", e["DB_POSTGRESDB_PORT"])
	// The init script's defaults: role and database "n8n", password from
	// the postgres service's N8N_DB_PASSWORD.
	require.Equal(t, "n8n", e["DB_POSTGRESDB_DATABASE"])
	require.Equal(t, "n8n", e["DB_POSTGRESDB_USER"])
	require.Equal(t, pgEnv["N8N_DB_PASSWORD"], e["DB_POSTGRESDB_PASSWORD"])
	require.NotEmpty(t, e["N8N_ENCRYPTION_KEY"])
	require.Equal(t, "regular", e["EXECUTIONS_MODE"], "regular mode unless N8N_EXECUTIONS_MODE says otherwise")
	require.Equal(t, "redis", e["QUEUE_BULL_REDIS_HOST"])

	var data bool
	for _, v := range n.Volumes {
		if v.Target == "/home/node/.n8n" {
			require.Equal(t, types.VolumeTypeVolume, v.Type)
			require.Equal(t, "n8n_data", v.Source)
			require.Contains(t, p.Volumes, v.Source)
			data = true
		}
	}
	require.True(t, data, "n8n keeps /home/node/.n8n in the n8n_data volume")

	var published bool
	for _, port := range n.Ports {
		published = published || (port.Target == 5678 && port.Published == "5678")
	}
	require.True(t, published, "n8n publishes port 5678")

	// Healthy means ready: /healthz answers 200 before n8n's migrations
	// are done, /healthz/readiness only once its database is ready.
	require.NotNil(t, n.HealthCheck)
	require.Contains(t, strings.Join(n.HealthCheck.Test, " "), "http://127.0.0.1:5678/healthz/readiness",
		"n8n's health check asks readiness, not liveness")

	require.Equal(t, types.ServiceConditionHealthy, n.DependsOn["postgres"].Condition)
	// An unhealthy claimd must not keep n8n down: n8n starts, and the node
	// reports the sidecar as unreachable until claimd is back.
	require.Equal(t, types.ServiceConditionStarted, n.DependsOn["claimd"].Condition,
		"n8n waits for claimd to be started, never for it to be healthy")
	for name, dep := range n.DependsOn {
		if name != "postgres" && name != "redis" {
			require.NotEqual(t, types.ServiceConditionHealthy, dep.Condition, "n8n must not wait for %s to be healthy", name)
		}
	}
	redis, ok := n.DependsOn["redis"]
	require.True(t, ok)
	require.False(t, redis.Required, "Redis is only there with the queue profile")
}

func TestComposeQueueMode(t *testing.T) {
	t.Parallel()
	p := loadCompose(t, map[string]string{
		"N8N_EXECUTIONS_MODE": "queue",
		"N8N_ENCRYPTION_KEY":  "test-encryption-key",
	}, "queue")
	main, worker := service(t, p, "n8n"), service(t, p, "n8n-worker")
	me, we := env(t, main), env(t, worker)

	require.Equal(t, "queue", me["EXECUTIONS_MODE"])
	require.Equal(t, "test-encryption-key", me["N8N_ENCRYPTION_KEY"])
	for k, v := range me {
		if strings.HasPrefix(k, "DB_") || strings.HasPrefix(k, "QUEUE_") ||
			k == "N8N_ENCRYPTION_KEY" || k == "EXECUTIONS_MODE" {
			require.Equal(t, v, we[k], "n8n-worker must share %s with n8n", k)
		}
	}
	require.Equal(t, "worker", worker.Command[0])

	redis := service(t, p, "redis")
	require.Equal(t, redis.Name, me["QUEUE_BULL_REDIS_HOST"], "QUEUE_BULL_REDIS_HOST names the redis service")
	require.NotNil(t, redis.HealthCheck)
	require.Equal(t, types.ServiceConditionHealthy, worker.DependsOn["redis"].Condition)

	// Manual executions run on the workers too (n8n 2.x warns without it).
	require.Equal(t, "true", me["OFFLOAD_MANUAL_EXECUTIONS_TO_WORKERS"])

	// The worker's health check: n8n's worker server (QUEUE_HEALTH_CHECK_*)
	// on the port the check asks, at /healthz or /healthz/readiness.
	require.Equal(t, "true", we["QUEUE_HEALTH_CHECK_ACTIVE"], "the worker serves /healthz only with QUEUE_HEALTH_CHECK_ACTIVE")
	require.NotNil(t, worker.HealthCheck, "n8n-worker has a health check")
	require.False(t, worker.HealthCheck.Disable)
	probe := regexp.MustCompile(`http://127\.0\.0\.1:(\d+)(/healthz(?:/readiness)?)\b`).FindStringSubmatch(strings.Join(worker.HealthCheck.Test, " "))
	require.NotNil(t, probe, "the worker's health check GETs its /healthz: %q", worker.HealthCheck.Test)
	require.Equal(t, we["QUEUE_HEALTH_CHECK_PORT"], probe[1], "the health check asks the port the worker server listens on")
	require.NotNil(t, worker.HealthCheck.StartPeriod, "a start period covers n8n's start")
}

// TestComposeQueueModeNeedsTheProfile: EXECUTIONS_MODE and the queue
// profile must agree, and the compose file leaves that to the n8n
// entrypoint, which refuses either one without the other (see
// TestN8NEntrypointQueueGuard): every n8n service runs it, and gets the
// variables it checks.
func TestComposeQueueModeNeedsTheProfile(t *testing.T) {
	t.Parallel()
	// Without the profile there is no redis service, so the host n8n is
	// pointed at does not exist: the entrypoint's check must fire.
	p := loadCompose(t, map[string]string{"N8N_EXECUTIONS_MODE": "queue"})
	e := env(t, service(t, p, "n8n"))
	require.Equal(t, "queue", e["EXECUTIONS_MODE"])
	_, err := p.GetService(e["QUEUE_BULL_REDIS_HOST"])
	require.Error(t, err, "without --profile queue no service is named %s", e["QUEUE_BULL_REDIS_HOST"])

	// The worker's command is the one the entrypoint refuses outside queue mode.
	q := loadCompose(t, nil, "queue")
	worker := service(t, q, "n8n-worker")
	require.Equal(t, "regular", env(t, worker)["EXECUTIONS_MODE"], "--profile queue alone leaves the mode regular")
	require.Equal(t, "worker", worker.Command[0])

	// Both n8n services are the image whose entrypoint is the wrapper.
	df := parseDockerfile(t, "n8n-node/Dockerfile")
	entry := execForm(t, df.Stages[len(df.Stages)-1].last(t, "ENTRYPOINT"))
	require.Equal(t, "/opt/idempotent-claim/entrypoint.sh", entry[len(entry)-1])
	for _, name := range []string{"n8n", "n8n-worker"} {
		s := service(t, q, name)
		require.NotNil(t, s.Build, name)
		require.Equal(t, "n8n-node/Dockerfile", s.Build.Dockerfile, name)
		require.Empty(t, s.Entrypoint, "%s keeps the image's entrypoint (the queue guard)", name)
	}
}

// TestComposeTaskRunners: n8n's task runners in external mode, as n8n's own
// compose layouts run them: every n8n process's broker listens on the
// compose network, and a runner of its own connects to it with the shared
// token.
func TestComposeTaskRunners(t *testing.T) {
	t.Parallel()
	p := loadCompose(t, map[string]string{"N8N_EXECUTIONS_MODE": "queue"}, "queue")
	for n8nName, runnerName := range map[string]string{"n8n": "n8n-runner", "n8n-worker": "n8n-worker-runner"} {
		ne := env(t, service(t, p, n8nName))
		require.Equal(t, "external", ne["N8N_RUNNERS_MODE"], n8nName)
		require.Equal(t, "0.0.0.0", ne["N8N_RUNNERS_BROKER_LISTEN_ADDRESS"], "%s: the broker must be reachable from the runner's container", n8nName)
		require.NotContains(t, ne, "N8N_RUNNERS_ENABLED", "%s: obsolete since n8n 2.0 (n8n warns about it)", n8nName)
		require.Equal(t, testSecrets["N8N_RUNNERS_AUTH_TOKEN"], ne["N8N_RUNNERS_AUTH_TOKEN"], n8nName)

		runner := service(t, p, runnerName)
		re := env(t, runner)
		require.Equal(t, ne["N8N_RUNNERS_AUTH_TOKEN"], re["N8N_RUNNERS_AUTH_TOKEN"], "%s authenticates to %s's broker", runnerName, n8nName)
		u, err := url.Parse(re["N8N_RUNNERS_TASK_BROKER_URI"])
		require.NoError(t, err)
		require.Equal(t, "http", u.Scheme)
		require.Equal(t, n8nName+":"+ne["N8N_RUNNERS_BROKER_PORT"], u.Host, "%s connects to %s's own broker", runnerName, n8nName)
		require.Contains(t, runner.DependsOn, n8nName, runnerName)
		require.Empty(t, runner.Ports, "%s publishes nothing", runnerName)
	}
}

// requiredSecrets are the names docker-compose.yml reads as ${NAME:?…}.
func requiredSecrets(t *testing.T, text string) []string {
	t.Helper()
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(`\$\{([A-Z][A-Z0-9_]*):\?`).FindAllStringSubmatch(text, -1) {
		seen[m[1]] = true
	}
	return sortedNames(keysOf(seen))
}

// TestComposeSecretsRequired: no secret has a fallback. Every secret is
// ${NAME:?…} wherever the file uses it, the header lists exactly those,
// a missing one stops docker compose with its name, and each one set
// reaches the services that use it.
func TestComposeSecretsRequired(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docker-compose.yml"))
	require.NoError(t, err)
	text := string(b)

	required := requiredSecrets(t, text)
	require.Equal(t, sortedNames(keysOf(testSecrets)), required, "the required secrets are the ones testSecrets provides")

	// Anything named like a secret is required; a default (:- or -) or an
	// "if unset" (:? is the only form allowed) is a public fallback.
	ref := regexp.MustCompile(`\$\{([A-Z][A-Z0-9_]*)([:?+-]*)`)
	secretName := regexp.MustCompile(`PASSWORD|SECRET|TOKEN|KEY`)
	for _, m := range ref.FindAllStringSubmatch(text, -1) {
		if secretName.MatchString(m[1]) || slices.Contains(required, m[1]) {
			require.Equal(t, ":?", m[2], "${%s%s…}: a secret has no fallback", m[1], m[2])
		}
	}
	require.NotContains(t, strings.ToLower(text), "dev-only", "no development default is left")

	// The header names them all, the way compose-env.sh writes them.
	header := regexp.MustCompile(`(?s)# REQUIRED SECRETS:.*?\n((?:#   [A-Z0-9_, ]+\n)+)`).FindStringSubmatch(text)
	require.NotNil(t, header, "the header comment lists the required secrets")
	listed := strings.FieldsFunc(strings.ReplaceAll(header[1], "#", ""), func(r rune) bool { return r == ',' || r == ' ' || r == '\n' })
	require.Equal(t, required, sortedNames(listed), "the header's REQUIRED SECRETS")

	// Each missing one stops the load, named, whatever the profiles.
	for _, name := range required {
		without := maps.Clone(testSecrets)
		delete(without, name)
		_, err := loadComposeErr(t, without)
		require.Error(t, err, "docker-compose.yml loads without %s", name)
		require.Contains(t, err.Error(), name)
		require.Contains(t, err.Error(), "make compose-env", "the message says how to get every secret")
		without[name] = ""
		_, err = loadComposeErr(t, without)
		require.Error(t, err, "an empty %s is missing too", name)
	}

	// Set, each reaches its services.
	p := loadCompose(t, map[string]string{"N8N_EXECUTIONS_MODE": "queue"}, allProfiles...)
	uses := []struct{ service, key, env string }{
		{"postgres", "POSTGRES_PASSWORD", "POSTGRES_PASSWORD"},
		{"postgres", "N8N_DB_PASSWORD", "N8N_DB_PASSWORD"},
		{"n8n", "DB_POSTGRESDB_PASSWORD", "N8N_DB_PASSWORD"},
		{"n8n", "N8N_ENCRYPTION_KEY", "N8N_ENCRYPTION_KEY"},
		{"n8n-worker", "N8N_ENCRYPTION_KEY", "N8N_ENCRYPTION_KEY"},
		{"n8n", "N8N_RUNNERS_AUTH_TOKEN", "N8N_RUNNERS_AUTH_TOKEN"},
		{"n8n-runner", "N8N_RUNNERS_AUTH_TOKEN", "N8N_RUNNERS_AUTH_TOKEN"},
		{"n8n-worker-runner", "N8N_RUNNERS_AUTH_TOKEN", "N8N_RUNNERS_AUTH_TOKEN"},
		{"claimd", "STRIPE_WEBHOOK_SECRET", "STRIPE_WEBHOOK_SECRET"},
		{"claimd", "GITHUB_WEBHOOK_SECRET", "GITHUB_WEBHOOK_SECRET"},
		{"claimd", "N8N_HOOK_TOKEN", "N8N_HOOK_TOKEN"},
		{"grafana", "GF_SECURITY_ADMIN_PASSWORD", "GRAFANA_ADMIN_PASSWORD"},
	}
	for _, u := range uses {
		require.Equal(t, testSecrets[u.env], env(t, service(t, p, u.service))[u.key], "%s on %s", u.key, u.service)
	}
	require.Contains(t, env(t, service(t, p, "claimd"))["DATABASE_URL"], ":"+testSecrets["POSTGRES_PASSWORD"]+"@")
	require.Equal(t, testSecrets["CLAIMD_API_KEYS"]+",demo:"+testSecrets["IC_HOOK_API_KEY"], env(t, service(t, p, "claimd"))["CLAIMD_API_KEYS"],
		"claimd's keys: CLAIMD_API_KEYS and the settle hook's key")
	for _, name := range []string{"n8n", "n8n-worker"} {
		require.Equal(t, testSecrets["IC_HOOK_API_KEY"], env(t, service(t, p, name))["IDEMPOTENT_CLAIM_API_KEY"], "the settle hook's key on %s", name)
	}
}

// TestSourcesExampleParses parses the example sources file on its own, with
// every ${VAR} set to a dummy value.
func TestSourcesExampleParses(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "sidecar", "deploy", "sources.example.yaml"))
	require.NoError(t, err)
	var asked []string
	cfg, err := sources.Parse(b, func(k string) string {
		asked = append(asked, k)
		return "dummy-" + strings.ToLower(k)
	})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"stripe", "github"}, keysOf(cfg.Sources))
	require.Contains(t, cfg.Policies, "orders", "claim-only sources carry a policy")
	// The trigger source of the trigger recipe
	// (sidecar/docs/compose.md#deploy-with-docker-compose): Stripe's rules,
	// no forward, review on lease expiry.
	require.ElementsMatch(t, []string{"stripe-trigger"}, keysOf(cfg.Triggers))
	trig := cfg.Triggers["stripe-trigger"]
	require.True(t, trig.TriggerOnly())
	require.Equal(t, "stripe-trigger", trig.Scope)
	require.Equal(t, cfg.Sources["stripe"].Tenant, trig.Tenant)
	require.Equal(t, cfg.Sources["stripe"].Provider, trig.Provider)
	require.Equal(t, claim.LeasePolicy("review"), cfg.Policies["stripe-trigger"].LeasePolicy)
	require.Subset(t, asked, []string{"STRIPE_WEBHOOK_SECRET", "GITHUB_WEBHOOK_SECRET", "N8N_HOOK_TOKEN"})
	require.Equal(t, "Bearer dummy-n8n_hook_token", cfg.Sources["stripe"].Forward.Headers["Authorization"])
	// The example a newcomer copies is safe by default: no source or policy
	// reclaims an expired lease (a second effect when the outcome is
	// unknown; DESIGN: the lease-expiry default is review). A source's
	// lease_policy is its scope's claim policy.
	require.Contains(t, cfg.Policies, "stripe")
	for name, pol := range cfg.Policies {
		require.NotEqual(t, claim.LeasePolicy("reclaim"), pol.LeasePolicy, "policy %s", name)
	}

	_, err = sources.Parse(b, func(string) string { return "" })
	require.Error(t, err, "an unset secret must stop claimd")
}

// TestComposeNodeInstall: n8n's installer manages the node package (see
// sidecar/deploy/n8n-entrypoint.sh): its community-node folder is a volume
// that main and workers share, packages n8n installed come back when their
// files are missing, and the env-managed mode pins the package's own
// version.
func TestComposeNodeInstall(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	var pkg struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	}
	b, err := os.ReadFile(filepath.Join(root, "n8n-node", "package.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &pkg))

	p := loadCompose(t, map[string]string{"N8N_EXECUTIONS_MODE": "queue"}, "queue")
	for _, name := range []string{"n8n", "n8n-worker"} {
		s := service(t, p, name)
		e := env(t, s)
		require.Equal(t, "true", e["N8N_COMMUNITY_PACKAGES_ENABLED"], name)
		require.Equal(t, "true", e["N8N_UNVERIFIED_PACKAGES_ENABLED"], name)
		require.Equal(t, "true", e["N8N_REINSTALL_MISSING_PACKAGES"], name)
		require.Equal(t, "false", e["N8N_COMMUNITY_PACKAGES_MANAGED_BY_ENV"], "%s: the image's copy unless asked", name)
		require.Equal(t, "auto", e["IC_NODE_INSTALL"], name)

		// Valid for n8n's parser: a JSON list of {name, version}, pinned to
		// the version this checkout builds.
		var pkgs []map[string]string
		require.NoError(t, json.Unmarshal([]byte(e["N8N_COMMUNITY_PACKAGES"]), &pkgs), "%s: N8N_COMMUNITY_PACKAGES", name)
		require.Equal(t, []map[string]string{{"name": pkg.Name, "version": pkg.Version}}, pkgs, name)

		var nodes bool
		for _, v := range s.Volumes {
			if v.Target == "/home/node/.n8n/nodes" {
				require.Equal(t, types.VolumeTypeVolume, v.Type)
				require.Equal(t, "n8n_nodes", v.Source)
				require.Contains(t, p.Volumes, v.Source)
				nodes = true
			}
		}
		require.True(t, nodes, "%s mounts the shared n8n_nodes volume on n8n's community-node folder", name)
	}

	managed := loadCompose(t, map[string]string{
		"N8N_COMMUNITY_PACKAGES_MANAGED_BY_ENV": "true",
		"N8N_COMMUNITY_PACKAGES":                `[{"name":"n8n-nodes-idempotent-claim","version":"9.9.9"}]`,
	})
	e := env(t, service(t, managed, "n8n"))
	require.Equal(t, "true", e["N8N_COMMUNITY_PACKAGES_MANAGED_BY_ENV"])
	require.Contains(t, e["N8N_COMMUNITY_PACKAGES"], `"9.9.9"`)
}

// TestComposeDatabaseConnections: n8n's pool survives a 70-execution storm,
// and PostgreSQL's max_connections covers every pool with five workers.
func TestComposeDatabaseConnections(t *testing.T) {
	t.Parallel()
	p := loadCompose(t, map[string]string{"N8N_EXECUTIONS_MODE": "queue"}, "queue")
	poolOf := func(name string) int {
		v, err := strconv.Atoi(env(t, service(t, p, name))["DB_POSTGRESDB_POOL_SIZE"])
		require.NoError(t, err, "%s: DB_POSTGRESDB_POOL_SIZE", name)
		return v
	}
	main, worker := poolOf("n8n"), poolOf("n8n-worker")
	// n8n's default of 2 failed most executions of a 70-delivery storm.
	require.GreaterOrEqual(t, main, 10)
	require.GreaterOrEqual(t, worker, 10)

	u, err := url.Parse(env(t, service(t, p, "claimd"))["DATABASE_URL"])
	require.NoError(t, err)
	claimd, err := strconv.Atoi(u.Query().Get("pool_max_conns"))
	require.NoError(t, err, "claimd's DATABASE_URL sets pool_max_conns, so the budget does not depend on the host")

	pg := service(t, p, "postgres")
	cmd := strings.Join(pg.Command, " ")
	m := regexp.MustCompile(`max_connections=(\d+)`).FindStringSubmatch(cmd)
	require.NotNil(t, m, "postgres sets max_connections: %q", cmd)
	maxConns, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	const reserved, listener, workers = 3, 1, 5
	need := main + workers*worker + claimd + listener
	require.LessOrEqual(t, need, maxConns-reserved,
		"n8n main %d + %d workers × %d + claimd %d + %d listener", main, workers, worker, claimd, listener)
}

// TestComposeStopGracePeriods: a service stopped (restart, stop, upgrade)
// gets SIGTERM, then SIGKILL after its stop_grace_period, 10 s when unset.
// claimd drains in-flight requests for CLAIMD_SHUTDOWN_TIMEOUT_SECONDS and
// n8n lets running executions finish for N8N_GRACEFUL_SHUTDOWN_TIMEOUT
// (30 s by default); each grace period must cover its service's own
// shutdown with room to exit, or a restart kills an execution between its
// effect and Complete.
func TestComposeStopGracePeriods(t *testing.T) {
	t.Parallel()
	const margin = 5 * time.Second
	p := loadCompose(t, map[string]string{"N8N_EXECUTIONS_MODE": "queue"}, allProfiles...)
	grace := func(name string) time.Duration {
		c := service(t, p, name)
		if c.StopGracePeriod == nil {
			return 10 * time.Second
		}
		return time.Duration(*c.StopGracePeriod)
	}
	claimdEnv := env(t, service(t, p, "claimd"))
	// The sources file is a path inside the container; the drain does not
	// depend on it.
	delete(claimdEnv, "CLAIMD_SOURCES_FILE")
	cfg, err := config.Load(nil, func(k string) string { return claimdEnv[k] })
	require.NoError(t, err)
	require.GreaterOrEqual(t, grace("claimd"), cfg.ShutdownTimeout+margin,
		"claimd's stop_grace_period covers its drain (CLAIMD_SHUTDOWN_TIMEOUT_SECONDS) and exit")
	for _, name := range []string{"n8n", "n8n-worker"} {
		n8nGrace := 30 * time.Second
		if v, ok := env(t, service(t, p, name))["N8N_GRACEFUL_SHUTDOWN_TIMEOUT"]; ok {
			secs, err := strconv.Atoi(v)
			require.NoError(t, err)
			n8nGrace = time.Duration(secs) * time.Second
		}
		require.GreaterOrEqual(t, grace(name), n8nGrace+margin,
			"%s's stop_grace_period covers n8n's graceful shutdown (N8N_GRACEFUL_SHUTDOWN_TIMEOUT) and exit", name)
	}
}
