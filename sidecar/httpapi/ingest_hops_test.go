package httpapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
)

// latin1 is what Node.js (and so n8n) makes of header bytes: each byte one
// character, ISO-8859-1. A UTF-8 "ü" arrives as "Ã¼".
func latin1(b string) string {
	r := make([]rune, len(b))
	for i := 0; i < len(b); i++ {
		r[i] = rune(b[i])
	}
	return string(r)
}

// Case B11: whatever bytes an event id holds, the workflow claims exactly
// the record the inbox holds. The stored id is header-safe (printable
// ASCII, percent-encoded where it was not), so the X-Idempotency-Event-Id a
// Node.js-style target reads back — bytes as Latin-1 — is byte for byte the
// stored id: the workflow's claim moves the inbox record out of received
// and the first attempt counts.
func TestIngestEventIDReachesTheWorkflowByteExact(t *testing.T) {
	t.Parallel()
	var base atomic.Value
	var claims atomic.Int32
	target := newIngestTarget(t, nil)
	target.mu.Lock()
	target.before = func(_ int, r *http.Request) { // the workflow's Idempotent Claim node, reading headers as Node does
		body, _ := json.Marshal(map[string]string{"source": latin1(r.Header.Get(inbox.HeaderSource)), "event_id": latin1(r.Header.Get(inbox.HeaderEventID))})
		req, _ := http.NewRequest(http.MethodPost, base.Load().(string)+"/v1/claims", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+ingestAPIKey)
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			claims.Add(1)
		}
	}
	target.mu.Unlock()
	const token = "forms-token-0123456789"
	e := setupIngest(t, `
sources:
  forms:
    tenant: acme
    provider: token
    secrets: ["`+token+`"]
    options: {header: X-Forms-Token, key: {id_pointers: ["/form", "/submission"]}}
    forward: {url: "${TARGET_URL}", max_attempts: 3, backoff_base_seconds: 1, backoff_cap_seconds: 1}
  sensors:
    tenant: acme
    provider: cloudevents
    secrets: ["`+identCEToken+`"]
    forward: {url: "${TARGET_URL}", max_attempts: 3, backoff_base_seconds: 1, backoff_cap_seconds: 1}
`, ingestOptions{dispatch: true, env: map[string]string{"TARGET_URL": target.srv.URL}})
	base.Store(e.base)

	longest := strings.Repeat("x", 1000) // with the join prefix, near the longest id kept as is
	forms := map[string]string{
		"2-byte UTF-8":          "Anmeldung Frühjahr",
		"3-byte UTF-8":          "Preis €",
		"4-byte UTF-8":          "Party 🎉",
		"newline":               "line one\nline two",
		"tab and CR":            "a\tb\rc",
		"DEL and C1":            "a\x7fb\u0085c",
		"percent sign":          "100% sure",
		"encoded look-alike":    "Fr%C3%BChjahr",
		"leading space":         " padded ",
		"longest plain ASCII":   longest,
		"too long once encoded": strings.Repeat("é", 400),
	}
	records := map[string]string{}
	for name, form := range forms {
		body, _ := json.Marshal(map[string]any{"form": form, "submission": 7})
		ans := e.send(t, "forms", ingestDelivery{header: ingestHeaders{{"Content-Type", "application/json"}, {"X-Forms-Token", token}}, body: body})
		require.Equal(t, http.StatusOK, ans.status, "%s: %s", name, ans.body)
		rs, _ := ans.receipts(t)
		require.Len(t, rs, 1, name)
		for i := 0; i < len(rs[0].EventID); i++ {
			c := rs[0].EventID[i]
			require.True(t, c >= 0x20 && c <= 0x7e, "%s: the stored id %q is printable ASCII", name, rs[0].EventID)
		}
		require.NotContains(t, records, rs[0].EventID, "%s: a distinct event, a distinct id", name)
		records[rs[0].EventID] = rs[0].ClaimID
	}
	ce := ingestDelivery{header: ingestHeaders{{"Authorization", "Bearer " + identCEToken}, {"Content-Type", "application/json"},
		{"ce-specversion", "1.0"}, {"ce-id", "reading-1"}, {"ce-source", "/sensors/k%C3%BCche"}, {"ce-type", "com.example.reading"}},
		body: []byte(`{"celsius":21.5}`)}
	ans := e.send(t, "sensors", ce)
	require.Equal(t, http.StatusOK, ans.status, "%s", ans.body)
	rs, _ := ans.receipts(t)
	records[rs[0].EventID] = rs[0].ClaimID

	for id, claimID := range records {
		e.waitDispatchState(t, claimID, "dispatched")
		require.Equal(t, "1", e.scalar(t, `SELECT dispatch_attempts::text FROM inbox_events WHERE claim_id = $1`, claimID),
			"%q: the first attempt's claim was of this very record", id)
		require.Equal(t, "processing", e.scalar(t, `SELECT state FROM claims WHERE id = $1`, claimID), "%q", id)
	}
	require.Equal(t, len(records), e.counts(t, "forms").claims+e.counts(t, "sensors").claims,
		"no second record: the workflow never claimed another key")
	require.Equal(t, int32(len(records)), claims.Load())
}

