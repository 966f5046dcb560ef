package verify

import (
	"crypto/sha256"
)

// Razorpay webhook headers
// (https://razorpay.com/docs/webhooks/validate-test/,
// https://razorpay.com/docs/webhooks/best-practices/).
const (
	RazorpaySignatureHeader = "X-Razorpay-Signature"
	RazorpayEventIDHeader   = "X-Razorpay-Event-Id"
)

// TypeRazorpay is Razorpay's payment webhooks.
const TypeRazorpay Type = "razorpay"

// The "razorpay" provider verifies Razorpay webhooks, per
// https://razorpay.com/docs/webhooks/validate-test/:
//
//   - X-Razorpay-Signature is the hex HMAC-SHA256 of the raw body, keyed
//     with the webhook secret chosen when the webhook was set up in the
//     Dashboard (not the API key secret, which signs Checkout callbacks);
//   - Razorpay signs no timestamp, so there is no replay window: a captured
//     delivery is caught by its event id in the claim ledger;
//   - several secrets may be configured: Razorpay signs the retries of an
//     event created before a secret change with the old secret
//     (https://razorpay.com/docs/webhooks/faqs/), so the old one stays
//     configured until those retries are over (24 hours).
//
// Key rule: ID is the X-Razorpay-Event-Id header, the event's id, which
// Razorpay keeps when it delivers the event again
// (https://razorpay.com/docs/webhooks/best-practices/, idempotency). The
// header is not covered by the signature (as GitHub's delivery id is not):
// a replay of a captured body under a forged event id is told apart only by
// the payload hash. Type is the body's "event" ("payment.captured"), Scope
// its "account_id", ObjectID the id of the entity the event "contains"
// first (payload.payment.entity.id for a payment event).
//
// Redelivery: a delivery answered other than 2xx is retried with
// exponential backoff for 24 hours after the event was created; a webhook
// failing for 24 hours is disabled (best practices page).
type razorpayVerifier struct {
	keys  [][]byte
	types TypeFilter
}

func init() {
	Register(Provider{
		Type: TypeRazorpay,
		Name: "Razorpay",
		Docs: []string{
			"https://razorpay.com/docs/webhooks/validate-test/",
			"https://razorpay.com/docs/webhooks/best-practices/",
			"https://razorpay.com/docs/webhooks/faqs/",
		},
		Build: func(core Core, _ any) (Verifier, error) {
			return &razorpayVerifier{keys: secretKeys(core.Secrets), types: core.Types()}, nil
		},
		CredentialHeaders: func(any) []string { return []string{RazorpaySignatureHeader} },
		Setup:             Setup{Secrets: "the webhook secret chosen when the webhook was set up (Dashboard → Account & Settings → Webhooks), not the API key secret"},
		Redelivery: Redelivery{
			Key:     "header `X-Razorpay-Event-Id`",
			Retries: "non-2xx retried with exponential backoff for 24 hours after the event was created, same event id; the webhook is disabled after 24 hours of failures",
			Horizon: "forever (an event id names one event)",
			Batches: "no",
			Resends: "no",
		},
	})
}

func (*razorpayVerifier) Type() Type { return TypeRazorpay }

// razorpayMAC is Razorpay's signature: X-Razorpay-Signature holds the hex
// HMAC-SHA256 of the body under the webhook secret.
var razorpayMAC = macHeader{
	Name:      RazorpaySignatureHeader,
	Hash:      sha256.New,
	Malformed: "must be 64 hex digits",
	Mismatch:  "signature does not match the payload under any configured secret",
}

func (v *razorpayVerifier) Verify(r Request) (Result, error) {
	if e := razorpayMAC.check(r.Header, v.keys, r.Body); e != nil {
		return Result{}, e
	}
	id := header(r.Header, RazorpayEventIDHeader)
	if id == "" {
		return Result{}, authenticated(missingHeader(RazorpayEventIDHeader))
	}
	var ev struct {
		Event     string     `json:"event"`
		AccountID flexString `json:"account_id"`
		Contains  []string   `json:"contains"`
		Payload   map[string]struct {
			Entity struct {
				ID flexString `json:"id"`
			} `json:"entity"`
		} `json:"payload"`
	}
	if e := unmarshalBody(r.Body, &ev); e != nil {
		return Result{}, authenticated(e)
	}
	if ev.Event == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/event", "the event has no type"))
	}
	if err := v.types.Check(ev.Event, InBody, "/event"); err != nil {
		return Result{}, err
	}
	obj := ""
	if len(ev.Contains) > 0 {
		obj = string(ev.Payload[ev.Contains[0]].Entity.ID)
	}
	return Result{Events: []Event{{ID: id, Type: ev.Event, Scope: string(ev.AccountID), ObjectID: obj}}}, nil
}
