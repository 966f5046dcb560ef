package httpapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Case B21: a key outlives its payload. A Standard Webhooks sender (Svix
// keeps messages 90 days and lets the sender resend them) resends a message
// after the payload retention purged it: the kept key answers duplicate
// with the same claim id and is not dispatched again; the workflow's claim
// is a duplicate with its result_ref; a resend with another payload is a
// conflict. After the key retention the key is gone and a resend is a new
// event (documented).

const retentionSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

const retentionSources = `
sources:
  svix:
    tenant: acme
    provider: standard-webhooks
    secrets: ["` + retentionSecret + `"]
    retention_days: 30
    forward: {url: "${TARGET_URL}", backoff_base_seconds: 1, backoff_cap_seconds: 1}
`

// svixMessage signs body as message id with a fresh timestamp, as a
// sender's resend does.
func svixMessage(t *testing.T, id string, body []byte) ingestDelivery {
	t.Helper()
	ts := signNow()
	sig, err := verifytest.StandardWebhooks(retentionSecret, id, ts, body)
	require.NoError(t, err)
	return ingestDelivery{header: jsonHeaders("webhook-id", id, "webhook-timestamp", strconv.FormatInt(ts, 10),
		"webhook-signature", sig), body: body}
}

// claimAPI posts a JSON body to the claims API and decodes the answer.
func claimAPI(t *testing.T, base, path string, body any) (int, map[string]any) {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(b))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+ingestAPIKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out
}

// retentionEnv is a sidecar whose target is a workflow: it claims the
// forwarded event with its body as payload, runs the effect (counted),
// completes with result_ref "refund-<n>" and answers status(n).
type retentionEnv struct {
	*ingestEnv
	target  *ingestTarget
	effects atomic.Int32
	ledger  *claim.Ledger
}

func setupRetention(t *testing.T, status func(n int) int) *retentionEnv {
	t.Helper()
	var base atomic.Value
	r := &retentionEnv{}
	r.target = newIngestTarget(t, func(n int) (int, http.Header) { return status(n), nil })
	r.target.mu.Lock()
	r.target.before = func(n int, req *http.Request) {
		var payload json.RawMessage
		if json.Unmarshal(r.target.requests()[n-1].body, &payload) != nil {
			return
		}
		code, c := claimAPI(t, base.Load().(string), "/v1/claims", map[string]any{"source": req.Header.Get(inbox.HeaderSource),
			"event_id": req.Header.Get(inbox.HeaderEventID), "payload": payload})
		if code != http.StatusOK || c["outcome"] != "won" {
			return
		}
		r.effects.Add(1)
		claimAPI(t, base.Load().(string), "/v1/claims/"+c["claim_id"].(string)+"/complete",
			map[string]any{"claim_token": c["claim_token"], "result_ref": "refund-" + strconv.Itoa(int(r.effects.Load()))})
	}
	r.target.mu.Unlock()
	env := map[string]string{"TARGET_URL": r.target.srv.URL}
	r.ingestEnv = setupIngest(t, retentionSources, ingestOptions{dispatch: true, env: env})
	base.Store(r.base)
	cfg, err := sources.Parse([]byte(retentionSources), func(k string) string { return env[k] })
	require.NoError(t, err)
	r.ledger, err = claim.New(r.pool, claim.Config{Policies: claim.Policies{BySource: cfg.Policies}})
	require.NoError(t, err)
	return r
}

// age moves a record's last change back by d, as if d had passed.
func (r *retentionEnv) age(t *testing.T, id string, d time.Duration) {
	t.Helper()
	_, err := r.pool.Exec(r.ctx, `UPDATE claims SET updated_at = updated_at - make_interval(secs => $2) WHERE id = $1`, id, d.Seconds())
	require.NoError(t, err)
}

func (r *retentionEnv) purge(t *testing.T) claim.PurgeResult {
	t.Helper()
	res, err := r.ledger.Purge(r.ctx, 100)
	require.NoError(t, err)
	return res
}

func (r *retentionEnv) deliver(t *testing.T, id string, body []byte) ingestReceipt {
	t.Helper()
	ans := r.send(t, "svix", svixMessage(t, id, body))
	require.Equal(t, http.StatusOK, ans.status, "%s", ans.body)
	rs, _ := ans.receipts(t)
	require.Len(t, rs, 1)
	return rs[0]
}

// settled waits until no dispatch job of the source is still to run, so
// that a dispatch that should not happen would have happened.
func (r *retentionEnv) settled(t *testing.T) {
	t.Helper()
	r.eventually(t, "every dispatch job finalized", func() bool {
		return r.scalar(t, `SELECT count(*)::text FROM river_job WHERE kind = 'claimd_inbox_dispatch'
			AND state NOT IN ('completed', 'cancelled', 'discarded')`) == "0"
	})
}

