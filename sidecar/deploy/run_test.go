package deploy

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// runCheckout is a copy of what sidecar/scripts/run.sh needs (the Go module:
// go.mod, go.sum, schema/ and sidecar/) in a temp folder. run.sh works in the
// checkout it sits in, so bin/claimd and .run/ are the copy's, never the
// developer's.
type runCheckout struct {
	t    *testing.T
	root string
	env  []string
}

func newRunCheckout(t *testing.T) *runCheckout {
	t.Helper()
	src := repoRoot(t)
	root := t.TempDir()
	for _, f := range []string{"go.mod", "go.sum"} {
		copyFile(t, filepath.Join(src, f), filepath.Join(root, f))
	}
	for _, d := range []string{"schema", "sidecar"} {
		require.NoError(t, os.CopyFS(filepath.Join(root, d), os.DirFS(filepath.Join(src, d))))
	}
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name == "DATABASE_URL" || strings.HasPrefix(name, "CLAIMD_") {
			continue
		}
		env = append(env, kv)
	}
	return &runCheckout{t: t, root: root, env: append(env, "DATABASE_URL="+pgtest.NewDatabase(t))}
}

func (c *runCheckout) command(addr string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(c.root, "sidecar", "scripts", "run.sh"))
	cmd.Env = append(append([]string{}, c.env...), "CLAIMD_ADDR="+addr)
	return cmd
}

func (c *runCheckout) pidFile() string { return filepath.Join(c.root, ".run", "claimd.pid") }

func (c *runCheckout) readPIDFile() string {
	c.t.Helper()
	b, err := os.ReadFile(c.pidFile())
	require.NoError(c.t, err)
	return strings.TrimSpace(string(b))
}

func (c *runCheckout) writePIDFile(pid int) {
	c.t.Helper()
	writeFile(c.t, c.pidFile(), strconv.Itoa(pid)+"\n", 0o644)
}

// runOnce runs run.sh to its end (it must refuse to start).
func (c *runCheckout) runOnce(addr string) (string, int) {
	c.t.Helper()
	b, err := c.command(addr).CombinedOutput()
	return string(b), exitCode(c.t, err)
}

// syncBuffer collects a process's output from its two pipes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runningClaimd is run.sh started in the background; claimd is its child
// (its PID in .run/claimd.pid).
type runningClaimd struct {
	t    *testing.T
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

// start starts run.sh and returns once claimd answers /healthz on addr
// (polled: the answer is the signal that it runs).
func (c *runCheckout) start(addr string) *runningClaimd {
	c.t.Helper()
	r := &runningClaimd{t: c.t, cmd: c.command(addr), out: &syncBuffer{}, done: make(chan struct{})}
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	require.NoError(c.t, r.cmd.Start())
	go func() { r.err = r.cmd.Wait(); close(r.done) }()
	c.t.Cleanup(r.stop)

	client := &http.Client{Timeout: 5 * time.Second}
	// A bound for a broken start, not a measurement: the first run builds
	// claimd from a cold copy.
	deadline := time.Now().Add(5 * time.Minute)
	for {
		resp, err := client.Get("http://" + addr + "/healthz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return r
			}
		}
		select {
		case <-r.done:
			c.t.Fatalf("run.sh exited before claimd answered /healthz (%v):\n%s", r.err, r.out)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("claimd did not answer /healthz on %s:\n%s", addr, r.out)
		}
	}
}

