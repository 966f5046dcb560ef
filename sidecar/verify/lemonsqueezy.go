package verify

import (
	"crypto/sha256"
)

// Lemon Squeezy webhook headers
// (https://docs.lemonsqueezy.com/help/webhooks/webhook-requests).
const (
	LemonSqueezySignatureHeader = "X-Signature"
	LemonSqueezyEventNameHeader = "X-Event-Name"
)

// TypeLemonSqueezy is Lemon Squeezy's store webhooks.
const TypeLemonSqueezy Type = "lemonsqueezy"

// The "lemonsqueezy" provider verifies Lemon Squeezy webhooks, per
// https://docs.lemonsqueezy.com/help/webhooks/signing-requests:
//
//   - X-Signature is the hex HMAC-SHA256 of the raw body, keyed with the
//     webhook's signing secret (a string of the user's choosing, normally
//     6 to 40 characters, entered when the webhook is created);
//   - Lemon Squeezy signs no timestamp, so there is no replay window;
//   - several secrets may be configured while a webhook's secret is
//     changed.
//
// The body is a JSON:API document
// (https://docs.lemonsqueezy.com/help/webhooks/webhook-requests): meta
// holds event_name (also sent, unsigned, as X-Event-Name, which is not
// read), data the resource the event is about (type, id, attributes).
//
// Key rule: Lemon Squeezy sends no event id, so ID is JoinKey(event_name,
// data.type, data.id, data.attributes.updated_at): the event, the resource
// and the moment the resource last changed. A retry resends the same body,
// so the same key; subscription_created and subscription_updated about one
// subscription differ by name; two subscription_updated events differ by
// updated_at. A resource without updated_at is keyed without it. Type is
// meta.event_name, Scope attributes.store_id, ObjectID data.id.
//
// Redelivery: a delivery answered anything but 200 is retried up to three
// more times with exponential backoff (5 s, 25 s, 125 s), then considered
// failed (https://docs.lemonsqueezy.com/help/webhooks/webhook-requests).
type lemonSqueezyVerifier struct {
	keys  [][]byte
	types TypeFilter
}

func init() {
	Register(Provider{
		Type: TypeLemonSqueezy,
		Name: "Lemon Squeezy",
		Docs: []string{
			"https://docs.lemonsqueezy.com/help/webhooks/signing-requests",
			"https://docs.lemonsqueezy.com/help/webhooks/webhook-requests",
		},
		Build: func(core Core, _ any) (Verifier, error) {
			return &lemonSqueezyVerifier{keys: secretKeys(core.Secrets), types: core.Types()}, nil
		},
		CredentialHeaders: func(any) []string { return []string{LemonSqueezySignatureHeader} },
		AcceptedStatus:    200,
		Setup:             Setup{Secrets: "the webhook's signing secret (Settings → Webhooks → the webhook → Signing secret)"},
		Redelivery: Redelivery{
			Key:     "`meta.event_name` + `data.type` + `data.id` + `data.attributes.updated_at`: Lemon Squeezy sends no event id",
			Retries: "anything but 200 is retried up to 3 more times (5 s, 25 s, 125 s), same body",
			Horizon: "forever (a resource's updated_at names one change)",
			Batches: "no",
			Resends: "no",
		},
	})
}

func (*lemonSqueezyVerifier) Type() Type { return TypeLemonSqueezy }

// lemonsqueezyMAC is Lemon Squeezy's signature: X-Signature holds the hex
// HMAC-SHA256 of the body under the webhook's signing secret.
var lemonsqueezyMAC = macHeader{
	Name:      LemonSqueezySignatureHeader,
	Hash:      sha256.New,
	Malformed: "must be 64 hex digits",
	Mismatch:  "signature does not match the payload under any configured secret",
}

func (v *lemonSqueezyVerifier) Verify(r Request) (Result, error) {
	if e := lemonsqueezyMAC.check(r.Header, v.keys, r.Body); e != nil {
		return Result{}, e
	}
	var doc struct {
		Meta struct {
			EventName string `json:"event_name"`
		} `json:"meta"`
		Data struct {
			Type       string     `json:"type"`
			ID         flexString `json:"id"`
			Attributes struct {
				StoreID   flexString `json:"store_id"`
				UpdatedAt flexString `json:"updated_at"`
			} `json:"attributes"`
		} `json:"data"`
	}
	if e := unmarshalBody(r.Body, &doc); e != nil {
		return Result{}, authenticated(e)
	}
	name := doc.Meta.EventName
	if name == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/meta/event_name", "the event has no name"))
	}
	if err := v.types.Check(name, InBody, "/meta/event_name"); err != nil {
		return Result{}, err
	}
	if doc.Data.Type == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/data/type", "the event's resource has no type"))
	}
	id := string(doc.Data.ID)
	if id == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/data/id", "the event's resource has no id"))
	}
	parts := []string{name, doc.Data.Type, id}
	if u := string(doc.Data.Attributes.UpdatedAt); u != "" {
		parts = append(parts, u)
	}
	return Result{Events: []Event{{ID: JoinKey(parts...), Type: name, Scope: string(doc.Data.Attributes.StoreID), ObjectID: id}}}, nil
}
