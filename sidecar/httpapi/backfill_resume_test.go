package httpapi_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/backfill"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// Tests of scans that are asked for (a queued row, an explicit range),
// that stop at max_pages and resume (the backlog), that recover recorded
// misses, and of the provider failures' classes.

// TestBackfillQueuedScanAndExplicitRange: a scan given the id of its
// queued row runs as that row (no second row), with its range; a row no
// longer queued (it ran, or was purged) runs nothing (ErrNotQueued). An explicit range
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
	// A row no longer queued (it ran) or gone (purged) runs nothing.
	reqs := len(b.sd.Requests())
	for _, id := range []int64{queued, queued + 1000} {
		_, err = b.scanner.Run(b.ctx, b.src, backfill.Trigger{Kind: backfill.TriggerAPI, Actor: "test", ScanID: id})
		require.ErrorIs(t, err, backfill.ErrNotQueued)
	}
	require.Len(t, b.sd.Requests(), reqs, "no provider call")
	require.Equal(t, "1", b.scalar(t, `SELECT count(*)::text FROM backfill_scans WHERE source = 'stripe-bf'`))

	sc, err = b.scanner.Run(b.ctx, b.src, backfill.Trigger{Kind: backfill.TriggerAPI, Actor: "test",
		From: b.now.Add(-1000 * time.Hour), To: b.now.Add(-10 * time.Hour)})
	require.NoError(t, err)
	require.NotEqual(t, queued, sc.ID, "a scan without a queued row makes its own")
	require.Equal(t, backfill.ResultOK, sc.Result, sc.Error)
	require.True(t, sc.RangeStart.Equal(win.From), "clamped to the window: %v", sc.RangeStart)
	require.True(t, sc.RangeEnd.Equal(b.now.Add(-10*time.Hour)))
	require.Equal(t, 1, sc.Listed, "evt_q_old only")
	all := b.sd.Requests()
	require.Equal(t, []string{itoa64(win.From.Unix())}, all[len(all)-1].Query["created[gte]"])
	require.Equal(t, []string{itoa64(b.now.Add(-10 * time.Hour).Unix())}, all[len(all)-1].Query["created[lt]"])
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

// bfResultCounts counts missed events and provider calls by class.
type bfResultCounts struct {
	bfCounts
	mu      sync.Mutex
	classes map[string]int
}

func (c *bfResultCounts) ProviderRequest(_, class string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.classes == nil {
		c.classes = map[string]int{}
	}
	c.classes[class]++
}

func (c *bfResultCounts) class(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.classes[k]
}

// drainScans runs scans until one ends ok, at most limit, and returns
// them; every scan before the last must be partial, with a backlog.
func drainScans(t *testing.T, limit int, scan func() backfill.Scan) []backfill.Scan {
	t.Helper()
	var out []backfill.Scan
	for len(out) < limit {
		sc := scan()
		out = append(out, sc)
		if sc.Result == backfill.ResultOK {
			require.Nil(t, sc.BacklogFrom)
			return out
		}
		require.Equal(t, backfill.ResultPartial, sc.Result, "scan %d: %s", len(out), sc.Error)
		require.Empty(t, sc.Error, "a partial scan is no error")
		require.NotNil(t, sc.BacklogFrom)
		require.NotNil(t, sc.BacklogTo)
		require.True(t, sc.BacklogFrom.Before(*sc.BacklogTo))
		require.Contains(t, sc.Notes, "are not checked yet and are listed by the next scans")
	}
	t.Fatalf("no scan ended ok in %d scans", limit)
	return nil
}

func sumMissed(scans []backfill.Scan) int {
	n := 0
	for _, sc := range scans {
		n += sc.Missed
	}
	return n
}

