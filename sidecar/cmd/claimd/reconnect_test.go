package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// After every claimd backend is terminated (what a PostgreSQL restart or
// failover does to the pool), the same sidecar serves again: each request
// that meets a dead connection fails with 503 (never 500, never a hang),
// and at most one request fails: after it, connections are pinged before use.
func TestPoolRecoversAfterBackendsTerminated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDatabase(t)
	const key = "t1-reconnect-key-0123456789"
	s := startInProcess(t, map[string]string{"DATABASE_URL": db, "CLAIMD_API_KEYS": "t1:" + key})
	c := newAPI(t, s.url, key)

	// Open several pool connections with concurrent claims; keep one
	// claim in processing to complete after the outage.
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.must(http.StatusOK, "POST", "/v1/claims", fmt.Sprintf(`{"source":"reconnect","event_id":"warm-%d"}`, i))
		}()
	}
	wg.Wait()
	held := c.must(http.StatusOK, "POST", "/v1/claims", `{"source":"reconnect","event_id":"held"}`)
	require.Equal(t, "won", held["outcome"])

	admin, err := pgx.Connect(ctx, db)
	require.NoError(t, err)
	defer admin.Close(ctx)
	rows, err := admin.Query(ctx, `SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'claimd'`)
	require.NoError(t, err)
	var killed []int32
	for rows.Next() {
		var pid int32
		var ok bool
		require.NoError(t, rows.Scan(&pid, &ok))
		require.True(t, ok, "pg_terminate_backend(%d)", pid)
		killed = append(killed, pid)
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, killed, "no claimd backend to terminate")
	waitFor(t, "the terminated backends to exit", func() bool {
		var left int
		require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)`, killed).Scan(&left))
		return left == 0
	})

	// Every kind of database call, in turn, until each has succeeded.
	failures := 0
	call := func(what string, want int, method, path, body string) map[string]any {
		t.Helper()
		for {
			status, m, err := c.do(method, path, body)
			require.NoError(t, err, what)
			if status == want {
				return m
			}
			require.Equal(t, http.StatusServiceUnavailable, status, "%s: %v", what, m)
			if e, ok := m["error"].(map[string]any); ok {
				require.Equal(t, "unavailable", e["code"], what)
			} else {
				require.Equal(t, "not_ready", m["status"], what) // GET /readyz
			}
			failures++
			require.LessOrEqual(t, failures, 1,
				"more than one failed request after %d connections died: the pool does not drop dead connections", len(killed))
		}
	}
	for i := range 3 {
		won := call("claim", http.StatusOK, "POST", "/v1/claims", fmt.Sprintf(`{"source":"reconnect","event_id":"after-%d"}`, i))
		require.Equal(t, "won", won["outcome"])
		res := call("batch", http.StatusOK, "POST", "/v1/claims/batch", fmt.Sprintf(
			`{"claims":[{"source":"reconnect","event_id":"b-%d-1"},{"source":"reconnect","event_id":"warm-0"}]}`, i))
		results := res["results"].([]any)
		require.Equal(t, "won", results[0].(map[string]any)["outcome"])
		require.Equal(t, "in_progress", results[1].(map[string]any)["outcome"])
		call("get", http.StatusOK, "GET", "/v1/claims/"+str(won, "claim_id"), "")
		call("readyz", http.StatusOK, "GET", "/readyz", "")
	}
	done := call("complete", http.StatusOK, "POST", "/v1/claims/"+str(held, "claim_id")+"/complete",
		`{"claim_token":"`+str(held, "claim_token")+`"}`)
	require.Equal(t, "completed", done["state"])
	t.Logf("%d backends terminated; %d requests answered 503 before the pool had replaced them", len(killed), failures)

	var backends int
	require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'claimd'`).Scan(&backends))
	require.Positive(t, backends, "the sidecar serves again over new connections")
}
