package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// ciWorkflow is the part of .github/workflows/ci.yml the checks read.
type ciWorkflow struct {
	On map[string]struct {
		Branches []string `yaml:"branches"`
	} `yaml:"on"`
	Permissions map[string]string `yaml:"permissions"`
	Jobs        map[string]struct {
		RunsOn         string `yaml:"runs-on"`
		TimeoutMinutes int    `yaml:"timeout-minutes"`
		Services       map[string]struct {
			Image   string            `yaml:"image"`
			Env     map[string]string `yaml:"env"`
			Ports   []string          `yaml:"ports"`
			Options string            `yaml:"options"`
		} `yaml:"services"`
		Steps []workflowStep `yaml:"steps"`
	} `yaml:"jobs"`
}

// TestCIWorkflow checks .github/workflows/ci.yml: pull requests and pushes
// to main run .ci/run, bounded in time, with the PostgreSQL (user postgres,
// trust) and Redis that .ci/run looks for, with .ci/run's install cache
// kept between runs, and with pinned actions.
func TestCIWorkflow(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, ".github", "workflows", "ci.yml"))
	require.NoError(t, err)
	var wf ciWorkflow
	require.NoError(t, yaml.Unmarshal(b, &wf))

	require.Contains(t, wf.On, "pull_request", "runs on pull requests")
	require.Empty(t, wf.On["pull_request"].Branches, "on pull requests to any branch")
	require.Equal(t, []string{"main"}, wf.On["push"].Branches, "runs on pushes to main")
	require.Equal(t, map[string]string{"contents": "read"}, wf.Permissions, "read-only")
	require.Len(t, wf.Jobs, 1)
	for _, job := range wf.Jobs {
		require.Equal(t, "ubuntu-latest", job.RunsOn)
		require.Positive(t, job.TimeoutMinutes, "a timeout")
		require.LessOrEqual(t, job.TimeoutMinutes, 90)

		// The services .ci/run looks for, healthy before the steps run,
		// PostgreSQL the major version of docker-compose.yml's.
		compose, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
		require.NoError(t, err)
		pg := job.Services["postgres"]
		require.Contains(t, string(compose), "image: "+pg.Image, "the PostgreSQL image of docker-compose.yml")
		require.Equal(t, "trust", pg.Env["POSTGRES_HOST_AUTH_METHOD"], ".ci/run connects as postgres without a password")
		require.Equal(t, []string{"5432:5432"}, pg.Ports)
		require.Contains(t, pg.Options, "--health-cmd")
		redis := job.Services["redis"]
		require.Contains(t, string(compose), "image: "+redis.Image, "the Redis image of docker-compose.yml")
		require.Equal(t, []string{"6379:6379"}, redis.Ports)
		require.Contains(t, redis.Options, "--health-cmd")

		pinned := regexp.MustCompile(`^[\w.-]+/[\w.-]+@[0-9a-f]{40}$`)
		var cache, setupGo bool
		for _, s := range job.Steps {
			if s.Uses == "" {
				continue
			}
			require.Regexp(t, pinned, s.Uses, "action %q must be pinned to a commit SHA", s.Uses)
			switch {
			case strings.HasPrefix(s.Uses, "actions/checkout@"):
				require.Equal(t, "false", s.With["persist-credentials"])
			case strings.HasPrefix(s.Uses, "actions/setup-go@"):
				setupGo = true
				require.Equal(t, "go.mod", s.With["go-version-file"], "the Go of go.mod")
			case strings.HasPrefix(s.Uses, "actions/cache@"):
				cache = true
				// IC_CACHE_DIR's default (Makefile, .ci/run's scripts).
				require.Equal(t, "~/.cache/idempotent-claim", s.With["path"])
				for _, script := range []string{"n8n-node/scripts/install-n8n.sh", "n8n-node/scripts/install-playwright.sh",
					"sidecar/scripts/golangci-lint.sh", "sidecar/scripts/sqlc.sh"} {
					require.FileExists(t, filepath.Join(root, filepath.FromSlash(script)))
					require.Contains(t, s.With["key"], "'"+script+"'", "the cache key changes with the versions %s pins", script)
				}
			}
		}
		require.True(t, setupGo, "actions/setup-go installs Go")
		require.True(t, cache, "actions/cache keeps .ci/run's installs")
		require.NotEmpty(t, job.Steps)
		require.Equal(t, "bash .ci/run", strings.TrimSpace(job.Steps[len(job.Steps)-1].Run), "the last step runs .ci/run")
	}
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	require.Contains(t, string(makefile), "IC_CACHE_DIR ?= $(HOME)/.cache/idempotent-claim")
}