// A provider header holding a control character (NUL and DEL alike;
// RFC 9110 section 5.5) is refused at the edge: 400 bad_request at once,
// the connection closed, nothing stored or forwarded. (Dispatch leaves such
// a header out of the forwarded ones too, should one ever be stored.)
func TestIngestControlCharacterHeadersNeverBlockDispatch(t *testing.T) {
	t.Parallel()
	target := newIngestTarget(t, nil)
	const token = "ctl-token-0123456789"
	e := setupIngest(t, `
sources:
  ids:
    tenant: acme
    provider: token
    secrets: ["`+token+`"]
    options: {header: X-Api-Key, key: {id_header: X-Event-Id}}
    forward: {url: "${TARGET_URL}", require_claim: false, max_attempts: 3, backoff_base_seconds: 1, backoff_cap_seconds: 1}
`, ingestOptions{dispatch: true, env: map[string]string{"TARGET_URL": target.srv.URL}})
	body := `{"n":1}`
	for _, ctl := range []string{"X-Event-Id: a\x01b", "X-Trace: t\x7fx", "X-Trace: t\x00"} {
		raw := "POST /ingest/ids HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Api-Key: " + token +
			"\r\nX-Event-Id: ab\r\n" + ctl + "\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
		replies := rawExchange(t, strings.TrimPrefix(e.base, "http://"), raw, 10*time.Second)
		require.Len(t, replies, 1, "%q", ctl)
		require.Equal(t, http.StatusBadRequest, replies[0].status, "%q: %s", ctl, replies[0].body)
		require.Equal(t, "bad_request", replies[0].code(t))
		require.True(t, replies[0].closed)
	}
	require.Equal(t, ingestCounts{}, e.counts(t, "ids"), "nothing stored")
	require.Empty(t, target.requests(), "nothing forwarded")
}

// A redirect whose Location does not parse is still a redirect: dead-
// lettered at once, and nothing of the Location (a token in its query or
// userinfo) is stored.
func TestIngestUnparsableRedirectLocationLeaksNothing(t *testing.T) {
	t.Parallel()
	target := newIngestTarget(t, func(int) (int, http.Header) {
		return http.StatusFound, http.Header{"Location": {"http://admin:LEAKPASS@[::1/hook?token=LEAKTOKEN"}}
	})
	e := setupIngest(t, `
sources:
  hooks:
    tenant: acme
    provider: github
    secrets: ["`+dispatchSecret+`"]
    forward: {url: "${TARGET_URL}", require_claim: false, max_attempts: 3, backoff_base_seconds: 1, backoff_cap_seconds: 1}
`, ingestOptions{dispatch: true, env: map[string]string{"TARGET_URL": target.srv.URL}})
	id := e.receiveOne(t, "bad-location-1")
	e.waitDispatchState(t, id, "dead_lettered")
	require.Len(t, target.requests(), 1, "dead-lettered at once")
	reason := e.scalar(t, `SELECT last_dispatch_error FROM inbox_events WHERE claim_id = $1`, id)
	require.Contains(t, reason, "302")
	for _, secret := range []string{"LEAKPASS", "LEAKTOKEN"} {
		require.NotContains(t, reason, secret)
		require.NotContains(t, strings.Join(e.deliveryLog(t, id), " "), secret)
		require.Equal(t, "0", e.scalar(t, `SELECT count(*)::text FROM claim_deliveries WHERE detail LIKE '%'||$1||'%'`, secret))
		require.NotContains(t, e.logs.String(), secret)
	}
}
