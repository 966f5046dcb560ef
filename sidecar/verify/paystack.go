package verify

import (
	"crypto/sha512"
)

// PaystackSignatureHeader is the header Paystack signs webhook events in
// (https://paystack.com/docs/payments/webhooks/).
const PaystackSignatureHeader = "X-Paystack-Signature"

// TypePaystack is Paystack's webhook events.
const TypePaystack Type = "paystack"

// The "paystack" provider verifies Paystack webhook events, per
// https://paystack.com/docs/payments/webhooks/ (verifying events):
//
//   - x-paystack-signature is the hex HMAC-SHA512 of the raw body, keyed
//     with the account's secret key (sk_live_… or sk_test_…, as shown on the
//     Dashboard's API Keys & Webhooks page);
//   - Paystack signs no timestamp, so there is no replay window;
//   - several secrets may be configured while the secret key is rolled.
//
// Key rule: Paystack's events carry no event id, so ID is JoinKey(event,
// data.id): the event name ("charge.success") and the id of the object it
// is about (the transaction, transfer, refund, subscription…), or
// data.reference when the object has no id. A retry resends the same body,
// so the same key. Most events happen once per object (one
// charge.success per transaction, one transfer.success per transfer); an
// event that can happen again on one object (invoice.update) and carries a
// changed body then reads as a conflict, not a new event: claim such
// events in the workflow on a business key (the invoice's id and its
// status). Type is "event", ObjectID data.id (or data.reference).
//
// Redelivery: an event not answered 200 OK is sent again, the same body,
// on Paystack's retry schedule (same page).
type paystackVerifier struct {
	keys  [][]byte
	types TypeFilter
}

func init() {
	Register(Provider{
		Type: TypePaystack,
		Name: "Paystack",
		Docs: []string{"https://paystack.com/docs/payments/webhooks/"},
		Build: func(core Core, _ any) (Verifier, error) {
			return &paystackVerifier{keys: secretKeys(core.Secrets), types: core.Types()}, nil
		},
		CredentialHeaders: func(any) []string { return []string{PaystackSignatureHeader} },
		Setup:             Setup{Secrets: "the account's secret key (`sk_live_…` or `sk_test_…`; Settings → API Keys & Webhooks)"},
		Redelivery: Redelivery{
			Key:     "`event` + `data.id` (or `data.reference`): Paystack events carry no id",
			Retries: "an event not answered 200 is sent again, same body, on Paystack's retry schedule",
			Horizon: "forever for events that happen once per object; an event that recurs on one object (`invoice.update`) reads as a conflict: claim it on a business key",
			Batches: "no",
			Resends: "no",
		},
	})
}

func (*paystackVerifier) Type() Type { return TypePaystack }

// paystackMAC is Paystack's signature: X-Paystack-Signature holds the hex
// HMAC-SHA512 of the body under the secret key.
var paystackMAC = macHeader{
	Name:      PaystackSignatureHeader,
	Hash:      sha512.New,
	Malformed: "must be 128 hex digits",
	Mismatch:  "signature does not match the payload under any configured secret",
}

func (v *paystackVerifier) Verify(r Request) (Result, error) {
	if e := paystackMAC.check(r.Header, v.keys, r.Body); e != nil {
		return Result{}, e
	}
	var ev struct {
		Event string `json:"event"`
		Data  struct {
			ID        flexString `json:"id"`
			Reference flexString `json:"reference"`
		} `json:"data"`
	}
	if e := unmarshalBody(r.Body, &ev); e != nil {
		return Result{}, authenticated(e)
	}
	if ev.Event == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/event", "the event has no name"))
	}
	if err := v.types.Check(ev.Event, InBody, "/event"); err != nil {
		return Result{}, err
	}
	obj := string(ev.Data.ID)
	if obj == "" {
		obj = string(ev.Data.Reference)
	}
	if obj == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/data/id", "the event's object has neither id nor reference"))
	}
	return Result{Events: []Event{{ID: JoinKey(ev.Event, obj), Type: ev.Event, ObjectID: obj}}}, nil
}
