package verify

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"time"
)

// AirtableMACHeader carries the MAC of an Airtable webhook notification
// (https://airtable.com/developers/web/api/webhooks-overview).
const AirtableMACHeader = "X-Airtable-Content-MAC"

// TypeAirtable is Airtable webhook notifications.
const TypeAirtable Type = "airtable"

// The "airtable" provider verifies Airtable webhook notifications, per
// https://airtable.com/developers/web/api/webhooks-overview:
//
//   - X-Airtable-Content-MAC is "hmac-sha256=" and the lower-case hex
//     HMAC-SHA256 of the raw body; the key is the webhook's macSecretBase64
//     (returned once, when the webhook is created) base64-DECODED: a
//     source's secrets are the macSecretBase64 strings as Airtable returns
//     them, one per webhook delivering to the source (or old and new while a
//     webhook is recreated);
//   - Airtable signs no timestamp header: no replay window.
//
// A notification is a nudge: {"base": {"id"}, "webhook": {"id"},
// "timestamp"} says that the webhook has new payloads, not what they are.
// The workflow lists them (GET /v0/bases/{baseId}/webhooks/{webhookId}/payloads)
// from the cursor it kept and claims per payload (baseTransactionNumber),
// which is what makes side effects exactly once
// (https://airtable.com/developers/web/api/list-webhook-payloads). Key rule
// for the nudge itself: ID is JoinKey(base.id, webhook.id, timestamp); a
// nudge claimed twice costs one listing that finds nothing new, a nudge
// never claimed delays changes to the next one. Type is "notification",
// Scope base.id, ObjectID webhook.id.
//
// A taken notification is answered 204 with no body (AcceptedStatus):
// Airtable asks for 200 or 204 and an empty body.
//
// Redelivery: a notification that fails is retried (the webhook's
// lastNotificationResult records retryNumber and willBeRetried,
// https://airtable.com/developers/web/api/model/webhooks-notification);
// payloads are deleted after a week whether listed or not, and the cursor
// is never reset.
type airtableVerifier struct {
	keys  [][]byte
	types TypeFilter
}

func init() {
	Register(Provider{
		Type: TypeAirtable,
		Name: "Airtable",
		Docs: []string{
			"https://airtable.com/developers/web/api/webhooks-overview",
			"https://airtable.com/developers/web/api/model/webhooks-notification",
			"https://airtable.com/developers/web/api/list-webhook-payloads",
		},
		Build: func(core Core, _ any) (Verifier, error) {
			keys := make([][]byte, len(core.Secrets))
			for i, s := range core.Secrets {
				k, err := base64.StdEncoding.DecodeString(s)
				if err != nil || len(k) == 0 {
					return nil, &ConfigError{Type: TypeAirtable, Field: "Secrets[" + strconv.Itoa(i) + "]", Reason: "must be the webhook's macSecretBase64 (standard base64) as Airtable returned it"}
				}
				keys[i] = k
			}
			return &airtableVerifier{keys: keys, types: core.Types()}, nil
		},
		CredentialHeaders: func(any) []string { return []string{AirtableMACHeader} },
		AcceptedStatus:    http.StatusNoContent,
		Setup:             Setup{Secrets: "the `macSecretBase64` Airtable returned when the webhook was created (Web API: create webhook)"},
		Redelivery: Redelivery{
			Key:     "nudge: `base.id` + `webhook.id` + `timestamp`; the workflow claims per listed payload (`baseTransactionNumber`)",
			Retries: "a failed notification is retried (retryNumber, willBeRetried); payloads are kept a week",
			Horizon: "forever (the timestamp is part of the key)",
			Batches: "no (one nudge may stand for many payloads, listed by the workflow)",
			Resends: "a nudge says only that payloads exist: never key side effects on it",
		},
	})
}

func (*airtableVerifier) Type() Type { return TypeAirtable }

// airtableMAC is Airtable's notification MAC: X-Airtable-Content-MAC
// holds "hmac-sha256=" and the hex HMAC-SHA256 of the body under the
// webhook's decoded macSecretBase64.
var airtableMAC = macHeader{
	Name:      AirtableMACHeader,
	Prefix:    "hmac-sha256=",
	Hash:      sha256.New,
	Malformed: `must be "hmac-sha256=" followed by 64 hex digits`,
	Mismatch:  "MAC does not match the body under any configured macSecretBase64",
}

func (v *airtableVerifier) Verify(r Request) (Result, error) {
	if e := airtableMAC.check(r.Header, v.keys, r.Body); e != nil {
		return Result{}, e
	}
	var n struct {
		Base struct {
			ID string `json:"id"`
		} `json:"base"`
		Webhook struct {
			ID string `json:"id"`
		} `json:"webhook"`
		Timestamp string `json:"timestamp"`
	}
	if e := unmarshalBody(r.Body, &n); e != nil {
		return Result{}, authenticated(e)
	}
	switch {
	case n.Base.ID == "":
		return Result{}, authenticated(bodyErr(CodeMissingField, "/base/id", "the notification has no base id"))
	case n.Webhook.ID == "":
		return Result{}, authenticated(bodyErr(CodeMissingField, "/webhook/id", "the notification has no webhook id"))
	case n.Timestamp == "":
		return Result{}, authenticated(bodyErr(CodeMissingField, "/timestamp", "the notification has no timestamp"))
	}
	if _, err := time.Parse(time.RFC3339Nano, n.Timestamp); err != nil {
		return Result{}, authenticated(bodyErr(CodeMalformedBody, "/timestamp", "is not an ISO 8601 timestamp"))
	}
	const typ = "notification"
	if err := v.types.Check(typ, InBody, ""); err != nil {
		return Result{}, err
	}
	return Result{Events: []Event{{ID: JoinKey(n.Base.ID, n.Webhook.ID, n.Timestamp), Type: typ, Scope: n.Base.ID, ObjectID: n.Webhook.ID}}}, nil
}
