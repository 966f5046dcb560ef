package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/backfill"
	"github.com/idempotent-claim/idempotent-claim/sidecar/metrics"
)

// Tests of "one scan of a source at a time", kept by the scan rows: a
// scan that finished frees its source at once, whatever River's job
// says; asks at the same moment make one scan.

// waitScanFinished polls GET …/scans/{id} until the scan has finished and
// returns it.
func (e *ingestEnv) waitScanFinished(t *testing.T, source string, id int64) backfill.Scan {
	t.Helper()
	var sc backfill.Scan
	e.eventually(t, "scan "+strconv.FormatInt(id, 10)+" finished", func() bool {
		r := e.api(t, "GET", "/v1/sources/"+source+"/backfill/scans/"+strconv.FormatInt(id, 10))
		require.Equal(t, 200, r.status, "%s", r.body)
		require.NoError(t, json.Unmarshal(r.body, &sc))
		return sc.FinishedAt != nil
	})
	return sc
}

// TestBackfillScanAskedRightAfterOneFinished: with a replica working the
// scans, a scan asked for as soon as the previous one has finished
// (GET …/scans/{id} says finished_at) is a new scan, queued, not
// already_running, and runs with the mode and range it asked for —
// whole_window and report by turns. Each answer's requested_at is the
// stored one; started_at is null while queued and set once it ran.
func TestBackfillScanAskedRightAfterOneFinished(t *testing.T) {
	t.Parallel()
	b := setupBackfillStripeWith(t, ", mode: auto", metrics.New(nil))
	b.sd.Add(b.event("evt_once_a", 2*time.Hour))
	seen := map[int64]bool{}
	for i := 0; i < 6; i++ {
		body := `{"whole_window":true}`
		if i%2 == 1 {
			body = `{"mode":"report"}`
		}
		a := b.apiPost(t, "/v1/sources/stripe-bf/backfill/scans", body)
		require.Equal(t, 202, a.status, "%s", a.body)
		var s scanAnswer
		require.NoError(t, json.Unmarshal(a.body, &s))
		require.False(t, s.AlreadyRunning, "ask %d: the previous scan has finished: %s", i, a.body)
		require.False(t, seen[s.Scan.ID], "ask %d: a new scan", i)
		seen[s.Scan.ID] = true
		require.Equal(t, backfill.ResultQueued, s.Scan.Result)
		require.Nil(t, s.Scan.StartedAt)
		require.Contains(t, string(a.body), `"started_at":null`)

		sc := b.waitScanFinished(t, "stripe-bf", s.Scan.ID)
		require.Equal(t, backfill.ResultOK, sc.Result, sc.Error)
		require.True(t, sc.RequestedAt.Equal(s.Scan.RequestedAt), "the answer's requested_at is the stored one")
		require.NotNil(t, sc.StartedAt, "it ran")
		if i%2 == 1 {
			require.Equal(t, "report", sc.Mode, "the mode asked for")
		} else {
			require.Equal(t, "auto", sc.Mode)
			require.WithinDuration(t, time.Now().Add(-72*time.Hour), *sc.RangeStart, time.Minute, "the whole window")
		}
	}
	require.Equal(t, "6", b.scalar(t, `SELECT count(*)::text FROM backfill_scans WHERE source = 'stripe-bf'`))
}

