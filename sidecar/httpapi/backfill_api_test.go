package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/backfill"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/standin"
)

// Tests of the backfill API's answers: a scan asked for answers its id at
// once (a queued row made with its job), the range a scan may ask for,
// the listings' pages, and the findings' states as they are now.

// setupBackfillQueue is a stripe-bf source (tenant acme, window 72 h,
// grace 10 min) whose scan jobs are queued and never worked: the scan
// worker is registered, no replica dispatches.
func setupBackfillQueue(t *testing.T) *ingestEnv {
	t.Helper()
	sd := standin.NewStripe(t, bfStripeKey)
	sources := `sources:
  stripe-bf:
    tenant: acme
    provider: stripe
    secrets: ["` + bfStripeSecret + `"]
    forward: {url: "http://n8n.invalid/webhook/stripe"}
    backfill: {credentials: ["${STRIPE_EVENTS_KEY}"], base_url: "` + sd.URL + `", window_hours: 72, grace_seconds: 600}
  stripe-other:
    tenant: other
    provider: stripe
    secrets: ["` + bfStripeSecret + `"]
    forward: {url: "http://n8n.invalid/webhook/other"}
    backfill: {credentials: ["${STRIPE_EVENTS_KEY}"], base_url: "` + sd.URL + `"}
`
	sc := &backfill.Scanner{Log: zerolog.Nop()}
	e := setupIngest(t, sources, ingestOptions{env: map[string]string{"STRIPE_EVENTS_KEY": bfStripeKey},
		workers: backfill.Workers(sc)})
	sc.Inbox = e.inbox
	return e
}

type scanAnswer struct {
	Scan           backfill.Scan `json:"scan"`
	AlreadyRunning bool          `json:"already_running"`
}

func (e *ingestEnv) askScan(t *testing.T, body string) (scanAnswer, ingestAnswer) {
	t.Helper()
	a := e.apiPost(t, "/v1/sources/stripe-bf/backfill/scans", body)
	require.Equal(t, 202, a.status, "%s", a.body)
	var s scanAnswer
	require.NoError(t, json.Unmarshal(a.body, &s))
	require.Positive(t, s.Scan.ID)
	require.Equal(t, "/v1/sources/stripe-bf/backfill/scans/"+strconv.FormatInt(s.Scan.ID, 10), a.header.Get("Location"))
	return s, a
}

