package httpapi_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/backfill"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/standin"
	"github.com/idempotent-claim/idempotent-claim/sidecar/metrics"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// Tests of gap detection and backfill (package backfill) through the real
// ingest door, inbox and dispatcher on PostgreSQL, against the providers'
// documented list APIs played by the stand-ins of internal/standin.

const (
	bfStripeSecret = "whsec_backfill_test_0001"
	bfStripeKey    = "rk_test_backfill_standin_4f2a9c1e7b"
)

// bfSleeps records the scanner's waits instead of waiting.
type bfSleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *bfSleeps) sleep(_ context.Context, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.d = append(s.d, d)
	return nil
}

func (s *bfSleeps) all() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

type bfStripeEnv struct {
	*ingestEnv
	sd      *standin.Stripe
	target  *ingestTarget
	scanner *backfill.Scanner
	sleeps  *bfSleeps
	src     *sources.Source
	now     time.Time
}

// setupBackfillStripe runs claimd's ingest with a stripe source whose
// backfill lists the stand-in; extra is added to its backfill mapping.
func setupBackfillStripe(t *testing.T, extra string) *bfStripeEnv {
	t.Helper()
	return setupBackfillStripeWith(t, extra, nil)
}

// setupBackfillStripeWith is setupBackfillStripe with the scan job's
// worker registered and the server's metrics m (nil: none, and no worker).
func setupBackfillStripeWith(t *testing.T, extra string, m *metrics.Metrics) *bfStripeEnv {
	t.Helper()
	return setupBackfillStripeSource(t, "", extra, m)
}

// setupBackfillStripeSource is setupBackfillStripeWith with srcExtra
// added to the stripe-bf source (a key rule).
func setupBackfillStripeSource(t *testing.T, srcExtra, extra string, m *metrics.Metrics) *bfStripeEnv {
	t.Helper()
	sd := standin.NewStripe(t, bfStripeKey)
	target := newIngestTarget(t, nil)
	sources := `sources:
  stripe-bf:
    tenant: acme
    provider: stripe
    secrets: ["` + bfStripeSecret + `"]
    forward: {url: "` + target.srv.URL + `/webhook/stripe", require_claim: false}` + srcExtra + `
    backfill: {credentials: ["${STRIPE_EVENTS_KEY}"], base_url: "` + sd.URL + `", window_hours: 72, grace_seconds: 600` + extra + `}
  stripe-other:
    tenant: other
    provider: stripe
    secrets: ["` + bfStripeSecret + `"]
    forward: {url: "` + target.srv.URL + `/webhook/other"}
    backfill: {credentials: ["${STRIPE_EVENTS_KEY}"], base_url: "` + sd.URL + `", interval_minutes: 0}
`
	sleeps := &bfSleeps{}
	now := time.Now().UTC().Truncate(time.Second)
	sc := &backfill.Scanner{Sleep: sleeps.sleep, Now: func() time.Time { return now }}
	o := ingestOptions{dispatch: true, env: map[string]string{"STRIPE_EVENTS_KEY": bfStripeKey}}
	if m != nil {
		o.workers, o.metrics = backfill.Workers(sc), m
		sc.Obs = m.Backfill()
	}
	e := setupIngest(t, sources, o)
	src := e.inbox.Source("stripe-bf")
	require.NotNil(t, src)
	require.NotNil(t, src.Backfill)
	sc.Inbox, sc.Log = e.inbox, zerolog.New(e.logs).Level(zerolog.DebugLevel)
	return &bfStripeEnv{ingestEnv: e, sd: sd, target: target, scanner: sc, sleeps: sleeps, src: src, now: now}
}

func (b *bfStripeEnv) event(id string, age time.Duration) standin.StripeEvent {
	return standin.StripeEvent{ID: id, Type: "invoice.paid", Created: b.now.Add(-age), APIVersion: "2024-06-20",
		Object: map[string]any{"id": "in_" + id, "object": "invoice", "amount_paid": 4200}}
}

