package deploy

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeNPM stands in for npm under n8n-node/scripts/install-n8n.sh. It
// "installs" a node that answers the script's checks; its n8n install
// reports its PID on the ready FIFO and then blocks on the gate FIFO until
// the test writes to it (FAKE_N8N_EXIT=N makes it fail with N instead).
const fakeNPM = `#!/usr/bin/env bash
set -eu
echo "$$ $*" >>"$FAKE_DIR/npm.log"
prefix="" last=""
while [ $# -gt 0 ]; do
	case $1 in
	--prefix) prefix=$2; shift ;;
	*) last=$1 ;;
	esac
	shift
done
case $last in
node-linux-*@*)
	d="$prefix/node_modules/${last%@*}"
	mkdir -p "$d/bin" "$d/include/node"
	: >"$d/include/node/node.h"
	printf '#!/usr/bin/env bash\ncase $1 in\n--version) echo v%s ;;\n-e) exit 0 ;;\n*) echo "$FAKE_N8N_VERSION" ;;\nesac\n' "${last##*@}" >"$d/bin/node"
	chmod +x "$d/bin/node"
	;;
n8n@*)
	if [ -n "${FAKE_N8N_EXIT:-}" ]; then exit "$FAKE_N8N_EXIT"; fi
	echo "$$" >"$FAKE_DIR/ready"
	read -r _ <"$FAKE_DIR/gate"
	mkdir -p "$prefix/node_modules/n8n/bin" "$prefix/node_modules/sqlite3"
	: >"$prefix/node_modules/n8n/bin/n8n"
	;;
sqlite3) [ -d node_modules/sqlite3 ] ;;
esac
`

// installRun is one run of install-n8n.sh with the fake npm first on PATH
// and a cache folder of its own.
type installRun struct {
	t      *testing.T
	dir    string // FAKE_DIR: the FIFOs and npm.log
	cache  string
	n8n    string // the pinned n8n version
	cmd    *exec.Cmd
	stdout *syncBuffer
	lines  chan string // stderr, a line at a time; closed at EOF
	stderr *syncBuffer // all of stderr, for messages
	done   chan struct{}
	err    error
	npmPID int
}