// TestBackfillScanAskedForAnswersItsID: POST …/backfill/scans makes the
// scan's row (queued, its trigger, actor, mode and range) and its job in
// one transaction and answers the scan at once, with its Location; asked
// again while it is queued, the same scan answers already_running (the
// range asked for the second time is not applied, and the answer's note
// says so; no second row). GET …/scans/{id} reads it; another tenant's
// scan and a missing id are 404, a malformed id 400 naming id. A queued scan whose job is gone is ended error
// "the scan never ran", by the next scan asked for and by the
// maintenance purge, and a new one is queued.
func TestBackfillScanAskedForAnswersItsID(t *testing.T) {
	t.Parallel()
	e := setupBackfillQueue(t)

	first, firstRaw := e.askScan(t, `{"mode":"report"}`)
	require.False(t, first.AlreadyRunning)
	require.Equal(t, backfill.ResultQueued, first.Scan.Result)
	require.Equal(t, "api", first.Scan.Trigger)
	require.Equal(t, "report", first.Scan.Mode)
	require.NotEmpty(t, first.Scan.Actor)
	require.True(t, first.Scan.RangeStart == nil && first.Scan.RangeEnd == nil, "the source's default range: known when it runs")
	require.Contains(t, string(firstRaw.body), `"range_start":null`)
	require.Contains(t, string(firstRaw.body), `"range_end":null`)
	require.Nil(t, first.Scan.FinishedAt)
	require.Nil(t, first.Scan.StartedAt, "not started yet")
	require.Contains(t, string(firstRaw.body), `"started_at":null`)
	require.WithinDuration(t, time.Now(), first.Scan.RequestedAt, time.Minute)
	require.NotContains(t, string(firstRaw.body), `"note"`)
	require.Equal(t, strconv.FormatInt(first.Scan.ID, 10), e.scalar(t,
		`SELECT args->>'scan_id' FROM river_job WHERE kind = 'claimd_backfill_scan' AND state = 'available'`),
		"the job carries the scan's id")

	r := e.api(t, "GET", "/v1/sources/stripe-bf/backfill/scans/"+strconv.FormatInt(first.Scan.ID, 10))
	require.Equal(t, 200, r.status, "%s", r.body)
	var got backfill.Scan
	require.NoError(t, json.Unmarshal(r.body, &got))
	require.Equal(t, first.Scan, got)

	again, againRaw := e.askScan(t, `{"whole_window":true}`)
	require.True(t, again.AlreadyRunning)
	require.Equal(t, first.Scan.ID, again.Scan.ID)
	require.Nil(t, again.Scan.RangeStart, "the scan queued already, as it was asked for")
	require.Equal(t, "report", again.Scan.Mode, "its own mode")
	require.Contains(t, string(againRaw.body), "were not applied", "the answer says the request's range was not applied")
	require.Equal(t, "1", e.scalar(t, `SELECT count(*)::text FROM backfill_scans`))
	require.Equal(t, "1", e.scalar(t, `SELECT count(*)::text FROM river_job WHERE kind = 'claimd_backfill_scan'`))

	var otherID int64
	require.NoError(t, e.pool.QueryRow(e.ctx, `INSERT INTO backfill_scans (tenant, source, trigger, mode, result)
		VALUES ('other', 'stripe-bf', 'api', 'auto', 'queued') RETURNING id`).Scan(&otherID))
	for _, p := range []string{
		"/v1/sources/stripe-bf/backfill/scans/" + strconv.FormatInt(otherID, 10),
		"/v1/sources/stripe-bf/backfill/scans/" + strconv.FormatInt(otherID+1000, 10),
		"/v1/sources/stripe-other/backfill/scans/" + strconv.FormatInt(first.Scan.ID, 10),
	} {
		r := e.api(t, "GET", p)
		require.Equal(t, 404, r.status, "%s: %s", p, r.body)
		require.Contains(t, string(r.body), "not_found")
	}
	for _, id := range []string{"abc", "-1", "0", "99999999999999999999", "1.5", "%20", "+1", "%2B1", "01", "00", "1e0", "0x1"} {
		r := e.api(t, "GET", "/v1/sources/stripe-bf/backfill/scans/"+id)
		require.Equal(t, 400, r.status, "%s: %s", id, r.body)
		require.Contains(t, string(r.body), `"field":"id"`)
		require.NotContains(t, string(r.body), "abc")
		require.NotContains(t, string(r.body), "99999")
	}
	_, err := e.pool.Exec(e.ctx, `DELETE FROM backfill_scans WHERE id = $1`, otherID)
	require.NoError(t, err)

	// The job is lost (cancelled, or discarded after its replica died):
	// the next scan asked for ends the queued row and is queued itself.
	_, err = e.pool.Exec(e.ctx, `DELETE FROM river_job WHERE kind = 'claimd_backfill_scan'`)
	require.NoError(t, err)
	next, _ := e.askScan(t, `{"whole_window":true}`)
	require.False(t, next.AlreadyRunning)
	require.NotEqual(t, first.Scan.ID, next.Scan.ID)
	require.WithinDuration(t, time.Now().Add(-72*time.Hour), *next.Scan.RangeStart, time.Minute, "the whole window, as it was when asked")
	require.WithinDuration(t, time.Now().Add(-600*time.Second), *next.Scan.RangeEnd, time.Minute)
	var args backfill.ScanArgs
	require.NoError(t, json.Unmarshal([]byte(e.scalar(t, `SELECT args::text FROM river_job WHERE kind = 'claimd_backfill_scan'`)), &args))
	require.Equal(t, next.Scan.ID, args.ScanID)
	require.NotNil(t, args.From)
	require.True(t, args.From.Equal(*next.Scan.RangeStart) && args.To.Equal(*next.Scan.RangeEnd))
	r = e.api(t, "GET", "/v1/sources/stripe-bf/backfill/scans/"+strconv.FormatInt(first.Scan.ID, 10))
	require.NoError(t, json.Unmarshal(r.body, &got))
	require.Equal(t, "error", got.Result)
	require.Contains(t, got.Error, "never ran")
	require.NotNil(t, got.FinishedAt)

	// The maintenance purge ends a queued scan whose job is gone too,
	// and leaves one whose job is queued.
	_, err = backfill.Purge(e.ctx, e.pool, time.Now().Add(-backfill.Retention))
	require.NoError(t, err)
	require.Equal(t, backfill.ResultQueued, e.scalar(t, `SELECT result FROM backfill_scans WHERE id = `+strconv.FormatInt(next.Scan.ID, 10)))
	_, err = e.pool.Exec(e.ctx, `DELETE FROM river_job WHERE kind = 'claimd_backfill_scan'`)
	require.NoError(t, err)
	_, err = backfill.Purge(e.ctx, e.pool, time.Now().Add(-backfill.Retention))
	require.NoError(t, err)
	require.Equal(t, "error", e.scalar(t, `SELECT result FROM backfill_scans WHERE id = `+strconv.FormatInt(next.Scan.ID, 10)))

	// The schedule's scan has its row too.
	n, err := backfill.Schedule(e.ctx, e.inbox, time.Now())
	require.NoError(t, err)
	require.Positive(t, n, "stripe-bf has never been scanned")
	require.Equal(t, backfill.ResultQueued, e.scalar(t, `SELECT result FROM backfill_scans WHERE tenant = 'acme' AND trigger = 'schedule'`))
}

