package verify_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// wooVectorBody and wooVectorSig are a vector computed from the
// documented algorithm (WC_Webhook::generate_signature: base64 of the raw
// HMAC-SHA256 of the body keyed with the secret) by an independent
// computation, `printf '%s' "$body" | openssl dgst -sha256 -hmac
// wc-vector-secret -binary | base64`; WooCommerce publishes no example
// signature.
const (
	wooVectorBody = `{"id":727,"status":"processing","currency":"USD","date_modified_gmt":"2017-03-22T16:28:08","total":"29.35"}`
	wooVectorSig  = "rreb+w2fQ+70z+QaTWD1qnqG0rddlLMfxzqZZHQXlts="
)

func wooVectorDelivery() verifytest.Delivery {
	h := http.Header{}
	h.Set("X-WC-Webhook-Signature", wooVectorSig)
	h.Set("X-WC-Webhook-Source", "https://shop.example.com/")
	h.Set("X-WC-Webhook-Topic", "order.created")
	h.Set("X-WC-Webhook-ID", "7")
	h.Set("X-WC-Webhook-Delivery-ID", "4a5c6bd3c1a0c9f1d1e58e1a93e7a1f5")
	return verifytest.Delivery{Header: h, Body: []byte(wooVectorBody)}
}

func TestWooCommerceVector(t *testing.T) {
	v := payMust(t, verify.TypeWooCommerce, verify.Core{Secrets: []string{"wc-vector-secret"}}, nil)
	ev := oneDeliveryEvent(t, v, wooVectorDelivery())
	if want := verify.JoinKey("https://shop.example.com/", "order.created", "727", "2017-03-22T16:28:08"); ev.ID != want ||
		ev.Type != "order.created" || ev.Scope != "https://shop.example.com/" || ev.ObjectID != "727" {
		t.Fatalf("event %+v", ev)
	}
	if got := verifytest.WooCommerce("wc-vector-secret", []byte(wooVectorBody)); got != wooVectorSig {
		t.Fatalf("verifytest.WooCommerce = %s", got)
	}
}

// TestWooCommercePing: the unsigned webhook_id=<id> ping is answered 200
// without an event; any other unsigned request is refused.
func TestWooCommercePing(t *testing.T) {
	v := payMust(t, verify.TypeWooCommerce, verify.Core{Secrets: []string{"wc-vector-secret"}}, nil)
	res, err := v.Verify(deliveryRequest(verifytest.WooCommercePing("12")))
	if err != nil || res.Handshake == nil || res.Handshake.Status != http.StatusOK || len(res.Handshake.Body) != 0 || len(res.Events) != 0 {
		t.Fatalf("ping: %+v, %v", res, err)
	}
	for _, body := range []string{"webhook_id=", "webhook_id=12&x=1", "webhook_id=abc", `{"id":1}`, ""} {
		_, err := v.Verify(verify.Request{Header: http.Header{}, Body: []byte(body)})
		requireCode(t, err, verify.CodeMissingHeader, verify.WooCommerceSignatureHeader)
	}
}

