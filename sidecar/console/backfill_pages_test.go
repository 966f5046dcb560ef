package console_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/backfill"
)

// TestConsoleBackfillWholeWindowAndOlder: the source page has "Scan the
// whole window" next to "Scan now" (the same CSRF token and confirmation
// box); it asks for a scan of the provider's whole window (the queued
// row and its job carry the window's range), a scan without it carries
// none. The scans and missed events lists link their older pages, which
// show the rows after the first page's, each once; the missed events
// list says a finding's state now (late_real once the record has a
// receipt hash). A cursor that is none is 400 naming it.
func TestConsoleBackfillWholeWindowAndOlder(t *testing.T) {
	t.Parallel()
	e := setupBackfill(t)
	b := e.browser(t)
	tok := b.signIn(keyA)

	page := b.get("/ui/sources/bf")
	require.Contains(t, page.body, `data-testid="backfill-scan-window"`)
	require.Contains(t, page.body, "Scan the whole window")
	r := b.post("/ui/sources/bf/backfill", url.Values{"csrf": {tok}, "whole_window": {"yes"}})
	require.Equal(t, http.StatusUnprocessableEntity, r.status, "the box is still to be ticked")
	r = b.post("/ui/sources/bf/backfill", url.Values{"csrf": {"wrong"}, "whole_window": {"yes"}, "confirm": {"yes"}})
	require.Equal(t, http.StatusForbidden, r.status)
	r = b.post("/ui/sources/bf/backfill", url.Values{"csrf": {tok}, "whole_window": {"maybe"}, "confirm": {"yes"}})
	require.Equal(t, http.StatusUnprocessableEntity, r.status)
	require.Contains(t, r.body, "whole_window")
	r = b.post("/ui/sources/bf/backfill", url.Values{"csrf": {tok}, "whole_window": {"yes"}, "confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	require.Equal(t, "/ui/sources/bf?scan=queued#backfill", r.location())
	var raw string
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT args::text FROM river_job WHERE kind = 'claimd_backfill_scan'`).Scan(&raw))
	var args backfill.ScanArgs
	require.NoError(t, json.Unmarshal([]byte(raw), &args))
	require.Equal(t, "console", args.Trigger)
	require.NotNil(t, args.From)
	require.NotNil(t, args.To)
	// The source's window (backfill.window_hours' default: 30 days).
	require.WithinDuration(t, time.Now().Add(-720*time.Hour), *args.From, time.Minute)
	require.True(t, args.To.After(*args.From) && args.To.Before(time.Now()))
	var start, end time.Time
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT range_start, range_end FROM backfill_scans WHERE id = $1 AND result = 'queued'`,
		args.ScanID).Scan(&start, &end))
	require.True(t, start.Equal(*args.From) && end.Equal(*args.To))

	// Eight scans (the queued one and seven finished), 23 findings.
	rec := e.claim(t, tenantA, "bf", "evt_pg_00")
	for i := 0; i < 7; i++ {
		_, err := e.pool.Exec(e.ctx, `INSERT INTO backfill_scans (tenant, source, trigger, mode, range_start, range_end, listed,
			result, finished_at) VALUES ('tenant-a', 'bf', 'schedule', 'auto', now() - interval '1 day', now(), $1, 'ok', now())`, 1000+i)
		require.NoError(t, err)
	}
	for i := 0; i < 23; i++ {
		id := fmt.Sprintf("evt_pg_%02d", i)
		state, claimID := "missed", any(nil)
		if i == 0 {
			state, claimID = "fetched", rec.ID
		}
		_, err := e.pool.Exec(e.ctx, `INSERT INTO backfill_events (tenant, scope, event_id, source, provider_id, scan_id, state,
			claim_id, detected_at) VALUES ('tenant-a', 'bf', $1, 'bf', $1, $2, $3, $4::uuid, now() - $5 * interval '1 minute')`,
			id, args.ScanID, state, claimID, i)
		require.NoError(t, err)
	}
	_, err := e.pool.Exec(e.ctx, `UPDATE claims SET receipt_hash = $2 WHERE id = $1`, rec.ID, strings.Repeat("cd", 32))
	require.NoError(t, err)

	page = b.get("/ui/sources/bf")
	require.Equal(t, http.StatusOK, page.status, page.body)
	require.Contains(t, page.body, "late_real", "the fetched event's record has its real delivery's receipt hash now")
	older := regexp.MustCompile(`href="([^"]*scans_before=[^"]*)" data-testid="backfill-scans-older"`).FindStringSubmatch(page.body)
	require.NotNil(t, older, "five of eight scans: an older link")
	olderEvents := regexp.MustCompile(`href="([^"]*events_before=[^"]*)" data-testid="backfill-events-older"`).FindStringSubmatch(page.body)
	require.NotNil(t, olderEvents, "twenty of 23 findings: an older link")
	require.Contains(t, page.body, "<code>evt_pg_19</code>")
	require.NotContains(t, page.body, "<code>evt_pg_20</code>")

	next := b.get(strings.ReplaceAll(older[1], "&amp;", "&"))
	require.Equal(t, http.StatusOK, next.status, next.body)
	require.Contains(t, next.body, "<td>1000</td>", "the oldest scan")
	require.NotContains(t, next.body, "<td>1006</td>", "on the first page")
	require.NotContains(t, next.body, `data-testid="backfill-scans-older"`, "the last page")
	next = b.get(strings.ReplaceAll(olderEvents[1], "&amp;", "&"))
	require.Equal(t, http.StatusOK, next.status, next.body)
	for i := 20; i < 23; i++ {
		require.Contains(t, next.body, fmt.Sprintf("<code>evt_pg_%02d</code>", i))
	}
	require.NotContains(t, next.body, "<code>evt_pg_19</code>")
	require.NotContains(t, next.body, `data-testid="backfill-events-older"`)

	for _, q := range []string{"scans_before=abc", "scans_before=-3", "scans_before=%2B3", "scans_before=03", "events_before=%3Cnot-a-cursor%3E"} {
		r := b.get("/ui/sources/bf?" + q)
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", q, r.body)
		require.NotContains(t, withoutToken(r.body), "not-a-cursor")
		require.NotContains(t, withoutToken(r.body), "abc")
	}
}

// TestConsoleRecordOrigin: the record page of a record claimd made from
// the provider's list says so; another record's page has no origin.
func TestConsoleRecordOrigin(t *testing.T) {
	t.Parallel()
	e := setupBackfill(t)
	b := e.browser(t)
	b.signIn(keyA)
	made, delivered := e.claim(t, tenantA, "bf", "evt_made"), e.claim(t, tenantA, "bf", "evt_delivered")
	_, err := e.pool.Exec(e.ctx, `UPDATE claims SET origin = 'backfill' WHERE id = $1`, made.ID)
	require.NoError(t, err)
	page := b.get("/ui/claims/" + made.ID)
	require.Equal(t, http.StatusOK, page.status, page.body)
	require.Contains(t, page.body, `data-testid="field-origin"`)
	require.Contains(t, page.body, "provider's own list of events")
	page = b.get("/ui/claims/" + delivered.ID)
	require.Equal(t, http.StatusOK, page.status, page.body)
	require.NotContains(t, page.body, `data-testid="field-origin"`)
}