// TestBackfillStaleRunningScanEnded: a scan left running by a claimd
// stopped mid-scan (its row running, its River job stuck running until
// River's rescuer discards it) is ended error "the scan stopped" by the
// maintenance purge once its job no longer runs, and by the next scan
// asked for; while its job runs it is left running. A running job answers
// only for the row it names: a running row no running job names (of
// another source, or once the job names another row) is ended. A source
// has at most one queued or running row (the unique index).
func TestBackfillStaleRunningScanEnded(t *testing.T) {
	t.Parallel()
	e := setupBackfillQueue(t)
	first, _ := e.askScan(t, `{}`)
	id := strconv.FormatInt(first.Scan.ID, 10)
	// The worker took the job and started the scan; then claimd stopped.
	_, err := e.pool.Exec(e.ctx, `UPDATE river_job SET state = 'running', attempted_at = now(), attempt = 1
		WHERE kind = 'claimd_backfill_scan'`)
	require.NoError(t, err)
	_, err = e.pool.Exec(e.ctx, `UPDATE backfill_scans SET result = 'running', started_at = now() WHERE id = $1`, first.Scan.ID)
	require.NoError(t, err)
	running := func(tenant, source string) int64 {
		var id int64
		require.NoError(t, e.pool.QueryRow(e.ctx, `INSERT INTO backfill_scans (tenant, source, trigger, mode, result, started_at)
			VALUES ($1, $2, 'api', 'report', 'running', now()) RETURNING id`, tenant, source).Scan(&id))
		return id
	}
	resultOf := func(id int64) string {
		return e.scalar(t, `SELECT result || ':' || COALESCE(error, '') || ':' || (finished_at IS NOT NULL)::text
			FROM backfill_scans WHERE id = $1`, id)
	}
	const stopped = "error:the scan stopped: claimd stopped or the job was lost:true"
	other := running("other", "stripe-other")
	_, err = e.pool.Exec(e.ctx, `INSERT INTO backfill_scans (tenant, source, trigger, mode, result)
		VALUES ('acme', 'stripe-bf', 'api', 'report', 'queued')`)
	require.Error(t, err, "a second active row of the source")
	require.Contains(t, err.Error(), "backfill_scans_one_active_idx")

	_, err = backfill.Purge(e.ctx, e.pool, time.Now().Add(-backfill.Retention))
	require.NoError(t, err)
	require.Equal(t, backfill.ResultRunning+"::false", resultOf(first.Scan.ID), "its job still runs")
	require.Equal(t, stopped, resultOf(other), "no job of its source runs")

	// River's rescuer discards the stuck job (one attempt): the purge
	// ends the row; the scan reads as ended.
	_, err = e.pool.Exec(e.ctx, `UPDATE river_job SET state = 'discarded', finalized_at = now() WHERE kind = 'claimd_backfill_scan'`)
	require.NoError(t, err)
	_, err = backfill.Purge(e.ctx, e.pool, time.Now().Add(-backfill.Retention))
	require.NoError(t, err)
	require.Equal(t, stopped, resultOf(first.Scan.ID))
	r := e.api(t, "GET", "/v1/sources/stripe-bf/backfill/scans/"+id)
	require.Equal(t, 200, r.status, "%s", r.body)
	var got backfill.Scan
	require.NoError(t, json.Unmarshal(r.body, &got))
	require.Equal(t, backfill.ResultError, got.Result)
	require.Equal(t, "the scan stopped: claimd stopped or the job was lost", got.Error)
	require.NotNil(t, got.FinishedAt)

	// The next scan asked for ends a stale running row of its source too.
	again := running("acme", "stripe-bf")
	next, _ := e.askScan(t, `{}`)
	require.False(t, next.AlreadyRunning)
	require.Equal(t, stopped, resultOf(again))
	require.Equal(t, backfill.ResultQueued+"::false", resultOf(next.Scan.ID))

	// A running job that names another row does not keep this one.
	_, err = e.pool.Exec(e.ctx, `UPDATE backfill_scans SET result = 'running', started_at = now() WHERE id = $1`, next.Scan.ID)
	require.NoError(t, err)
	_, err = e.pool.Exec(e.ctx, `UPDATE river_job SET state = 'running', attempted_at = now(), attempt = 1,
		args = jsonb_set(args, '{scan_id}', to_jsonb($1::bigint)) WHERE kind = 'claimd_backfill_scan' AND args->>'scan_id' = $2`,
		first.Scan.ID, strconv.FormatInt(next.Scan.ID, 10))
	require.NoError(t, err)
	_, err = backfill.Purge(e.ctx, e.pool, time.Now().Add(-backfill.Retention))
	require.NoError(t, err)
	require.Equal(t, stopped, resultOf(next.Scan.ID))
}

