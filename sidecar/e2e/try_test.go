package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
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
)

// tryScript is make try's script (sidecar/scripts/try.sh).
const tryScript = "../scripts/try.sh"

// tryDeadline bounds one make try up to its summary (claimd, three n8n CLI
// commands, n8n's start) on a loaded machine; not a measurement.
const tryDeadline = 8 * time.Minute

// trySample is the summary's delivery to paste: the URL and the body.
var trySample = regexp.MustCompile(`curl -sS -X POST (\S+) -H 'Content-Type: application/json' -d '(\{[^']*\})'`)

// tryLogin is the summary's login line.
var tryLogin = regexp.MustCompile(`(?m)^  login +(\S+) / (\S+) `)

// lockedBuffer collects a process's output from its two pipes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// tryPorts returns a free port for n8n whose next port (its task broker's)
// is free too, and a free port for claimd.
func tryPorts(t *testing.T) (n8n, claimd int) {
	t.Helper()
	for i := 0; i < 50; i++ {
		p := FreePort(t)
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+1)); err == nil {
			l.Close()
			return p, FreePort(t)
		}
	}
	t.Fatalf("no free pair of ports for n8n and its task broker")
	return 0, 0
}

// tryCommand is try.sh with env (its state in TRY_DIR, on fresh ports and a fresh
// claimd database, with the cached n8n, the test's claimd build and the
// built node package: TRY_NO_BUILD), what make try does after its builds.
func tryCommand(t *testing.T, env []string, extra ...string) (*exec.Cmd, *lockedBuffer) {
	t.Helper()
	cmd := exec.Command("bash", tryScript)
	cmd.Env = append(append([]string{}, env...), extra...)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	// A process group of its own, as a terminal gives make try: Ctrl-C is
	// a SIGINT to that group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, out
}

// pidIn reads a PID file of try.sh.
func pidIn(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s holds %q, not a PID", path, b)
	}
	return pid
}

// running reports whether pid is a process that has not exited (a zombie
// counts as exited).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// deliverSample posts the summary's sample delivery and returns the answer.
func deliverSample(t *testing.T, url, body string) answer {
	t.Helper()
	a := post(t, url, []byte(body), nil)
	var parsed struct {
		Status    string `json:"status"`
		ResultRef string `json:"result_ref"`
	}
	_ = json.Unmarshal(a.Raw, &parsed)
	a.Status, a.ResultRef = parsed.Status, parsed.ResultRef
	return a
}

