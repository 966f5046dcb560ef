package deploy

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/short"
)

// doctorLine is one check of doctor.sh: the group it is printed under
// ("make run", "make test", "make try", "make lint" or "ports"), ok or
// missing, the tool and the rest.
type doctorLine struct {
	group, status, tool, detail string
}

var doctorEntry = regexp.MustCompile(`^  (ok|missing)\s+(.+?)\s{2,}(.*)$`)

func parseDoctor(out string) []doctorLine {
	var lines []doctorLine
	group := ""
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, "make run needs"):
			group = "make run"
		case strings.HasPrefix(l, "make test needs"):
			group = "make test"
		case strings.HasPrefix(l, "make try needs"):
			group = "make try"
		case strings.HasPrefix(l, "make lint needs"):
			group = "make lint"
		case l == "ports:":
			group = "ports"
		}
		if m := doctorEntry.FindStringSubmatch(l); m != nil {
			lines = append(lines, doctorLine{group: group, status: m[1], tool: m[2], detail: m[3]})
		}
	}
	return lines
}

func findDoctorLine(t *testing.T, lines []doctorLine, group, tool, out string) doctorLine {
	t.Helper()
	for _, l := range lines {
		if l.group == group && l.tool == tool {
			return l
		}
	}
	t.Fatalf("doctor printed no %s line under %s:\n%s", tool, group, out)
	return doctorLine{}
}

// toolDir makes a folder of symlinks to the named programs from this
// machine's PATH: a PATH with only those on it.
func toolDir(t *testing.T, tools ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, tool := range tools {
		p, err := exec.LookPath(tool)
		require.NoError(t, err, "%s is needed to run the script under test", tool)
		require.NoError(t, os.Symlink(p, filepath.Join(dir, tool)))
	}
	return dir
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "%v", err)
	return exit.ExitCode()
}

func goModVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "go.mod"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(b)
	require.NotNil(t, m, "go.mod has a go line")
	return string(m[1])
}