// TestBackfillScanRangeAsked: the body of POST …/backfill/scans is
// strict JSON; from and to are RFC 3339 date-times within the provider's
// window, from before to, and not with whole_window. Each refusal is 400
// naming the field, states the window's bounds where it is about them,
// and repeats nothing of the body; nothing is queued.
func TestBackfillScanRangeAsked(t *testing.T) {
	t.Parallel()
	e := setupBackfillQueue(t)
	now := time.Now().UTC().Truncate(time.Second)
	at := func(d time.Duration) string { return now.Add(-d).Format(time.RFC3339) }
	for _, tc := range []struct {
		name, body, field, says string
		status                  int
	}{
		{"unknown field", `{"mode":"report","frm":"x"}`, "frm", "", 400},
		{"duplicate field", `{"from":"` + at(time.Hour) + `","from":"` + at(2*time.Hour) + `"}`, "from", "", 400},
		{"not JSON", `{"from":`, "", "", 400},
		{"from not a date", `{"from":"yesterday-ish"}`, "from", "RFC 3339", 400},
		{"from without offset", `{"from":"2025-03-04T05:06:07"}`, "from", "RFC 3339", 400},
		{"from a number", `{"from":1700000000}`, "from", "", 400},
		{"from older than the window", `{"from":"2001-02-03T04:05:06Z"}`, "from", "window", 400},
		{"from in the grace", `{"from":"` + at(time.Minute) + `"}`, "from", "window", 400},
		{"to in the future", `{"to":"` + now.Add(time.Hour).Format(time.RFC3339) + `"}`, "to", "window", 400},
		{"to before from", `{"from":"` + at(2*time.Hour) + `","to":"` + at(3*time.Hour) + `"}`, "to", "later than from", 400},
		{"to equal to from", `{"from":"` + at(2*time.Hour) + `","to":"` + at(2*time.Hour) + `"}`, "to", "later than from", 400},
		{"whole window with from", `{"whole_window":true,"from":"` + at(2*time.Hour) + `"}`, "whole_window", "without from and to", 400},
		{"whole window with to", `{"whole_window":true,"to":"` + at(2*time.Hour) + `"}`, "whole_window", "", 400},
		{"whole window a string", `{"whole_window":"yes"}`, "whole_window", "", 400},
		{"mode", `{"mode":"redeliver"}`, "mode", "", 422},
	} {
		a := e.apiPost(t, "/v1/sources/stripe-bf/backfill/scans", tc.body)
		require.Equal(t, tc.status, a.status, "%s: %s", tc.name, a.body)
		if tc.field != "" {
			require.Contains(t, string(a.body), `"field":"`+tc.field+`"`, tc.name)
		}
		require.Contains(t, string(a.body), tc.says, tc.name)
		for _, v := range []string{"yesterday-ish", "2001-02-03", "2025-03-04", "1700000000", `"yes"`} {
			require.NotContains(t, string(a.body), v, "%s: nothing of the body is repeated", tc.name)
		}
	}
	require.Equal(t, "0", e.scalar(t, `SELECT count(*)::text FROM backfill_scans`), "nothing queued")

	s, _ := e.askScan(t, `{"from":"`+at(30*time.Hour)+`","to":"`+at(20*time.Hour)+`"}`)
	require.True(t, s.Scan.RangeStart.Equal(now.Add(-30*time.Hour)) && s.Scan.RangeEnd.Equal(now.Add(-20*time.Hour)),
		"%v %v", *s.Scan.RangeStart, *s.Scan.RangeEnd)
	_, err := e.pool.Exec(e.ctx, `DELETE FROM river_job WHERE kind = 'claimd_backfill_scan'`)
	require.NoError(t, err)
	s, _ = e.askScan(t, `{"from":"`+at(30*time.Hour)+`"}`)
	require.WithinDuration(t, time.Now().Add(-600*time.Second), *s.Scan.RangeEnd, time.Minute, "one bound: the other is the window's")
}