// TestBackfillScanFinishedBeforeItsJob: River completes jobs later, in
// batches, so a scan's job may still count as not finished after its row
// has. The row decides: once it finished, the next ask makes a new scan.
// The worker runs exactly its job's row: a job whose row is no longer
// queued, or that names none, does nothing.
func TestBackfillScanFinishedBeforeItsJob(t *testing.T) {
	t.Parallel()
	e := setupBackfillQueue(t)
	w := &backfill.Worker{Scanner: &backfill.Scanner{Inbox: e.inbox, Log: zerolog.Nop()}}
	jobOf := func(id int64) *river.Job[backfill.ScanArgs] {
		var args backfill.ScanArgs
		require.NoError(t, json.Unmarshal([]byte(e.scalar(t, `SELECT args::text FROM river_job
			WHERE kind = 'claimd_backfill_scan' AND args->>'scan_id' = $1`, strconv.FormatInt(id, 10))), &args))
		return &river.Job[backfill.ScanArgs]{JobRow: &rivertype.JobRow{ID: 1, Kind: args.Kind()}, Args: args}
	}

	first, _ := e.askScan(t, `{"whole_window":true}`)
	// The replica runs the scan; River has not completed its job yet
	// (it stays available here: nothing completes it).
	require.NoError(t, w.Work(e.ctx, jobOf(first.Scan.ID)))
	sc := e.waitScanFinished(t, "stripe-bf", first.Scan.ID)
	require.Equal(t, backfill.ResultOK, sc.Result, sc.Error)

	next, raw := e.askScan(t, `{"mode":"report"}`)
	require.False(t, next.AlreadyRunning, "%s", raw.body)
	require.NotEqual(t, first.Scan.ID, next.Scan.ID)
	require.Equal(t, backfill.ResultQueued, next.Scan.Result)
	require.Equal(t, "report", next.Scan.Mode, "the mode asked for")
	require.Nil(t, next.Scan.RangeStart, "the range asked for: the source's default")
	require.Equal(t, "2", e.scalar(t, `SELECT count(*)::text FROM river_job WHERE kind = 'claimd_backfill_scan'`))

	// The first job again (River's retry, or a late run): its row is no
	// longer queued; it does nothing, and the new scan stays queued.
	finished := e.scalar(t, `SELECT row_to_json(s)::text FROM backfill_scans s WHERE id = $1`, first.Scan.ID)
	require.NoError(t, w.Work(e.ctx, jobOf(first.Scan.ID)))
	require.Equal(t, finished, e.scalar(t, `SELECT row_to_json(s)::text FROM backfill_scans s WHERE id = $1`, first.Scan.ID))
	require.Equal(t, backfill.ResultQueued, e.scalar(t, `SELECT result FROM backfill_scans WHERE id = $1`, next.Scan.ID))
	// A job without a row runs nothing either.
	none := jobOf(next.Scan.ID)
	none.Args.ScanID = 0
	require.NoError(t, w.Work(e.ctx, none))
	require.Equal(t, "2", e.scalar(t, `SELECT count(*)::text FROM backfill_scans`))
	require.Equal(t, backfill.ResultQueued, e.scalar(t, `SELECT result FROM backfill_scans WHERE id = $1`, next.Scan.ID))

	// A scan run without its row while one is queued runs nothing.
	_, err := w.Scanner.Run(e.ctx, e.inbox.Source("stripe-bf"), backfill.Trigger{Kind: backfill.TriggerAPI})
	require.ErrorIs(t, err, backfill.ErrSourceBusy)
	require.Equal(t, "2", e.scalar(t, `SELECT count(*)::text FROM backfill_scans`))

	// Its own job runs it, with its own mode.
	require.NoError(t, w.Work(e.ctx, jobOf(next.Scan.ID)))
	sc = e.waitScanFinished(t, "stripe-bf", next.Scan.ID)
	require.Equal(t, backfill.ResultOK, sc.Result, sc.Error)
	require.Equal(t, "report", sc.Mode)
}

