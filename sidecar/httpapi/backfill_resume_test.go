package httpapi_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/backfill"
)

// Tests of scans that are asked for (a queued row, an explicit range),
// that stop at max_pages and resume (the backlog), that recover recorded
// misses, and of the provider failures' classes.

// TestBackfillQueuedScanAndExplicitRange: a scan given the id of its
// queued row runs as that row (no second row), with its range; a queued
// row gone meanwhile (purged) is replaced by a new one. An explicit range
// is listed whatever the cursor says, clamped to the provider's window
// (Window), and an explicit range that does not join the cursor leaves
// the cursor where it was.
func TestBackfillQueuedScanAndExplicitRange(t *testing.T) {
	t.Parallel()
	b := setupBackfillStripe(t, ", mode: report")
	b.sd.Add(b.event("evt_q_old", 50*time.Hour), b.event("evt_q_new", 2*time.Hour))
	win := backfill.Window(b.src, b.now)
	require.Equal(t, backfill.Range{From: b.now.Add(-72 * time.Hour), To: b.now.Add(-600 * time.Second)}, win)

	var queued int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `INSERT INTO backfill_scans (tenant, source, trigger, actor, mode, result)
		VALUES ('acme', 'stripe-bf', 'api', 'test', 'report', 'queued') RETURNING id`).Scan(&queued))
	sc, err := b.scanner.Run(b.ctx, b.src, backfill.Trigger{Kind: backfill.TriggerAPI, Actor: "test", ScanID: queued})
	require.NoError(t, err)
	require.Equal(t, queued, sc.ID, "the queued row is the scan")
	require.Equal(t, backfill.ResultOK, sc.Result, sc.Error)
	require.Equal(t, 2, sc.Missed)
	require.Equal(t, "1", b.scalar(t, `SELECT count(*)::text FROM backfill_scans WHERE source = 'stripe-bf'`))
	var from, to time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT range_start, range_end FROM backfill_scans WHERE id = $1`, queued).Scan(&from, &to))
	require.True(t, from.Equal(win.From) && to.Equal(win.To), "the range is recorded on the queued row: %v %v", from, to)

	// The cursor is at the window's end now; an explicit range still
	// lists from its own start, clamped to the window.
	sc, err = b.scanner.Run(b.ctx, b.src, backfill.Trigger{Kind: backfill.TriggerAPI, Actor: "test",
		From: b.now.Add(-1000 * time.Hour), To: b.now.Add(-10 * time.Hour), ScanID: queued + 1000})
	require.NoError(t, err)
	require.NotEqual(t, queued+1000, sc.ID, "a missing queued row is replaced by a new one")
	require.Equal(t, backfill.ResultOK, sc.Result, sc.Error)
	require.True(t, sc.RangeStart.Equal(win.From), "clamped to the window: %v", sc.RangeStart)
	require.True(t, sc.RangeEnd.Equal(b.now.Add(-10*time.Hour)))
	require.Equal(t, 1, sc.Listed, "evt_q_old only")
	reqs := b.sd.Requests()
	require.Equal(t, []string{itoa64(win.From.Unix())}, reqs[len(reqs)-1].Query["created[gte]"])
	require.Equal(t, []string{itoa64(b.now.Add(-10 * time.Hour).Unix())}, reqs[len(reqs)-1].Query["created[lt]"])
	require.Equal(t, win.To.UTC().Format(time.RFC3339), b.scalar(t,
		`SELECT to_char(scanned_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') FROM backfill_state WHERE source = 'stripe-bf'`),
		"an older explicit range does not move the cursor back")

	// An explicit range after a gap in the cursor does not advance it.
	_, err = b.pool.Exec(b.ctx, `UPDATE backfill_state SET scanned_until = $1 WHERE source = 'stripe-bf'`, b.now.Add(-60*time.Hour))
	require.NoError(t, err)
	sc, err = b.scanner.Run(b.ctx, b.src, backfill.Trigger{Kind: backfill.TriggerAPI, From: b.now.Add(-5 * time.Hour)})
	require.NoError(t, err)
	require.Equal(t, backfill.ResultOK, sc.Result, sc.Error)
	require.True(t, sc.RangeEnd.Equal(win.To), "a zero To is the window's end")
	require.Equal(t, b.now.Add(-60*time.Hour).UTC().Format(time.RFC3339), b.scalar(t,
		`SELECT to_char(scanned_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') FROM backfill_state WHERE source = 'stripe-bf'`),
		"[now−5h, end) does not join the cursor at now−60h")
}