// TestBackfillListingPages: GET …/backfill/scans and …/events answer
// pages of limit rows (1…200) newest first with next, the before of the
// next page (absent on the last); following next visits every row once
// in order, also findings detected at one instant (ordered by event id).
// A limit, before or state given twice, a limit out of range or not a
// number, a before that is no cursor: 400 naming it, nothing repeated.
func TestBackfillListingPages(t *testing.T) {
	t.Parallel()
	e := setupBackfillQueue(t)
	var ids []int64
	for i := 0; i < 7; i++ {
		var id int64
		require.NoError(t, e.pool.QueryRow(e.ctx, `INSERT INTO backfill_scans (tenant, source, trigger, mode, range_start,
			range_end, result, finished_at) VALUES ('acme', 'stripe-bf', 'schedule', 'auto', now() - interval '1 day', now(),
			'ok', now()) RETURNING id`).Scan(&id))
		ids = append([]int64{id}, ids...)
	}
	var seen []int64
	path := "/v1/sources/stripe-bf/backfill/scans?limit=3"
	for pages := 0; ; pages++ {
		require.Less(t, pages, 4)
		r := e.api(t, "GET", path)
		require.Equal(t, 200, r.status, "%s", r.body)
		var p struct {
			Scans []backfill.Scan `json:"scans"`
			Next  *int64          `json:"next"`
		}
		require.NoError(t, json.Unmarshal(r.body, &p))
		for _, s := range p.Scans {
			seen = append(seen, s.ID)
		}
		if p.Next == nil {
			require.Len(t, p.Scans, 1)
			break
		}
		require.Len(t, p.Scans, 3)
		path = "/v1/sources/stripe-bf/backfill/scans?limit=3&before=" + strconv.FormatInt(*p.Next, 10)
	}
	require.Equal(t, ids, seen)

	// Findings: five at one instant, four older.
	var want []string
	for i := 0; i < 9; i++ {
		id := fmt.Sprintf("evt_page_%d", i)
		detected := "timestamptz '2026-01-02T00:00:00Z'"
		if i >= 5 {
			detected = fmt.Sprintf("timestamptz '2026-01-01T00:00:00Z' - interval '%d seconds'", i)
		}
		_, err := e.pool.Exec(e.ctx, `INSERT INTO backfill_events (tenant, scope, event_id, source, provider_id, scan_id, state,
			detected_at) VALUES ('acme', 'stripe-bf', $1, 'stripe-bf', $1, $2, 'missed', `+detected+`)`, id, ids[0])
		require.NoError(t, err)
		want = append(want, id)
	}
	var got []string
	path = "/v1/sources/stripe-bf/backfill/events?limit=2&state=missed"
	for pages := 0; ; pages++ {
		require.Less(t, pages, 6)
		r := e.api(t, "GET", path)
		require.Equal(t, 200, r.status, "%s", r.body)
		var p struct {
			Events []backfill.Finding `json:"events"`
			Next   string             `json:"next"`
		}
		require.NoError(t, json.Unmarshal(r.body, &p))
		for _, f := range p.Events {
			got = append(got, f.EventID)
		}
		if p.Next == "" {
			break
		}
		path = "/v1/sources/stripe-bf/backfill/events?limit=2&state=missed&before=" + url.QueryEscape(p.Next)
	}
	require.Equal(t, want, got)
	r := e.api(t, "GET", "/v1/sources/stripe-bf/backfill/events")
	var all struct {
		Events []backfill.Finding `json:"events"`
		Next   *string            `json:"next"`
	}
	require.NoError(t, json.Unmarshal(r.body, &all))
	require.Len(t, all.Events, 9, "the default page holds them all")
	require.Nil(t, all.Next)

	for _, tc := range []struct{ path, field string }{
		{"scans?limit=0", "limit"},
		{"scans?limit=201", "limit"},
		{"scans?limit=ten", "limit"},
		{"scans?limit=", "limit"},
		{"scans?limit=2&limit=3", "limit"},
		{"scans?before=abc", "before"},
		{"scans?before=0", "before"},
		{"scans?before=%2B1", "before"},
		{"scans?before=01", "before"},
		{"scans?before=", "before"},
		{"scans?before=5&before=6", "before"},
		{"events?limit=-1", "limit"},
		{"events?before=zzz%3Cscript%3E", "before"},
		{"events?before=", "before"},
		{"events?before=" + backfill.EventCursor(time.Now(), "x") + "&before=" + backfill.EventCursor(time.Now(), "y"), "before"},
		{"events?state=missed&state=arrived", "state"},
		{"events?state=missed&limit=1&limit=1", "limit"},
	} {
		r := e.api(t, "GET", "/v1/sources/stripe-bf/backfill/"+tc.path)
		require.Equal(t, 400, r.status, "%s: %s", tc.path, r.body)
		require.Contains(t, string(r.body), `"field":"`+tc.field+`"`, tc.path)
		for _, v := range []string{"ten", "abc", "script", "zzz"} {
			require.NotContains(t, string(r.body), v, tc.path)
		}
	}
}

