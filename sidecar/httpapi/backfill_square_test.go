package httpapi_test

import (
	"encoding/json"
	"fmt"
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

// Gap detection for Square: SearchEvents (a cursor page repeats the
// query), events fetched from the search, the late notification a
// duplicate.

const (
	bfSquareKey     = "sq-signature-key-backfill-01"
	bfSquareToken   = "EAAAl_backfill_standin_personal_token_77"
	bfSquareURL     = "https://claimd.example/ingest/sq-bf"
	bfSquareVersion = "2025-01-23"
)

type bfSquareEnv struct {
	*ingestEnv
	sq      *standin.Square
	target  *ingestTarget
	scanner *backfill.Scanner
	sleeps  *bfSleeps
	src     *sources.Source
	now     time.Time
}

func setupBackfillSquare(t *testing.T, extra string) *bfSquareEnv {
	t.Helper()
	sq := standin.NewSquare(t, bfSquareToken, bfSquareVersion)
	target := newIngestTarget(t, nil)
	sources := `sources:
  sq-bf:
    tenant: acme
    provider: square
    secrets: ["` + bfSquareKey + `"]
    options: {notification_url: "` + bfSquareURL + `"}
    forward: {url: "` + target.srv.URL + `/webhook/square", require_claim: false}
    backfill: {credentials: ["${SQ_TOKEN}"], base_url: "` + sq.URL + `", window_hours: 72, grace_seconds: 600, square: {version: "` + bfSquareVersion + `"}` + extra + `}
`
	e := setupIngest(t, sources, ingestOptions{dispatch: true, env: map[string]string{"SQ_TOKEN": bfSquareToken}})
	src := e.inbox.Source("sq-bf")
	require.NotNil(t, src)
	sleeps := &bfSleeps{}
	now := time.Now().UTC().Truncate(time.Second)
	sc := &backfill.Scanner{Inbox: e.inbox, Log: zerolog.New(e.logs).Level(zerolog.DebugLevel), Sleep: sleeps.sleep,
		Now: func() time.Time { return now }}
	return &bfSquareEnv{ingestEnv: e, sq: sq, target: target, scanner: sc, sleeps: sleeps, src: src, now: now}
}

func (b *bfSquareEnv) event(id string, age time.Duration) standin.SquareEvent {
	return standin.SquareEvent{EventID: id, Type: "payment.updated", MerchantID: "MLX1", LocationID: "L1",
		CreatedAt: b.now.Add(-age), DataType: "payment", DataID: "pay_" + id,
		Object: map[string]any{"payment": map[string]any{"id": "pay_" + id, "status": "COMPLETED", "amount_money": map[string]any{"amount": 4200, "currency": "EUR"}}}}
}

func (b *bfSquareEnv) deliver(t *testing.T, ev standin.SquareEvent) ingestReceipt {
	t.Helper()
	body, sig := ev.Notification(bfSquareURL, bfSquareKey)
	a := b.send(t, "sq-bf", ingestDelivery{header: ingestHeaders{{"Content-Type", "application/json"},
		{verify.SquareSignatureHeader, sig}}, body: body})
	require.Equal(t, 200, a.status, "%s", a.body)
	rs, _ := a.receipts(t)
	require.Len(t, rs, 1)
	return rs[0]
}

func (b *bfSquareEnv) scan(t *testing.T) backfill.Scan {
	t.Helper()
	return b.runScan(t, b.scanner, b.src)
}

func (b *bfSquareEnv) findings(t *testing.T) map[string]string {
	t.Helper()
	return b.backfillFindings(t, "sq-bf")
}

// TestBackfillSquareMissedEventFetchedOnce: an event SearchEvents returns
// and the inbox lacks is stored from the search and dispatched once; one
// in the inbox is not missed, one within the grace not judged; the
// notification arriving afterwards (other bytes: no location_id, its own
// field order) is a duplicate, not a conflict, and the finding becomes
// late_real.
func TestBackfillSquareMissedEventFetchedOnce(t *testing.T) {
	t.Parallel()
	b := setupBackfillSquare(t, ", mode: auto")
	present, lost, young := b.event("ev-present", 3*time.Hour), b.event("ev-lost", 2*time.Hour), b.event("ev-young", time.Minute)
	b.sq.Add(present, lost, young)
	require.Equal(t, "accepted", b.deliver(t, present).Status)

	sc := b.scan(t)
	require.Equal(t, backfill.ResultOK, sc.Result, sc.Error)
	require.Equal(t, 2, sc.Listed)
	require.Equal(t, 1, sc.Missed)
	require.Equal(t, 1, sc.Backfilled)
	require.Equal(t, map[string]string{"ev-lost": "fetched"}, b.findings(t))
	var q struct {
		Filter struct {
			CreatedAt struct {
				StartAt time.Time `json:"start_at"`
				EndAt   time.Time `json:"end_at"`
			} `json:"created_at"`
		} `json:"filter"`
	}
	reqs := b.sq.Requests()
	require.Len(t, reqs, 1)
	require.NoError(t, json.Unmarshal(reqs[0].Query, &q))
	require.True(t, q.Filter.CreatedAt.StartAt.Equal(b.now.Add(-72*time.Hour)))
	require.True(t, q.Filter.CreatedAt.EndAt.Equal(b.now.Add(-600*time.Second)))

	id := b.scalar(t, `SELECT id::text FROM claims WHERE source = 'sq-bf' AND event_id = 'ev-lost'`)
	b.waitDispatchState(t, id, "dispatched")
	got := b.target.forInbox(id)
	require.Len(t, got, 1)
	require.Equal(t, "backfill", got[0].header.Get(inbox.HeaderOrigin))
	require.JSONEq(t, string(lost.JSON()), string(got[0].body))

	require.Equal(t, "duplicate", b.deliver(t, lost).Status)
	require.Equal(t, "0", b.scalar(t, `SELECT conflict_count::text FROM claims WHERE id = $1`, id))
	require.Equal(t, ingestCounts{claims: 2, inbox: 2, jobs: 2}, b.counts(t, "sq-bf"))
	sc2 := b.scan(t)
	require.Equal(t, backfill.ResultOK, sc2.Result)
	require.Zero(t, sc2.Missed)
	require.Equal(t, map[string]string{"ev-lost": "late_real"}, b.findings(t))
}

// TestBackfillSquarePagesRateLimitRevoked: 7 events over pages of 2 (4
// pages), each later page repeating the query with the cursor (the
// stand-in refuses one that does not); a 429 RATE_LIMITED with
// Retry-After: 7 waited (recorded, not slept); then a revoked token ends
// a scan credential_refused, nothing stored, the token nowhere.
func TestBackfillSquarePagesRateLimitRevoked(t *testing.T) {
	t.Parallel()
	b := setupBackfillSquare(t, ", mode: report")
	b.sq.PageSize = 2
	for i := 0; i < 7; i++ {
		b.sq.Add(b.event(fmt.Sprintf("ev-page-%d", i), time.Duration(i+1)*time.Hour))
	}
	var once sync.Once
	b.scanner.Obs = bfObs{page: func() { once.Do(func() { b.sq.FailNext429("7") }) }}
	sc := b.scan(t)
	require.Equal(t, backfill.ResultOK, sc.Result, sc.Error)
	require.Equal(t, 4, sc.Pages)
	require.Equal(t, 7, sc.Missed)
	require.Equal(t, []time.Duration{7 * time.Second}, b.sleeps.all())
	var cursors []string
	var statuses []int
	for _, r := range b.sq.Requests() {
		statuses = append(statuses, r.Status)
		cursors = append(cursors, r.Cursor)
		require.JSONEq(t, string(b.sq.Requests()[0].Query), string(r.Query), "every page repeats the query")
	}
	require.Equal(t, []int{200, 429, 200, 200, 200}, statuses)
	require.Equal(t, []string{"", "cur-2", "cur-2", "cur-4", "cur-6"}, cursors)
	require.Equal(t, ingestCounts{}, b.counts(t, "sq-bf"))

	b.sq.Revoke()
	sc2 := b.scan(t)
	require.Equal(t, backfill.ResultCredentialRefused, sc2.Result)
	ans, err := json.Marshal(sc2)
	require.NoError(t, err)
	for _, s := range []string{b.logs.String(), string(ans)} {
		require.NotContains(t, s, bfSquareToken)
		require.NotContains(t, s, "AUTHENTICATION_ERROR")
	}
	require.Equal(t, ingestCounts{}, b.counts(t, "sq-bf"))
}
