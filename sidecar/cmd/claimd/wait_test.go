package main

import (
	"context"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// claimd wires the wait for a concurrent holder: a claim with wait_seconds
// is woken by the holder's completion; on SIGTERM a waiting claim is
// answered at once (in_progress) instead of holding the drain for its
// whole wait.
func TestWaitingClaimWokenAndEndedBySIGTERM(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDatabase(t)
	const key = "t1-wait-key-0123456789abc"
	p := startServe(t, map[string]string{
		"DATABASE_URL":    db,
		"CLAIMD_API_KEYS": "t1:" + key,
		// Long budgets: the drain must end because the wait ended.
		"CLAIMD_SHUTDOWN_TIMEOUT_SECONDS": "600",
	})
	c := newAPI(t, p.url, key)
	watcher, err := pgx.Connect(ctx, db)
	require.NoError(t, err)
	defer watcher.Close(ctx)
	marked := func(id string) {
		waitFor(t, "a claim to wait on "+id, func() bool {
			var on bool
			require.NoError(t, watcher.QueryRow(ctx, `SELECT wait_notify FROM claims WHERE id = $1`, id).Scan(&on))
			return on
		})
	}
	type answer struct {
		status int
		body   map[string]any
		err    error
		took   time.Duration
	}
	waiting := func(body string) <-chan answer {
		out := make(chan answer, 1)
		go func() {
			start := time.Now()
			s, b, err := c.do("POST", "/v1/claims", body)
			out <- answer{s, b, err, time.Since(start)}
		}()
		return out
	}

	const first = `{"source":"wait","event_id":"evt-1"}`
	won := c.must(http.StatusOK, "POST", "/v1/claims", first)
	ch := waiting(`{"source":"wait","event_id":"evt-1","wait_seconds":25}`)
	marked(str(won, "claim_id"))
	c.must(http.StatusOK, "POST", "/v1/claims/"+str(won, "claim_id")+"/complete",
		`{"claim_token":"`+str(won, "claim_token")+`","result_ref":"r-1"}`)
	a := <-ch
	require.NoError(t, a.err)
	require.Equal(t, http.StatusOK, a.status, "%v", a.body)
	require.Equal(t, "duplicate", a.body["outcome"])
	require.Equal(t, "r-1", a.body["result_ref"])

	held := c.must(http.StatusOK, "POST", "/v1/claims", `{"source":"wait","event_id":"evt-2"}`)
	ch = waiting(`{"source":"wait","event_id":"evt-2","wait_seconds":25}`)
	marked(str(held, "claim_id"))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	a = <-ch
	require.NoError(t, a.err)
	require.Equal(t, http.StatusOK, a.status, "%v", a.body)
	require.Equal(t, "in_progress", a.body["outcome"])
	require.Less(t, a.took, 20*time.Second, "the shutdown ended the wait")
	require.Equal(t, 0, p.exitCode(t), "stderr:\n%s", p.stderr.String())
}