// TestBackfillFindingStatesNow: the findings listing says each finding's
// state as it is now, without another scan: a fetched event whose real
// delivery came afterwards is late_real, a missed event whose delivery
// came is arrived (with its record), and ?state= filters on those
// states. The stored states stay what the scan saw until the next scan.
func TestBackfillFindingStatesNow(t *testing.T) {
	t.Parallel()
	b := setupBackfillStripe(t, ", mode: fetch")
	late := b.event("evt_now_late", 2*time.Hour)
	b.sd.Add(late)
	require.Equal(t, backfill.ResultOK, b.scan(t).Result)
	arrives, stays := b.event("evt_now_arrives", 3*time.Hour), b.event("evt_now_stays", 4*time.Hour)
	b.sd.Add(arrives, stays)
	sc, err := b.scanner.Run(b.ctx, b.src, backfill.Trigger{Kind: backfill.TriggerAPI, Mode: "report", From: b.now.Add(-10 * time.Hour)})
	require.NoError(t, err)
	require.Equal(t, 2, sc.Missed)

	states := func(query string) map[string]backfill.Finding {
		r := b.api(t, "GET", "/v1/sources/stripe-bf/backfill/events"+query)
		require.Equal(t, 200, r.status, "%s", r.body)
		var p struct {
			Events []backfill.Finding `json:"events"`
		}
		require.NoError(t, json.Unmarshal(r.body, &p))
		out := map[string]backfill.Finding{}
		for _, f := range p.Events {
			out[f.EventID] = f
		}
		return out
	}
	now := states("")
	require.Equal(t, "fetched", now["evt_now_late"].State)
	require.Equal(t, "missed", now["evt_now_arrives"].State)

	b.deliver(t, late, "")
	rc := b.deliver(t, arrives, "")
	now = states("")
	require.Equal(t, "late_real", now["evt_now_late"].State, "the real delivery came after the backfill")
	require.Equal(t, "arrived", now["evt_now_arrives"].State)
	require.Equal(t, rc.ClaimID, now["evt_now_arrives"].ClaimID, "linked to the record the delivery made")
	require.Equal(t, "missed", now["evt_now_stays"].State)
	require.Len(t, states("?state=late_real"), 1)
	require.Contains(t, states("?state=late_real"), "evt_now_late")
	require.Len(t, states("?state=arrived"), 1)
	require.Contains(t, states("?state=arrived"), "evt_now_arrives")
	require.Empty(t, states("?state=fetched"))
	missed := states("?state=missed")
	require.Len(t, missed, 1)
	require.Contains(t, missed, "evt_now_stays")
	stored := b.findings(t)
	require.Equal(t, "fetched", stored["evt_now_late"], "not persisted by reading")
	require.Equal(t, "missed", stored["evt_now_arrives"])
	require.False(t, strings.Contains(fmt.Sprint(stored), "late_real"))
}