// TestBackfillStripeBacklogCoversTheWindow: an account with more events
// than backfill.max_pages × page size (17 lost events, pages of 2, 3
// pages a scan) is scanned to the end of its window by successive
// scans: each ends partial with the part it did not reach as the
// source's backlog, the cursor moves past what it covered, and the next
// scan lists the new part first (an event lost meanwhile is found at
// once) and then the backlog. Every event is recorded missed exactly
// once, none is left out.
func TestBackfillStripeBacklogCoversTheWindow(t *testing.T) {
	t.Parallel()
	b := setupBackfillStripe(t, ", mode: report, max_pages: 3")
	counts := &bfResultCounts{}
	b.scanner.Obs = counts
	b.sd.PageSize = 2
	want := map[string]string{}
	for i := range 17 {
		id := "evt_bl_" + strconv.Itoa(i)
		b.sd.Add(b.event(id, time.Duration(2+i*4)*time.Hour)) // 2 h … 66 h old
		want[id] = "missed"
	}
	first := b.scan(t)
	require.Equal(t, backfill.ResultPartial, first.Result, first.Error)
	require.Equal(t, 3, first.Pages)
	require.Equal(t, 6, first.Missed)
	win := backfill.Window(b.src, b.now)
	require.True(t, first.BacklogFrom.Equal(win.From))
	require.True(t, first.BacklogTo.Equal(b.now.Add(-22*time.Hour).Add(time.Second)),
		"the rest: from the window's start to the second after the oldest event reached: %v", first.BacklogTo)
	require.Equal(t, win.To.Format(time.RFC3339), b.scalar(t,
		`SELECT to_char(scanned_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') FROM backfill_state WHERE source = 'stripe-bf'`),
		"the cursor moved past the part covered")
	require.Equal(t, backfill.ResultPartial, b.scalar(t, `SELECT result FROM backfill_scans WHERE id = $1`, first.ID))
	require.Equal(t, win.From.Format(time.RFC3339), b.scalar(t,
		`SELECT to_char(backlog_from AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') FROM backfill_scans WHERE id = $1`, first.ID))

	// Lost meanwhile, in the new part: found by the next scan first.
	b.sd.Add(b.event("evt_bl_new", 30*time.Minute))
	want["evt_bl_new"] = "missed"
	n := len(b.sd.Requests())
	scans := append([]backfill.Scan{first}, drainScans(t, 10, func() backfill.Scan { return b.scan(t) })...)
	reqs := b.sd.Requests()[n:]
	require.Equal(t, []string{itoa64(b.now.Add(-600*time.Second - time.Hour).Unix())}, reqs[0].Query["created[gte]"],
		"the new part first: from the cursor less the overlap")
	require.Equal(t, []string{itoa64(win.From.Unix())}, reqs[1].Query["created[gte]"], "then the backlog")
	require.Equal(t, []string{itoa64(first.BacklogTo.Unix())}, reqs[1].Query["created[lt]"])
	require.Equal(t, 1+3, scans[1].Missed, "the new event, then three of the backlog's (the oldest event reached before, "+
		"in the backlog's last second, is listed again and not counted again)")
	require.Equal(t, want, b.findings(t), "every event recorded, none left out")
	require.Equal(t, 18, sumMissed(scans), "each missed once")
	require.Equal(t, 18, counts.missed, "and counted once")
	for _, sc := range scans {
		require.LessOrEqual(t, sc.Pages, 3, "max_pages bounds every scan")
	}
	require.Equal(t, "", b.scalar(t, `SELECT COALESCE(backlog_from::text, '') FROM backfill_state WHERE source = 'stripe-bf'`),
		"the backlog is done")
	require.Empty(t, b.sleeps.all())
}

