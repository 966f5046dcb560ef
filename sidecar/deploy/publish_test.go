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

// workflow is the part of a GitHub Actions workflow the publish checks read.
type workflow struct {
	On struct {
		Push struct {
			Tags []string `yaml:"tags"`
		} `yaml:"push"`
	} `yaml:"on"`
	Permissions map[string]string      `yaml:"permissions"`
	Jobs        map[string]workflowJob `yaml:"jobs"`
}

type workflowJob struct {
	Permissions map[string]string `yaml:"permissions"`
	Defaults    struct {
		Run struct {
			WorkingDirectory string `yaml:"working-directory"`
		} `yaml:"run"`
	} `yaml:"defaults"`
	Steps []workflowStep `yaml:"steps"`
}

type workflowStep struct {
	Name string            `yaml:"name"`
	Uses string            `yaml:"uses"`
	With map[string]string `yaml:"with"`
	Run  string            `yaml:"run"`
	Env  map[string]string `yaml:"env"`
}

// TestPublishWorkflow checks .github/workflows/publish-node.yml: a node-v*
// tag builds, tests, lints and scans the n8n node package, then publishes
// it with npm provenance (n8n's verification requires it), from n8n-node/,
// with pinned actions.
func TestPublishWorkflow(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, ".github", "workflows", "publish-node.yml"))
	require.NoError(t, err)
	var wf workflow
	require.NoError(t, yaml.Unmarshal(b, &wf))

	require.Equal(t, []string{"node-v*"}, wf.On.Push.Tags, "published from node-v* tags only")
	require.Equal(t, map[string]string{"contents": "read"}, wf.Permissions, "read-only by default")
	require.Len(t, wf.Jobs, 1)
	var job workflowJob
	for _, j := range wf.Jobs {
		job = j
	}
	require.Equal(t, map[string]string{"contents": "read", "id-token": "write"}, job.Permissions,
		"id-token: write signs the provenance statement; nothing else is writable")
	require.Equal(t, "n8n-node", job.Defaults.Run.WorkingDirectory)

	// Every action is pinned to a commit.
	pinned := regexp.MustCompile(`^[\w.-]+/[\w.-]+@[0-9a-f]{40}$`)
	script, err := os.ReadFile(filepath.Join(root, "n8n-node", "scripts", "install-n8n.sh"))
	require.NoError(t, err)
	nodePin := regexp.MustCompile(`(?m)^NODE_VERSION=(\S+)`).FindSubmatch(script)
	require.NotNil(t, nodePin)
	var setupNode bool
	for _, s := range job.Steps {
		if s.Uses == "" {
			continue
		}
		require.Regexp(t, pinned, s.Uses, "action %q must be pinned to a commit SHA", s.Uses)
		if strings.HasPrefix(s.Uses, "actions/setup-node@") {
			setupNode = true
			require.Equal(t, string(nodePin[1]), s.With["node-version"], "the Node the repository pins")
			require.Equal(t, "https://registry.npmjs.org", s.With["registry-url"])
			require.Equal(t, "false", s.With["package-manager-cache"], "no dependency cache in a publishing job")
		}
		if strings.HasPrefix(s.Uses, "actions/checkout@") {
			require.Equal(t, "false", s.With["persist-credentials"])
		}
	}
	require.True(t, setupNode, "actions/setup-node writes the registry's .npmrc")

	// The steps, in order: install, build, test, lint, scan, publish.
	index := func(what string, match func(workflowStep) bool) int {
		t.Helper()
		for i, s := range job.Steps {
			if match(s) {
				return i
			}
		}
		require.Failf(t, "step missing", "no step %s", what)
		return -1
	}
	runs := func(cmd string) func(workflowStep) bool {
		return func(s workflowStep) bool { return strings.Contains(s.Run, cmd) }
	}
	order := []int{
		index("npm ci", runs("npm ci")),
		index("npm run build", runs("npm run build")),
		index("npm test", runs("npm test")),
		index("npm run lint", runs("npm run lint")),
		index("the package scan", func(s workflowStep) bool { return strings.TrimSpace(s.Run) == "scripts/scan-package.sh" }),
		index("npm publish", runs("npm publish")),
	}
	for i := 1; i < len(order); i++ {
		require.Less(t, order[i-1], order[i], "steps out of order: install, build, test, lint, scan, publish")
	}
	require.Contains(t, job.Steps[order[0]].Run, "--ignore-scripts")

	publish := job.Steps[order[len(order)-1]]
	require.Contains(t, publish.Run, "--provenance", "n8n requires npm provenance")
	require.Contains(t, publish.Run, "--access public")
	require.Equal(t, "true", publish.Env["RELEASE_MODE"], "prepublishOnly (n8n-node prerelease) refuses a publish without it")
	require.Equal(t, "${{ secrets.NPM_TOKEN }}", publish.Env["NODE_AUTH_TOKEN"])

	// After publishing, the scanner's full check of the published version.
	after := index("the published-version scan", runs("scripts/scan-package.sh --published"))
	require.Greater(t, after, order[len(order)-1])

	// The scan script the workflow calls exists and is executable.
	st, err := os.Stat(filepath.Join(root, "n8n-node", "scripts", "scan-package.sh"))
	require.NoError(t, err)
	require.NotZero(t, st.Mode()&0o111, "scan-package.sh is executable")
}