// stop sends SIGTERM to the PID it started (run.sh, which passes it on to
// claimd) and waits for it to exit.
func (r *runningClaimd) stop() {
	select {
	case <-r.done:
		return
	default:
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(time.Minute):
		r.t.Errorf("claimd (pid %d) did not stop within a minute of SIGTERM; killing it:\n%s", r.cmd.Process.Pid, r.out)
		_ = r.cmd.Process.Kill()
		<-r.done
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// anotherAddress is the banner's and the refusal's hint: a free port, never
// Prometheus's 9090.
var anotherAddress = regexp.MustCompile(`CLAIMD_ADDR=127\.0\.0\.1:(\d+) make run`)

func requireAnotherAddress(t *testing.T, out string) {
	t.Helper()
	m := anotherAddress.FindStringSubmatch(out)
	require.NotNil(t, m, "the output says how to use another address:\n%s", out)
	require.NotEqual(t, "9090", m[1], "9090 is Prometheus's port (Debian's prometheus package starts one)")
}

// claimdPID is the PID in the PID file, checked to be a running claimd.
func (c *runCheckout) claimdPID() int {
	c.t.Helper()
	pid, err := strconv.Atoi(c.readPIDFile())
	require.NoError(c.t, err)
	args, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	require.NoError(c.t, err, "the PID file names a running process")
	require.Contains(c.t, string(args), "claimd\x00serve", "the PID file names claimd itself")
	return pid
}

// TestRunRefusesASecondStart: a second make run while claimd runs exits 1,
// says which PID runs where and how to stop it, and leaves .run/claimd.pid
// naming the running claimd; the file goes when claimd exits; a PID file of
// an exited or unrelated process is stale: removed, said so, and the start
// goes ahead; a foreign listener on the address is named.
func TestRunRefusesASecondStart(t *testing.T) {
	t.Parallel()
	c := newRunCheckout(t)

	addr := freeAddr(t)
	first := c.start(addr)
	pid := c.claimdPID()
	banner := first.out.String()
	require.Contains(t, banner, "listening   http://"+addr)
	requireAnotherAddress(t, banner)
	require.NotContains(t, banner, "make db-stop", "no project-local cluster: DATABASE_URL is set")
	require.Regexp(t, `run: building bin/claimd: done \(\d+ (s|min)`, banner, "the build says when it is done")

	// The same address, then another one: the running claimd is reported
	// either way, before anything is built.
	for _, second := range []string{addr, freeAddr(t)} {
		out, code := c.runOnce(second)
		require.Equal(t, 1, code, out)
		require.Contains(t, out, fmt.Sprintf("claimd is already running (pid %d) on http://%s; stop it: kill -TERM %d", pid, addr, pid))
		require.NotContains(t, out, "building bin/claimd")
		require.Equal(t, strconv.Itoa(pid), c.readPIDFile(), "the PID file still names the running claimd")
	}

	// SIGTERM to the script reaches claimd, which drains and exits 0; the
	// PID and address files go with it.
	first.stop()
	require.NoError(t, first.err, "claimd exits 0 on SIGTERM:\n%s", first.out)
	require.NoFileExists(t, c.pidFile(), "the PID file goes when claimd exits")
	require.NoFileExists(t, filepath.Join(c.root, ".run", "claimd.addr"))

	// A foreign listener on the address is reported.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	busy := l.Addr().String()
	out, code := c.runOnce(busy)
	require.NoError(t, l.Close())
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "something is already listening on "+busy)
	requireAnotherAddress(t, out)
	if _, lsofErr := exec.LookPath("lsof"); lsofErr == nil {
		require.Contains(t, out, fmt.Sprintf("(pid %d", os.Getpid()), "lsof names the listener: this test")
	}

	// Stale (the exited claimd, as a SIGKILL leaves it), then unrelated
	// (this test's own PID): removed, said so; the start goes ahead and the
	// file names the new claimd.
	for _, old := range []int{pid, os.Getpid()} {
		c.writePIDFile(old)
		addr := freeAddr(t)
		next := c.start(addr)
		require.Contains(t, next.out.String(), fmt.Sprintf("run: removing the stale .run/claimd.pid (pid %d is not a running claimd)", old))
		require.NotEqual(t, old, c.claimdPID(), "the PID file names the new claimd")
		next.stop()
		require.NoError(t, next.err, "%s", next.out)
		require.NoFileExists(t, c.pidFile())
	}

	// claimd killed with SIGKILL: the script still removes the file.
	next := c.start(freeAddr(t))
	require.NoError(t, syscall.Kill(c.claimdPID(), syscall.SIGKILL))
	<-next.done
	require.NoFileExists(t, c.pidFile(), "the script removes the PID file of a claimd that was killed")
}