// TestBackfillGitHubBacklogResumesAtCursor: GitHub has no time filter and
// lists newest first; a scan stopped at max_pages keeps the rel="next"
// position (path and query only, no host, no credential) as the backlog
// cursor, and the next scans list the new part from the top (stopping at
// the first delivery older than it) and then resume the backlog at that
// cursor, without listing the newer deliveries again, until the window is
// covered: every delivery recorded missed once. A cursor that is not this
// hook's list on the API's origin is not followed.
func TestBackfillGitHubBacklogResumesAtCursor(t *testing.T) {
	t.Parallel()
	b := setupBackfillGitHub(t, ", mode: report, max_pages: 3")
	b.gh.PageSize = 2
	want := map[string]string{}
	for i := 14; i >= 0; i-- { // oldest first: the log's ids grow with time
		guid := "guid-bl-" + strconv.Itoa(i)
		b.gh.Add(b.delivery(guid, time.Duration(2+i*4)*time.Hour, 502))
		want[guid] = "missed"
	}
	first := b.scan(t)
	require.Equal(t, backfill.ResultPartial, first.Result, first.Error)
	require.Equal(t, 6, first.Missed)
	cursor := b.scalar(t, `SELECT backlog_cursor FROM backfill_state WHERE source = 'gh-bf'`)
	require.True(t, strings.HasPrefix(cursor, "/"+bfGitHubHook+"/deliveries?"), "path and query: %s", cursor)
	require.NotContains(t, cursor, "127.0.0.1")
	require.NotContains(t, cursor, bfGitHubToken)

	n := len(b.gh.Requests())
	scans := append([]backfill.Scan{first}, drainScans(t, 10, func() backfill.Scan { return b.scan(t) })...)
	reqs := b.gh.Requests()[n:]
	require.Empty(t, reqs[0].Query["cursor"], "the new part from the top")
	stored, err := url.Parse(cursor)
	require.NoError(t, err)
	require.NotEmpty(t, stored.Query()["cursor"])
	require.Equal(t, stored.Query()["cursor"], reqs[1].Query["cursor"], "then the backlog at its cursor")
	require.Equal(t, want, b.findings(t))
	require.Equal(t, 15, sumMissed(scans), "each missed once")
	for _, sc := range scans {
		require.LessOrEqual(t, sc.Pages, 3)
	}
	require.Equal(t, "", b.scalar(t, `SELECT COALESCE(backlog_cursor, '') FROM backfill_state WHERE source = 'gh-bf'`))

	// A stored cursor on another path (a tampered row, a changed hook) is
	// not followed: the backlog is listed from the top.
	_, err = b.pool.Exec(b.ctx, `UPDATE backfill_state SET backlog_from = $1, backlog_to = $2,
		backlog_cursor = '//evil.example/repos/x/y/hooks/1/deliveries?cursor=v1_1' WHERE source = 'gh-bf'`,
		b.now.Add(-72*time.Hour), b.now.Add(-time.Hour))
	require.NoError(t, err)
	n = len(b.gh.Requests())
	sc := b.scan(t)
	require.Contains(t, []string{backfill.ResultOK, backfill.ResultPartial}, sc.Result, sc.Error)
	for _, r := range b.gh.Requests()[n:] {
		require.Equal(t, "/"+bfGitHubHook+"/deliveries", r.Path)
	}
	require.Empty(t, b.gh.Requests()[n+1].Query["cursor"], "the backlog listed from the top")
	require.Contains(t, b.logs.String(), "the stored list position is not this hook's delivery list")
}

// TestBackfillRecordedMissesRecovered: events a report scan recorded
// missed are recovered once the source's scans fetch: the next fetch scan
// reaches back to the oldest recorded miss still in the window (further
// back than its cursor less the overlap), stores and dispatches each
// once; a recorded miss older than the window stays missed and the scan
// says so; a later scan fetches nothing again.
func TestBackfillRecordedMissesRecovered(t *testing.T) {
	t.Parallel()
	b := setupBackfillStripe(t, ", mode: fetch")
	gone, mid, recent := b.event("evt_rm_gone", 71*time.Hour), b.event("evt_rm_mid", 30*time.Hour), b.event("evt_rm_recent", 2*time.Hour)
	b.sd.Add(gone, mid, recent)
	sc, err := b.scanner.Run(b.ctx, b.src, backfill.Trigger{Kind: backfill.TriggerAPI, Mode: sources.BackfillReport})
	require.NoError(t, err)
	require.Equal(t, backfill.ResultOK, sc.Result, sc.Error)
	require.Equal(t, 3, sc.Missed)
	require.Equal(t, ingestCounts{}, b.counts(t, "stripe-bf"), "report stores nothing")

	// Two hours later the source scans in its own mode, fetch: its
	// cursor less the overlap would start after all three.
	later := b.now.Add(2 * time.Hour)
	b.scanner.Now = func() time.Time { return later }
	n := len(b.sd.Requests())
	sc = b.scan(t)
	require.Equal(t, backfill.ResultOK, sc.Result, sc.Error)
	require.Equal(t, "fetch", sc.Mode)
	require.Equal(t, 2, sc.Backfilled, "the two still listable")
	require.Zero(t, sc.Missed, "recorded before: not counted missed again")
	require.True(t, sc.RangeStart.Equal(mid.Created), "from the oldest recorded miss in the window: %v", sc.RangeStart)
	require.Equal(t, []string{itoa64(mid.Created.Unix())}, b.sd.Requests()[n].Query["created[gte]"])
	require.Contains(t, sc.Notes, "1 events recorded missed were created before the provider's window")
	require.Equal(t, map[string]string{"evt_rm_gone": "missed", "evt_rm_mid": "fetched", "evt_rm_recent": "fetched"}, b.findings(t))
	for _, id := range []string{"evt_rm_mid", "evt_rm_recent"} {
		cid, origin, _ := b.claimOf(t, id)
		require.Equal(t, "backfill", origin)
		b.waitDispatchState(t, cid, "dispatched")
		require.Len(t, b.target.forInbox(cid), 1, "dispatched once")
	}

	sc = b.scan(t)
	require.Equal(t, backfill.ResultOK, sc.Result, sc.Error)
	require.Zero(t, sc.Backfilled)
	require.Zero(t, sc.Missed)
	require.Equal(t, ingestCounts{claims: 2, inbox: 2, jobs: 2}, b.counts(t, "stripe-bf"), "nothing stored twice")
	require.Contains(t, sc.Notes, "stay missed", "the one out of the window is still said")
}