// TestDoctorNamesWhatIsMissing runs doctor.sh on a PATH holding only what
// the script itself needs, git, make and a go older than go.mod's: every
// other tool is reported missing with its apt and Homebrew packages, and
// the exit status is 1.
func TestDoctorNamesWhatIsMissing(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	// bash for the scripts, the rest for devdb.sh bindir.
	bin := toolDir(t, "bash", "dirname", "id", "readlink", "sort", "uname", "git", "make")
	writeFile(t, filepath.Join(bin, "go"), "#!/bin/sh\necho 'go version go1.20.1 linux/amd64'\n", 0o755)
	env := []string{"PATH=" + bin, "HOME=" + t.TempDir(), "CHROMIUM_PATH=" + filepath.Join(t.TempDir(), "chromium")}

	cmd := exec.Command(filepath.Join(root, "sidecar", "scripts", "doctor.sh"))
	cmd.Env = env
	b, err := cmd.CombinedOutput()
	out := string(b)
	require.Equal(t, 1, exitCode(t, err), out)
	lines := parseDoctor(out)

	for _, present := range []struct{ group, tool string }{{"make run", "make"}, {"make test", "git"}} {
		l := findDoctorLine(t, lines, present.group, present.tool, out)
		require.Equal(t, "ok", l.status, out)
		require.NotEmpty(t, l.detail, "the version found is shown")
	}

	goLine := findDoctorLine(t, lines, "make run", "go", out)
	require.Equal(t, "missing", goLine.status, out)
	require.Contains(t, goLine.detail, "1.20.1 is older than go.mod's "+goModVersion(t))
	require.Contains(t, goLine.detail, "brew install go")
	require.Contains(t, goLine.detail, "https://go.dev/dl/")

	for _, want := range []struct{ group, tool, apt, brew string }{
		{"make run", "curl", "apt-get install curl", "brew install curl"},
		{"make run", "python3", "apt-get install python3", "brew install python"},
		{"make test", "node", "apt-get install nodejs", "brew install node"},
		{"make test", "npm", "apt-get install npm", "brew install node"},
		{"make test", "cc", "apt-get install build-essential", "xcode-select --install"},
		{"make test", "c++", "apt-get install build-essential", "xcode-select --install"},
		{"make test", "flock", "apt-get install util-linux", "brew install flock"},
		{"make test", "promtool", "apt-get install prometheus", "brew install prometheus"},
		{"make test", "chromium", "apt-get install chromium", "set CHROMIUM_PATH"},
		{"make try", "setsid", "apt-get install util-linux", "Linux only"},
	} {
		l := findDoctorLine(t, lines, want.group, want.tool, out)
		require.Equal(t, "missing", l.status, "%s\n%s", want.tool, out)
		require.Contains(t, l.detail, "not found")
		require.Contains(t, l.detail, want.apt)
		require.Contains(t, l.detail, want.brew)
	}

	// redis-server: not installed here; needed unless something answers.
	redis := findDoctorLine(t, lines, "make test", "redis-server", out)
	if c, err := net.Dial("tcp", "127.0.0.1:6379"); err == nil {
		_ = c.Close()
		require.Equal(t, "ok", redis.status, out)
		require.Contains(t, redis.detail, "answers on 127.0.0.1:6379")
	} else {
		require.Equal(t, "missing", redis.status, out)
		require.Contains(t, redis.detail, "apt-get install redis-server")
		require.Contains(t, redis.detail, "brew install redis")
	}

	// PostgreSQL: found exactly when devdb.sh finds it on the same PATH
	// (its usual install folders are searched too).
	devdb := exec.Command(filepath.Join(root, "sidecar", "scripts", "devdb.sh"), "bindir")
	devdb.Env = env
	bindir, devdbErr := devdb.Output()
	pg := findDoctorLine(t, lines, "make run", "postgresql", out)
	if devdbErr == nil {
		require.Equal(t, "ok", pg.status, out)
		require.Contains(t, pg.detail, strings.TrimSpace(string(bindir)))
	} else {
		require.Equal(t, "missing", pg.status, out)
		require.Contains(t, pg.detail, "apt-get install postgresql")
		require.Contains(t, pg.detail, "brew install postgresql@16")
	}

	// The summary: one install command per platform for all of it.
	apt := regexp.MustCompile(`(?m)^  Debian/Ubuntu: +(?:sudo )?apt-get install (.*)$`).FindStringSubmatch(out)
	require.NotNil(t, apt, out)
	require.Subset(t, strings.Fields(apt[1]), []string{"curl", "python3", "nodejs", "npm", "build-essential", "util-linux", "chromium"})
	require.NotContains(t, out, "everything is installed")
	// The prometheus package starts a server on :9090: the note says so.
	require.Regexp(t, `(?m)^  Debian/Ubuntu: +the prometheus package also starts a Prometheus server on :9090`, out)
	brew := regexp.MustCompile(`(?m)^  macOS: +brew install (.*)$`).FindStringSubmatch(out)
	require.NotNil(t, brew, out)
	require.Subset(t, strings.Fields(brew[1]), []string{"go", "curl", "python", "node", "flock"})
	require.Equal(t, 1, strings.Count(brew[1], "node"), "node is listed once though node and npm both need it")
	require.Regexp(t, `(?m)^  macOS: +xcode-select --install$`, out)
	require.Regexp(t, `(?m)^  Debian/Ubuntu: +Go `+regexp.QuoteMeta(goModVersion(t))+` or newer from https://go.dev/dl/`, out)
}

// TestDoctorOnThisMachine: this machine runs make test, so doctor.sh finds
// everything on its PATH (Redis through IC_REDIS_ADDR) and exits 0.
func TestDoctorOnThisMachine(t *testing.T) {
	short.Skip(t, "everything make test needs (make doctor)")
	t.Parallel()
	redis := os.Getenv("IC_REDIS_ADDR")
	if redis == "" {
		redis = "127.0.0.1:6379"
	}
	cmd := exec.Command(filepath.Join(repoRoot(t), "sidecar", "scripts", "doctor.sh"))
	cmd.Env = append(os.Environ(), "IC_REDIS_ADDR="+redis)
	b, err := cmd.CombinedOutput()
	out := string(b)
	require.NoError(t, err, "make doctor reports something missing on a machine that runs the tests:\n%s", out)
	require.NotContains(t, out, "missing")
	require.Contains(t, out, "everything is installed")
	lines := parseDoctor(out)
	require.NotEmpty(t, lines)
	for _, l := range lines {
		require.Equal(t, "ok", l.status, "%+v", l)
		require.NotEmpty(t, l.detail, "%s shows the version found", l.tool)
	}
}

// TestRunWithoutGo: make run without Go says so and points at make doctor,
// before it touches anything.
func TestRunWithoutGo(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(filepath.Join(repoRoot(t), "sidecar", "scripts", "run.sh"))
	cmd.Env = []string{"PATH=" + toolDir(t, "bash", "dirname"), "HOME=" + t.TempDir()}
	b, err := cmd.CombinedOutput()
	out := string(b)
	require.Equal(t, 1, exitCode(t, err), out)
	require.Contains(t, out, "run: Go is not installed")
	require.Contains(t, out, "make doctor")
}
