package httpapi_test

import (
	"bytes"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Mailgun signs timestamp + token, not event-data
// (https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/securing-webhooks):
// the token is a signed one-time value (verify.Result.Nonce) that both
// doors record with the delivery's events. The same delivery again (a
// provider retry of the very same request) is a duplicate; the same
// signature object with other event-data (a captured signature carrying a
// forged body) is refused as unauthenticated with nothing stored.

var mailgunNonceSources = `
sources:
  mg: {tenant: ` + ingestTenant + `, provider: mailgun, secrets: ["` + verifytest.MailgunKey + `"], forward: {url: "http://127.0.0.1:9/never"}}
  t-mg: {tenant: ` + ingestTenant + `, provider: mailgun, secrets: ["` + verifytest.MailgunKey + `"]}
`

// mailgunSigned is eventData signed now with token, as the harness's
// delivery.
func mailgunSigned(token, eventData string) ingestDelivery {
	d := verifytest.MailgunDelivery(verifytest.MailgunKey, time.Now(), verifytest.MailgunToken(token), eventData)
	names := make([]string, 0, len(d.Header))
	for k := range d.Header {
		names = append(names, k)
	}
	sort.Strings(names)
	var h ingestHeaders
	for _, k := range names {
		for _, v := range d.Header[k] {
			h = append(h, [2]string{k, v})
		}
	}
	return ingestDelivery{header: h, body: d.Body}
}

// forged is d's signature object with eventData in place of d's own.
func forged(t *testing.T, d ingestDelivery, eventData string) ingestDelivery {
	t.Helper()
	i := bytes.Index(d.body, []byte(`,"event-data":`))
	require.Positive(t, i)
	body := append(append([]byte{}, d.body[:i]...), []byte(`,"event-data":`+eventData+`}`)...)
	return ingestDelivery{header: d.header, body: body}
}

func (e *ingestEnv) nonceRows(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM delivery_nonces`).Scan(&n))
	return n
}

// TestIngestMailgunTokenReplay: through POST /ingest/{source} on
// PostgreSQL, a signed delivery is stored; the same request again is a
// duplicate (2xx, one record); its signature with other event-data is
// refused 401 with nothing stored; the token is kept as a hash, never in
// clear; an expired token is purged by the retention purge and no longer
// refuses.
func TestIngestMailgunTokenReplay(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, mailgunNonceSources, ingestOptions{})
	at := float64(time.Now().Add(-time.Minute).UnixMicro()) / 1e6
	orig := mailgunSigned("replay-1", verifytest.MailgunEventData("mg-orig-1", "delivered", at))

	a := e.send(t, "mg", orig)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	rs, _ := a.receipts(t)
	require.Len(t, rs, 1)
	require.Equal(t, "accepted", rs[0].Status)
	stored := e.counts(t, "mg")
	require.Equal(t, ingestCounts{1, 1, 1, 0}, stored)
	require.Equal(t, 1, e.nonceRows(t))
	require.Equal(t, "0", e.scalar(t, `SELECT count(*)::text FROM delivery_nonces WHERE position($1::bytea IN nonce_hash) > 0`,
		[]byte(verifytest.MailgunToken("replay-1"))), "the token is never stored in clear")

	a = e.send(t, "mg", orig)
	require.Equal(t, http.StatusOK, a.status, "the same request again: %s", a.body)
	rs, _ = a.receipts(t)
	require.Len(t, rs, 1)
	require.Equal(t, "duplicate", rs[0].Status)
	require.Equal(t, stored, e.counts(t, "mg"))

	fake := forged(t, orig, verifytest.MailgunEventData("mg-forged-1", "delivered", at))
	a = e.send(t, "mg", fake)
	require.Equal(t, http.StatusUnauthorized, a.status, "%s", a.body)
	require.Equal(t, "unauthorized", a.errorCode(t))
	require.Equal(t, stored, e.counts(t, "mg"), "nothing stored")
	require.Equal(t, "0", e.scalar(t, `SELECT count(*)::text FROM claims WHERE event_id LIKE '%mg-forged-1%'`))
	require.Contains(t, e.logs.String(), `"field":"/signature/token"`)
	require.Contains(t, e.logs.String(), `"code":"bad_signature"`)
	require.NotContains(t, e.logs.String(), verifytest.MailgunToken("replay-1"), "the token is never logged")

	// Other event-data under the same signature, the original's id
	// included: refused too (not a conflict kept for review).
	a = e.send(t, "mg", forged(t, orig, verifytest.MailgunEventData("mg-orig-1", "opened", at)))
	require.Equal(t, http.StatusUnauthorized, a.status, "%s", a.body)
	require.Equal(t, stored, e.counts(t, "mg"))

	// Past its TTL the row is purged, in the retention purge.
	expireNonces(t, e)
	res, err := purgeLedger(t, e).Purge(e.ctx, 1)
	require.NoError(t, err)
	require.Equal(t, 1, res.NoncesPurged)
	require.Zero(t, e.nonceRows(t))
}

// TestIngestMailgunTokenReplayConcurrent: new deliveries and replays of
// stored ones' signatures with other event-data, all at once (deliveries
// arriving together share transactions, inbox/receipt_groups.go): each
// new one is stored, each replay refused, and the replays store nothing.
// A token whose row expired but is not purged yet is bound anew.
func TestIngestMailgunTokenReplayConcurrent(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, mailgunNonceSources, ingestOptions{maxConns: 12})
	at := float64(time.Now().Add(-time.Minute).UnixMicro()) / 1e6
	const n = 8
	var firsts, news, fakes []ingestDelivery
	for i := range n {
		firsts = append(firsts, mailgunSigned(fmt.Sprintf("conc-first-%d", i), verifytest.MailgunEventData(fmt.Sprintf("mg-first-%d", i), "delivered", at)))
		news = append(news, mailgunSigned(fmt.Sprintf("conc-new-%d", i), verifytest.MailgunEventData(fmt.Sprintf("mg-new-%d", i), "delivered", at)))
		fakes = append(fakes, forged(t, firsts[i], verifytest.MailgunEventData(fmt.Sprintf("mg-fake-%d", i), "delivered", at)))
	}
	for _, d := range firsts {
		require.Equal(t, http.StatusOK, e.send(t, "mg", d).status)
	}
	statuses := make([]int, 2*n)
	var wg sync.WaitGroup
	for i := range 2 * n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := news[i/2]
			if i%2 == 1 {
				d = fakes[i/2]
			}
			statuses[i] = e.send(t, "mg", d).status
		}()
	}
	wg.Wait()
	for i, st := range statuses {
		want := http.StatusOK
		if i%2 == 1 {
			want = http.StatusUnauthorized
		}
		require.Equal(t, want, st, "delivery %d", i)
	}
	require.Equal(t, ingestCounts{2 * n, 2 * n, 2 * n, 0}, e.counts(t, "mg"))
	require.Equal(t, "0", e.scalar(t, `SELECT count(*)::text FROM claims WHERE event_id LIKE '%mg-fake-%'`))

	// Expired, not yet purged: the token no longer binds (its timestamp
	// would be outside the tolerance by then).
	expireNonces(t, e)
	a := e.send(t, "mg", fakes[0])
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.Equal(t, 2*n, e.nonceRows(t))
}

// TestTriggerMailgunTokenReplay: the same through POST /v1/trigger/{source}:
// won; the same request again after completion a duplicate; the
// signature with other event-data unauthenticated with nothing claimed;
// the expired token purged.
func TestTriggerMailgunTokenReplay(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, mailgunNonceSources, ingestOptions{})
	at := float64(time.Now().Add(-time.Minute).UnixMicro()) / 1e6
	orig := mailgunSigned("trig-replay-1", verifytest.MailgunEventData("mg-trig-1", "delivered", at))

	won := e.decided(t, "t-mg", trigCall(orig, "mg-1"))
	require.Equal(t, "won", won.Decision)
	require.Len(t, won.Events, 1)
	require.Equal(t, [3]int{1, 0, 0}, e.trigCounts(t))
	require.Equal(t, 1, e.nonceRows(t))
	c := e.apiPost(t, "/v1/claims/"+won.Events[0].ClaimID+"/complete", `{"claim_token":"`+won.Events[0].ClaimToken+`","result_ref":"done"}`)
	require.Equal(t, http.StatusOK, c.status, "%s", c.body)

	dup := e.decided(t, "t-mg", trigCall(orig, "mg-2"))
	require.Equal(t, "duplicate", dup.Decision, "the same request again")
	require.Equal(t, http.StatusOK, dup.Response.Status)

	ref := e.decided(t, "t-mg", trigCall(forged(t, orig, verifytest.MailgunEventData("mg-trig-forged", "delivered", at)), "mg-3"))
	require.Equal(t, "unauthenticated", ref.Decision)
	require.Equal(t, http.StatusUnauthorized, ref.Response.Status)
	require.Empty(t, ref.Events)
	require.Equal(t, [3]int{1, 0, 0}, e.trigCounts(t), "nothing claimed")
	require.Equal(t, 1, e.nonceRows(t))

	expireNonces(t, e)
	res, err := purgeLedger(t, e).Purge(e.ctx, 10)
	require.NoError(t, err)
	require.Equal(t, 1, res.NoncesPurged)
	require.Zero(t, e.nonceRows(t))
}

// expireNonces moves every kept nonce's expiry into the past, as the
// passing of its TTL would.
func expireNonces(t *testing.T, e *ingestEnv) {
	t.Helper()
	_, err := e.pool.Exec(e.ctx, `UPDATE delivery_nonces SET expires_at = now() - interval '1 second'`)
	require.NoError(t, err)
}

// purgeLedger is a ledger on e's database, for its retention purge.
func purgeLedger(t *testing.T, e *ingestEnv) *claim.Ledger {
	t.Helper()
	l, err := claim.New(e.pool, claim.Config{})
	require.NoError(t, err)
	return l
}
