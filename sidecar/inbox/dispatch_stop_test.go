package inbox_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
)

// TestStopCancelsDispatchesRunningAtTheDeadline: a dispatch whose target
// does not answer before the dispatcher's stop deadline (claimd's
// shutdown) is cancelled within the deadline, recorded as a failed attempt,
// and its job left for a retry, not in River's running state (where only
// the rescue after sources.RescueStuckAfter, 5 min, would take it again: seen in
// the compose upgrade test). The next dispatcher delivers it.
func TestStopCancelsDispatchesRunningAtTheDeadline(t *testing.T) {
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	b := newDispatchBundle(t, "/webhook/stop-hook", ", require_claim: false", func(_ *retryBundle, n int, r *http.Request) (int, string) {
		if n == 1 {
			arrived <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return http.StatusServiceUnavailable, `{}`
		}
		return http.StatusOK, `{}`
	})
	defer close(release)
	first, err := inbox.New(inbox.Options{Pool: b.pool, Ledger: b.ledger, Config: b.cfg, Logger: zerolog.Nop(),
		Observer: retryObserver{b.results}, Dispatch: true, PollInterval: 50 * time.Millisecond,
		Jitter: func() float64 { return 0.05 }})
	require.NoError(t, err)
	require.NoError(t, first.Start(b.ctx))
	b.inbox = first
	id := b.receive(t, "evt-stop")
	select {
	case <-arrived:
	case <-time.After(retryWait):
		t.Fatal("the dispatch never reached the target")
	}

	// The POST is in flight and will not end by itself before the
	// deadline: Stop must cancel it and still return within the deadline.
	ctx, cancel := context.WithTimeout(b.ctx, inbox.StopCancelGrace+time.Second)
	defer cancel()
	require.NoError(t, first.Stop(ctx), "Stop returns once the cancelled dispatch is recorded")

	var jobState string
	require.NoError(t, b.pool.QueryRow(b.ctx,
		`SELECT state FROM river_job WHERE args->>'claim_id' = $1`, id).Scan(&jobState))
	require.NotEqual(t, "running", jobState, "the cut dispatch's job is left for a retry")
	row := b.row(t, id)
	require.Equal(t, "pending", row.state)
	require.Equal(t, 1, row.attempts)
	require.Contains(t, row.lastError, "target unreachable")

	// The next dispatcher (claimd restarted) delivers it.
	b.startInbox(t, true)
	b.waitEnd(t, "dispatched")
	require.Equal(t, "dispatched", b.row(t, id).state)
}