// TestBackfillScansAskedAtOnce: asks at the same moment make one scan:
// one answer is the new scan, the others already_running with that scan
// and a note that their mode and range were not applied.
func TestBackfillScansAskedAtOnce(t *testing.T) {
	t.Parallel()
	e := setupBackfillQueue(t)
	const n = 6
	type answer struct {
		status int
		body   []byte
		err    error
	}
	answers := make([]answer, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			body := `{"whole_window":true}`
			if i%2 == 1 {
				body = `{"mode":"report"}`
			}
			req, err := http.NewRequest(http.MethodPost, e.base+"/v1/sources/stripe-bf/backfill/scans", strings.NewReader(body))
			if err != nil {
				answers[i].err = err
				return
			}
			req.Header.Set("Authorization", "Bearer "+ingestAPIKey)
			req.Header.Set("Content-Type", "application/json")
			<-start
			resp, err := e.client.Do(req)
			if err != nil {
				answers[i].err = err
				return
			}
			defer resp.Body.Close()
			answers[i].status = resp.StatusCode
			answers[i].body, answers[i].err = io.ReadAll(resp.Body)
		}(i)
	}
	close(start)
	wg.Wait()
	ids := map[int64]bool{}
	made := 0
	for _, a := range answers {
		require.NoError(t, a.err)
		require.Equal(t, 202, a.status, "%s", a.body)
		var s scanAnswer
		require.NoError(t, json.Unmarshal(a.body, &s))
		ids[s.Scan.ID] = true
		require.Equal(t, backfill.ResultQueued, s.Scan.Result)
		if s.AlreadyRunning {
			require.Contains(t, string(a.body), `"note":`)
			require.Contains(t, string(a.body), "were not applied")
		} else {
			made++
			require.NotContains(t, string(a.body), `"note":`)
		}
	}
	require.Len(t, ids, 1, "one scan")
	require.Equal(t, 1, made, "one answer made it")
	require.Equal(t, "1", e.scalar(t, `SELECT count(*)::text FROM backfill_scans`))
	require.Equal(t, "1", e.scalar(t, `SELECT count(*)::text FROM river_job WHERE kind = 'claimd_backfill_scan'`))
}

// TestBackfillSourceWithoutBackfill: every backfill route answers 409
// invalid_state naming source for a configured source without backfill —
// a trigger source, an ingest door, a claim-only source — and 404 for a
// source that is not configured or is another tenant's; an empty state is
// 400 naming state.
func TestBackfillSourceWithoutBackfill(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, `sources:
  trig-nobf:
    tenant: acme
    provider: stripe
    secrets: ["whsec_nobf"]
  door-nobf:
    tenant: acme
    provider: stripe
    secrets: ["whsec_nobf"]
    forward: {url: "http://n8n.invalid/webhook/x"}
  claim-only: {}
  door-other:
    tenant: other
    provider: stripe
    secrets: ["whsec_nobf"]
    forward: {url: "http://n8n.invalid/webhook/y"}
`, ingestOptions{})
	routes := func(src string) [][2]string {
		p := "/v1/sources/" + src + "/backfill/"
		return [][2]string{{"POST", p + "scans"}, {"GET", p + "scans"}, {"GET", p + "scans/1"}, {"GET", p + "events"}}
	}
	for _, src := range []string{"trig-nobf", "door-nobf", "claim-only"} {
		for _, r := range routes(src) {
			var a ingestAnswer
			if r[0] == "POST" {
				a = e.apiPost(t, r[1], `{}`)
			} else {
				a = e.api(t, r[0], r[1])
			}
			require.Equal(t, 409, a.status, "%s %s: %s", r[0], r[1], a.body)
			require.Contains(t, string(a.body), `"code":"invalid_state"`)
			require.Contains(t, string(a.body), `"field":"source"`)
			require.Contains(t, string(a.body), "no backfill configured")
		}
	}
	for _, src := range []string{"nope", "door-other"} {
		for _, r := range routes(src) {
			var a ingestAnswer
			if r[0] == "POST" {
				a = e.apiPost(t, r[1], `{}`)
			} else {
				a = e.api(t, r[0], r[1])
			}
			require.Equal(t, 404, a.status, "%s %s: %s", r[0], r[1], a.body)
			require.Contains(t, string(a.body), "no such source")
		}
	}

	q := setupBackfillQueue(t)
	for _, p := range []string{"?state=", "?state", "?state=&limit=5"} {
		a := q.api(t, "GET", "/v1/sources/stripe-bf/backfill/events"+p)
		require.Equal(t, 400, a.status, "%s: %s", p, a.body)
		require.Contains(t, string(a.body), `"field":"state"`)
	}
}
