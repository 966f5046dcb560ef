package verify

import (
	"crypto/sha1" //nolint:gosec // Intercom signs notifications with HMAC-SHA1.
)

// IntercomSignatureHeader carries Intercom's notification signature
// (https://developers.intercom.com/intercom-api-reference/v1.0/reference/signed-notifications).
const IntercomSignatureHeader = "X-Hub-Signature"

// TypeIntercom is Intercom's webhook notifications.
const TypeIntercom Type = "intercom"

// The "intercom" provider verifies Intercom webhook notifications, per
// https://developers.intercom.com/intercom-api-reference/v1.0/reference/signed-notifications:
//
//   - X-Hub-Signature is "sha1=" and the lower-case hex HMAC-SHA1 of the
//     raw body, keyed with the app's client secret (Developer Hub, Basic
//     Info; the subscription's hub_secret in the v1 API's words); Intercom
//     publishes an example request but not the secret it was signed with.
//     Intercom signs nothing else and no timestamp, so there is no
//     replay window: a replay is caught by its notification id;
//   - several client secrets may be configured while one is rotated.
//
// The body is a notification object
// (https://developers.intercom.com/docs/references/webhooks/webhook-models):
// ID is its "id" (notif_…, one per notification, kept when Intercom retries
// it), Type its "topic" ("conversation.user.created", or "ping" for the
// test notification), Scope "app_id", ObjectID data.item.id.
// delivery_attempts, delivery_status and delivered_at describe the
// delivery, not the event, and are volatile.
//
// Redelivery (https://developers.intercom.com/docs/webhooks/webhook-notifications):
// a notification answered with an error is delivered again with the same
// id; Intercom pauses a topic for 15 minutes after 1000 consecutive errors
// in 15 minutes, throttles an endpoint answering 429 with delays from 1
// minute to 2 hours, and suspends a private app's subscription after seven
// days of errors.
type intercomVerifier struct {
	keys  [][]byte
	types TypeFilter
}

func init() {
	Register(Provider{
		Type: TypeIntercom,
		Name: "Intercom",
		Docs: []string{
			"https://developers.intercom.com/intercom-api-reference/v1.0/reference/signed-notifications",
			"https://developers.intercom.com/docs/references/webhooks/webhook-models",
			"https://developers.intercom.com/docs/webhooks/webhook-notifications",
		},
		Build: func(core Core, _ any) (Verifier, error) {
			return &intercomVerifier{keys: secretKeys(core.Secrets), types: core.Types()}, nil
		},
		CredentialHeaders: func(any) []string { return []string{IntercomSignatureHeader} },
		VolatileFields:    []string{"/delivery_attempts", "/delivery_status", "/delivered_at"},
		Setup:             Setup{Secrets: "the app's client secret (Developer Hub → the app → Basic information → Client secret)"},
		Redelivery: Redelivery{
			Key:     "notification `id` (notif_…)",
			Retries: "redelivered with the same id after errors; 429 throttles 1 min to 2 h; a private app's subscription is suspended after 7 days of errors",
			Horizon: "forever (one id per notification)",
			Batches: "no",
			Resends: "no",
		},
	})
}

func (*intercomVerifier) Type() Type { return TypeIntercom }

// intercomMAC is Intercom's signature: X-Hub-Signature holds "sha1=" and
// the hex HMAC-SHA1 of the body under the app's client secret.
var intercomMAC = macHeader{
	Name:      IntercomSignatureHeader,
	Prefix:    "sha1=",
	Hash:      sha1.New,
	Malformed: `must be "sha1=" followed by 40 hex digits`,
	Mismatch:  "signature does not match the body under any configured client secret",
}

func (v *intercomVerifier) Verify(r Request) (Result, error) {
	if e := intercomMAC.check(r.Header, v.keys, r.Body); e != nil {
		return Result{}, e
	}
	var n struct {
		ID    string     `json:"id"`
		Topic string     `json:"topic"`
		AppID flexString `json:"app_id"`
		Data  struct {
			Item struct {
				ID flexString `json:"id"`
			} `json:"item"`
		} `json:"data"`
	}
	if e := unmarshalBody(r.Body, &n); e != nil {
		return Result{}, authenticated(e)
	}
	if n.ID == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/id", "the notification has no id"))
	}
	if n.Topic == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/topic", "the notification has no topic"))
	}
	if err := v.types.Check(n.Topic, InBody, "/topic"); err != nil {
		return Result{}, err
	}
	return Result{Events: []Event{{ID: n.ID, Type: n.Topic, Scope: string(n.AppID), ObjectID: string(n.Data.Item.ID)}}}, nil
}
