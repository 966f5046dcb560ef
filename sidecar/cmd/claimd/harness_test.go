package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/config"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/short"
)

// Process-level tests of the claimd binary. Some run the real binary built
// with `go build` (signals, exit codes, stdout/stderr); others run Main in
// this process (pool behaviour). Every test gets its own database from
// pgtest.NewDatabase.

// binDir holds the claimd binary built once per test run.
var binDir string

var build struct {
	once sync.Once
	path string
	out  []byte
	err  error
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "claimd-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// claimdBinary builds this package into binDir once and returns its path.
// Under -race the binary is built with the race detector too, so a race in
// the real serve/shutdown path fails the test (exit code 66).
func claimdBinary(t testing.TB) string {
	t.Helper()
	short.Skip(t, "a build of claimd")
	build.once.Do(func() {
		build.path = filepath.Join(binDir, "claimd")
		args := []string{"build", "-o", build.path}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, ".")...)
		build.out, build.err = cmd.CombinedOutput()
	})
	if build.err != nil {
		t.Fatalf("go build claimd: %v\n%s", build.err, build.out)
	}
	return build.path
}

// processEnv is a minimal environment plus vars, so settings in the
// developer's shell (DATABASE_URL, CLAIMD_*) never leak into a test.
func processEnv(vars map[string]string) []string {
	env := []string{}
	for _, k := range []string{"PATH", "HOME", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	return env
}

// logSink collects log lines written by a process or an in-process logger
// and lets tests wait for one.
type logSink struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	lines   []string
	partial []byte
	changed chan struct{}
}

func newLogSink() *logSink { return &logSink{changed: make(chan struct{})} }

// Write implements io.Writer (zerolog writes one event per call).
func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Write(p)
	s.partial = append(s.partial, p...)
	for {
		i := bytes.IndexByte(s.partial, '\n')
		if i < 0 {
			break
		}
		s.lines = append(s.lines, string(s.partial[:i]))
		s.partial = s.partial[i+1:]
	}
	close(s.changed)
	s.changed = make(chan struct{})
	return len(p), nil
}

// String returns everything written so far.
func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// Lines returns the complete lines written so far.
func (s *logSink) Lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.lines...)
}

// logLine is the part of a JSON log line the tests read.
type logLine struct {
	Level   string `json:"level"`
	Message string `json:"message"`
	Addr    string `json:"addr"`
	// MetricsAddr is the metrics listener of "claimd listening".
	MetricsAddr string `json:"metrics_addr"`
	Applied     *int   `json:"applied"`
}

// waitMessage blocks until a JSON line with the given message is written,
// or done is closed (the process ended), and returns the line.
func (s *logSink) waitMessage(t testing.TB, msg string, done <-chan struct{}) logLine {
	t.Helper()
	seen := 0
	for {
		s.mu.Lock()
		lines, changed := s.lines[seen:], s.changed
		seen = len(s.lines)
		s.mu.Unlock()
		for _, l := range lines {
			var ll logLine
			if json.Unmarshal([]byte(l), &ll) == nil && ll.Message == msg {
				return ll
			}
		}
		select {
		case <-changed:
		case <-done:
			// Drain lines written just before the end.
			s.mu.Lock()
			rest := s.lines[seen:]
			s.mu.Unlock()
			for _, l := range rest {
				var ll logLine
				if json.Unmarshal([]byte(l), &ll) == nil && ll.Message == msg {
					return ll
				}
			}
			t.Fatalf("claimd ended before logging %q; log:\n%s", msg, s.String())
		}
	}
}

// proc is a claimd process started by a test.
type proc struct {
	cmd    *exec.Cmd
	stderr *logSink
	stdout bytes.Buffer
	// done is closed when the process has exited and its output is read.
	done chan struct{}
	// waitErr is cmd.Wait's result, valid after done.
	waitErr error
	// url is http://addr once serving (startServe).
	url string
}

// start runs the binary with args and env and returns at once.
func start(t testing.TB, env map[string]string, args ...string) *proc {
	t.Helper()
	return startBinary(t, claimdBinary(t), env, args...)
}

// plainBuild is the claimd binary built without the race detector, for
// tests that measure the process's memory (the detector's shadow memory
// would be most of what they measure).
var plainBuild struct {
	once sync.Once
	path string
	out  []byte
	err  error
}

func claimdBinaryPlain(t testing.TB) string {
	t.Helper()
	short.Skip(t, "a build of claimd")
	plainBuild.once.Do(func() {
		plainBuild.path = filepath.Join(binDir, "claimd-plain")
		cmd := exec.Command("go", "build", "-o", plainBuild.path, ".")
		plainBuild.out, plainBuild.err = cmd.CombinedOutput()
	})
	if plainBuild.err != nil {
		t.Fatalf("go build claimd: %v\n%s", plainBuild.err, plainBuild.out)
	}
	return plainBuild.path
}