// deliver posts ev to the ingest door as Stripe's webhook would, rendered
// at apiVersion ("" its own).
func (b *bfStripeEnv) deliver(t *testing.T, ev standin.StripeEvent, apiVersion string) ingestReceipt {
	t.Helper()
	body, sig := ev.SignedDelivery(bfStripeSecret, time.Now(), apiVersion)
	a := b.send(t, "stripe-bf", ingestDelivery{header: ingestHeaders{{"Content-Type", "application/json"},
		{verify.StripeSignatureHeader, sig}}, body: body})
	require.Equal(t, 200, a.status, "%s", a.body)
	rs, _ := a.receipts(t)
	require.Len(t, rs, 1)
	return rs[0]
}

// runScan runs one scan of src as the API would start it; the scan's own
// failures are in its result, so an error is the database's.
func (e *ingestEnv) runScan(t *testing.T, s *backfill.Scanner, src *sources.Source) backfill.Scan {
	t.Helper()
	sc, err := s.Run(e.ctx, src, backfill.Trigger{Kind: backfill.TriggerAPI, Actor: "test"})
	require.NoError(t, err)
	return sc
}

// backfillFindings is the backfill_events of scope (tenant acme): event id → state.
func (e *ingestEnv) backfillFindings(t *testing.T, scope string) map[string]string {
	t.Helper()
	rows, err := e.pool.Query(e.ctx, `SELECT event_id, state FROM backfill_events WHERE tenant = 'acme' AND scope = $1`, scope)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, st string
		require.NoError(t, rows.Scan(&id, &st))
		out[id] = st
	}
	require.NoError(t, rows.Err())
	return out
}

func (b *bfStripeEnv) scan(t *testing.T) backfill.Scan {
	t.Helper()
	return b.runScan(t, b.scanner, b.src)
}

func (b *bfStripeEnv) findings(t *testing.T) map[string]string {
	t.Helper()
	return b.backfillFindings(t, "stripe-bf")
}

