package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/backfill"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/standin"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// Gap detection for GitHub: the hook's delivery log (Link cursor pages),
// redelivery through GitHub (the stand-in POSTs the signed delivery to
// claimd's ingest door) and fetch from the delivery detail.

const (
	bfGitHubSecret = "gh-backfill-webhook-secret-01"
	bfGitHubToken  = "github_pat_backfill_standin_9f8e7d6c5b4a"
	bfGitHubHook   = "repos/acme/shop/hooks/7"
)

type bfGitHubEnv struct {
	*ingestEnv
	gh      *standin.GitHub
	target  *ingestTarget
	scanner *backfill.Scanner
	sleeps  *bfSleeps
	src     *sources.Source
	now     time.Time
}

func setupBackfillGitHub(t *testing.T, extra string) *bfGitHubEnv {
	t.Helper()
	return setupBackfillGitHubSource(t, "", extra)
}

// setupBackfillGitHubSource is setupBackfillGitHub with srcExtra added to
// the source (a key rule).
func setupBackfillGitHubSource(t *testing.T, srcExtra, extra string) *bfGitHubEnv {
	t.Helper()
	gh := standin.NewGitHub(t, bfGitHubToken, bfGitHubHook, bfGitHubSecret)
	target := newIngestTarget(t, nil)
	sources := `sources:
  gh-bf:
    tenant: acme
    provider: github
    secrets: ["` + bfGitHubSecret + `"]
    forward: {url: "` + target.srv.URL + `/webhook/gh", require_claim: false}` + srcExtra + `
    backfill: {credentials: ["${GH_EVENTS_TOKEN}"], base_url: "` + gh.URL + `", grace_seconds: 600, github: {hook: ` + bfGitHubHook + `}` + extra + `}
`
	e := setupIngest(t, sources, ingestOptions{dispatch: true, env: map[string]string{"GH_EVENTS_TOKEN": bfGitHubToken}})
	gh.IngestURL = e.base + "/ingest/gh-bf"
	src := e.inbox.Source("gh-bf")
	require.NotNil(t, src)
	sleeps := &bfSleeps{}
	now := time.Now().UTC().Truncate(time.Second)
	sc := &backfill.Scanner{Inbox: e.inbox, Log: zerolog.New(e.logs).Level(zerolog.DebugLevel), Sleep: sleeps.sleep,
		Now: func() time.Time { return now }}
	return &bfGitHubEnv{ingestEnv: e, gh: gh, target: target, scanner: sc, sleeps: sleeps, src: src, now: now}
}

func (b *bfGitHubEnv) delivery(guid string, age time.Duration, status int) standin.GitHubDelivery {
	payload := fmt.Sprintf(`{"action":"opened","number":%d,"pull_request":{"id":%d,"title":"fix %s"},"repository":{"full_name":"acme/shop"}}`,
		len(guid), len(guid)*7, guid)
	return standin.GitHubDelivery{GUID: guid, DeliveredAt: b.now.Add(-age), Event: "pull_request", Action: "opened",
		StatusCode: status, Payload: []byte(payload)}
}

