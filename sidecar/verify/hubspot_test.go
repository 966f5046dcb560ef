package verify_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// HubSpot publishes no v3 example signature, so this vector was computed
// independently (Python's hmac module) from the algorithm at
// https://developers.hubspot.com/docs/apps/legacy-apps/authentication/validating-requests#validate-the-v3-request-signature:
// base64 HMAC-SHA256 of "POST" + URI (escapes of HubSpot's table decoded)
// + body + timestamp. The body is the one of HubSpot's v1 example.
func TestHubSpotVector(t *testing.T) {
	t.Parallel()
	const (
		configured = "https://hooks.example.com/hubspot?source=crm%3amain&x=%28a%29%2Cb%3Bc%2Ad%21e%40f%24g%27h"
		ts         = "1764931200000"
		sig        = "uptLnJ3RA+XYHwmin011sm91E+MvikB7bNxkv342I4U="
	)
	body := []byte(`[{"eventId":1,"subscriptionId":12345,"portalId":62515,"occurredAt":1564113600000,"subscriptionType":"contact.creation","attemptNumber":0,"objectId":123,"changeSource":"CRM","changeFlag":"NEW","appId":54321}]`)
	at := time.UnixMilli(1764931200000)
	v := mustBuild(t, verify.TypeHubSpot, verify.Core{Secrets: []string{verifytest.HubSpotSecret}, Now: fixedClock(at.Add(4 * time.Minute))}, map[string]any{"url": configured})
	h := http.Header{}
	h.Set(verify.HubSpotSignatureV3Header, sig)
	h.Set(verify.HubSpotTimestampHeader, ts)
	evs := verifyEvents(t, v, verifytest.Delivery{Header: h, Body: body})
	if len(evs) != 1 || evs[0].ID != verify.JoinKey("62515", "12345", "1") || evs[0].Type != "contact.creation" ||
		evs[0].Scope != "62515" || evs[0].ObjectID != "123" || !evs[0].Timestamp.Equal(at) || string(evs[0].Payload) != string(body[1:len(body)-1]) {
		t.Fatalf("got %+v", evs)
	}
}

