package verify

import (
	"crypto/sha256"
	"encoding/base64"
)

// Shopify webhook headers
// (https://shopify.dev/docs/apps/build/webhooks/subscribe/https#step-2-validate-the-origin-of-your-webhook-to-ensure-its-coming-from-shopify,
// https://shopify.dev/docs/apps/build/webhooks/ignore-duplicates).
const (
	ShopifyHMACHeader      = "X-Shopify-Hmac-Sha256"
	ShopifyEventIDHeader   = "X-Shopify-Event-Id"
	ShopifyWebhookIDHeader = "X-Shopify-Webhook-Id"
	ShopifyTopicHeader     = "X-Shopify-Topic"
	ShopifyShopHeader      = "X-Shopify-Shop-Domain"
)

// The same headers as Shopify's Events deliveries name them, without the X-
// prefix (https://shopify.dev/docs/apps/build/events/delivery-structure#headers,
// https://shopify.dev/docs/apps/build/events/verify-deliveries).
const (
	ShopifyEventsHMACHeader      = "Shopify-Hmac-Sha256"
	ShopifyEventsEventIDHeader   = "Shopify-Event-Id"
	ShopifyEventsWebhookIDHeader = "Shopify-Webhook-Id"
	ShopifyEventsTopicHeader     = "Shopify-Topic"
	ShopifyEventsShopHeader      = "Shopify-Shop-Domain"
)

// The "shopify" provider type, per
// https://shopify.dev/docs/apps/build/webhooks/subscribe/https#step-2-validate-the-origin-of-your-webhook-to-ensure-its-coming-from-shopify:
//
//   - X-Shopify-Hmac-Sha256 is the base64 HMAC-SHA256 of the raw body, keyed
//     with the app's client secret (any header spelling: names are
//     case-insensitive);
//   - the body must be the exact bytes Shopify sent (its JSON escapes such as
//     "\/" and "\u003c" do not survive a parse and re-serialise).
//
// Shopify signs no timestamp and none of its headers, so there is no replay
// window; duplicates are caught by the event id in the claim ledger.
//
// The identity: ID is JoinKey(X-Shopify-Topic, X-Shopify-Event-Id). The
// event id is "shared across all deliveries produced by the same merchant
// action" (https://shopify.dev/docs/apps/build/webhooks/delivery-structure):
// the same for every subscription to one topic and across retries
// (https://shopify.dev/docs/apps/build/webhooks/ignore-duplicates), but one
// action can also produce deliveries on several topics (orders/create and
// orders/paid, products/create and products/update), which are distinct
// events for a source subscribed to both; so the topic is part of the key.
// Without an event id, ID is X-Shopify-Webhook-Id ("a unique composite key
// per delivery"). A delivery without X-Shopify-Topic, which Shopify sends on
// every delivery, is refused (authenticated missing_header): the key would
// lack a part. Type is X-Shopify-Topic, Scope is X-Shopify-Shop-Domain,
// ObjectID is the body's admin_graphql_api_id (or id).
//
// Shopify's Events deliveries send the same headers without the X- prefix
// (Shopify-Hmac-Sha256, Shopify-Event-Id, Shopify-Webhook-Id, Shopify-Topic,
// Shopify-Shop-Domain: https://shopify.dev/docs/apps/build/events/delivery-structure#headers,
// https://shopify.dev/docs/apps/build/events/verify-deliveries), signed the
// same way. Every header is read under either spelling, so one event gets
// one key whichever spelling carried it. A delivery that carries both
// spellings of one header with different values names two things at once
// and is refused (malformed_header naming the un-prefixed spelling;
// authenticated when the signature was good), never read as either. Both
// signature spellings are credential headers.
func init() {
	Register(Provider{
		Type: TypeShopify,
		Name: "Shopify",
		Docs: []string{
			"https://shopify.dev/docs/apps/build/webhooks/subscribe/https#step-2-validate-the-origin-of-your-webhook-to-ensure-its-coming-from-shopify",
			"https://shopify.dev/docs/apps/build/webhooks/delivery-structure",
			"https://shopify.dev/docs/apps/build/webhooks/ignore-duplicates",
			"https://shopify.dev/docs/apps/build/events/delivery-structure#headers",
			"https://shopify.dev/docs/apps/build/events/verify-deliveries",
		},
		Build:             buildShopify,
		CredentialHeaders: func(any) []string { return []string{ShopifyHMACHeader, ShopifyEventsHMACHeader} },
		Setup:             Setup{Secrets: "the app's client secret (Partner Dashboard or Dev Dashboard → the app → Client credentials); for webhooks made in the store admin, the key shown under Settings → Notifications → Webhooks"},
		Redelivery: Redelivery{
			Key:     "`X-Shopify-Topic` + `X-Shopify-Event-Id`; without an event id, `X-Shopify-Webhook-Id` (Events deliveries: the same headers without `X-`)",
			Retries: "8 times over 4 hours, keeping both ids",
			Horizon: "forever",
			Batches: "no",
			Resends: "a second subscription to one topic sends the event under a new `X-Shopify-Webhook-Id` and the same event id: a duplicate, as Shopify wants",
		},
	})
}

