package deploy

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// makeEnv is the environment for a make started by a test: the test's own,
// less what a make running the tests (make test) passes to its sub-makes
// (MAKEFLAGS, MAKELEVEL, MFLAGS), which would add -j, -s or directory lines.
func makeEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES", "GNUMAKEFLAGS":
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

func runMake(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("make is not installed: %v (make doctor lists the prerequisites)", err)
	}
	cmd := exec.Command("make", append([]string{"--no-print-directory"}, args...)...)
	cmd.Dir = dir
	cmd.Env = makeEnv()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// makefileTargets reads the Makefile's .PHONY list (continuation lines
// joined) and the names of the targets it defines rules for.
func makefileTargets(t *testing.T, path string) (phony, defined []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, ".PHONY:"); ok {
			phony = append(phony, strings.Fields(rest)...)
		}
	}
	// A rule line: a name at the start of the line, a colon, and no '='
	// right after it (NAME := value is a variable).
	rule := regexp.MustCompile(`(?m)^([A-Za-z0-9_-]+):(?:[^=]|$)`)
	for _, m := range rule.FindAllStringSubmatch(text, -1) {
		defined = append(defined, m[1])
	}
	return phony, defined
}

// TestMakeHelp: every .PHONY target has a rule and a one-line description
// in `make help`, and make help lists nothing else.
func TestMakeHelp(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	phony, defined := makefileTargets(t, filepath.Join(root, "Makefile"))
	require.NotEmpty(t, phony, "the Makefile has a .PHONY list")
	for _, name := range phony {
		require.Equal(t, 1, countOf(phony, name), "%s is listed in .PHONY more than once", name)
	}
	require.ElementsMatch(t, phony, defined, "every target is .PHONY and every .PHONY target has a rule")

	out, err := runMake(t, root, "help")
	require.NoError(t, err, out)
	entry := regexp.MustCompile(`^  (\S+)\s+(.*)$`)
	described := map[string]string{}
	var listed []string
	for _, line := range strings.Split(out, "\n") {
		m := entry.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		listed = append(listed, m[1])
		described[m[1]] = strings.TrimSpace(m[2])
	}
	require.ElementsMatch(t, phony, listed, "make help lists exactly the .PHONY targets, once each:\n%s", out)
	for _, name := range phony {
		require.NotEmpty(t, described[name], "make help has no description for %s", name)
	}
	require.Contains(t, out, "Environment: DATABASE_URL", "make help ends with the environment variables")
}

func countOf(list []string, s string) int {
	n := 0
	for _, v := range list {
		if v == s {
			n++
		}
	}
	return n
}

// TestMakeDBStatusStopped: devdb.sh status exits 3 when there is no running
// cluster (for scripts); make db-status prints the same state and exits 0.
// It runs in a copy of the Makefile and devdb.sh, so the state is "not
// initialised" whatever the checkout's own cluster is doing.
func TestMakeDBStatusStopped(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	dir := t.TempDir()
	copyFile(t, filepath.Join(root, "Makefile"), filepath.Join(dir, "Makefile"))
	copyFile(t, filepath.Join(root, "sidecar", "scripts", "devdb.sh"), filepath.Join(dir, "sidecar", "scripts", "devdb.sh"))
	devdb := filepath.Join(dir, "sidecar", "scripts", "devdb.sh")
	if out, err := exec.Command(devdb, "bindir").CombinedOutput(); err != nil {
		t.Skipf("devdb.sh status needs PostgreSQL's server programs, which are not installed:\n%s", out)
	}

	out, err := exec.Command(devdb, "status").CombinedOutput()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "devdb.sh status: %v\n%s", err, out)
	require.Equal(t, 3, exit.ExitCode(), string(out))
	require.Equal(t, "not initialised\n", string(out))

	out2, err := runMake(t, dir, "db-status")
	require.NoError(t, err, "make db-status exits 0 when the cluster is not running:\n%s", out2)
	require.Equal(t, "not initialised\n", out2, "the state and nothing else (no make error line)")
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	fi, err := os.Stat(src)
	require.NoError(t, err)
	writeFile(t, dst, string(b), fi.Mode().Perm())
}