func TestHubSpot(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	opts := map[string]any{"url": verifytest.HubSpotURL}
	v := mustBuild(t, verify.TypeHubSpot, verify.Core{Secrets: []string{verifytest.HubSpotSecret}, Now: fixedClock(now)}, opts)
	body := verifytest.HubSpotBatch(verifytest.HubSpotItem(7, "deal.creation", 9, 0))
	good := func() verifytest.Delivery { return verifytest.HubSpotDelivery(verifytest.HubSpotSecret, now, body) }

	t.Run("fixture", func(t *testing.T) { replayFixture(t, "hubspot") })

	t.Run("configuration", func(t *testing.T) {
		for _, o := range []map[string]any{nil, {"url": ""}, {"url": "/relative"}, {"url": "ftp://x/y"}, {"url": "https://x/y#frag"}} {
			_, err := tryBuild(t, verify.TypeHubSpot, verify.Core{Secrets: []string{"s"}}, o)
			requireConfigField(t, err, "URL")
		}
		_, err := tryBuild(t, verify.TypeHubSpot, verify.Core{Secrets: []string{" s"}}, opts)
		requireConfigField(t, err, "Secrets[0]")
	})

	t.Run("missing and malformed headers", func(t *testing.T) {
		d := good()
		d.Header.Del(verify.HubSpotSignatureV3Header)
		requireRefused(t, v, d, verify.CodeMissingHeader, verify.InHeader, verify.HubSpotSignatureV3Header)
		d.Header.Del(verify.HubSpotLegacySignatureHeader)
		requireRefused(t, v, d, verify.CodeMissingHeader, verify.InHeader, verify.HubSpotSignatureV3Header)
		d = good()
		d.Header.Del(verify.HubSpotTimestampHeader)
		requireRefused(t, v, d, verify.CodeMissingHeader, verify.InHeader, verify.HubSpotTimestampHeader)
		for _, bad := range []string{"sha256=abc", "uptLnJ3RA+XYHwmin011sm91E+MvikB7bNxkv342I4U", "!!ptLnJ3RA+XYHwmin011sm91E+MvikB7bNxkv342I4U="} {
			d = good()
			d.Header.Set(verify.HubSpotSignatureV3Header, bad)
			requireRefused(t, v, d, verify.CodeMalformedHeader, verify.InHeader, verify.HubSpotSignatureV3Header)
		}
		d = good()
		d.Header.Set(verify.HubSpotTimestampHeader, "2026-03-01T12:00:00Z")
		requireRefused(t, v, d, verify.CodeMalformedHeader, verify.InHeader, verify.HubSpotTimestampHeader)
	})

	t.Run("wrong secret, URL, method and rotation", func(t *testing.T) {
		other := verifytest.HubSpotDelivery("another-client-secret", now, body)
		requireRefused(t, v, other, verify.CodeBadSignature, verify.InHeader, verify.HubSpotSignatureV3Header)
		rot := mustBuild(t, verify.TypeHubSpot, verify.Core{Secrets: []string{"another-client-secret", verifytest.HubSpotSecret}, Now: fixedClock(now)}, opts)
		verifyEvents(t, rot, other)
		verifyEvents(t, rot, good())
		elsewhere := mustBuild(t, verify.TypeHubSpot, verify.Core{Secrets: []string{verifytest.HubSpotSecret}, Now: fixedClock(now)}, map[string]any{"url": "https://hooks.example.com/other"})
		requireRefused(t, elsewhere, good(), verify.CodeBadSignature, verify.InHeader, verify.HubSpotSignatureV3Header)
		d := good()
		d.Method = http.MethodPut
		requireRefused(t, v, d, verify.CodeBadSignature, verify.InHeader, verify.HubSpotSignatureV3Header)
		d = good()
		d.Header.Set(verify.HubSpotTimestampHeader, "1")
		requireRefused(t, v, d, verify.CodeBadSignature, verify.InHeader, verify.HubSpotSignatureV3Header)
	})

	t.Run("tolerance", func(t *testing.T) {
		old := verifytest.HubSpotDelivery(verifytest.HubSpotSecret, now.Add(-5*time.Minute-time.Millisecond), body)
		requireRefused(t, v, old, verify.CodeTimestampOutsideTolerance, verify.InHeader, verify.HubSpotTimestampHeader)
		verifyEvents(t, v, verifytest.HubSpotDelivery(verifytest.HubSpotSecret, now.Add(-5*time.Minute), body))
		wide := mustBuild(t, verify.TypeHubSpot, verify.Core{Secrets: []string{verifytest.HubSpotSecret}, Tolerance: 10 * time.Minute, Now: fixedClock(now)}, opts)
		verifyEvents(t, wide, old)
	})

	t.Run("batch split and key rule", func(t *testing.T) {
		b := verifytest.HubSpotBatch(verifytest.HubSpotItem(7, "contact.propertyChange", 9, 0), verifytest.HubSpotItem(8, "contact.propertyChange", 9, 0),
			`{"eventId":7,"subscriptionId":999,"portalId":62515,"subscriptionType":"contact.propertyChange","objectId":9}`)
		evs := verifyEvents(t, v, verifytest.HubSpotDelivery(verifytest.HubSpotSecret, now, b))
		if len(evs) != 3 || evs[0].ID == evs[1].ID || evs[0].ID == evs[2].ID || evs[0].ID != verify.JoinKey("62515", "234567", "7") {
			t.Fatalf("got %+v", evs)
		}
		again := verifyEvents(t, v, verifytest.HubSpotDelivery(verifytest.HubSpotSecret, now, verifytest.HubSpotBatch(verifytest.HubSpotItem(7, "contact.propertyChange", 9, 3))))
		if again[0].ID != evs[0].ID {
			t.Fatalf("retry id %q, want %q", again[0].ID, evs[0].ID)
		}
	})

	t.Run("items refused on their own", func(t *testing.T) {
		b := verifytest.HubSpotBatch(`{"subscriptionId":1,"portalId":2,"subscriptionType":"deal.creation"}`, verifytest.HubSpotItem(8, "deal.creation", 9, 0))
		res, err := v.Verify(verify.Request{Header: verifytest.HubSpotDelivery(verifytest.HubSpotSecret, now, b).Header, Body: b})
		if err != nil || len(res.Events) != 1 || len(res.Rejected) != 1 || res.Rejected[0].Index != 0 {
			t.Fatalf("got %+v, %v", res, err)
		}
		only := mustBuild(t, verify.TypeHubSpot, verify.Core{Secrets: []string{verifytest.HubSpotSecret}, AllowedEventTypes: []string{"contact.*"}, Now: fixedClock(now)}, opts)
		e := requireRefused(t, only, good(), verify.CodeEventTypeNotAllowed, verify.InBody, "/0/subscriptionType")
		if !e.Authenticated {
			t.Error("a refused type is authenticated")
		}
		requireRefused(t, v, verifytest.HubSpotDelivery(verifytest.HubSpotSecret, now, []byte(`[]`)), verify.CodeMalformedBody, verify.InBody, "")
		requireRefused(t, v, verifytest.HubSpotDelivery(verifytest.HubSpotSecret, now, []byte(`{"eventId":1}`)), verify.CodeMalformedBody, verify.InBody, "")
	})
}
