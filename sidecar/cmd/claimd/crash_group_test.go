package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// SIGKILL while claim and complete groups are in flight (group commit):
// every acknowledged win is in the database with the token its answer
// carried, every acknowledged Complete is completed, no key was won twice,
// and after a restart none of them is won again.
func TestSIGKILLWithGroupsInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDatabase(t)
	const key = "t1-crash-group-key-0123456789"
	env := map[string]string{"DATABASE_URL": db, "CLAIMD_API_KEYS": "t1:" + key, "CLAIMD_GROUP_WORKERS": "2"}
	p := startServe(t, env)
	c := newAPI(t, p.url, key)

	var (
		mu        sync.Mutex
		won       = map[string]string{} // event id → acknowledged claim token
		completed = map[string]bool{}   // event id → Complete acknowledged
		answered  atomic.Int64
		next      atomic.Int64
	)
	killAt := int64(600)
	killed := make(chan struct{})
	var killOnce sync.Once
	kill := func() {
		killOnce.Do(func() {
			// The groups ran: some held more than one call.
			_, m, err := c.do("GET", "/metrics", "")
			require.NoError(t, err)
			raw := str(m, "raw")
			require.Regexp(t, `claimd_group_calls_bucket\{kind="claim",le="2"\} [1-9]`, raw, "claims were grouped under this load")
			require.NoError(t, p.cmd.Process.Kill()) // our own child, by PID
			close(killed)
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
				// Two clients claim each key: one winner, one duplicate.
				ev := fmt.Sprintf("evt_%d", next.Add(1)/2)
				status, m, err := c.do("POST", "/v1/claims", `{"source":"crash","event_id":"`+ev+`"}`)
				if err != nil || status != http.StatusOK {
					if answered.Load() >= killAt {
						return // the process is gone
					}
					continue
				}
				if answered.Add(1) >= killAt {
					kill()
				}
				if str(m, "outcome") != "won" {
					continue
				}
				token := str(m, "claim_token")
				mu.Lock()
				won[ev] = token
				mu.Unlock()
				status, _, err = c.do("POST", "/v1/claims/"+str(m, "claim_id")+"/complete",
					`{"claim_token":"`+token+`","result_ref":"ref-`+ev+`"}`)
				if err == nil && status == http.StatusOK {
					mu.Lock()
					completed[ev] = true
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	<-p.done
	require.NotEmpty(t, won)

	conn, err := pgx.Connect(ctx, db)
	require.NoError(t, err)
	defer conn.Close(ctx)
	for ev, token := range won {
		var got, state, ref string
		var attempt int
		require.NoError(t, conn.QueryRow(ctx, `SELECT claim_token::text, state, COALESCE(result_ref, ''), attempt
			FROM claims WHERE source = 'crash' AND event_id = $1`, ev).Scan(&got, &state, &ref, &attempt), ev)
		require.Equal(t, token, got, "%s: the acknowledged win is the stored one", ev)
		require.Equal(t, 1, attempt, ev)
		if completed[ev] {
			require.Equal(t, "completed", state, ev)
			require.Equal(t, "ref-"+ev, ref, ev)
		}
	}
	var twice int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM (SELECT claim_id FROM claim_deliveries
		WHERE outcome = 'won' GROUP BY claim_id HAVING count(*) > 1) x`).Scan(&twice))
	require.Zero(t, twice, "no key won twice")

	p2 := startServe(t, env)
	c2 := newAPI(t, p2.url, key)
	for ev := range won {
		m := c2.must(http.StatusOK, "POST", "/v1/claims", `{"source":"crash","event_id":"`+ev+`"}`)
		// A Complete whose answer the kill swallowed may have committed.
		want := []string{"in_progress", "duplicate"}
		if completed[ev] {
			want = []string{"duplicate"}
		}
		require.Contains(t, want, str(m, "outcome"), "%s: never won again", ev)
	}
	t.Logf("%d answers before the kill, %d wins acknowledged, %d completes acknowledged", answered.Load(), len(won), len(completed))
}
