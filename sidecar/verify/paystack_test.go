package verify_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// paystackVectorBody and paystackVectorSig are a vector computed from the
// documented algorithm (https://paystack.com/docs/payments/webhooks/: hex
// HMAC-SHA512 of the raw body keyed with the secret key) by an independent
// computation, `printf '%s' "$body" | openssl dgst -sha512 -hmac
// sk_test_vector`; Paystack publishes no example signature.
const (
	paystackVectorBody = `{"event":"charge.success","data":{"id":302961,"domain":"live","status":"success","reference":"qTPrJoy9Bx","amount":10000,"currency":"NGN","customer":{"id":68324,"email":"customer@example.com"}}}`
	paystackVectorSig  = "54ec454ec701067d8570396505159fd5f8d5e31a2999d88f6cb9cbc2b5d18d64a3433a0e262e3889ed56bc8c98c46ac09bec4439fe6e76252a90f756b439b68b"
)

func paystackVectorDelivery() verifytest.Delivery {
	h := http.Header{}
	h.Set("x-paystack-signature", paystackVectorSig)
	return verifytest.Delivery{Header: h, Body: []byte(paystackVectorBody)}
}

func TestPaystackVector(t *testing.T) {
	v := payMust(t, verify.TypePaystack, verify.Core{Secrets: []string{"sk_test_vector"}}, nil)
	ev := oneDeliveryEvent(t, v, paystackVectorDelivery())
	if ev.ID != verify.JoinKey("charge.success", "302961") || ev.Type != "charge.success" || ev.ObjectID != "302961" {
		t.Fatalf("event %+v", ev)
	}
	if got := verifytest.Paystack("sk_test_vector", []byte(paystackVectorBody)); got != paystackVectorSig {
		t.Fatalf("verifytest.Paystack = %s, want the vector", got)
	}
}

func TestPaystackRefusals(t *testing.T) {
	v := payMust(t, verify.TypePaystack, verify.Core{Secrets: []string{"sk_test_vector"}}, nil)

	d := paystackVectorDelivery()
	d.Header.Del("x-paystack-signature")
	_, err := v.Verify(deliveryRequest(d))
	requireCode(t, err, verify.CodeMissingHeader, verify.PaystackSignatureHeader)

	// A SHA-256-sized or non-hex value is malformed.
	for _, bad := range []string{paystackVectorSig[:64], strings.Repeat("z", 128)} {
		d = paystackVectorDelivery()
		d.Header.Set("x-paystack-signature", bad)
		_, err = v.Verify(deliveryRequest(d))
		requireCode(t, err, verify.CodeMalformedHeader, verify.PaystackSignatureHeader)
	}

	wrong := payMust(t, verify.TypePaystack, verify.Core{Secrets: []string{"sk_test_other"}}, nil)
	_, err = wrong.Verify(deliveryRequest(paystackVectorDelivery()))
	requireCode(t, err, verify.CodeBadSignature, verify.PaystackSignatureHeader)

	d = paystackVectorDelivery()
	d.Body = []byte(paystackVectorBody + " ")
	_, err = v.Verify(deliveryRequest(d))
	requireCode(t, err, verify.CodeBadSignature, verify.PaystackSignatureHeader)

	body := []byte(`{"event":"charge.success","data":{"status":"success"}}`)
	_, err = v.Verify(deliveryRequest(verifytest.PaystackDelivery("sk_test_vector", body)))
	if ve := requireCode(t, err, verify.CodeMissingField, "/data/id"); !ve.Authenticated {
		t.Fatal("want authenticated")
	}

	only := payMust(t, verify.TypePaystack, verify.Core{Secrets: []string{"sk_test_vector"}, AllowedEventTypes: []string{"transfer.*"}}, nil)
	_, err = only.Verify(deliveryRequest(paystackVectorDelivery()))
	requireCode(t, err, verify.CodeEventTypeNotAllowed, "/event")

	_, err = payBuild(verify.TypePaystack, verify.Core{Secrets: []string{" sk_test_vector"}}, nil)
	requireConfigField(t, err, "Secrets[0]")
}

func TestPaystackRotation(t *testing.T) {
	v := payMust(t, verify.TypePaystack, verify.Core{Secrets: []string{"sk_live_new", "sk_test_vector"}}, nil)
	oneDeliveryEvent(t, v, paystackVectorDelivery())
	oneDeliveryEvent(t, v, verifytest.PaystackDelivery("sk_live_new", []byte(paystackVectorBody)))
}

// TestPaystackKey: two events about one transfer are two ids; a retry,
// which resends the body, is one; an object without id is keyed by its
// reference.
func TestPaystackKey(t *testing.T) {
	v := payMust(t, verify.TypePaystack, verify.Core{Secrets: []string{verifytest.PaystackSecret}}, nil)
	failed := verifytest.PaystackTransfer("transfer.failed", 7, "failed", payNow)
	reversed := verifytest.PaystackTransfer("transfer.reversed", 7, "reversed", payNow)
	a := oneDeliveryEvent(t, v, verifytest.PaystackDelivery(verifytest.PaystackSecret, failed))
	b := oneDeliveryEvent(t, v, verifytest.PaystackDelivery(verifytest.PaystackSecret, reversed))
	c := oneDeliveryEvent(t, v, verifytest.PaystackDelivery(verifytest.PaystackSecret, reversed))
	if a.ID == b.ID || b.ID != c.ID {
		t.Fatalf("ids %q %q %q", a.ID, b.ID, c.ID)
	}
	ref := oneDeliveryEvent(t, v, verifytest.PaystackDelivery(verifytest.PaystackSecret, []byte(`{"event":"paymentrequest.success","data":{"reference":"PRQ_1weqqsn2wwzgft8"}}`)))
	if ref.ID != verify.JoinKey("paymentrequest.success", "PRQ_1weqqsn2wwzgft8") {
		t.Fatalf("id %q", ref.ID)
	}
	replayFixture(t, string(verify.TypePaystack))
}
