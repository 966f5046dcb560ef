package verify_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// lemonVectorBody and lemonVectorSig are a vector computed from the
// documented algorithm
// (https://docs.lemonsqueezy.com/help/webhooks/signing-requests: the hex
// HMAC-SHA256 digest of the raw body keyed with the signing secret) by an
// independent computation, `printf '%s' "$body" | openssl dgst -sha256
// -hmac lemon-vector-secret`; Lemon Squeezy publishes no example
// signature.
const (
	lemonVectorBody = `{"meta":{"event_name":"order_created","test_mode":true},"data":{"type":"orders","id":"1","attributes":{"store_id":1,"identifier":"636f855c-1fb9-4c07-b75c-3a10afef010a","order_number":1,"status":"paid","total":1199,"created_at":"2021-08-17T09:45:53.000000Z","updated_at":"2021-08-17T09:45:53.000000Z"}}}`
	lemonVectorSig  = "e9fcddbd11f40e0ffd0c76bae21911f5e69aa516725b1f5563ceef6be81b2d28"
)

func lemonVectorDelivery() verifytest.Delivery {
	h := http.Header{}
	h.Set("X-Signature", lemonVectorSig)
	h.Set("X-Event-Name", "order_created")
	return verifytest.Delivery{Header: h, Body: []byte(lemonVectorBody)}
}

func TestLemonSqueezyVector(t *testing.T) {
	v := payMust(t, verify.TypeLemonSqueezy, verify.Core{Secrets: []string{"lemon-vector-secret"}}, nil)
	ev := oneDeliveryEvent(t, v, lemonVectorDelivery())
	if want := verify.JoinKey("order_created", "orders", "1", "2021-08-17T09:45:53.000000Z"); ev.ID != want || ev.Type != "order_created" || ev.ObjectID != "1" || ev.Scope != "1" {
		t.Fatalf("event %+v", ev)
	}
	if got := verifytest.LemonSqueezy("lemon-vector-secret", []byte(lemonVectorBody)); got != lemonVectorSig {
		t.Fatalf("verifytest.LemonSqueezy = %s", got)
	}
}

func TestLemonSqueezyRefusals(t *testing.T) {
	v := payMust(t, verify.TypeLemonSqueezy, verify.Core{Secrets: []string{"lemon-vector-secret"}}, nil)

	d := lemonVectorDelivery()
	d.Header.Del("X-Signature")
	_, err := v.Verify(deliveryRequest(d))
	requireCode(t, err, verify.CodeMissingHeader, "X-Signature")

	d = lemonVectorDelivery()
	d.Header.Set("X-Signature", "sha256="+lemonVectorSig)
	_, err = v.Verify(deliveryRequest(d))
	requireCode(t, err, verify.CodeMalformedHeader, "X-Signature")

	wrong := payMust(t, verify.TypeLemonSqueezy, verify.Core{Secrets: []string{"not-the-secret"}}, nil)
	_, err = wrong.Verify(deliveryRequest(lemonVectorDelivery()))
	requireCode(t, err, verify.CodeBadSignature, "X-Signature")

	// The unsigned X-Event-Name is not read: the signed body names the
	// event.
	d = lemonVectorDelivery()
	d.Header.Set("X-Event-Name", "order_refunded")
	if ev := oneDeliveryEvent(t, v, d); ev.Type != "order_created" {
		t.Fatalf("type %q", ev.Type)
	}

	for body, field := range map[string]string{
		`{"meta":{},"data":{"type":"orders","id":"1"}}`:                            "/meta/event_name",
		`{"meta":{"event_name":"order_created"},"data":{"id":"1"}}`:                "/data/type",
		`{"meta":{"event_name":"order_created"},"data":{"type":"orders"}}`:         "/data/id",
		`{"meta":{"event_name":"order_created"},"data":{"type":"orders","id":""}}`: "/data/id",
	} {
		_, err = v.Verify(deliveryRequest(verifytest.LemonSqueezyDelivery("lemon-vector-secret", "x", []byte(body))))
		if ve := requireCode(t, err, verify.CodeMissingField, field); !ve.Authenticated {
			t.Fatalf("%s: want authenticated", body)
		}
	}

	only := payMust(t, verify.TypeLemonSqueezy, verify.Core{Secrets: []string{"lemon-vector-secret"}, AllowedEventTypes: []string{"subscription_*"}}, nil)
	_, err = only.Verify(deliveryRequest(lemonVectorDelivery()))
	requireCode(t, err, verify.CodeEventTypeNotAllowed, "/meta/event_name")
}

func TestLemonSqueezyRotation(t *testing.T) {
	v := payMust(t, verify.TypeLemonSqueezy, verify.Core{Secrets: []string{"lemon-new-secret", "lemon-vector-secret"}}, nil)
	oneDeliveryEvent(t, v, lemonVectorDelivery())
	oneDeliveryEvent(t, v, verifytest.LemonSqueezyDelivery("lemon-new-secret", "order_created", []byte(lemonVectorBody)))
}

// TestLemonSqueezyKey: created and updated at one moment are two events,
// two updates at different moments are two, a retry (same body) is one.
func TestLemonSqueezyKey(t *testing.T) {
	s := verifytest.LemonSqueezySecret
	v := payMust(t, verify.TypeLemonSqueezy, verify.Core{Secrets: []string{s}}, nil)
	created := oneDeliveryEvent(t, v, verifytest.LemonSqueezyDelivery(s, "subscription_created", verifytest.LemonSqueezySubscription("subscription_created", "9", "active", payNow)))
	upd1 := oneDeliveryEvent(t, v, verifytest.LemonSqueezyDelivery(s, "subscription_updated", verifytest.LemonSqueezySubscription("subscription_updated", "9", "active", payNow)))
	upd2 := oneDeliveryEvent(t, v, verifytest.LemonSqueezyDelivery(s, "subscription_updated", verifytest.LemonSqueezySubscription("subscription_updated", "9", "cancelled", payNow.Add(time.Minute))))
	again := oneDeliveryEvent(t, v, verifytest.LemonSqueezyDelivery(s, "subscription_updated", verifytest.LemonSqueezySubscription("subscription_updated", "9", "cancelled", payNow.Add(time.Minute))))
	if created.ID == upd1.ID || upd1.ID == upd2.ID || upd2.ID != again.ID {
		t.Fatalf("ids %q %q %q %q", created.ID, upd1.ID, upd2.ID, again.ID)
	}
	replayFixture(t, string(verify.TypeLemonSqueezy))
}