// TestBackfillIgnoredRangeNotJudged: a provider that ignores the asked
// time range (Stripe's created[gte]/created[lt], Square's created_at
// filter) does not make a scan judge events outside it: an event younger
// than the grace (its delivery may be in flight) or older than the window
// is neither recorded nor fetched, and the list ends at the first older
// event.
func TestBackfillIgnoredRangeNotJudged(t *testing.T) {
	t.Parallel()
	t.Run("stripe", func(t *testing.T) {
		t.Parallel()
		b := setupBackfillStripe(t, ", mode: fetch")
		b.sd.PageSize = 2
		b.sd.Add(b.event("evt_ir_young", time.Minute), b.event("evt_ir_in", 2*time.Hour),
			b.event("evt_ir_old", 100*time.Hour), b.event("evt_ir_older", 110*time.Hour), b.event("evt_ir_oldest", 120*time.Hour))
		b.sd.IgnoreRange(true)
		sc := b.scan(t)
		require.Equal(t, backfill.ResultOK, sc.Result, sc.Error)
		require.Equal(t, 1, sc.Listed)
		require.Equal(t, map[string]string{"evt_ir_in": "fetched"}, b.findings(t))
		require.Equal(t, ingestCounts{claims: 1, inbox: 1, jobs: 1}, b.counts(t, "stripe-bf"))
		require.Len(t, b.sd.Requests(), 2, "the list ends at the first event older than the window")
	})
	t.Run("square", func(t *testing.T) {
		t.Parallel()
		b := setupBackfillSquare(t, ", mode: fetch")
		b.sq.Add(b.event("sq_ir_young", time.Minute), b.event("sq_ir_in", 2*time.Hour), b.event("sq_ir_old", 100*time.Hour))
		b.sq.IgnoreRange(true)
		sc := b.scan(t)
		require.Equal(t, backfill.ResultOK, sc.Result, sc.Error)
		require.Equal(t, 1, sc.Listed)
		require.Len(t, b.findings(t), 1)
		for _, st := range b.findings(t) {
			require.Equal(t, "fetched", st)
		}
	})
}

// withBaseURL is src with its backfill listing base instead.
func withBaseURL(src *sources.Source, base string) *sources.Source {
	s := *src
	bf := *src.Backfill
	bf.BaseURL = base
	s.Backfill = &bf
	return &s
}

