package verify

import (
	"crypto/sha256"
	"time"
)

// Linear webhook headers (https://linear.app/developers/webhooks).
const (
	LinearSignatureHeader = "Linear-Signature"
	LinearDeliveryHeader  = "Linear-Delivery"
	LinearEventHeader     = "Linear-Event"
)

// LinearTolerance is the replay window Linear documents for
// webhookTimestamp ("within a minute", https://linear.app/developers/webhooks#securing-webhooks;
// the SDK's LinearWebhookClient.verify refuses more than 60 s either way,
// https://github.com/linear/linear/blob/master/packages/sdk/src/webhooks/client.ts).
const LinearTolerance = 60 * time.Second

// TypeLinear is the "linear" provider: Linear workspace and OAuth app
// webhooks.
//
// Verification, per https://linear.app/developers/webhooks#securing-webhooks:
// Linear-Signature is the hex HMAC-SHA256 of the raw body keyed with the
// webhook's signing secret (several may be configured while one is
// changed), and the body's webhookTimestamp (unix milliseconds) must be
// within Tolerance of the clock ([LinearTolerance], 60 s, unless the
// source sets tolerance_seconds). The
// timestamp is inside the signed body, so it cannot be moved without
// breaking the signature.
//
// Identity: every attempt is stamped afresh (a retry an hour later could
// not pass the 60 s window otherwise), so /webhookTimestamp is volatile: a
// retry of one event is a duplicate, not a conflict. ID comes from the
// signed body: JoinKey(organizationId, type, action, data.id, createdAt),
// createdAt being "the time the action took place", so two changes to one
// issue are two events and every attempt of one change is one. Payloads
// without data.id (agent session events, app notifications) are keyed by
// the Linear-Delivery header. Type is type and action ("Issue.update"),
// Scope organizationId, ObjectID data.id.
//
// Redelivery: a delivery not answered with 200 within 5 seconds is retried
// up to 3 times, after 1 minute, 1 hour and 6 hours
// (https://linear.app/developers/webhooks).
const TypeLinear Type = "linear"

func init() {
	Register(Provider{
		Type: TypeLinear,
		Name: "Linear",
		Docs: []string{
			"https://linear.app/developers/webhooks",
			"https://github.com/linear/linear/blob/master/packages/sdk/src/webhooks/client.ts",
		},
		DefaultTolerance: LinearTolerance,
		Build: func(core Core, _ any) (Verifier, error) {
			return &linearVerifier{keys: secretKeys(core.Secrets), tol: core.Tolerance, now: core.Now, types: core.Types()}, nil
		},
		SignsTimestamp:    true,
		CredentialHeaders: func(any) []string { return []string{LinearSignatureHeader} },
		VolatileFields:    []string{"/webhookTimestamp"},
		Setup:             Setup{Secrets: "the webhook's signing secret (Settings → API → Webhooks → the webhook)"},
		Redelivery: Redelivery{
			Key:     "`organizationId` + `type` + `action` + `data.id` + `createdAt` (body, signed); else `Linear-Delivery`",
			Retries: "up to 3 retries, after 1 minute, 1 hour and 6 hours; `webhookTimestamp` re-stamped (volatile)",
			Horizon: "forever (entity id + event time)",
			Batches: "no",
			Resends: "no",
		},
	})
}

type linearVerifier struct {
	keys  [][]byte
	tol   time.Duration
	now   func() time.Time
	types TypeFilter
}

func (*linearVerifier) Type() Type { return TypeLinear }

// linearMAC is Linear's signature: Linear-Signature holds the hex
// HMAC-SHA256 of the body under the webhook's signing secret.
var linearMAC = macHeader{
	Name:      LinearSignatureHeader,
	Hash:      sha256.New,
	Malformed: "must be 64 hex digits",
	Mismatch:  "signature does not match the payload under any configured secret",
}

func (v *linearVerifier) Verify(r Request) (Result, error) {
	if e := linearMAC.check(r.Header, v.keys, r.Body); e != nil {
		return Result{}, e
	}
	var body struct {
		WebhookTimestamp *int64 `json:"webhookTimestamp"`
		Type             string `json:"type"`
		Action           string `json:"action"`
		CreatedAt        string `json:"createdAt"`
		OrganizationID   string `json:"organizationId"`
		Data             struct {
			ID flexString `json:"id"`
		} `json:"data"`
	}
	if e := unmarshalBody(r.Body, &body); e != nil {
		return Result{}, e
	}
	if body.WebhookTimestamp == nil {
		return Result{}, bodyErr(CodeMissingField, "/webhookTimestamp", "the signed body has no webhookTimestamp")
	}
	ts := time.UnixMilli(*body.WebhookTimestamp)
	if now := v.now(); !within(now, ts, v.tol) {
		return Result{}, windowErr(InBody, "/webhookTimestamp", now, ts, v.tol)
	}
	if body.Type == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/type", "the payload has no type"))
	}
	typ := body.Type
	if body.Action != "" {
		typ += "." + body.Action
	}
	var id string
	switch {
	case body.Data.ID != "" && body.CreatedAt != "":
		id = JoinKey(body.OrganizationID, body.Type, body.Action, string(body.Data.ID), body.CreatedAt)
	default:
		id = header(r.Header, LinearDeliveryHeader)
		if id == "" {
			return Result{}, authenticated(headerErr(CodeMissingHeader, LinearDeliveryHeader, "the payload has no data.id and createdAt, and the delivery no Linear-Delivery"))
		}
	}
	if err := v.types.Check(typ, InBody, "/type"); err != nil {
		return Result{}, err
	}
	return Result{Events: []Event{{ID: id, Type: typ, Scope: body.OrganizationID, ObjectID: string(body.Data.ID), Timestamp: ts}}}, nil
}