func scriptPin(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "n8n-node", "scripts", "install-n8n.sh"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^` + name + `=(\S+)`).FindSubmatch(b)
	require.NotNil(t, m, "install-n8n.sh pins %s", name)
	return string(m[1])
}

func newInstallRun(t *testing.T, extraEnv ...string) *installRun {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("install-n8n.sh installs on Linux only")
	}
	if _, err := exec.LookPath("flock"); err != nil {
		t.Fatalf("flock is not installed; install-n8n.sh needs it (Debian/Ubuntu: apt-get install util-linux)")
	}
	dir := t.TempDir()
	r := &installRun{t: t, dir: dir, cache: filepath.Join(dir, "cache"), n8n: scriptPin(t, "N8N_VERSION"),
		stdout: &syncBuffer{}, stderr: &syncBuffer{}, lines: make(chan string, 1000), done: make(chan struct{})}
	bin := filepath.Join(dir, "bin")
	writeFile(t, filepath.Join(bin, "npm"), fakeNPM, 0o755)
	for _, fifo := range []string{"ready", "gate"} {
		require.NoError(t, syscall.Mkfifo(filepath.Join(dir, fifo), 0o600))
	}
	r.cmd = exec.Command(filepath.Join(repoRoot(t), "n8n-node", "scripts", "install-n8n.sh"))
	r.cmd.Env = append(makeEnv(
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"IC_CACHE_DIR="+r.cache,
		"IC_PROGRESS_SECONDS=1",
		"FAKE_DIR="+dir,
		"FAKE_N8N_VERSION="+r.n8n,
	), extraEnv...)
	return r
}

// viaMake runs `make n8n` in the repository instead of the script.
func (r *installRun) viaMake() {
	env := r.cmd.Env
	r.cmd = exec.Command("make", "--no-print-directory", "n8n")
	r.cmd.Dir = repoRoot(r.t)
	r.cmd.Env = env
}

func (r *installRun) start() {
	r.t.Helper()
	pr, pw, err := os.Pipe()
	require.NoError(r.t, err)
	r.cmd.Stdout = r.stdout
	r.cmd.Stderr = pw
	require.NoError(r.t, r.cmd.Start())
	require.NoError(r.t, pw.Close())
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			_, _ = r.stderr.Write([]byte(sc.Text() + "\n"))
			r.lines <- sc.Text()
		}
		close(r.lines)
		_ = pr.Close()
	}()
	go func() { r.err = r.cmd.Wait(); close(r.done) }()
	r.t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			_ = r.cmd.Process.Kill()
			<-r.done
		}
		if r.npmPID > 0 {
			_ = syscall.Kill(r.npmPID, syscall.SIGKILL)
		}
	})
}

// A bound for a broken run, not a measurement.
const installBound = 2 * time.Minute

// awaitNPM returns the fake npm's PID once its n8n install blocks.
func (r *installRun) awaitNPM() int {
	r.t.Helper()
	got := make(chan string, 1)
	go func() {
		b, err := os.ReadFile(filepath.Join(r.dir, "ready"))
		if err == nil {
			got <- strings.TrimSpace(string(b))
		}
	}()
	select {
	case s := <-got:
		pid, err := strconv.Atoi(s)
		require.NoError(r.t, err)
		r.npmPID = pid
		return pid
	case <-r.done:
		// Unblock the reader above: a writer that closes at once.
		if f, err := os.OpenFile(filepath.Join(r.dir, "ready"), os.O_WRONLY, 0); err == nil {
			_ = f.Close()
		}
		r.t.Fatalf("install-n8n.sh exited (%v) before npm installed n8n:\n%s", r.err, r.stderr)
	case <-time.After(installBound):
		r.t.Fatalf("npm did not start installing n8n:\n%s", r.stderr)
	}
	return 0
}

// awaitLine returns the first stderr line matching re.
func (r *installRun) awaitLine(re *regexp.Regexp) string {
	r.t.Helper()
	deadline := time.After(installBound)
	for {
		select {
		case l, ok := <-r.lines:
			if !ok {
				r.t.Fatalf("stderr ended without a line matching %s:\n%s", re, r.stderr)
			}
			if re.MatchString(l) {
				return l
			}
		case <-deadline:
			r.t.Fatalf("no line matching %s:\n%s", re, r.stderr)
		}
	}
}

// openGate lets the blocked npm finish.
func (r *installRun) openGate() {
	r.t.Helper()
	f, err := os.OpenFile(filepath.Join(r.dir, "gate"), os.O_WRONLY, 0)
	require.NoError(r.t, err)
	_, err = f.WriteString("go\n")
	require.NoError(r.t, err)
	require.NoError(r.t, f.Close())
}

func (r *installRun) wait() int {
	r.t.Helper()
	select {
	case <-r.done:
	case <-time.After(installBound):
		r.t.Fatalf("install-n8n.sh did not exit:\n%s", r.stderr)
	}
	// stderr reaches its end only when nothing the script started holds
	// it: the progress printer and the npm step are gone too.
	deadline := time.After(installBound)
	for open := true; open; {
		select {
		case _, open = <-r.lines:
		case <-deadline:
			r.t.Fatalf("install-n8n.sh exited (%v) but something it started still holds its stderr:\n%s", r.err, r.stderr)
		}
	}
	return exitCode(r.t, r.err)
}

func (r *installRun) marker() string {
	return filepath.Join(r.cache, "n8n-"+r.n8n, ".install-complete")
}

// heartbeat matches install-n8n.sh's progress line for the n8n install.
func heartbeat(version string) *regexp.Regexp {
	return regexp.MustCompile(`^install-n8n: still installing n8n ` + regexp.QuoteMeta(version) +
		`: (\d+ min )?\d+ s so far \(a cold install takes 4-17 min\)$`)
}

// TestInstallN8NProgress: while npm installs n8n, `make n8n` shows a
// progress line on stderr (make discards only stdout); once npm is done the
// install completes as before.
func TestInstallN8NProgress(t *testing.T) {
	t.Parallel()
	r := newInstallRun(t)
	r.viaMake()
	r.start()
	r.awaitNPM()
	r.awaitLine(heartbeat(r.n8n))
	r.openGate()
	require.Equal(t, 0, r.wait(), r.stderr.String())
	require.FileExists(t, r.marker())
	require.Contains(t, r.stderr.String(), "install-n8n: n8n "+r.n8n+" installed in ")
	require.Contains(t, r.stderr.String(), "(a cold install takes 4-17 min)")
	require.NotContains(t, r.stdout.String(), "IC_NODE_BIN=", "make n8n sends the paths to /dev/null")

	// Installed: the next run finds both and prints the paths.
	again := exec.Command(filepath.Join(repoRoot(t), "n8n-node", "scripts", "install-n8n.sh"))
	again.Env = r.cmd.Env
	var stderr syncBuffer
	again.Stderr = &stderr
	out, err := again.Output()
	require.NoError(t, err, stderr.String())
	require.Contains(t, stderr.String(), "n8n "+r.n8n+" present")
	require.Regexp(t, `^IC_NODE_BIN=.*/bin/node\nIC_N8N_BIN=.*/node_modules/n8n/bin/n8n\n$`, string(out))
}

// TestInstallN8NInterrupted: INT or TERM during the n8n install stops npm
// (its PID is gone once the script has exited) and leaves no marker.
func TestInstallN8NInterrupted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sig  syscall.Signal
		exit int
	}{{syscall.SIGINT, 130}, {syscall.SIGTERM, 143}} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			t.Parallel()
			r := newInstallRun(t)
			r.start()
			npm := r.awaitNPM()
			r.awaitLine(heartbeat(r.n8n))
			require.NoError(t, r.cmd.Process.Signal(tc.sig))
			require.Equal(t, tc.exit, r.wait(), r.stderr.String())
			require.Contains(t, r.stderr.String(), "install-n8n: interrupted")
			require.True(t, errors.Is(syscall.Kill(npm, 0), syscall.ESRCH), "npm (pid %d) was stopped", npm)
			require.NoFileExists(t, r.marker())
		})
	}
}

// TestInstallN8NNPMFails: a failing npm install fails the script with npm's
// status and leaves no marker.
func TestInstallN8NNPMFails(t *testing.T) {
	t.Parallel()
	r := newInstallRun(t, "FAKE_N8N_EXIT=7")
	r.start()
	require.Equal(t, 7, r.wait(), r.stderr.String())
	require.Contains(t, r.stderr.String(), "install-n8n: npm install n8n@"+r.n8n+" failed (exit 7)")
	require.NoFileExists(t, r.marker())
	require.Empty(t, r.stdout.String(), "no paths for a failed install")
}