// deliver posts d to the ingest door as GitHub does; form sends it as
// a form-encoded hook would (payload=<JSON>), other bytes than the
// delivery detail's JSON.
func (b *bfGitHubEnv) deliver(t *testing.T, d standin.GitHubDelivery, form bool) ingestReceipt {
	t.Helper()
	if form {
		d.Payload = []byte("payload=" + url.QueryEscape(string(d.Payload)))
	}
	body, h := b.gh.Signed(d)
	if form {
		h.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	var hs ingestHeaders
	for k := range h {
		hs = append(hs, [2]string{k, h.Get(k)})
	}
	a := b.send(t, "gh-bf", ingestDelivery{header: hs, body: body})
	require.Equal(t, 200, a.status, "%s", a.body)
	rs, _ := a.receipts(t)
	require.Len(t, rs, 1)
	return rs[0]
}

func (b *bfGitHubEnv) scan(t *testing.T) backfill.Scan {
	t.Helper()
	return b.runScan(t, b.scanner, b.src)
}

func (b *bfGitHubEnv) findings(t *testing.T) map[string]string {
	t.Helper()
	return b.backfillFindings(t, "gh-bf")
}

func (b *bfGitHubEnv) claimID(t *testing.T, guid string) string {
	t.Helper()
	return b.scalar(t, `SELECT id::text FROM claims WHERE tenant = 'acme' AND source = 'gh-bf' AND event_id = $1`, guid)
}

// TestBackfillGitHubRedeliver: deliveries GitHub logged and claimd never
// stored — one GitHub shows as 200 (answered by a proxy that lost it),
// one failed twice (two rows, one GUID) — are missed and redelivered
// through GitHub: the stand-in POSTs each signed delivery, with its GUID,
// to the ingest door, where it is received once and dispatched once; a
// delivery claimd has is not missed, one within the grace is not judged.
// The next scan sees them arrived.
func TestBackfillGitHubRedeliver(t *testing.T) {
	t.Parallel()
	b := setupBackfillGitHub(t, ", mode: redeliver")
	present := b.gh.Add(b.delivery("guid-present", 3*time.Hour, 200))
	lostOK := b.gh.Add(b.delivery("guid-lost-ok", 2*time.Hour, 200))
	failed := b.delivery("guid-failed", 100*time.Minute, 502)
	b.gh.Add(failed)
	failed.DeliveredAt = b.now.Add(-90 * time.Minute)
	b.gh.Add(failed)
	b.gh.Add(b.delivery("guid-young", time.Minute, 502))
	rc := b.deliver(t, present, false)
	require.Equal(t, "accepted", rc.Status)

	sc := b.scan(t)
	require.Equal(t, backfill.ResultOK, sc.Result, sc.Error)
	require.Equal(t, 2, sc.Missed)
	require.Equal(t, 2, sc.Redelivered)
	require.Zero(t, sc.Backfilled)
	require.Len(t, b.gh.Attempts(), 2)
	require.Equal(t, map[string]string{"guid-lost-ok": "redelivery_requested", "guid-failed": "redelivery_requested"}, b.findings(t))
	for _, guid := range []string{lostOK.GUID, failed.GUID} {
		id := b.claimID(t, guid)
		b.waitDispatchState(t, id, "dispatched")
		got := b.target.forInbox(id)
		require.Len(t, got, 1)
		require.Empty(t, got[0].header.Get(inbox.HeaderOrigin), "the provider's own delivery, through the normal door")
		require.Equal(t, "pull_request", got[0].header.Get("X-Github-Event"))
		require.Empty(t, got[0].header.Get("X-Hub-Signature-256"))
		require.Equal(t, []string{"received", "dispatched"}, b.deliveryLog(t, id))
		require.Empty(t, b.scalar(t, `SELECT COALESCE(origin, '') FROM claims WHERE id = $1`, id))
	}
	require.Equal(t, ingestCounts{claims: 3, inbox: 3, jobs: 3}, b.counts(t, "gh-bf"))

	sc2 := b.scan(t)
	require.Equal(t, backfill.ResultOK, sc2.Result, sc2.Error)
	require.Zero(t, sc2.Missed)
	require.Zero(t, sc2.Redelivered)
	require.Len(t, b.gh.Attempts(), 2)
	require.Equal(t, map[string]string{"guid-lost-ok": "arrived", "guid-failed": "arrived"}, b.findings(t))
}

// TestBackfillGitHubFetch: mode fetch stores the delivery detail's payload
// with its delivery headers (the signature left out) as an inbox event of
// origin backfill, dispatched once; the real delivery arriving afterwards,
// form-encoded (other bytes), is a duplicate, not a conflict.
func TestBackfillGitHubFetch(t *testing.T) {
	t.Parallel()
	b := setupBackfillGitHub(t, ", mode: fetch")
	lost := b.gh.Add(b.delivery("guid-fetch", 2*time.Hour, 504))
	sc := b.scan(t)
	require.Equal(t, backfill.ResultOK, sc.Result, sc.Error)
	require.Equal(t, 1, sc.Missed)
	require.Equal(t, 1, sc.Backfilled)
	require.Empty(t, b.gh.Attempts())
	id := b.claimID(t, lost.GUID)
	b.waitDispatchState(t, id, "dispatched")
	got := b.target.forInbox(id)
	require.Len(t, got, 1)
	require.Equal(t, "backfill", got[0].header.Get(inbox.HeaderOrigin))
	require.Equal(t, "pull_request", got[0].header.Get("X-Github-Event"))
	require.Equal(t, lost.GUID, got[0].header.Get(inbox.HeaderEventID))
	require.Empty(t, got[0].header.Get("X-Hub-Signature-256"))
	require.JSONEq(t, string(lost.Payload), string(got[0].body))
	stored := b.scalar(t, `SELECT headers::text FROM inbox_events WHERE claim_id = $1`, id)
	require.NotContains(t, strings.ToLower(stored), "x-hub-signature")

	require.Equal(t, "duplicate", b.deliver(t, lost, true).Status)
	require.Equal(t, "0", b.scalar(t, `SELECT conflict_count::text FROM claims WHERE id = $1`, id))
	require.Equal(t, []string{"received", "dispatched", "ingest_duplicate"}, b.deliveryLog(t, id))
	require.Equal(t, ingestCounts{claims: 1, inbox: 1, jobs: 1}, b.counts(t, "gh-bf"))
}

// TestBackfillGitHubPagesRateLimitRevoked: 7 deliveries over pages of 2
// are read through the Link header's cursor (4 pages); a 403 with
// Retry-After: 7 (GitHub's rate limit) is waited out, recorded, not
// slept; then a revoked token ends a scan credential_refused with nothing
// stored and the token in no log line or answer.
func TestBackfillGitHubPagesRateLimitRevoked(t *testing.T) {
	t.Parallel()
	b := setupBackfillGitHub(t, ", mode: report")
	b.gh.PageSize = 2
	for i := 0; i < 7; i++ {
		b.gh.Add(b.delivery(fmt.Sprintf("guid-page-%d", i), time.Duration(7-i)*time.Hour, 500))
	}
	var once sync.Once
	b.scanner.Obs = bfObs{page: func() { once.Do(func() { b.gh.FailNext429("7") }) }}
	sc := b.scan(t)
	require.Equal(t, backfill.ResultOK, sc.Result, sc.Error)
	require.Equal(t, 4, sc.Pages)
	require.Equal(t, 7, sc.Listed)
	require.Equal(t, 7, sc.Missed)
	require.Equal(t, []time.Duration{7 * time.Second}, b.sleeps.all())
	var cursors []string
	var statuses []int
	for _, r := range b.gh.Requests() {
		statuses = append(statuses, r.Status)
		cursors = append(cursors, strings.Join(r.Query["cursor"], ","))
	}
	require.Equal(t, []int{200, 403, 200, 200, 200}, statuses)
	require.Equal(t, "", cursors[0])
	require.Equal(t, cursors[1], cursors[2], "the limited page asked again")
	require.NotEqual(t, cursors[2], cursors[3])
	require.Equal(t, ingestCounts{}, b.counts(t, "gh-bf"))

	b.gh.Revoke()
	b.now = b.now.Add(time.Minute)
	sc2 := b.scan(t)
	require.Equal(t, backfill.ResultCredentialRefused, sc2.Result)
	require.Equal(t, backfill.ErrCredentialRefused.Error(), sc2.Error)
	require.Equal(t, ingestCounts{}, b.counts(t, "gh-bf"))
	ans, err := json.Marshal(sc2)
	require.NoError(t, err)
	for _, s := range []string{b.logs.String(), string(ans)} {
		require.NotContains(t, s, bfGitHubToken)
		require.NotContains(t, s, "Bad credentials")
	}
}

// TestBackfillGitHubKeyRule: with a key rule that reads the payload (the
// pull request's id) and a header (the event), a listed delivery is
// fetched before it is keyed (the list carries no body), then keyed by the
// rule exactly as its delivery was: the delivered one is not missed, the
// lost one is found under the rule's key.
func TestBackfillGitHubKeyRule(t *testing.T) {
	t.Parallel()
	b := setupBackfillGitHubSource(t, "\n    key: {fields: [\"/pull_request/id\"], headers: [\"X-GitHub-Event\"]}", ", mode: report")
	present := b.gh.Add(b.delivery("guid-rule-present", 3*time.Hour, 200))
	lost := b.gh.Add(b.delivery("guid-rule-lost-x", 2*time.Hour, 502))
	rc := b.deliver(t, present, false)
	require.Equal(t, "accepted", rc.Status)
	sc := b.scan(t)
	require.Equal(t, backfill.ResultOK, sc.Result, sc.Error)
	require.Equal(t, 1, sc.Missed)
	var id struct {
		PullRequest struct {
			ID int `json:"id"`
		} `json:"pull_request"`
	}
	require.NoError(t, json.Unmarshal(lost.Payload, &id))
	require.Equal(t, map[string]string{verify.JoinKey("pull_request", fmt.Sprint(id.PullRequest.ID)): "missed"}, b.findings(t))
	details := 0
	for _, r := range b.gh.Requests() {
		if strings.Count(r.Path, "/deliveries/") == 1 {
			details++
		}
	}
	require.Equal(t, 2, details, "each listed delivery fetched before it is keyed")
}

// bfCounts is a backfill.Observer that adds up what scans report, as the
// claimd_backfill_* counters do.
type bfCounts struct {
	mu        sync.Mutex
	missed    int
	recovered map[string]int
}

func (*bfCounts) Scanned(string, string, time.Time) {}
func (*bfCounts) ProviderRequest(string, string)    {}
func (c *bfCounts) Missed(_ string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.missed += n
}
func (c *bfCounts) Recovered(_, how string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.recovered == nil {
		c.recovered = map[string]int{}
	}
	c.recovered[how] += n
}

// TestBackfillGitHubStoppedScanCountsWhatItRecorded: a scan that stops
// part-way (the token may list deliveries but not redeliver them: 403)
// still reports the missed event it recorded, to the scan and to the
// metrics, and the event is not counted again when the next scan, with a
// token that may redeliver, finds it; the event the stopped scan never
// judged is counted then. Missed minus recovered ends at zero, so the
// missed-events alert clears.
func TestBackfillGitHubStoppedScanCountsWhatItRecorded(t *testing.T) {
	t.Parallel()
	b := setupBackfillGitHub(t, ", mode: redeliver")
	counts := &bfCounts{}
	b.scanner.Obs = counts
	b.gh.Add(b.delivery("guid-a", 3*time.Hour, 502))
	b.gh.Add(b.delivery("guid-b", 2*time.Hour, 502))
	b.gh.ReadOnly(true)

	sc := b.scan(t)
	require.Equal(t, backfill.ResultCredentialRefused, sc.Result)
	require.Equal(t, backfill.ErrCredentialRefused.Error(), sc.Error)
	require.NotContains(t, sc.Error, "Resource not accessible", "the provider's text is not passed on")
	require.Equal(t, 1, sc.Missed, "the event whose redelivery was refused is recorded missed")
	require.Zero(t, sc.Redelivered)
	require.Len(t, b.findings(t), 1)
	require.Equal(t, 1, counts.missed)
	require.Empty(t, counts.recovered)

	b.gh.ReadOnly(false)
	sc2 := b.scan(t)
	require.Equal(t, backfill.ResultOK, sc2.Result, sc2.Error)
	require.Equal(t, 1, sc2.Missed, "only the event the stopped scan never judged is new")
	require.Equal(t, 2, sc2.Redelivered)
	require.Equal(t, map[string]string{"guid-a": "redelivery_requested", "guid-b": "redelivery_requested"}, b.findings(t))
	require.Equal(t, 2, counts.missed, "each missed event counted once")
	require.Equal(t, map[string]int{"redelivered": 2}, counts.recovered)
}

// TestBackfillGitHubEndlessEmptyPages: a list whose every page is empty
// and links a next one (a broken or hostile server) ends the scan at
// backfill.max_pages: pages without items count too, so what a provider's
// answers can make a scan request is bounded. The scan is partial: it
// reached no delivery, so the whole range is its backlog, resumed at the
// list position it stopped at (path and query only), and the next scan
// (the new part first, from the top) is bounded the same way.
func TestBackfillGitHubEndlessEmptyPages(t *testing.T) {
	t.Parallel()
	b := setupBackfillGitHub(t, ", mode: report, max_pages: 5")
	b.gh.Endless(true)
	sc := b.scan(t)
	require.Equal(t, backfill.ResultPartial, sc.Result, sc.Error)
	require.Empty(t, sc.Error)
	require.Contains(t, sc.Notes, "backfill.max_pages (5)")
	require.Equal(t, 5, sc.Pages)
	require.Len(t, b.gh.Requests(), 5, "no page is asked past max_pages")
	require.NotNil(t, sc.BacklogFrom)
	require.True(t, sc.BacklogFrom.Equal(*sc.RangeStart) && sc.BacklogTo.Equal(*sc.RangeEnd), "nothing reached: all of it is left")
	cursor := b.scalar(t, `SELECT backlog_cursor FROM backfill_state WHERE source = 'gh-bf'`)
	require.True(t, strings.HasPrefix(cursor, "/repos/"), "path and query only: %s", cursor)
	require.Contains(t, cursor, "cursor=")
	sc2 := b.scan(t)
	require.Equal(t, backfill.ResultPartial, sc2.Result, sc2.Error)
	reqs := b.gh.Requests()
	require.Len(t, reqs, 10)
	require.Empty(t, reqs[5].Query["cursor"], "the new part is listed first, from the top")
	require.True(t, sc2.BacklogFrom.Equal(*sc.BacklogFrom), "the backlog still reaches back to the window's start")
	require.Empty(t, b.findings(t))
}
