package verify

import (
	"crypto/sha256"
	"net/url"
	"strings"
)

// Square webhook headers
// (https://developer.squareup.com/docs/webhooks/step2subscribe,
// https://developer.squareup.com/docs/webhooks/step3validate).
const (
	SquareSignatureHeader       = "X-Square-Hmacsha256-Signature"
	SquareLegacySignatureHeader = "X-Square-Signature"
	SquareRetryNumberHeader     = "Square-Retry-Number"
	SquareRetryReasonHeader     = "Square-Retry-Reason"
	SquareInitialDeliveryHeader = "Square-Initial-Delivery-Timestamp"
)

// TypeSquare is Square's webhook event notifications.
const TypeSquare Type = "square"

// SquareOptions are the options of a "square" source.
type SquareOptions struct {
	// NotificationURL is the subscription's notification URL exactly as it
	// is entered in the Developer Console (an absolute https URL): Square
	// signs it with the body, byte for byte, so it is never rebuilt from
	// the request's Host or X-Forwarded-* headers. Required.
	NotificationURL string `required:"true" doc:"the subscription's notification URL exactly as entered (Square signs it)"`
}

// The "square" provider verifies Square webhook event notifications, per
// https://developer.squareup.com/docs/webhooks/step3validate:
//
//   - x-square-hmacsha256-signature is the base64 HMAC-SHA256 of the
//     notification URL followed directly by the raw body, keyed with the
//     subscription's signature key (its text, used as is);
//   - the legacy x-square-signature (HMAC-SHA1) is never accepted: a
//     delivery carrying only it is refused as missing the SHA-256 header;
//   - Square signs no timestamp, so there is no replay window;
//   - several signature keys may be configured while a subscription's key
//     is replaced.
//
// Key rule: ID is the body's event_id, the idempotency value Square puts in
// every notification and keeps on its retries
// (https://developer.squareup.com/docs/webhooks/step4manage). Type is the
// body's type ("payment.updated"), Scope merchant_id, ObjectID data.id.
//
// Redelivery: a notification not answered 2xx within 10 seconds is
// retried for up to 72 hours after the event (after 1, 2, 4, 8, 16 and 32
// minutes, then hourly), the same body, with square-retry-number,
// square-retry-reason and square-initial-delivery-timestamp set
// (https://developer.squareup.com/docs/webhooks-api/delivery-sla); those
// headers are not signed and not part of the key.
type squareVerifier struct {
	keys  [][]byte
	url   []byte
	types TypeFilter
}

func init() {
	Register(Provider{
		Type: TypeSquare,
		Name: "Square",
		Docs: []string{
			"https://developer.squareup.com/docs/webhooks/step3validate",
			"https://developer.squareup.com/docs/webhooks/step2subscribe",
			"https://developer.squareup.com/docs/webhooks/step4manage",
			"https://developer.squareup.com/docs/webhooks-api/delivery-sla",
		},
		Options: func() any { return &SquareOptions{} },
		Build: func(core Core, opts any) (Verifier, error) {
			o, _ := opts.(*SquareOptions)
			if o == nil {
				o = &SquareOptions{}
			}
			if err := validateSquareURL(o.NotificationURL); err != nil {
				return nil, err
			}
			return &squareVerifier{keys: secretKeys(core.Secrets), url: []byte(o.NotificationURL), types: core.Types()}, nil
		},
		CredentialHeaders: func(any) []string { return []string{SquareSignatureHeader, SquareLegacySignatureHeader} },
		Setup:             Setup{Secrets: "the subscription's signature key (Developer Console → the app → Webhooks → Subscriptions → the subscription → Signature key)"},
		Redelivery: Redelivery{
			Key:     "body `event_id`",
			Retries: "not 2xx within 10 s: retried up to 72 hours after the event (1, 2, 4, 8, 16, 32 min, then hourly), same body, `square-retry-number` set",
			Horizon: "forever (event_id is Square's idempotency value)",
			Batches: "no",
			Resends: "no",
		},
		// https://developer.squareup.com/docs/webhooks-api/delivery-sla:
		// a retry carries square-retry-number and square-retry-reason.
		RetryHeaders: []string{"square-retry-number", "square-retry-reason"},
	})
}

func validateSquareURL(s string) error {
	const field = "NotificationURL"
	if s == "" {
		return &ConfigError{Type: TypeSquare, Field: field, Reason: "is required: the subscription's notification URL, exactly as entered in the Developer Console (Square signs it)"}
	}
	if strings.TrimSpace(s) != s {
		return &ConfigError{Type: TypeSquare, Field: field, Reason: "has leading or trailing whitespace"}
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return &ConfigError{Type: TypeSquare, Field: field, Reason: "must be an absolute https URL (Square sends notifications over HTTPS only)"}
	}
	return nil
}

func (*squareVerifier) Type() Type { return TypeSquare }

// squareMAC is Square's signature: x-square-hmacsha256-signature holds the
// base64 HMAC-SHA256 of the notification URL followed by the body, under
// the subscription's signature key.
var squareMAC = macHeader{
	Name:      SquareSignatureHeader,
	Hash:      sha256.New,
	Base64:    true,
	Malformed: "must be the base64 of 32 bytes",
	Mismatch:  "signature does not match the notification URL and payload under any configured signature key",
}

func (v *squareVerifier) Verify(r Request) (Result, error) {
	if header(r.Header, SquareSignatureHeader) == "" && header(r.Header, SquareLegacySignatureHeader) != "" {
		return Result{}, headerErr(CodeMissingHeader, SquareSignatureHeader, "only the legacy HMAC-SHA1 x-square-signature is present; x-square-hmacsha256-signature is required")
	}
	if e := squareMAC.check(r.Header, v.keys, v.url, r.Body); e != nil {
		return Result{}, e
	}
	return v.Identify(r.Header, r.Body)
}

// Identify implements [Identifier]: the identity from the notification's
// JSON, which is also the shape of an event SearchEvents returns
// (https://developer.squareup.com/reference/square/events-api/SearchEvents).
func (v *squareVerifier) Identify(_ Header, body []byte) (Result, error) {
	var ev struct {
		MerchantID flexString `json:"merchant_id"`
		Type       string     `json:"type"`
		EventID    flexString `json:"event_id"`
		Data       struct {
			ID flexString `json:"id"`
		} `json:"data"`
	}
	if e := unmarshalBody(body, &ev); e != nil {
		return Result{}, authenticated(e)
	}
	if ev.EventID == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/event_id", "the notification has no event_id"))
	}
	if err := v.types.Check(ev.Type, InBody, "/type"); err != nil {
		return Result{}, err
	}
	return Result{Events: []Event{{ID: string(ev.EventID), Type: ev.Type, Scope: string(ev.MerchantID), ObjectID: string(ev.Data.ID)}}}, nil
}