func TestIngestRedeliveryAfterPayloadPurgeIsDuplicate(t *testing.T) {
	t.Parallel()
	r := setupRetention(t, func(int) int { return http.StatusOK })
	const msg = "msg_2LJaUzPnNlWGPRsKqNAVz8Szdoa"
	body := []byte(`{"type":"invoice.paid","timestamp":"2026-10-15T09:00:00Z","data":{"invoice":"in_1","amount":4200,"currency":"eur"}}`)

	first := r.deliver(t, msg, body)
	require.Equal(t, "accepted", first.Status)
	r.waitDispatchState(t, first.ClaimID, "dispatched")
	require.Equal(t, int32(1), r.effects.Load())
	require.Equal(t, "completed", r.scalar(t, `SELECT state FROM claims WHERE id = $1`, first.ClaimID))
	require.Equal(t, "duplicate", r.deliver(t, msg, body).Status, "a resend within the retention")

	// 31 days later the payload retention (30 days) purges the payload,
	// the key stays (key retention: default 400 days).
	r.age(t, first.ClaimID, 31*24*time.Hour)
	require.Equal(t, claim.PurgeResult{PayloadsPurged: 1}, r.purge(t))
	require.Equal(t, ingestCounts{claims: 1, inbox: 0, jobs: 1, conflicts: 0}, r.counts(t, "svix"),
		"body and headers gone, key kept")
	require.Equal(t, []string{"payload_purged"}, r.deliveryLog(t, first.ClaimID))
	require.Equal(t, http.StatusNotFound, r.api(t, http.MethodGet, "/v1/inbox/"+first.ClaimID).status,
		"the inbox event (body) is gone")

	// The sender resends the message (same webhook-id, re-signed).
	again := r.deliver(t, msg, body)
	require.Equal(t, "duplicate", again.Status)
	require.Equal(t, first.ClaimID, again.ClaimID, "the same record")
	r.settled(t)
	require.Len(t, r.target.requests(), 1, "not dispatched again")
	require.Equal(t, int32(1), r.effects.Load(), "one effect")
	require.Equal(t, ingestCounts{claims: 1, inbox: 0, jobs: 1, conflicts: 0}, r.counts(t, "svix"))

	// The workflow's claim of the key (a replay through n8n, or the
	// inline path) is a duplicate with the result_ref.
	var payload json.RawMessage = body
	code, c := claimAPI(t, r.base, "/v1/claims", map[string]any{"source": "svix", "event_id": msg, "payload": payload})
	require.Equal(t, http.StatusOK, code, "%v", c)
	require.Equal(t, "duplicate", c["outcome"])
	require.Equal(t, first.ClaimID, c["claim_id"])
	require.Equal(t, "refund-1", c["result_ref"])
	require.Nil(t, c["claim_token"])

	// Another payload under the same id: a conflict on both doors, still
	// not dispatched; its body is kept for review.
	other := []byte(`{"type":"invoice.paid","timestamp":"2026-10-15T09:00:00Z","data":{"invoice":"in_1","amount":9900,"currency":"eur"}}`)
	conflict := r.deliver(t, msg, other)
	require.Equal(t, "conflict", conflict.Status)
	require.Equal(t, first.ClaimID, conflict.ClaimID)
	payload = other
	code, c = claimAPI(t, r.base, "/v1/claims", map[string]any{"source": "svix", "event_id": msg, "payload": payload})
	require.Equal(t, http.StatusOK, code, "%v", c)
	require.Equal(t, "conflict", c["outcome"])
	r.settled(t)
	require.Len(t, r.target.requests(), 1)
	require.Equal(t, ingestCounts{claims: 1, inbox: 0, jobs: 1, conflicts: 1}, r.counts(t, "svix"))
	require.Equal(t, []string{"payload_purged", "ingest_duplicate", "duplicate", "ingest_conflict", "conflict"},
		r.deliveryLog(t, first.ClaimID))

	// After the key retention the key is gone: a resend is a new event
	// (documented: key_retention_days must cover the sender's window).
	r.age(t, first.ClaimID, 370*24*time.Hour)
	require.Equal(t, claim.PurgeResult{KeysDeleted: 1}, r.purge(t))
	require.Equal(t, ingestCounts{}, func() ingestCounts { c := r.counts(t, "svix"); c.jobs = 0; return c }(),
		"record, payload and conflict body gone")
	late := r.deliver(t, msg, body)
	require.Equal(t, "accepted", late.Status)
	require.NotEqual(t, first.ClaimID, late.ClaimID)
	r.waitDispatchState(t, late.ClaimID, "dispatched")
	require.Equal(t, int32(2), r.effects.Load())
}

// A dispatch dead-lettered after the workflow completed the event (here
// the workflow answers 400 after its Complete): after the payload purge a
// provider redelivery finds no inbox row to re-arm, so it is a duplicate
// and nothing is dispatched without its body; an operator replay is 404.
func TestIngestRedeliveryAfterPayloadPurgeNeverRearms(t *testing.T) {
	t.Parallel()
	r := setupRetention(t, func(int) int { return http.StatusBadRequest })
	const msg = "msg_dead_lettered_dispatch"
	body := []byte(`{"type":"invoice.paid","data":{"invoice":"in_2","amount":100}}`)
	first := r.deliver(t, msg, body)
	require.Equal(t, "accepted", first.Status)
	r.waitDispatchState(t, first.ClaimID, "dead_lettered")
	require.Equal(t, "completed", r.scalar(t, `SELECT state FROM claims WHERE id = $1`, first.ClaimID))

	r.age(t, first.ClaimID, 31*24*time.Hour)
	require.Equal(t, claim.PurgeResult{PayloadsPurged: 1}, r.purge(t))
	again := r.deliver(t, msg, body)
	require.Equal(t, "duplicate", again.Status, "nothing to re-arm: the record is completed and its body gone")
	require.Equal(t, first.ClaimID, again.ClaimID)
	r.settled(t)
	require.Len(t, r.target.requests(), 1)
	require.Equal(t, int32(1), r.effects.Load())
	require.Equal(t, http.StatusNotFound, r.api(t, http.MethodPost, "/v1/inbox/"+first.ClaimID+"/replay").status)
	require.Equal(t, []string{"payload_purged", "ingest_duplicate"}, r.deliveryLog(t, first.ClaimID))
}
