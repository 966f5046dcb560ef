package verify_test

import (
	"net/http"
	"testing"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// razorpayVectorBody and razorpayVectorSig are a vector computed from the
// documented algorithm (https://razorpay.com/docs/webhooks/validate-test/:
// hex HMAC-SHA256 of the raw body, keyed with the webhook secret) by an
// independent computation, `printf '%s' "$body" | openssl dgst -sha256
// -hmac test-webhook-secret`; Razorpay publishes no example signature.
const (
	razorpayVectorBody = `{"entity":"event","account_id":"acc_BFQ7uQEaa7j2z7","event":"order.paid","contains":["payment","order"],"payload":{"payment":{"entity":{"id":"pay_DESlfW9H8K9uqM","entity":"payment","amount":100,"currency":"INR","status":"captured"}},"order":{"entity":{"id":"order_DESlLckIVRkHWj","entity":"order","status":"paid"}}},"created_at":1567674606}`
	razorpayVectorSig  = "6b99c60094beaf3ca0d80a6c0dc7a34c7add1cad1392bfb350dff92cde76a4ad"
)

func razorpayVectorDelivery() verifytest.Delivery {
	h := http.Header{}
	h.Set("X-Razorpay-Signature", razorpayVectorSig)
	h.Set("X-Razorpay-Event-Id", "Gb5kMCdcAZ8jJ8")
	return verifytest.Delivery{Header: h, Body: []byte(razorpayVectorBody)}
}

func TestRazorpayVector(t *testing.T) {
	v := payMust(t, verify.TypeRazorpay, verify.Core{Secrets: []string{"test-webhook-secret"}}, nil)
	ev := oneDeliveryEvent(t, v, razorpayVectorDelivery())
	if ev.ID != "Gb5kMCdcAZ8jJ8" || ev.Type != "order.paid" || ev.Scope != "acc_BFQ7uQEaa7j2z7" || ev.ObjectID != "pay_DESlfW9H8K9uqM" {
		t.Fatalf("event %+v", ev)
	}
	if got := verifytest.Razorpay("test-webhook-secret", []byte(razorpayVectorBody)); got != razorpayVectorSig {
		t.Fatalf("verifytest.Razorpay = %s, want the vector", got)
	}
	// Upper-case hex is the same signature.
	d := razorpayVectorDelivery()
	d.Header.Set("X-Razorpay-Signature", "6B99C60094BEAF3CA0D80A6C0DC7A34C7ADD1CAD1392BFB350DFF92CDE76A4AD")
	oneDeliveryEvent(t, v, d)
}

func TestRazorpayRefusals(t *testing.T) {
	v := payMust(t, verify.TypeRazorpay, verify.Core{Secrets: []string{"test-webhook-secret"}}, nil)

	d := razorpayVectorDelivery()
	d.Header.Del("X-Razorpay-Signature")
	_, err := v.Verify(deliveryRequest(d))
	requireCode(t, err, verify.CodeMissingHeader, "X-Razorpay-Signature")

	for _, bad := range []string{"sha256=" + razorpayVectorSig, razorpayVectorSig[:62], razorpayVectorSig[:63] + "g"} {
		d = razorpayVectorDelivery()
		d.Header.Set("X-Razorpay-Signature", bad)
		_, err = v.Verify(deliveryRequest(d))
		requireCode(t, err, verify.CodeMalformedHeader, "X-Razorpay-Signature")
	}

	wrong := payMust(t, verify.TypeRazorpay, verify.Core{Secrets: []string{"another-secret"}}, nil)
	_, err = wrong.Verify(deliveryRequest(razorpayVectorDelivery()))
	requireCode(t, err, verify.CodeBadSignature, "X-Razorpay-Signature")

	d = razorpayVectorDelivery()
	d.Header.Del("X-Razorpay-Event-Id")
	_, err = v.Verify(deliveryRequest(d))
	if ve := requireCode(t, err, verify.CodeMissingHeader, "X-Razorpay-Event-Id"); !ve.Authenticated {
		t.Fatal("a missing event id after a good signature must be marked authenticated")
	}

	d = razorpayVectorDelivery()
	d.Body = []byte(`{"event":1}`)
	d.Header.Set("X-Razorpay-Signature", verifytest.Razorpay("test-webhook-secret", d.Body))
	_, err = v.Verify(deliveryRequest(d))
	requireCode(t, err, verify.CodeMalformedBody, "")

	only := payMust(t, verify.TypeRazorpay, verify.Core{Secrets: []string{"test-webhook-secret"}, AllowedEventTypes: []string{"payment.*"}}, nil)
	_, err = only.Verify(deliveryRequest(razorpayVectorDelivery()))
	requireCode(t, err, verify.CodeEventTypeNotAllowed, "/event")

	_, err = payBuild(verify.TypeRazorpay, verify.Core{}, nil)
	requireConfigField(t, err, "Secrets")
}

// TestRazorpayRotation: the old secret signs the retries of events created
// before a secret change (https://razorpay.com/docs/webhooks/faqs/), so
// both verify while configured.
func TestRazorpayRotation(t *testing.T) {
	v := payMust(t, verify.TypeRazorpay, verify.Core{Secrets: []string{"new-secret", "test-webhook-secret"}}, nil)
	oneDeliveryEvent(t, v, razorpayVectorDelivery())
	body := []byte(razorpayVectorBody)
	oneDeliveryEvent(t, v, verifytest.RazorpayDelivery("new-secret", "Gb5kMCdcAZ8jJ8", body))
}

// TestRazorpayKey: two events about one payment are two ids; a retry,
// which repeats X-Razorpay-Event-Id, is one.
func TestRazorpayKey(t *testing.T) {
	v := payMust(t, verify.TypeRazorpay, verify.Core{Secrets: []string{verifytest.RazorpaySecret}}, nil)
	auth := verifytest.RazorpayPayment("payment.authorized", "pay_X", "authorized", payNow)
	capt := verifytest.RazorpayPayment("payment.captured", "pay_X", "captured", payNow)
	a := oneDeliveryEvent(t, v, verifytest.RazorpayDelivery(verifytest.RazorpaySecret, "E1", auth))
	b := oneDeliveryEvent(t, v, verifytest.RazorpayDelivery(verifytest.RazorpaySecret, "E2", capt))
	c := oneDeliveryEvent(t, v, verifytest.RazorpayDelivery(verifytest.RazorpaySecret, "E2", capt))
	if a.ID == b.ID || b.ID != c.ID || a.ObjectID != "pay_X" || b.ObjectID != "pay_X" {
		t.Fatalf("ids %q %q %q", a.ID, b.ID, c.ID)
	}
	replayFixture(t, string(verify.TypeRazorpay))
}