func (b *bfStripeEnv) claimOf(t *testing.T, eventID string) (id, origin string, conflicts int) {
	t.Helper()
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT id::text, COALESCE(origin, ''), conflict_count FROM claims
		WHERE tenant = 'acme' AND source = 'stripe-bf' AND event_id = $1`, eventID).Scan(&id, &origin, &conflicts))
	return id, origin, conflicts
}

// TestBackfillStripeMissedEventFetchedOnce: an event Stripe lists and the
// inbox lacks is missed, stored from the list (origin backfill) and
// dispatched once with X-Idempotency-Origin: backfill; an event already in
// the inbox is not missed; an event younger than the grace or older than
// the window is not asked for (the stand-in checks created[gte] and
// created[lt]); the real signed delivery arriving afterwards is a
// duplicate, also when Stripe rendered it at another API version (no
// conflict), and is not dispatched again; a second scan finds nothing new.
func TestBackfillStripeMissedEventFetchedOnce(t *testing.T) {
	t.Parallel()
	b := setupBackfillStripe(t, ", mode: fetch")
	present := b.event("evt_present", 3*time.Hour)
	lostSame := b.event("evt_lost_same", 2*time.Hour)
	lostOther := b.event("evt_lost_other", 90*time.Minute)
	young := b.event("evt_young", time.Minute)
	old := b.event("evt_old", 100*time.Hour)
	b.sd.Add(present, lostSame, lostOther, young, old)
	rc := b.deliver(t, present, "")
	require.Equal(t, "accepted", rc.Status)
	b.waitDispatchState(t, rc.ClaimID, "dispatched")

	sc := b.scan(t)
	require.Equal(t, backfill.ResultOK, sc.Result, sc.Error)
	require.Equal(t, 3, sc.Listed, "present and the two lost: young and old are outside the range")
	require.Equal(t, 2, sc.Missed)
	require.Equal(t, 2, sc.Backfilled)
	require.Equal(t, map[string]string{"evt_lost_same": "fetched", "evt_lost_other": "fetched"}, b.findings(t))
	reqs := b.sd.Requests()
	require.Len(t, reqs, 1)
	require.Equal(t, []string{itoa64(b.now.Add(-72 * time.Hour).Unix())}, reqs[0].Query["created[gte]"])
	require.Equal(t, []string{itoa64(b.now.Add(-600 * time.Second).Unix())}, reqs[0].Query["created[lt]"])
	require.Equal(t, "Bearer "+bfStripeKey, reqs[0].Authorization)

	for _, id := range []string{"evt_lost_same", "evt_lost_other"} {
		cid, origin, _ := b.claimOf(t, id)
		require.Equal(t, "backfill", origin)
		b.waitDispatchState(t, cid, "dispatched")
		got := b.target.forInbox(cid)
		require.Len(t, got, 1, "dispatched once")
		require.Equal(t, "backfill", got[0].header.Get(inbox.HeaderOrigin))
		require.Equal(t, id, got[0].header.Get(inbox.HeaderEventID))
		var ev map[string]any
		require.NoError(t, json.Unmarshal(got[0].body, &ev))
		require.Equal(t, id, ev["id"])
		require.Equal(t, []string{"received", "dispatched"}, b.deliveryLog(t, cid))
		require.Contains(t, b.scalar(t, `SELECT detail FROM claim_deliveries WHERE claim_id = $1 AND outcome = 'received'`, cid),
			"backfilled from provider event list (scan ")
	}
	present0 := b.target.forInbox(rc.ClaimID)
	require.Len(t, present0, 1, "the delivered event is not dispatched again")
	require.Empty(t, present0[0].header.Get(inbox.HeaderOrigin))

	// The real deliveries arrive late: duplicates, one of them rendered
	// at the endpoint's pinned API version (other bytes).
	require.Equal(t, "duplicate", b.deliver(t, lostSame, "").Status)
	require.Equal(t, "duplicate", b.deliver(t, lostOther, "2020-08-27").Status)
	for _, id := range []string{"evt_lost_same", "evt_lost_other"} {
		cid, _, conflicts := b.claimOf(t, id)
		require.Zero(t, conflicts, "another rendering of one event is no conflict")
		require.Equal(t, []string{"received", "dispatched", "ingest_duplicate"}, b.deliveryLog(t, cid))
	}
	c := b.counts(t, "stripe-bf")
	require.Equal(t, ingestCounts{claims: 3, inbox: 3, jobs: 3, conflicts: 0}, c)

	sc2 := b.scan(t)
	require.Equal(t, backfill.ResultOK, sc2.Result)
	require.Zero(t, sc2.Missed)
	require.Zero(t, sc2.Backfilled)
	require.Equal(t, ingestCounts{claims: 3, inbox: 3, jobs: 3, conflicts: 0}, b.counts(t, "stripe-bf"))
	require.Equal(t, map[string]string{"evt_lost_same": "late_real", "evt_lost_other": "late_real"}, b.findings(t),
		"the real deliveries came late")
	require.Empty(t, b.sleeps.all())
}

// TestBackfillStripePagesAndRateLimit: a list of 7 events over pages of 2
// is read to its end through starting_after (4 pages), each event judged
// once; a 429 with Retry-After: 7 on the second page is waited out (the
// recorded wait is 7 s, nothing really sleeps) and the page asked again.
// Mode report stores nothing.
func TestBackfillStripePagesAndRateLimit(t *testing.T) {
	t.Parallel()
	b := setupBackfillStripe(t, ", mode: report")
	b.sd.PageSize = 2
	for i := 0; i < 7; i++ {
		b.sd.Add(b.event("evt_page_"+string(rune('a'+i)), time.Duration(i+1)*time.Hour))
	}
	var once sync.Once
	b.scanner.Obs = bfObs{page: func() { once.Do(func() { b.sd.FailNext429("7") }) }}
	sc := b.scan(t)
	require.Equal(t, backfill.ResultOK, sc.Result, sc.Error)
	require.Equal(t, 4, sc.Pages)
	require.Equal(t, 7, sc.Listed)
	require.Equal(t, 7, sc.Missed)
	require.Zero(t, sc.Backfilled)
	require.Equal(t, []time.Duration{7 * time.Second}, b.sleeps.all())
	reqs := b.sd.Requests()
	var afters []string
	statuses := []int{}
	for _, r := range reqs {
		statuses = append(statuses, r.Status)
		afters = append(afters, strings.Join(r.Query["starting_after"], ","))
	}
	require.Equal(t, []int{200, 429, 200, 200, 200}, statuses)
	require.Equal(t, []string{"", "evt_page_b", "evt_page_b", "evt_page_d", "evt_page_f"}, afters)
	require.Len(t, b.findings(t), 7)
	for _, st := range b.findings(t) {
		require.Equal(t, "missed", st)
	}
	require.Equal(t, ingestCounts{}, b.counts(t, "stripe-bf"), "report stores nothing")
}

// bfObs calls page after each successful provider request.
type bfObs struct{ page func() }

func (bfObs) Scanned(string, string, time.Time) {}
func (bfObs) Missed(string, int)                {}
func (bfObs) Recovered(string, string, int)     {}
func (o bfObs) ProviderRequest(_, class string) {
	if class == "2xx" && o.page != nil {
		o.page()
	}
}

// TestBackfillStripeRevokedKey: a revoked key (401, whose body quotes part
// of it) ends the scan credential_refused with a fixed text; nothing is
// recorded or stored, and the key appears in no log line and no answer.
func TestBackfillStripeRevokedKey(t *testing.T) {
	t.Parallel()
	b := setupBackfillStripe(t, ", mode: fetch")
	b.sd.Add(b.event("evt_unseen", 2*time.Hour))
	b.sd.Revoke()
	sc := b.scan(t)
	require.Equal(t, backfill.ResultCredentialRefused, sc.Result)
	require.Equal(t, backfill.ErrCredentialRefused.Error(), sc.Error)
	require.Empty(t, b.findings(t))
	require.Equal(t, ingestCounts{}, b.counts(t, "stripe-bf"))
	ans, err := json.Marshal(sc)
	require.NoError(t, err)
	logs := b.logs.String()
	for _, part := range []string{bfStripeKey, bfStripeKey[:8], bfStripeKey[len(bfStripeKey)-4:], "Invalid API Key"} {
		require.NotContains(t, logs, part)
		require.NotContains(t, string(ans), part)
	}
	require.Contains(t, logs, "req_standin0001", "the provider's request id is logged")
	require.Equal(t, "credential_refused", b.scalar(t, `SELECT result FROM backfill_scans WHERE id = $1`, sc.ID))
}

func itoa64(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// TestBackfillAPIAndSchedule: POST /v1/sources/{source}/backfill/scans
// queues the scan job, which a dispatching replica runs (River, unique
// per source); GET …/scans and …/events show its result and findings;
// another tenant's source is 404 and a bad mode or state is named. The
// schedule queues a scan when the source's next one is due, not before.
// The metrics count the scan, the missed and the recovered events.
func TestBackfillAPIAndSchedule(t *testing.T) {
	t.Parallel()
	m := metrics.New(nil)
	b := setupBackfillStripeWith(t, ", mode: auto, interval_minutes: 15", m)
	b.sd.Add(b.event("evt_api_lost", 2*time.Hour))

	a := b.apiPost(t, "/v1/sources/stripe-bf/backfill/scans", `{"mode":"fetch"}`)
	require.Equal(t, 202, a.status, "%s", a.body)
	var started struct {
		Scan           backfill.Scan `json:"scan"`
		AlreadyRunning bool          `json:"already_running"`
	}
	require.NoError(t, json.Unmarshal(a.body, &started))
	require.Positive(t, started.Scan.ID)
	require.False(t, started.AlreadyRunning)
	var scans struct {
		Scans []backfill.Scan `json:"scans"`
	}
	b.eventually(t, "the API's scan finished", func() bool {
		r := b.api(t, "GET", "/v1/sources/stripe-bf/backfill/scans")
		require.Equal(t, 200, r.status, "%s", r.body)
		require.NoError(t, json.Unmarshal(r.body, &scans))
		return len(scans.Scans) == 1 && scans.Scans[0].Result != backfill.ResultRunning &&
			scans.Scans[0].Result != backfill.ResultQueued
	})
	sc := scans.Scans[0]
	require.Equal(t, started.Scan.ID, sc.ID, "the scan answered at once is the scan that ran")
	require.Equal(t, backfill.ResultOK, sc.Result, sc.Error)
	require.Equal(t, "api", sc.Trigger)
	require.Equal(t, "fetch", sc.Mode)
	require.NotEmpty(t, sc.Actor, "the key prefix")
	require.Equal(t, 1, sc.Missed)
	require.Equal(t, 1, sc.Backfilled)

	r := b.api(t, "GET", "/v1/sources/stripe-bf/backfill/events?state=fetched")
	require.Equal(t, 200, r.status)
	var evs struct {
		Events []backfill.Finding `json:"events"`
	}
	require.NoError(t, json.Unmarshal(r.body, &evs))
	require.Len(t, evs.Events, 1)
	require.Equal(t, "evt_api_lost", evs.Events[0].EventID)
	require.NotEmpty(t, evs.Events[0].ClaimID)
	b.waitDispatchState(t, evs.Events[0].ClaimID, "dispatched")
	require.Len(t, b.target.forInbox(evs.Events[0].ClaimID), 1)
	r = b.api(t, "GET", "/v1/sources/stripe-bf/backfill/events?state=missed")
	require.NoError(t, json.Unmarshal(r.body, &evs))
	require.Empty(t, evs.Events)

	for _, tc := range []struct {
		method, path, body string
		status             int
		field              string
	}{
		{"GET", "/v1/sources/stripe-other/backfill/scans", "", 404, ""},
		{"POST", "/v1/sources/stripe-other/backfill/scans", "", 404, ""},
		{"GET", "/v1/sources/stripe-other/backfill/events", "", 404, ""},
		{"GET", "/v1/sources/nope/backfill/scans", "", 404, ""},
		{"POST", "/v1/sources/stripe-bf/backfill/scans", `{"mode":"redeliver"}`, 422, "mode"},
		{"POST", "/v1/sources/stripe-bf/backfill/scans", `{"mode":"<script>"}`, 422, "mode"},
		{"GET", "/v1/sources/stripe-bf/backfill/events?state=%3Cscript%3E", "", 422, "state"},
	} {
		var got ingestAnswer
		if tc.method == "POST" {
			got = b.apiPost(t, tc.path, tc.body)
		} else {
			got = b.api(t, tc.method, tc.path)
		}
		require.Equal(t, tc.status, got.status, "%s %s: %s", tc.method, tc.path, got.body)
		require.NotContains(t, string(got.body), "script", "nothing of the input echoed")
		if tc.field != "" {
			require.Contains(t, string(got.body), `"field":"`+tc.field+`"`)
		}
	}

	// The schedule: nothing due right after the scan (interval 15 min),
	// one scan queued once it is due.
	n, err := backfill.Schedule(b.ctx, b.inbox, time.Now())
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = backfill.Schedule(b.ctx, b.inbox, time.Now().Add(16*time.Minute))
	require.NoError(t, err)
	require.Equal(t, 1, n, "stripe-bf is due; stripe-other scans on demand only (interval 0)")
	b.eventually(t, "the scheduled scan finished", func() bool {
		return b.scalar(t, `SELECT count(*)::text FROM backfill_scans WHERE source = 'stripe-bf' AND trigger = 'schedule' AND result NOT IN ('queued', 'running')`) == "1"
	})

	// Retention: scans finished before the cut go, with their findings.
	purged, err := backfill.Purge(b.ctx, b.pool, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Zero(t, purged)
	purged, err = backfill.Purge(b.ctx, b.pool, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, 2, purged)
	require.Equal(t, "0", b.scalar(t, `SELECT count(*)::text FROM backfill_events WHERE source = 'stripe-bf'`))

	mfs, err := m.Registry.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, mm := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range mm.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			if c := mm.GetCounter(); c != nil {
				got[key] = c.GetValue()
			}
		}
	}
	require.Equal(t, 2.0, got["claimd_backfill_scans_total,result=ok,source=stripe-bf"])
	require.Equal(t, 1.0, got["claimd_backfill_missed_total,source=stripe-bf"])
	require.Equal(t, 1.0, got["claimd_backfill_recovered_total,how=fetched,source=stripe-bf"])
	require.GreaterOrEqual(t, got["claimd_backfill_provider_requests_total,code_class=2xx,source=stripe-bf"], 2.0)
}

// TestBackfillStripeKeyRule: with the source's own key rule (the invoice
// and the event type instead of the event id), a listed event is keyed by
// that rule, exactly as its delivery: the one delivered is not missed,
// the lost one is stored under the rule's key, and its real delivery
// afterwards is a duplicate of it.
func TestBackfillStripeKeyRule(t *testing.T) {
	t.Parallel()
	b := setupBackfillStripeSource(t, "\n    key: {fields: [\"/data/object/id\", \"/type\"]}", ", mode: fetch", nil)
	present, lost := b.event("evt_rule_present", 3*time.Hour), b.event("evt_rule_lost", 2*time.Hour)
	b.sd.Add(present, lost)
	rc := b.deliver(t, present, "")
	require.Equal(t, "accepted", rc.Status)
	require.Equal(t, verify.JoinKey("in_evt_rule_present", "invoice.paid"), rc.EventID)
	sc := b.scan(t)
	require.Equal(t, backfill.ResultOK, sc.Result, sc.Error)
	require.Equal(t, 1, sc.Missed)
	require.Equal(t, 1, sc.Backfilled)
	key := verify.JoinKey("in_evt_rule_lost", "invoice.paid")
	require.Equal(t, map[string]string{key: "fetched"}, b.findings(t))
	late := b.deliver(t, lost, "2020-08-27")
	require.Equal(t, "duplicate", late.Status)
	require.Equal(t, key, late.EventID)
	require.Equal(t, ingestCounts{claims: 2, inbox: 2, jobs: 2}, b.counts(t, "stripe-bf"))
}

// TestBackfillStripeAllowedEventTypes: a listed event of a type the
// source's allowed_event_types leaves out is not missed (its delivery
// would have been filtered too): the verifier's own filter applies.
func TestBackfillStripeAllowedEventTypes(t *testing.T) {
	t.Parallel()
	b := setupBackfillStripeSource(t, "\n    allowed_event_types: [\"customer.*\"]", ", mode: fetch", nil)
	inv := b.event("evt_filtered", 2*time.Hour)
	cus := b.event("evt_customer", 2*time.Hour)
	cus.Type = "customer.created"
	b.sd.Add(inv, cus)
	sc := b.scan(t)
	require.Equal(t, backfill.ResultOK, sc.Result, sc.Error)
	require.Equal(t, 2, sc.Listed)
	require.Equal(t, 1, sc.Missed)
	require.Equal(t, map[string]string{"evt_customer": "fetched"}, b.findings(t))
	require.NotContains(t, b.logs.String(), "could not be keyed", "a filtered type is no failure")
}