// startBinary runs bin with args and env and returns at once.
func startBinary(t testing.TB, bin string, env map[string]string, args ...string) *proc {
	t.Helper()
	p := &proc{stderr: newLogSink(), done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = processEnv(env)
	p.cmd.Stdout = &p.stdout
	errPipe, err := p.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	go func() {
		// Wait only after the pipe is drained.
		_, _ = io.Copy(p.stderr, errPipe)
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill() // our own child, by PID
			<-p.done
		}
		if t.Failed() {
			t.Logf("claimd %v stderr:\n%s", args, p.stderr.String())
		}
	})
	return p
}

// startServe starts `claimd` (serve) on a kernel-chosen port and waits
// for its "claimd listening" log line, which carries the bound address.
func startServe(t testing.TB, env map[string]string) *proc {
	t.Helper()
	return startServeBinary(t, claimdBinary(t), env)
}

// startServeBinary is startServe of the binary bin.
func startServeBinary(t testing.TB, bin string, env map[string]string) *proc {
	t.Helper()
	all := map[string]string{
		"CLAIMD_ADDR":                         "127.0.0.1:0",
		"CLAIMD_LOG_FORMAT":                   "json",
		"CLAIMD_MAINTENANCE_INTERVAL_SECONDS": "0",
	}
	for k, v := range env {
		all[k] = v
	}
	p := startBinary(t, bin, all)
	ll := p.stderr.waitMessage(t, "claimd listening", p.done)
	require.NotEmpty(t, ll.Addr, "listening line without addr")
	p.url = "http://" + ll.Addr
	return p
}

// exitCode waits for the process and returns its exit code.
func (p *proc) exitCode(t testing.TB) int {
	t.Helper()
	<-p.done
	var ee *exec.ExitError
	if errors.As(p.waitErr, &ee) {
		return ee.ExitCode()
	}
	require.NoError(t, p.waitErr)
	return 0
}

// runClaimd runs a one-shot command and returns stdout, stderr and the
// exit code.
func runClaimd(t testing.TB, env map[string]string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	p := start(t, env, args...)
	code = p.exitCode(t)
	return p.stdout.String(), p.stderr.String(), code
}

// inProc is a Main running in the test process.
type inProc struct {
	m    *Main
	url  string
	logs *logSink
}

// startInProcess runs Main in this process with settings from env (as the
// binary would read them) and stops it when the test ends.
func startInProcess(t testing.TB, env map[string]string) *inProc {
	t.Helper()
	return startInProcessWith(t, env, nil)
}

// startInProcessWith is startInProcess with a hook that adjusts Main
// before it runs.
func startInProcessWith(t testing.TB, env map[string]string, adjust func(*Main)) *inProc {
	t.Helper()
	all := map[string]string{
		"CLAIMD_ADDR":                         "127.0.0.1:0",
		"CLAIMD_MAINTENANCE_INTERVAL_SECONDS": "0",
	}
	for k, v := range env {
		all[k] = v
	}
	cfg, err := config.Load(nil, func(k string) string { return all[k] })
	require.NoError(t, err)
	logs := newLogSink()
	m := NewMain(cfg, newLogger(cfg, logs))
	if adjust != nil {
		adjust(m)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- m.Run(ctx) }()
	select {
	case <-m.Ready:
	case err := <-errc:
		cancel()
		m.Close()
		t.Fatalf("Main.Run ended before serving: %v\n%s", err, logs.String())
	}
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-errc)
		m.Close()
	})
	return &inProc{m: m, url: "http://" + m.Addr, logs: logs}
}

// waitFor polls cond until it holds. It is for conditions that only
// PostgreSQL or the kernel can report (lock waits, closed listeners);
// the bound is a hang guard, not a timing assertion.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// api is a small JSON client of the sidecar.
type api struct {
	t      testing.TB
	client *http.Client
	base   string
	key    string
}

func newAPI(t testing.TB, base, key string) *api {
	return &api{t: t, base: base, key: key, client: &http.Client{
		Timeout:   5 * time.Minute,
		Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true},
	}}
}

// do sends a request and returns the status and the decoded JSON body.
func (a *api) do(method, path, body string) (int, map[string]any, error) {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, a.base+path, r)
	if err != nil {
		return 0, nil, err
	}
	if a.key != "" {
		req.Header.Set("Authorization", "Bearer "+a.key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, err
	}
	var m map[string]any
	if len(b) > 0 && json.Unmarshal(b, &m) != nil {
		m = map[string]any{"raw": string(b)}
	}
	return resp.StatusCode, m, nil
}

// must sends a request that must succeed with want and returns the body.
func (a *api) must(want int, method, path, body string) map[string]any {
	a.t.Helper()
	status, m, err := a.do(method, path, body)
	require.NoError(a.t, err, "%s %s", method, path)
	require.Equal(a.t, want, status, "%s %s: %v", method, path, m)
	return m
}

// str reads a string field of a JSON object.
func str(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}
