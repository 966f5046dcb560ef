package inbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// SIGKILL while ingest groups are in flight (group commit of receipts):
// 32 clients deliver fresh events, two deliveries of each event at once,
// to an ingest-only replica that groups them; it is killed with SIGKILL
// mid-stream. Every event acknowledged 2xx is stored with its dispatch
// job, and every stored event has exactly one; a
// dispatching process started after it posts every stored event exactly
// once; a redelivery of an acknowledged event is a duplicate.
func TestIngestSIGKILLWithGroupsInFlight(t *testing.T) {
	t.Parallel()
	bin := buildClaimd(t)
	dbURL := pgtest.NewDatabase(t)

	var mu sync.Mutex
	posts := map[string]int{} // inbox id → posts
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		posts[r.Header.Get(inbox.HeaderInboxID)]++
		mu.Unlock()
	}))
	t.Cleanup(target.Close)

	const secret = "crash-group-github-secret-01"
	sources := filepath.Join(t.TempDir(), "sources.yaml")
	require.NoError(t, os.WriteFile(sources, []byte(`
sources:
  gh:
    tenant: acme
    provider: github
    secrets: ["${GH_HOOK_SECRET}"]
    forward: {require_claim: false, url: "`+target.URL+`/webhook/gh", concurrency: 8}
`), 0o600))
	env := map[string]string{
		"DATABASE_URL": dbURL, "CLAIMD_ADDR": "127.0.0.1:0", "CLAIMD_SOURCES_FILE": sources,
		"GH_HOOK_SECRET": secret, "CLAIMD_API_KEYS": "acme:crash-group-api-key-0001",
		"CLAIMD_RELOAD_INTERVAL_SECONDS": "0", "CLAIMD_MAINTENANCE_INTERVAL_SECONDS": "0",
		"CLAIMD_DISPATCH": "false", "CLAIMD_GROUP_WORKERS": "2",
	}
	first, addr := startClaimd(t, bin, env)

	client := &http.Client{Timeout: crashWait, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	// deliver posts event ev once; ok reports a 2xx with its receipt.
	deliver := func(addr, ev string) (id, status string, ok bool) {
		body := []byte(`{"ref":"refs/heads/main","after":"` + ev + `"}`)
		req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/ingest/gh", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Delivery", ev)
		req.Header.Set("X-GitHub-Event", "push")
		req.Header.Set("X-Hub-Signature-256", verifytest.GitHub(secret, body))
		resp, err := client.Do(req)
		if err != nil {
			return "", "", false
		}
		defer resp.Body.Close()
		var r struct {
			Received []struct {
				ClaimID string `json:"claim_id"`
				Status  string `json:"status"`
			} `json:"received"`
		}
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&r) != nil || len(r.Received) != 1 {
			return "", "", false
		}
		return r.Received[0].ClaimID, r.Received[0].Status, true
	}

	var (
		amu      sync.Mutex
		acked    = map[string]string{} // event id → acknowledged inbox id
		answered atomic.Int64
		next     atomic.Int64
	)
	const killAt = 600
	killed := make(chan struct{})
	var killOnce sync.Once
	var metrics string // claimd's /metrics just before the kill
	kill := func() {
		killOnce.Do(func() {
			req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
			req.Header.Set("Authorization", "Bearer crash-group-api-key-0001")
			if resp, err := client.Do(req); err == nil {
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				metrics = string(raw)
			}
			close(killed)                                 // before the kill: a failure after it is expected
			_ = first.cmd.Process.Signal(syscall.SIGKILL) // our own child, by PID
		})
	}
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-killed:
					return
				default:
				}
				// Two clients deliver each event: one accepted, one duplicate.
				ev := fmt.Sprintf("crash-%d", next.Add(1)/2)
				id, status, ok := deliver(addr, ev)
				if !ok {
					select {
					case <-killed:
						return // the process is gone
					default:
					}
					select {
					case <-first.done:
						t.Errorf("claimd exited before the kill: %v", first.err)
						return
					default:
					}
					continue
				}
				if status != string(inbox.Accepted) && status != string(inbox.Duplicate) {
					t.Errorf("%s: receipt %s", ev, status)
					return
				}
				amu.Lock()
				if prev, seen := acked[ev]; seen && prev != id {
					t.Errorf("%s: two inbox records %s and %s", ev, prev, id)
				}
				acked[ev] = id
				amu.Unlock()
				if answered.Add(1) >= killAt {
					kill()
				}
			}
		}()
	}
	wg.Wait()
	select {
	case <-first.done:
	case <-time.After(crashWait):
		t.Fatal("claimd survived SIGKILL")
	}
	require.NotEmpty(t, acked)
	// The groups ran: some held more than one delivery.
	bucket := func(le string) int {
		m := regexp.MustCompile(`claimd_group_calls_bucket\{kind="ingest",le="` + regexp.QuoteMeta(le) + `"\} (\d+)`).FindStringSubmatch(metrics)
		require.NotNil(t, m, "le=%s in /metrics:\n%s", le, metrics)
		n, _ := strconv.Atoi(m[1])
		return n
	}
	require.Less(t, bucket("1"), bucket("+Inf"), "some groups held more than one delivery")

	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	for ev, id := range acked {
		var state string
		var jobs int
		require.NoError(t, pool.QueryRow(ctx, `SELECT e.dispatch_state, (SELECT count(*) FROM river_job j
			WHERE j.args->>'claim_id' = $1) FROM inbox_events e WHERE e.claim_id = $1::uuid`, id).Scan(&state, &jobs),
			"%s: the acknowledged event survived the kill", ev)
		require.Equal(t, "pending", state, ev)
		require.Equal(t, 1, jobs, "%s: stored with exactly one dispatch job", ev)
	}
	var stored, orphans, doubled int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM inbox_events`).Scan(&stored))
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM inbox_events e WHERE NOT EXISTS
		(SELECT 1 FROM river_job j WHERE j.args->>'claim_id' = e.claim_id::text)`).Scan(&orphans))
	require.Zero(t, orphans, "no stored event without its dispatch job")
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT args->>'claim_id' FROM river_job
		GROUP BY 1 HAVING count(*) > 1) x`).Scan(&doubled))
	require.Zero(t, doubled, "no event with two dispatch jobs")

	env["CLAIMD_DISPATCH"] = "true"
	second, addr := startClaimd(t, bin, env)
	deadline := time.Now().Add(crashWait)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var pending int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM inbox_events WHERE dispatch_state <> 'dispatched'`).Scan(&pending))
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d not dispatched after restart; log:\n%s", pending, stored, second.logs())
		}
		<-tick.C
	}
	require.NoError(t, second.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-second.done:
		require.NoError(t, second.err, "graceful stop; log:\n%s", second.logs())
	case <-time.After(crashWait):
		t.Fatalf("claimd did not stop on SIGTERM; log:\n%s", second.logs())
	}
	mu.Lock()
	require.Len(t, posts, stored, "every stored event posted")
	for id, n := range posts {
		require.Equal(t, 1, n, "%s: posted exactly once", id)
	}
	mu.Unlock()
	for ev := range acked {
		_, ok := posts[acked[ev]]
		require.True(t, ok, "%s: the acknowledged event was dispatched", ev)
	}

	// A provider retrying after the restart gets a duplicate.
	third, addr := startClaimd(t, bin, env)
	n := 0
	for ev, id := range acked {
		got, status, ok := deliver(addr, ev)
		require.True(t, ok, ev)
		require.Equal(t, id, got, ev)
		require.Equal(t, string(inbox.Duplicate), status, ev)
		if n++; n == 50 {
			break
		}
	}
	require.NoError(t, third.cmd.Process.Signal(syscall.SIGTERM))
	<-third.done
	t.Logf("%d answers before the kill, %d events acknowledged, %d stored", answered.Load(), len(acked), stored)
}