// TestTry runs make try's script as a user would, twice on the same state
// folder. The first run waits for its summary, sends the sample delivery it
// prints twice through n8n (done, then duplicate with the same result
// reference: the protected API ran once), signs in to n8n with the login
// it prints, then stops it with SIGINT (Ctrl-C): n8n and claimd exit, their
// PID files go, and it exits 0. The second run (TRY_ONESHOT=1) imports nothing (the examples
// are unchanged), makes no new owner, sends its own sample twice, checks the
// answers itself and exits 0.
func TestTry(t *testing.T) {
	FindN8N(t)
	if _, err := os.Stat(filepath.Join(examplesDir, "..", "dist", "nodes", "IdempotentClaim", "IdempotentClaim.node.js")); err != nil {
		t.Fatalf("the node package is not built (make build-node): %v", err)
	}
	dir := LogDir(t, "try")
	n8nPort, claimdPort := tryPorts(t)
	env := EnvWithout([]string{"TRY_", "N8N_", "DB_", "CLAIMD_", "DATABASE_URL", "EXECUTIONS_", "QUEUE_"}, map[string]string{
		"TRY_DIR":                 dir,
		"TRY_N8N_PORT":            strconv.Itoa(n8nPort),
		"TRY_CLAIMD_PORT":         strconv.Itoa(claimdPort),
		"TRY_CLAIMD_DATABASE_URL": FreshDatabase(t, "ic_e2e_try"),
		"TRY_NO_BUILD":            "1",
		"TRY_CLAIMD_BIN":          ClaimdBinary(t),
	})

	// --- first run: as a user, stopped with Ctrl-C ---
	cmd, out := tryCommand(t, env)
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting try.sh: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
			<-done
		}
		if t.Failed() {
			t.Logf("--- try.sh output ---\n%s\n--- tail of n8n.log ---\n%s", out, TailFile(filepath.Join(dir, "n8n.log"), 60))
		}
	})
	began := time.Now()
	for !strings.Contains(out.String(), "(from another shell: kill -TERM ") {
		select {
		case err := <-done:
			stopped = true
			t.Fatalf("try.sh exited (%v) before its summary", err)
		case <-time.After(pollInterval):
		}
		if time.Since(began) > tryDeadline {
			t.Fatalf("no summary from try.sh within %s", tryDeadline)
		}
	}
	t.Logf("make try: summary after %s", time.Since(began).Round(time.Second))
	summary := out.String()
	m := trySample.FindStringSubmatch(summary)
	if m == nil {
		t.Fatalf("the summary has no sample delivery to paste")
	}
	url, body := m[1], m[2]
	if want := fmt.Sprintf("http://127.0.0.1:%d/webhook/", n8nPort); !strings.HasPrefix(url, want) {
		t.Fatalf("the sample delivery goes to %s, not to n8n's webhooks (%s…)", url, want)
	}
	first := deliverSample(t, url, body)
	second := deliverSample(t, url, body)
	if first.Code != http.StatusOK || first.Status != "done" || first.ResultRef == "" {
		t.Fatalf("first delivery: %s %s, want 200 done with a result_ref", first, first.Raw)
	}
	if second.Code != http.StatusOK || second.Status != "duplicate" || second.ResultRef != first.ResultRef {
		t.Fatalf("second delivery: %s %s, want 200 duplicate with result_ref %q", second, second.Raw, first.ResultRef)
	}

	// The login it prints opens the editor.
	lm := tryLogin.FindStringSubmatch(summary)
	if lm == nil {
		t.Fatalf("the summary has no login line")
	}
	login, _ := json.Marshal(map[string]string{"emailOrLdapLoginId": lm[1], "password": lm[2]})
	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/rest/login", n8nPort), "application/json", bytes.NewReader(login))
	if err != nil {
		t.Fatalf("signing in to n8n: %v", err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("signing in to n8n with the printed login: %s %.300s", resp.Status, raw)
	}

	// Ctrl-C: SIGINT to the process group.
	n8nPID, claimdPID := pidIn(t, filepath.Join(dir, "n8n.pid")), pidIn(t, filepath.Join(dir, "claimd.pid"))
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatalf("SIGINT: %v", err)
	}
	select {
	case err = <-done:
		stopped = true
	case <-time.After(2 * time.Minute):
		t.Fatalf("try.sh did not exit within 2 min of SIGINT")
	}
	if err != nil {
		t.Errorf("try.sh after SIGINT: %v, want exit status 0 (a stop after the summary is how it ends)", err)
	}
	for name, pid := range map[string]int{"n8n": n8nPID, "claimd": claimdPID} {
		if running(pid) {
			t.Errorf("%s (pid %d) still runs after try.sh stopped", name, pid)
		}
	}
	for _, f := range []string{"n8n.pid", "claimd.pid", "try.pid"} {
		if _, err := os.Stat(filepath.Join(dir, f)); !os.IsNotExist(err) {
			t.Errorf("%s is left after try.sh stopped (%v)", f, err)
		}
	}
	if !strings.Contains(out.String(), "try: stopped.") {
		t.Errorf("try.sh does not say it stopped")
	}

	// --- second run: the same state, TRY_ONESHOT ---
	cmd2, out2 := tryCommand(t, env, "TRY_ONESHOT=1")
	if err := cmd2.Start(); err != nil {
		t.Fatalf("starting try.sh again: %v", err)
	}
	done2 := make(chan error, 1)
	go func() { done2 <- cmd2.Wait() }()
	began = time.Now()
	select {
	case err = <-done2:
	case <-time.After(tryDeadline):
		_ = syscall.Kill(-cmd2.Process.Pid, syscall.SIGTERM)
		<-done2
		t.Fatalf("the second try.sh (TRY_ONESHOT=1) did not finish within %s:\n%s", tryDeadline, out2)
	}
	t.Logf("make try, second run (TRY_ONESHOT=1): %s", time.Since(began).Round(time.Second))
	second2 := out2.String()
	if err != nil {
		t.Fatalf("the second try.sh (TRY_ONESHOT=1): %v\n%s", err, second2)
	}
	for _, want := range []string{
		"the example workflows are imported (unchanged since the last make try)",
		`HTTP 200 {"status":"done"`,
		`HTTP 200 {"status":"duplicate"`,
		"oneshot: done, then duplicate, as expected",
		"try: stopped.",
	} {
		if !strings.Contains(second2, want) {
			t.Errorf("the second run's output lacks %q:\n%s", want, second2)
		}
	}
	if strings.Contains(second2, "created n8n's owner account") {
		t.Errorf("the second run made the owner account again:\n%s", second2)
	}
	for _, f := range []string{"n8n.pid", "claimd.pid", "try.pid"} {
		if _, err := os.Stat(filepath.Join(dir, f)); !os.IsNotExist(err) {
			t.Errorf("%s is left after the second run (%v)", f, err)
		}
	}
}