// TestBackfillServerErrorsAndTransport: a 5xx is tried again after a
// capped exponential backoff, apart from the rate-limit budget, and after
// backfill.ServerTries answers the scan ends error ("answered HTTP 503 (3
// tries)"), never rate_limited, the cursor unmoved; a 5xx that passes
// lets the scan complete. A call without an HTTP answer ends error with
// its class's fixed text and metric class: a closed port (unreachable,
// tried again), a server that does not speak TLS (tls, not tried again),
// an answer that is no HTTP (unreadable), no answer in time (timeout), a
// host name that does not resolve (dns).
// No text quotes the URL, the provider's body or the key.
func TestBackfillServerErrorsAndTransport(t *testing.T) {
	t.Parallel()
	b := setupBackfillStripe(t, ", mode: report, max_wait_seconds: 1")
	counts := &bfResultCounts{}
	b.scanner.Obs = counts
	b.sd.Add(b.event("evt_5xx", 2*time.Hour))

	b.sd.FailNext5xx(3, 503)
	sc := b.scan(t)
	require.Equal(t, backfill.ResultError, sc.Result)
	require.Equal(t, "the provider's API answered HTTP 503 (3 tries)", sc.Error)
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second}, b.sleeps.all(),
		"exponential backoff, beyond max_wait_seconds (1 s): not the rate-limit budget")
	require.Equal(t, 3, counts.class("5xx"))
	require.Equal(t, "", b.scalar(t, `SELECT COALESCE(scanned_until::text, '') FROM backfill_state WHERE source = 'stripe-bf'`))

	b.sd.FailNext5xx(2, 502)
	sc = b.scan(t)
	require.Equal(t, backfill.ResultOK, sc.Result, sc.Error)
	require.Equal(t, 1, sc.Missed)

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedURL := "http://" + closed.Addr().String()
	require.NoError(t, closed.Close())
	garbage := rawServer(t, func(c net.Conn) { _, _ = c.Write([]byte("SSH-2.0-not-http\r\n\r\n")) })
	stall := make(chan struct{})
	t.Cleanup(func() { close(stall) })
	silent := rawServer(t, func(net.Conn) { <-stall })
	untrusted := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(untrusted.Close)
	for _, tc := range []struct {
		name, base, class, text string
		tries                   int
		http                    *http.Client
	}{
		{"closed port", closedURL, backfill.ClassUnreachable, "the provider's API refused the connection or could not be reached (3 tries)", 3, nil},
		{"no TLS", strings.Replace(b.sd.URL, "http://", "https://", 1), backfill.ClassTLS,
			"the TLS handshake with the provider's API failed (its certificate was not trusted or it does not speak TLS)", 1, nil},
		{"untrusted certificate", untrusted.URL, backfill.ClassTLS,
			"the TLS handshake with the provider's API failed (its certificate was not trusted or it does not speak TLS)", 1, nil},
		{"not HTTP", garbage, backfill.ClassUnreadable, "the provider's answer could not be read (3 tries)", 3, nil},
		{"no answer in time", silent, backfill.ClassTimeout, "the provider's API did not answer in time (3 tries)", 3,
			&http.Client{Timeout: 50 * time.Millisecond}},
	} {
		before := counts.class(tc.class)
		s := *b.scanner
		s.HTTP = tc.http
		sc, err := s.Run(b.ctx, withBaseURL(b.src, tc.base), backfill.Trigger{Kind: backfill.TriggerAPI})
		require.NoError(t, err, tc.name)
		require.Equal(t, backfill.ResultError, sc.Result, tc.name)
		require.Equal(t, tc.text, sc.Error, tc.name)
		require.Equal(t, tc.tries, counts.class(tc.class)-before, tc.name)
	}
	// A name that does not resolve (RFC 6761: .invalid never does); not
	// tried again when the resolver says so, and a resolver that cannot
	// be asked may make it a temporary failure, tried again.
	before := counts.class(backfill.ClassDNS)
	sc, err = b.scanner.Run(b.ctx, withBaseURL(b.src, "http://claimd-backfill-test.invalid"), backfill.Trigger{Kind: backfill.TriggerAPI})
	require.NoError(t, err)
	require.Equal(t, backfill.ResultError, sc.Result)
	require.True(t, strings.HasPrefix(sc.Error, "the provider's API host name could not be resolved (DNS)"), sc.Error)
	require.Positive(t, counts.class(backfill.ClassDNS)-before)
	require.NotContains(t, sc.Error, "claimd-backfill-test")
	logs := b.logs.String()
	for _, part := range []string{bfStripeKey, "stand-in outage", "127.0.0.1:"} {
		require.NotContains(t, logs, part)
	}
}

// rawServer accepts TCP connections on a loopback port and hands each to
// serve, then closes it; it returns http://ADDR.
func rawServer(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				_, _ = c.Read(buf)
				serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-done
	})
	return "http://" + l.Addr().String()
}

