package inbox_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/short"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// crashWait bounds every wait of the crash test (a deadline, not a sleep).
const crashWait = 90 * time.Second

// claimdProc is a claimd process started by the test.
type claimdProc struct {
	cmd  *exec.Cmd
	addr chan string
	done chan struct{}
	mu   sync.Mutex
	log  bytes.Buffer
	err  error // cmd.Wait, valid after done
}

func (p *claimdProc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// startClaimd runs the binary with env only (nothing from the developer's
// shell) and returns once it logged its listening address.
func startClaimd(t *testing.T, bin string, env map[string]string) (*claimdProc, string) {
	t.Helper()
	p := &claimdProc{cmd: exec.Command(bin, "serve"), addr: make(chan string, 1), done: make(chan struct{})}
	for _, k := range []string{"PATH", "HOME", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			p.cmd.Env = append(p.cmd.Env, k+"="+v)
		}
	}
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	stderr, err := p.cmd.StderrPipe()
	require.NoError(t, err)
	p.cmd.Stdout = io.Discard
	require.NoError(t, p.cmd.Start())
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			p.mu.Lock()
			p.log.Write(line)
			p.log.WriteByte('\n')
			p.mu.Unlock()
			var l struct {
				Message string `json:"message"`
				Addr    string `json:"addr"`
			}
			if json.Unmarshal(line, &l) == nil && l.Message == "claimd listening" {
				p.addr <- l.Addr
			}
		}
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill() // by PID, only this test's process
			<-p.done
		}
	})
	select {
	case a := <-p.addr:
		return p, a
	case <-p.done:
		t.Fatalf("claimd exited before listening (%v); log:\n%s", p.err, p.logs())
	case <-time.After(crashWait):
		t.Fatalf("claimd did not listen within %s; log:\n%s", crashWait, p.logs())
	}
	return nil, ""
}

func buildClaimd(t *testing.T) string {
	t.Helper()
	short.Skip(t, "a build of claimd")
	bin := filepath.Join(t.TempDir(), "claimd")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/idempotent-claim/idempotent-claim/sidecar/cmd/claimd").CombinedOutput()
	require.NoError(t, err, "go build claimd: %s", out)
	return bin
}

// TestIngestSurvivesSIGKILLAfterAcknowledging runs the real claimd binary
// as an ingest-only replica (CLAIMD_DISPATCH=false), acknowledges a
// delivery, and kills the process with SIGKILL before anything could be
// dispatched. A new process with dispatch enabled then dispatches the event
// exactly once; a provider retry after the restart is a duplicate.
func TestIngestSurvivesSIGKILLAfterAcknowledging(t *testing.T) {
	t.Parallel()
	bin := buildClaimd(t)
	dbURL := pgtest.NewDatabase(t)

	var mu sync.Mutex
	var posts []http.Header
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		posts = append(posts, r.Header.Clone())
		mu.Unlock()
	}))
	t.Cleanup(target.Close)
	postCount := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(posts)
	}

	const secret = "crash-test-github-secret-01"
	sources := filepath.Join(t.TempDir(), "sources.yaml")
	require.NoError(t, os.WriteFile(sources, []byte(`
sources:
  gh:
    tenant: acme
    provider: github
    secrets: ["${GH_HOOK_SECRET}"]
    forward: {require_claim: false, url: "`+target.URL+`/webhook/gh", backoff_base_seconds: 1, backoff_cap_seconds: 1}
`), 0o600))
	env := map[string]string{
		"DATABASE_URL": dbURL, "CLAIMD_ADDR": "127.0.0.1:0", "CLAIMD_SOURCES_FILE": sources,
		"GH_HOOK_SECRET": secret, "CLAIMD_API_KEYS": "acme:crash-test-api-key-000001",
		"CLAIMD_RELOAD_INTERVAL_SECONDS": "0", "CLAIMD_MAINTENANCE_INTERVAL_SECONDS": "0",
		"CLAIMD_DISPATCH": "false",
	}

	first, addr := startClaimd(t, bin, env)
	body := []byte(`{"ref":"refs/heads/main","after":"c0ffee"}`)
	deliver := func(addr string) (int, string, string) {
		req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/ingest/gh", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Delivery", "crash-delivery-1")
		req.Header.Set("X-GitHub-Event", "push")
		req.Header.Set("X-Hub-Signature-256", verifytest.GitHub(secret, body))
		resp, err := (&http.Client{Timeout: crashWait}).Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var r struct {
			Received []struct {
				ClaimID string `json:"claim_id"`
				Status  string `json:"status"`
			} `json:"received"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&r))
		require.Len(t, r.Received, 1)
		return resp.StatusCode, r.Received[0].ClaimID, r.Received[0].Status
	}
	status, id, outcome := deliver(addr)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, string(inbox.Accepted), outcome)

	// SIGKILL right after the acknowledgement: no shutdown, no drain.
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGKILL))
	select {
	case <-first.done:
	case <-time.After(crashWait):
		t.Fatal("claimd survived SIGKILL")
	}
	var exit *exec.ExitError
	require.True(t, errors.As(first.err, &exit), "killed: %v", first.err)
	require.Equal(t, syscall.SIGKILL, exit.Sys().(syscall.WaitStatus).Signal())

	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var dispatchState, jobState string
	require.NoError(t, pool.QueryRow(ctx, `SELECT e.dispatch_state, j.state::text FROM inbox_events e
		JOIN river_job j ON j.args->>'claim_id' = e.claim_id::text WHERE e.claim_id = $1`, id).Scan(&dispatchState, &jobState))
	require.Equal(t, "pending", dispatchState, "the acknowledged event survived the kill")
	require.Equal(t, "available", jobState, "its dispatch job is waiting")
	require.Zero(t, postCount(), "an ingest-only replica never dispatches")

	env["CLAIMD_DISPATCH"] = "true"
	second, addr := startClaimd(t, bin, env)
	deadline := time.Now().Add(crashWait)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var open int
		require.NoError(t, pool.QueryRow(ctx, `SELECT e.dispatch_state, (SELECT count(*) FROM river_job j
			WHERE j.args->>'claim_id' = $2 AND j.state NOT IN ('completed', 'cancelled', 'discarded'))
			FROM inbox_events e WHERE e.claim_id = $1`, id, id).Scan(&dispatchState, &open))
		if dispatchState == "dispatched" && open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not dispatched after restart (state %s); log:\n%s", dispatchState, second.logs())
		}
		<-tick.C
	}
	require.Equal(t, 1, postCount(), "dispatched exactly once")
	mu.Lock()
	require.Equal(t, id, posts[0].Get(inbox.HeaderInboxID))
	require.Equal(t, "crash-delivery-1", posts[0].Get(inbox.HeaderEventID))
	mu.Unlock()

	// GitHub retrying after the restart gets a duplicate; nothing new is queued.
	status, again, outcome := deliver(addr)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, id, again)
	require.Equal(t, string(inbox.Duplicate), outcome)
	var jobs int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job`).Scan(&jobs))
	require.Equal(t, 1, jobs)
	require.Equal(t, 1, postCount())

	require.NoError(t, second.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-second.done:
		require.NoError(t, second.err, "graceful stop; log:\n%s", second.logs())
	case <-time.After(crashWait):
		t.Fatalf("claimd did not stop on SIGTERM; log:\n%s", second.logs())
	}
}
