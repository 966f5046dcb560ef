package verify

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/idempotent-claim/idempotent-claim/sidecar/strictjson"
)

// CalcomSignatureHeader carries Cal.com's webhook signature
// (https://cal.com/docs/developing/guides/automation/webhooks).
const CalcomSignatureHeader = "X-Cal-Signature-256"

// TypeCalcom is Cal.com webhooks.
const TypeCalcom Type = "calcom"

// The "calcom" provider verifies Cal.com webhooks, per
// https://cal.com/docs/developing/guides/automation/webhooks:
//
//   - X-Cal-Signature-256 is the lower-case hex HMAC-SHA256 of the raw body
//     keyed with the webhook's secret; a webhook without a secret is sent
//     unsigned (no header, or the placeholder "no-secret-provided" in older
//     versions): refused as missing or malformed;
//   - Cal.com signs no timestamp: no replay window; several secrets may be
//     configured while one is changed.
//
// The default body is {"triggerEvent": "BOOKING_CREATED", "createdAt",
// "payload": {…, "uid", "bookingId"}}. Cal.com sends no event or delivery
// id, so the key rule joins what names the event: ID is
// JoinKey(triggerEvent, booking, createdAt), the booking being payload.uid,
// else payload.bookingId, else "sha256:" and the digest of the payload's
// canonical JSON (FORM_SUBMITTED, PING…). A webhook with a custom payload
// template that has no triggerEvent is keyed "sha256:" and the hex SHA-256
// of the raw body (Digest), Type "". Type is triggerEvent, ObjectID the
// booking uid.
//
// Redelivery: Cal.com's documentation names no retry policy. Its source
// queues each delivery as a task retried up to 3 attempts with backoff
// (10 s to 10 min,
// https://github.com/calcom/cal.com/blob/main/packages/features/webhooks/lib/tasker/trigger/config.ts)
// and builds every attempt with the trigger's own time as createdAt, so a
// retry keeps the key; whether an endpoint's error answer makes the task
// retry is not documented.
type calcomVerifier struct {
	keys  [][]byte
	types TypeFilter
}

func init() {
	Register(Provider{
		Type: TypeCalcom,
		Name: "Cal.com",
		Docs: []string{
			"https://cal.com/docs/developing/guides/automation/webhooks",
		},
		Build: func(core Core, _ any) (Verifier, error) {
			return &calcomVerifier{keys: secretKeys(core.Secrets), types: core.Types()}, nil
		},
		CredentialHeaders: func(any) []string { return []string{CalcomSignatureHeader} },
		Setup:             Setup{Secrets: "the webhook's secret (Settings → Developer → Webhooks → the webhook → Secret)"},
		Redelivery: Redelivery{
			Key:     "`triggerEvent` + `payload.uid` (else `bookingId`, else payload digest) + `createdAt`; custom templates: body digest",
			Retries: "none documented; the source retries a delivery task up to 3 attempts (10 s to 10 min), createdAt kept",
			Horizon: "forever (createdAt is part of the key)",
			Batches: "no",
			Resends: "no",
		},
	})
}

func (*calcomVerifier) Type() Type { return TypeCalcom }

// calcomMAC is Cal.com's signature: X-Cal-Signature-256 holds the hex
// HMAC-SHA256 of the body under the webhook's secret.
var calcomMAC = macHeader{
	Name:      CalcomSignatureHeader,
	Hash:      sha256.New,
	Malformed: "must be 64 hex digits (the webhook needs a secret in Cal.com)",
	Mismatch:  "signature does not match the body under any configured secret",
}

func (v *calcomVerifier) Verify(r Request) (Result, error) {
	if e := calcomMAC.check(r.Header, v.keys, r.Body); e != nil {
		return Result{}, e
	}
	var ev struct {
		TriggerEvent string         `json:"triggerEvent"`
		CreatedAt    string         `json:"createdAt"`
		Payload      jsontext.Value `json:"payload"`
	}
	if b := bytes.TrimSpace(strictjson.TrimBOM(r.Body)); len(b) == 0 || b[0] != '{' || unmarshalBody(r.Body, &ev) != nil || ev.TriggerEvent == "" {
		// A custom payload template: nothing names the event but the body.
		if err := v.types.Check("", InBody, "/triggerEvent"); err != nil {
			return Result{}, err
		}
		sum := sha256.Sum256(r.Body)
		return Result{Events: []Event{{ID: "sha256:" + hex.EncodeToString(sum[:]), Digest: true}}}, nil
	}
	if err := v.types.Check(ev.TriggerEvent, InBody, "/triggerEvent"); err != nil {
		return Result{}, err
	}
	if ev.CreatedAt == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/createdAt", "the webhook has no createdAt"))
	}
	var p struct {
		UID       flexString `json:"uid"`
		BookingID flexString `json:"bookingId"`
	}
	if len(ev.Payload) > 0 && ev.Payload.Kind() == '{' {
		if e := unmarshalBody(ev.Payload, &p); e != nil {
			e.Field = "/payload" + e.Field
			return Result{}, authenticated(e)
		}
	}
	booking := string(p.UID)
	if booking == "" && p.BookingID != "" {
		booking = "booking:" + string(p.BookingID)
	}
	if booking == "" {
		sum, err := strictjson.Hash(ev.Payload)
		if err != nil {
			return Result{}, authenticated(bodyErr(CodeMissingField, "/payload", "the webhook has no payload to name the event by"))
		}
		booking = "sha256:" + sum
	}
	return Result{Events: []Event{{ID: JoinKey(ev.TriggerEvent, booking, ev.CreatedAt), Type: ev.TriggerEvent, ObjectID: string(p.UID)}}}, nil
}
