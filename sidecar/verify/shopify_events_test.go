package verify_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Shopify's Events deliveries name the webhook headers without the X-
// prefix (https://shopify.dev/docs/apps/build/events/delivery-structure#headers,
// https://shopify.dev/docs/apps/build/events/verify-deliveries). The
// signature below was computed independently with openssl
// (openssl dgst -sha256 -hmac shopify-client-secret-0001 -binary | base64)
// from the documented algorithm: base64 HMAC-SHA256 of the raw body.
const (
	shopifyEvSecret = "shopify-client-secret-0001"
	shopifyEvBody   = `{"id":820982911946154508,"admin_graphql_api_id":"gid://shopify/Order/820982911946154508","total_price":"10.00"}`
	shopifyEvSig    = "jncSIJYakiQaJdVqVslUmSV51etLEriczjmW6e6kPBo="
	shopifyEvID     = "98880550-7158-44d4-b7cd-2c97c8a091b5"
	// shopifyEvKey is JoinKey("orders/create", shopifyEvID).
	shopifyEvKey = "13:orders/create|36:98880550-7158-44d4-b7cd-2c97c8a091b5"
)

// shopifyEvDelivery is the one event with its headers spelled with prefix
// ("X-") or without (""), names as written on the wire.
func shopifyEvDelivery(prefix string) verifytest.Delivery {
	h := http.Header{}
	set := func(name, value string) { h[prefix+name] = []string{value} }
	set("Shopify-Hmac-Sha256", shopifyEvSig)
	set("Shopify-Topic", "orders/create")
	set("Shopify-Event-Id", shopifyEvID)
	set("Shopify-Webhook-Id", "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043")
	set("Shopify-Shop-Domain", "example.myshopify.com")
	set("Shopify-Api-Version", "unstable")
	h["Content-Type"] = []string{"application/json"}
	return verifytest.Delivery{Header: h, Body: []byte(shopifyEvBody)}
}

func TestShopifyEventsHeadersWithoutPrefix(t *testing.T) {
	t.Parallel()
	v := mustBuild(t, verify.TypeShopify, verify.Core{Secrets: []string{shopifyEvSecret}}, nil)

	classic := verifyEvents(t, v, shopifyEvDelivery("X-"))
	events := verifyEvents(t, v, shopifyEvDelivery(""))
	if len(classic) != 1 || len(events) != 1 {
		t.Fatalf("got %d and %d events, want one each", len(classic), len(events))
	}
	want := verify.Event{ID: shopifyEvKey, Type: "orders/create", Scope: "example.myshopify.com",
		ObjectID: "gid://shopify/Order/820982911946154508"}
	for _, ev := range [][]verify.Event{classic, events} {
		if ev[0].ID != want.ID || ev[0].Type != want.Type || ev[0].Scope != want.Scope || ev[0].ObjectID != want.ObjectID {
			t.Fatalf("got %+v, want %+v", ev[0], want)
		}
	}
	if got := verify.JoinKey("orders/create", shopifyEvID); got != shopifyEvKey {
		t.Fatalf("JoinKey = %q, want %q", got, shopifyEvKey)
	}

	t.Run("lower-case names as a proxy may pass them", func(t *testing.T) {
		d := shopifyEvDelivery("")
		low := http.Header{}
		for k, vs := range d.Header {
			low[strings.ToLower(k)] = vs
		}
		d.Header = low
		if evs := verifyEvents(t, v, d); evs[0].ID != shopifyEvKey {
			t.Fatalf("got %q", evs[0].ID)
		}
	})

	t.Run("without an event id the Events webhook id is the key", func(t *testing.T) {
		d := shopifyEvDelivery("")
		d.Header.Del("Shopify-Event-Id")
		if evs := verifyEvents(t, v, d); evs[0].ID != "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043" {
			t.Fatalf("got %q", evs[0].ID)
		}
	})

	t.Run("both spellings with one value are one header", func(t *testing.T) {
		d := shopifyEvDelivery("")
		for k, vs := range shopifyEvDelivery("X-").Header {
			d.Header[k] = vs
		}
		if evs := verifyEvents(t, v, d); evs[0].ID != shopifyEvKey {
			t.Fatalf("got %q", evs[0].ID)
		}
	})

	t.Run("both spellings with different values are refused, naming the header", func(t *testing.T) {
		for _, c := range []struct {
			name, value string
			authed      bool
		}{
			{"Shopify-Hmac-Sha256", verifytest.Shopify("another-secret", []byte(shopifyEvBody)), false},
			{"Shopify-Topic", "orders/paid", true},
			{"Shopify-Event-Id", "0d1c2b3a-0000-4000-8000-000000000001", true},
			{"Shopify-Webhook-Id", "0d1c2b3a-0000-4000-8000-000000000002", true},
			{"Shopify-Shop-Domain", "other.myshopify.com", true},
		} {
			d := shopifyEvDelivery("X-")
			d.Header[c.name] = []string{c.value}
			e := requireRefused(t, v, d, verify.CodeMalformedHeader, verify.InHeader, c.name)
			if e.Authenticated != c.authed {
				t.Errorf("%s: Authenticated = %v, want %v", c.name, e.Authenticated, c.authed)
			}
			if strings.Contains(e.Error(), c.value) {
				t.Errorf("%s: the error echoes the header's value: %v", c.name, e)
			}
		}
	})

	t.Run("missing headers are named as before", func(t *testing.T) {
		d := shopifyEvDelivery("")
		d.Header.Del("Shopify-Hmac-Sha256")
		requireRefused(t, v, d, verify.CodeMissingHeader, verify.InHeader, verify.ShopifyHMACHeader)
		d = shopifyEvDelivery("")
		d.Header.Del("Shopify-Topic")
		requireRefused(t, v, d, verify.CodeMissingHeader, verify.InHeader, verify.ShopifyTopicHeader)
		d = shopifyEvDelivery("")
		d.Header.Del("Shopify-Event-Id")
		d.Header.Del("Shopify-Webhook-Id")
		requireRefused(t, v, d, verify.CodeMissingHeader, verify.InHeader, verify.ShopifyEventIDHeader)
	})

	t.Run("tampered and wrong secret", func(t *testing.T) {
		d := shopifyEvDelivery("")
		d.Body = []byte(strings.Replace(shopifyEvBody, "10.00", "90.00", 1))
		requireRefused(t, v, d, verify.CodeBadSignature, verify.InHeader, "Shopify-Hmac-Sha256")
		other := mustBuild(t, verify.TypeShopify, verify.Core{Secrets: []string{"another-secret"}}, nil)
		requireRefused(t, other, shopifyEvDelivery(""), verify.CodeBadSignature, verify.InHeader, "Shopify-Hmac-Sha256")
		requireRefused(t, other, shopifyEvDelivery("X-"), verify.CodeBadSignature, verify.InHeader, verify.ShopifyHMACHeader)
	})

	t.Run("both signature spellings are credentials", func(t *testing.T) {
		p, _ := verify.Lookup(verify.TypeShopify)
		got := p.CredentialHeaders(nil)
		for _, want := range []string{"X-Shopify-Hmac-Sha256", "Shopify-Hmac-Sha256"} {
			if !slices.ContainsFunc(got, func(h string) bool { return strings.EqualFold(h, want) }) {
				t.Errorf("CredentialHeaders = %v, missing %s", got, want)
			}
		}
	})
}