// TestBackfillRecordOrigin: the record and the inbox event claimd made
// from the provider's list say origin backfill wherever they are looked
// up (GET /v1/claims/{id}, GET /v1/claims?source=&event_id=, GET
// /v1/inbox/{id}); a delivered event's say no origin, also after the
// late real delivery of the backfilled one (still its record).
func TestBackfillRecordOrigin(t *testing.T) {
	t.Parallel()
	b := setupBackfillStripe(t, ", mode: fetch")
	present, lost := b.event("evt_origin_present", 3*time.Hour), b.event("evt_origin_lost", 2*time.Hour)
	b.sd.Add(present, lost)
	rc := b.deliver(t, present, "")
	require.Equal(t, 1, b.scan(t).Backfilled)
	lostID, origin, _ := b.claimOf(t, "evt_origin_lost")
	require.Equal(t, "backfill", origin)

	originOf := func(path string) (string, bool) {
		r := b.api(t, "GET", path)
		require.Equal(t, 200, r.status, "%s: %s", path, r.body)
		var m map[string]any
		require.NoError(t, json.Unmarshal(r.body, &m))
		o, ok := m["origin"].(string)
		return o, ok
	}
	for _, p := range []string{"/v1/claims/" + lostID, "/v1/claims?source=stripe-bf&event_id=evt_origin_lost", "/v1/inbox/" + lostID} {
		o, ok := originOf(p)
		require.True(t, ok, p)
		require.Equal(t, "backfill", o, p)
	}
	for _, p := range []string{"/v1/claims/" + rc.ClaimID, "/v1/inbox/" + rc.ClaimID} {
		_, ok := originOf(p)
		require.False(t, ok, "%s: a delivered event has no origin", p)
	}
	b.deliver(t, lost, "")
	o, ok := originOf("/v1/claims/" + lostID)
	require.True(t, ok)
	require.Equal(t, "backfill", o, "the late real delivery is a duplicate of the backfilled record")
}
