package verify_test

import (
	"net/http"
	"testing"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Square's published example: the vector of the webhook signature tests in
// Square's official SDKs
// (https://github.com/square/square-go-sdk/blob/main/webhooks/client/verify_signature_test.go,
// the same in the Python, Java, PHP, Ruby and Node SDKs).
const (
	squareVectorBody = `{"merchant_id":"MLEFBHHSJGVHD","type":"webhooks.test_notification","event_id":"ac3ac95b-f97d-458c-a6e6-18981597e05f","created_at":"2022-07-13T20:30:59.037339943Z","data":{"type":"webhooks","id":"bc368e64-01aa-407e-b46e-3231809b1129"}}`
	squareVectorSig  = "GF4YkrJgGBDZ9NIYbNXBnMzqb2HoL4RW/S6vkZ9/2N4="
	squareVectorKey  = "Ibxx_5AKakO-3qeNVR61Dw"
	squareVectorURL  = "https://webhook.site/679a4f3a-dcfa-49ee-bac5-9d0edad886b9"
)

func squareVectorDelivery() verifytest.Delivery {
	h := http.Header{}
	h.Set("x-square-hmacsha256-signature", squareVectorSig)
	return verifytest.Delivery{Header: h, Body: []byte(squareVectorBody)}
}

func squareVerifier(t *testing.T, url string, keys ...string) verify.Verifier {
	t.Helper()
	return payMust(t, verify.TypeSquare, verify.Core{Secrets: keys}, decodeOptions(t, verify.TypeSquare, map[string]any{"notification_url": url}))
}

func TestSquarePublishedVector(t *testing.T) {
	v := squareVerifier(t, squareVectorURL, squareVectorKey)
	ev := oneDeliveryEvent(t, v, squareVectorDelivery())
	if ev.ID != "ac3ac95b-f97d-458c-a6e6-18981597e05f" || ev.Type != "webhooks.test_notification" || ev.Scope != "MLEFBHHSJGVHD" || ev.ObjectID != "bc368e64-01aa-407e-b46e-3231809b1129" {
		t.Fatalf("event %+v", ev)
	}
	if got := verifytest.Square(squareVectorKey, squareVectorURL, []byte(squareVectorBody)); got != squareVectorSig {
		t.Fatalf("verifytest.Square = %s", got)
	}
	// The URL is signed: another URL (a trailing slash, http) does not
	// verify.
	for _, u := range []string{squareVectorURL + "/", "https://webhook.site/679a4f3a-dcfa-49ee-bac5-9d0edad886b8"} {
		_, err := squareVerifier(t, u, squareVectorKey).Verify(deliveryRequest(squareVectorDelivery()))
		requireCode(t, err, verify.CodeBadSignature, verify.SquareSignatureHeader)
	}
}

func TestSquareRefusals(t *testing.T) {
	v := squareVerifier(t, squareVectorURL, squareVectorKey)

	d := squareVectorDelivery()
	d.Header.Del("x-square-hmacsha256-signature")
	_, err := v.Verify(deliveryRequest(d))
	requireCode(t, err, verify.CodeMissingHeader, verify.SquareSignatureHeader)

	// Only the legacy SHA-1 header: refused, naming the SHA-256 one.
	d.Header.Set("x-square-signature", "c2lnbmF0dXJlLXNoYTE=")
	_, err = v.Verify(deliveryRequest(d))
	requireCode(t, err, verify.CodeMissingHeader, verify.SquareSignatureHeader)

	for _, bad := range []string{"GF4YkrJgGBDZ9NIYbNXBnMzqb2HoL4RW/S6vkZ9/2N4", "GF4YkrJgGBDZ9NIYbNXBnMzqb2HoL4RW_S6vkZ9_2N4=", "not base64 at all!!"} {
		d = squareVectorDelivery()
		d.Header.Set("x-square-hmacsha256-signature", bad)
		_, err = v.Verify(deliveryRequest(d))
		requireCode(t, err, verify.CodeMalformedHeader, verify.SquareSignatureHeader)
	}

	_, err = squareVerifier(t, squareVectorURL, "another-key").Verify(deliveryRequest(squareVectorDelivery()))
	requireCode(t, err, verify.CodeBadSignature, verify.SquareSignatureHeader)

	d = squareVectorDelivery()
	d.Body = []byte(`{"merchant_id":"M","type":"payment.updated","data":{"id":"p"}}`)
	d.Header.Set("x-square-hmacsha256-signature", verifytest.Square(squareVectorKey, squareVectorURL, d.Body))
	_, err = v.Verify(deliveryRequest(d))
	if ve := requireCode(t, err, verify.CodeMissingField, "/event_id"); !ve.Authenticated {
		t.Fatal("want authenticated")
	}

	only := payMust(t, verify.TypeSquare, verify.Core{Secrets: []string{squareVectorKey}, AllowedEventTypes: []string{"payment.*"}},
		decodeOptions(t, verify.TypeSquare, map[string]any{"notification_url": squareVectorURL}))
	_, err = only.Verify(deliveryRequest(squareVectorDelivery()))
	requireCode(t, err, verify.CodeEventTypeNotAllowed, "/type")
}

func TestSquareConfig(t *testing.T) {
	for _, u := range []string{"", "http://example.com/hook", "/ingest/square", " https://example.com/hook", "https:///nohost"} {
		_, err := payBuild(verify.TypeSquare, verify.Core{Secrets: []string{"k"}}, decodeOptions(t, verify.TypeSquare, map[string]any{"notification_url": u}))
		requireConfigField(t, err, "NotificationURL")
	}
	_, err := payBuild(verify.TypeSquare, verify.Core{}, decodeOptions(t, verify.TypeSquare, map[string]any{"notification_url": squareVectorURL}))
	requireConfigField(t, err, "Secrets")
}

func TestSquareRotation(t *testing.T) {
	v := squareVerifier(t, squareVectorURL, "the-new-key", squareVectorKey)
	oneDeliveryEvent(t, v, squareVectorDelivery())
	oneDeliveryEvent(t, v, verifytest.SquareDelivery("the-new-key", squareVectorURL, []byte(squareVectorBody), 0, payNow))
}

// TestSquareKey: payment.created and payment.updated about one payment
// are two ids; a retry (square-retry-number set, same body) is one.
func TestSquareKey(t *testing.T) {
	k, u := verifytest.SquareSignatureKey, verifytest.SquareNotificationURL
	v := squareVerifier(t, u, k)
	a := oneDeliveryEvent(t, v, verifytest.SquareDelivery(k, u, verifytest.SquarePayment("e1", "payment.created", "P", "APPROVED", payNow), 0, payNow))
	b := oneDeliveryEvent(t, v, verifytest.SquareDelivery(k, u, verifytest.SquarePayment("e2", "payment.updated", "P", "COMPLETED", payNow), 0, payNow))
	c := oneDeliveryEvent(t, v, verifytest.SquareDelivery(k, u, verifytest.SquarePayment("e2", "payment.updated", "P", "COMPLETED", payNow), 3, payNow))
	if a.ID == b.ID || b.ID != c.ID || a.ObjectID != "P" {
		t.Fatalf("ids %q %q %q", a.ID, b.ID, c.ID)
	}
	replayFixture(t, string(verify.TypeSquare))
}