// TestBackfillBacklogLeavesTheWindow: a backlog not listed before part
// of it leaves the provider's window is cut to the window: the part still
// inside is listed, the scan's notes name the period that was never
// checked, and the scan ends ok (nothing listable is left).
func TestBackfillBacklogLeavesTheWindow(t *testing.T) {
	t.Parallel()
	b := setupBackfillStripe(t, ", mode: report, max_pages: 2")
	b.sd.PageSize = 3
	for i, age := range []int{2, 3, 4, 5, 6, 7, 60, 66, 70} {
		b.sd.Add(b.event("evt_lw_"+strconv.Itoa(i), time.Duration(age)*time.Hour))
	}
	first := b.scan(t)
	require.Equal(t, backfill.ResultPartial, first.Result, first.Error)
	require.Equal(t, 6, first.Missed)

	// Five hours on, [now−72 h, now−67 h) of the backlog is out of the
	// window: evt_lw_8 (70 h old then) can no longer be listed.
	later := b.now.Add(5 * time.Hour)
	b.scanner.Now = func() time.Time { return later }
	sc := b.scan(t)
	require.Equal(t, backfill.ResultOK, sc.Result, sc.Error)
	require.Contains(t, sc.Notes, "the backlog's part ["+b.now.Add(-72*time.Hour).Format(time.RFC3339)+", "+
		later.Add(-72*time.Hour).Format(time.RFC3339)+") left the provider's window before it was listed")
	require.Equal(t, 2, sc.Missed, "evt_lw_6 and evt_lw_7 from the backlog")
	require.Nil(t, sc.BacklogFrom)
	require.Len(t, b.findings(t), 8, "evt_lw_8 was never listed")
	require.NotContains(t, b.findings(t), "evt_lw_8")
	sc = b.scan(t)
	require.Equal(t, backfill.ResultOK, sc.Result, sc.Error)
	require.Empty(t, sc.Notes, "said once, when dropped")
}

// TestBackfillSquareBacklogCoversTheWindow: Square's SearchEvents, pages
// of 2, 2 pages a scan: 9 lost events are fetched over successive
// partial scans, each stored once.
func TestBackfillSquareBacklogCoversTheWindow(t *testing.T) {
	t.Parallel()
	b := setupBackfillSquare(t, ", mode: fetch, max_pages: 2")
	b.sq.PageSize = 2
	for i := range 9 {
		b.sq.Add(b.event("sq_bl_"+strconv.Itoa(i), time.Duration(2+i*7)*time.Hour))
	}
	scans := drainScans(t, 10, func() backfill.Scan { return b.scan(t) })
	require.Greater(t, len(scans), 2)
	backfilled := 0
	for _, sc := range scans {
		backfilled += sc.Backfilled
		require.LessOrEqual(t, sc.Pages, 2)
	}
	require.Equal(t, 9, backfilled)
	require.Equal(t, 9, sumMissed(scans))
	require.Len(t, b.findings(t), 9)
	for _, st := range b.findings(t) {
		require.Equal(t, "fetched", st)
	}
	require.Equal(t, ingestCounts{claims: 9, inbox: 9, jobs: 9}, b.counts(t, "sq-bf"))
}

// TestBackfillWholeWindowPartial: a scan asked for over the whole window
// that stops at max_pages leaves its unreached part as the source's
// backlog (it is all the window lacks), which the next scans drain; a
// partial scan of a narrower range only shows its unreached part.
func TestBackfillWholeWindowPartial(t *testing.T) {
	t.Parallel()
	b := setupBackfillStripe(t, ", mode: report, max_pages: 2")
	b.sd.PageSize = 2
	for i := range 7 {
		b.sd.Add(b.event("evt_ww_"+strconv.Itoa(i), time.Duration(2+i*5)*time.Hour))
	}
	win := backfill.Window(b.src, b.now)
	narrow, err := b.scanner.Run(b.ctx, b.src, backfill.Trigger{Kind: backfill.TriggerAPI, From: win.From, To: b.now.Add(-3 * time.Hour)})
	require.NoError(t, err)
	require.Equal(t, backfill.ResultPartial, narrow.Result, narrow.Error)
	require.Contains(t, narrow.Notes, "ask for that range again")
	require.Equal(t, "", b.scalar(t, `SELECT COALESCE(backlog_from::text, '') || COALESCE(scanned_until::text, '')
		FROM backfill_state WHERE source = 'stripe-bf'`), "a narrower range leaves the source's state alone")

	sc, err := b.scanner.Run(b.ctx, b.src, backfill.Trigger{Kind: backfill.TriggerAPI, From: win.From, To: win.To})
	require.NoError(t, err)
	require.Equal(t, backfill.ResultPartial, sc.Result, sc.Error)
	require.Contains(t, sc.Notes, "are listed by the next scans")
	require.Equal(t, sc.BacklogTo.UTC().Format(time.RFC3339), b.scalar(t,
		`SELECT to_char(backlog_to AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') FROM backfill_state WHERE source = 'stripe-bf'`))
	scans := drainScans(t, 10, func() backfill.Scan { return b.scan(t) })
	require.Equal(t, 7, narrow.Missed+sc.Missed+sumMissed(scans))
	require.Len(t, b.findings(t), 7)
}