func TestWooCommerceRefusals(t *testing.T) {
	v := payMust(t, verify.TypeWooCommerce, verify.Core{Secrets: []string{"wc-vector-secret"}}, nil)

	d := wooVectorDelivery()
	d.Header.Set("X-WC-Webhook-Signature", "rreb+w2fQ+70z+QaTWD1qnqG0rddlLMfxzqZZHQXlt")
	_, err := v.Verify(deliveryRequest(d))
	requireCode(t, err, verify.CodeMalformedHeader, verify.WooCommerceSignatureHeader)

	wrong := payMust(t, verify.TypeWooCommerce, verify.Core{Secrets: []string{"wc-other"}}, nil)
	_, err = wrong.Verify(deliveryRequest(wooVectorDelivery()))
	requireCode(t, err, verify.CodeBadSignature, verify.WooCommerceSignatureHeader)

	// A signed ping body is an ordinary delivery: not JSON.
	body := []byte("webhook_id=7")
	d = verifytest.WooCommerceDelivery("wc-vector-secret", "order.created", body, payNow)
	_, err = v.Verify(deliveryRequest(d))
	requireCode(t, err, verify.CodeMalformedBody, "")

	for _, h := range []string{verify.WooCommerceSourceHeader, verify.WooCommerceTopicHeader} {
		d = wooVectorDelivery()
		d.Header.Del(h)
		_, err = v.Verify(deliveryRequest(d))
		if ve := requireCode(t, err, verify.CodeMissingHeader, h); !ve.Authenticated {
			t.Fatal("want authenticated")
		}
	}
	// The delivery id is needed only when the body cannot key the event.
	d = wooVectorDelivery()
	d.Header.Del(verify.WooCommerceDeliveryIDHeader)
	oneDeliveryEvent(t, v, d)
	d = verifytest.WooCommerceDelivery("wc-vector-secret", "order.deleted", []byte(`{"id":727}`), payNow)
	d.Header.Del(verify.WooCommerceDeliveryIDHeader)
	_, err = v.Verify(deliveryRequest(d))
	requireCode(t, err, verify.CodeMissingHeader, verify.WooCommerceDeliveryIDHeader)

	only := payMust(t, verify.TypeWooCommerce, verify.Core{Secrets: []string{"wc-vector-secret"}, AllowedEventTypes: []string{"product.*"}}, nil)
	_, err = only.Verify(deliveryRequest(wooVectorDelivery()))
	requireCode(t, err, verify.CodeEventTypeNotAllowed, verify.WooCommerceTopicHeader)
}

func TestWooCommerceRotation(t *testing.T) {
	v := payMust(t, verify.TypeWooCommerce, verify.Core{Secrets: []string{"wc-new", "wc-vector-secret"}}, nil)
	oneDeliveryEvent(t, v, wooVectorDelivery())
	oneDeliveryEvent(t, v, verifytest.WooCommerceDelivery("wc-new", "order.created", []byte(wooVectorBody), payNow))
}

// TestWooCommerceKey: one order created and updated in one second is two
// events; one change delivered twice (new delivery ids) is one; two
// changes of one order are two; deletions and action topics fall back on
// the delivery id.
func TestWooCommerceKey(t *testing.T) {
	s := verifytest.WooCommerceSecret
	v := payMust(t, verify.TypeWooCommerce, verify.Core{Secrets: []string{s}}, nil)
	o := verifytest.WooCommerceOrder(1, "processing", payNow)
	created := oneDeliveryEvent(t, v, verifytest.WooCommerceDelivery(s, "order.created", o, payNow))
	updated := oneDeliveryEvent(t, v, verifytest.WooCommerceDelivery(s, "order.updated", o, payNow))
	again := oneDeliveryEvent(t, v, verifytest.WooCommerceDelivery(s, "order.updated", o, payNow.Add(3*time.Second)))
	later := oneDeliveryEvent(t, v, verifytest.WooCommerceDelivery(s, "order.updated", verifytest.WooCommerceOrder(1, "completed", payNow.Add(time.Minute)), payNow.Add(time.Minute)))
	if created.ID == updated.ID || updated.ID != again.ID || later.ID == updated.ID {
		t.Fatalf("ids %q %q %q %q", created.ID, updated.ID, again.ID, later.ID)
	}
	del1 := oneDeliveryEvent(t, v, verifytest.WooCommerceDelivery(s, "order.deleted", []byte(`{"id":1}`), payNow))
	del2 := oneDeliveryEvent(t, v, verifytest.WooCommerceDelivery(s, "order.deleted", []byte(`{"id":1}`), payNow.Add(time.Hour)))
	act := oneDeliveryEvent(t, v, verifytest.WooCommerceDelivery(s, "action.woocommerce_add_to_cart", []byte(`{"action":"woocommerce_add_to_cart","arg":"3c59dc048e8850243be8079a5c74d079"}`), payNow))
	if del1.ID == del2.ID || del1.ObjectID != "1" || act.ObjectID != "" || act.ID == del1.ID {
		t.Fatalf("ids %q %q %q", del1.ID, del2.ID, act.ID)
	}
	replayFixture(t, string(verify.TypeWooCommerce))
}
