package httpapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/ingest"
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

// B11 (issue "Every hop keeps the event" §1): whatever bytes an event id
// holds, the workflow claims exactly the record the inbox holds. The
// stored id is header-safe (printable ASCII, percent-encoded where it was
// not), so the X-Idempotency-Event-Id a Node.js-style target reads back —
// bytes as Latin-1 — is byte for byte the stored id: the workflow's claim
// moves the inbox record out of received and the first attempt counts.
func TestIngestEventIDReachesTheWorkflowByteExact(t *testing.T) {
	t.Parallel()
	var base atomic.Value
	var claims atomic.Int32
	target := newIngestTarget(t, nil)
	target.mu.Lock()
	target.before = func(_ int, r *http.Request) { // the workflow's Idempotent Claim node, reading headers as Node does
		body, _ := json.Marshal(map[string]string{"source": latin1(r.Header.Get(ingest.HeaderSource)), "event_id": latin1(r.Header.Get(ingest.HeaderEventID))})
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