func buildShopify(c Core, _ any) (Verifier, error) {
	return &shopifyVerifier{keys: secretKeys(c.Secrets), types: newTypeFilter(c.AllowedEventTypes)}, nil
}

type shopifyVerifier struct {
	keys  [][]byte
	types typeFilter
}

func (*shopifyVerifier) Type() Type { return TypeShopify }

func (v *shopifyVerifier) Verify(r Request) (Result, error) {
	raw, sigHeader, e := shopifyHeader(r.Header, ShopifyHMACHeader, ShopifyEventsHMACHeader)
	if e != nil {
		return Result{}, e
	}
	if raw == "" {
		return Result{}, headerErr(CodeMissingHeader, ShopifyHMACHeader, "neither X-Shopify-Hmac-Sha256 nor Shopify-Hmac-Sha256 is present")
	}
	sig, err := base64.StdEncoding.DecodeString(raw)
	if err != nil || len(sig) != sha256.Size {
		return Result{}, headerErr(CodeMalformedHeader, sigHeader, "must be the standard base64 of a 32-byte HMAC-SHA256")
	}
	if !anyMACMatches(sha256.New, v.keys, [][]byte{sig}, r.Body) {
		return Result{}, headerErr(CodeBadSignature, sigHeader, "signature does not match the payload under any configured secret")
	}
	// Shopify signs none of its headers: from here on every failure is
	// authenticated (the body is Shopify's).
	var vals [4]string
	var names [4]string
	for i, pair := range [4][2]string{
		{ShopifyEventIDHeader, ShopifyEventsEventIDHeader},
		{ShopifyWebhookIDHeader, ShopifyEventsWebhookIDHeader},
		{ShopifyTopicHeader, ShopifyEventsTopicHeader},
		{ShopifyShopHeader, ShopifyEventsShopHeader},
	} {
		if vals[i], names[i], e = shopifyHeader(r.Header, pair[0], pair[1]); e != nil {
			return Result{}, authenticated(e)
		}
	}
	eventID, webhookID, topic, shop := vals[0], vals[1], vals[2], vals[3]
	if eventID == "" && webhookID == "" {
		return Result{}, authenticated(headerErr(CodeMissingHeader, ShopifyEventIDHeader, "neither X-Shopify-Event-Id nor X-Shopify-Webhook-Id (nor their Events spellings without X-) is present"))
	}
	if topic == "" {
		return Result{}, authenticated(headerErr(CodeMissingHeader, ShopifyTopicHeader, "Shopify names the topic of every delivery (X-Shopify-Topic, or Shopify-Topic in Events deliveries); the key needs it"))
	}
	if err := v.types.check(topic, InHeader, names[2]); err != nil {
		return Result{}, err
	}
	// One merchant action shares its event id across the topics it
	// triggers: the topic tells those events apart.
	id := webhookID
	if eventID != "" {
		id = JoinKey(topic, eventID)
	}
	var body struct {
		GID string     `json:"admin_graphql_api_id"`
		ID  flexString `json:"id"`
	}
	if firstNonSpace(r.Body) == '{' {
		// The object id is informational, but an ambiguous body is refused
		// all the same: its payload hash could not be exact.
		if e := unmarshalBody(r.Body, &body); e != nil {
			return Result{}, authenticated(e)
		}
	}
	obj := body.GID
	if obj == "" {
		obj = string(body.ID)
	}
	return Result{Events: []Event{{ID: id, Type: topic, Scope: shop, ObjectID: obj}}}, nil
}

// shopifyHeader returns the value of the header named classic (an
// X-Shopify-… name) or of its Events spelling events (the same name
// without X-), and the name it was read under (classic when neither is
// present). When both are present with different values it returns a
// malformed_header *Error naming events: the delivery names two values
// for one header, and neither is picked.
func shopifyHeader(h Header, classic, events string) (value, name string, err *Error) {
	x, ev := header(h, classic), header(h, events)
	switch {
	case x != "" && ev != "" && x != ev:
		return "", events, headerErr(CodeMalformedHeader, events, "is present beside "+classic+" with another value; a delivery names one value, under either spelling")
	case x != "":
		return x, classic, nil
	case ev != "":
		return ev, events, nil
	}
	return "", classic, nil
}
