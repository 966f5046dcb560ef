package verify

import (
	"crypto/sha256"
)

// TypeformSignatureHeader carries Typeform's webhook signature
// (https://www.typeform.com/developers/webhooks/secure-your-webhooks/).
const TypeformSignatureHeader = "Typeform-Signature"

// TypeTypeform is Typeform webhooks.
const TypeTypeform Type = "typeform"

// The "typeform" provider verifies Typeform webhooks, per
// https://www.typeform.com/developers/webhooks/secure-your-webhooks/:
//
//   - Typeform-Signature is "sha256=" and the standard base64 (not hex) of
//     the HMAC-SHA256 of the raw body keyed with the webhook's secret (set
//     in the Connect > Webhooks panel or with the Webhooks API); several
//     secrets may be configured while one is changed;
//   - Typeform signs no timestamp: no replay window. Deliveries of a webhook
//     without a secret carry no signature and are refused.
//
// The body is an event (https://www.typeform.com/developers/webhooks/example-payload/):
// ID is "event_id" (one per event, kept when Typeform retries), Type
// "event_type" ("form_response", "form_response_partial"), Scope form_response.form_id, ObjectID
// form_response.token (the response's token, the same for one response).
//
// Redelivery (https://www.typeform.com/developers/webhooks/):
// a delivery not answered 2xx within 30 seconds is retried with the same
// event_id: every 2-3 minutes for 10 hours after 429, 408, 503 or 423,
// five times with backoff (5, 10, 20, 60, 120 minutes) after any other
// code; 404 or 410 disables the webhook at once, without a retry.
type typeformVerifier struct {
	keys  [][]byte
	types TypeFilter
}

func init() {
	Register(Provider{
		Type: TypeTypeform,
		Name: "Typeform",
		Docs: []string{
			"https://www.typeform.com/developers/webhooks/secure-your-webhooks/",
			"https://www.typeform.com/developers/webhooks/example-payload/",
			"https://www.typeform.com/developers/webhooks/",
		},
		Build: func(core Core, _ any) (Verifier, error) {
			return &typeformVerifier{keys: secretKeys(core.Secrets), types: core.Types()}, nil
		},
		CredentialHeaders: func(any) []string { return []string{TypeformSignatureHeader} },
		Setup:             Setup{Secrets: "the webhook's secret (the form → Connect → Webhooks → Edit → Secret, or the Webhooks API's `secret`)"},
		Redelivery: Redelivery{
			Key:     "`event_id`",
			Retries: "every 2-3 min for 10 h after 429/408/503/423, else 5 times over about 3.5 h; 404/410 disables the webhook",
			Horizon: "forever (one id per event)",
			Batches: "no",
			Resends: "no",
		},
	})
}

func (*typeformVerifier) Type() Type { return TypeTypeform }

// typeformMAC is Typeform's signature: Typeform-Signature holds "sha256="
// and the base64 HMAC-SHA256 of the body under the webhook's secret.
var typeformMAC = macHeader{
	Name:      TypeformSignatureHeader,
	Prefix:    "sha256=",
	Hash:      sha256.New,
	Base64:    true,
	Malformed: `must be "sha256=" followed by the base64 of a 32-byte HMAC-SHA256`,
	Mismatch:  "signature does not match the body under any configured secret",
}

func (v *typeformVerifier) Verify(r Request) (Result, error) {
	if e := typeformMAC.check(r.Header, v.keys, r.Body); e != nil {
		return Result{}, e
	}
	var ev struct {
		EventID      string `json:"event_id"`
		EventType    string `json:"event_type"`
		FormResponse struct {
			FormID string `json:"form_id"`
			Token  string `json:"token"`
		} `json:"form_response"`
	}
	if e := unmarshalBody(r.Body, &ev); e != nil {
		return Result{}, authenticated(e)
	}
	if ev.EventID == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/event_id", "the event has no event_id"))
	}
	if err := v.types.Check(ev.EventType, InBody, "/event_type"); err != nil {
		return Result{}, err
	}
	return Result{Events: []Event{{ID: ev.EventID, Type: ev.EventType, Scope: ev.FormResponse.FormID, ObjectID: ev.FormResponse.Token}}}, nil
}
