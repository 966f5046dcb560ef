package verify

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"time"
)

// Zendesk webhook request headers
// (https://developer.zendesk.com/documentation/webhooks/verifying/).
const (
	ZendeskSignatureHeader    = "X-Zendesk-Webhook-Signature"
	ZendeskTimestampHeader    = "X-Zendesk-Webhook-Signature-Timestamp"
	ZendeskInvocationIDHeader = "X-Zendesk-Webhook-Invocation-Id"
	ZendeskWebhookIDHeader    = "X-Zendesk-Webhook-Id"
	ZendeskAccountIDHeader    = "X-Zendesk-Account-Id"
)

// TypeZendesk is Zendesk webhooks (trigger, automation and event
// subscription webhooks).
const TypeZendesk Type = "zendesk"

// The "zendesk" provider verifies Zendesk webhook requests, per
// https://developer.zendesk.com/documentation/webhooks/verifying/:
//
//   - X-Zendesk-Webhook-Signature is the standard base64 of the
//     HMAC-SHA256, keyed with the webhook's signing secret (as Zendesk shows
//     it, used as is), of X-Zendesk-Webhook-Signature-Timestamp + the raw
//     body, concatenated without separator;
//   - the timestamp is RFC 3339 ("2021-06-29T20:55:45Z"); Zendesk names no
//     window, so the tolerance is the default 300 s, either direction;
//   - several signing secrets may be configured while one is reset. The
//     fixed secret Zendesk signs "test webhook" requests with before a
//     webhook exists is not accepted unless configured.
//
// Configure the webhook with the POST method: claimd takes no events from
// GET, PUT, PATCH or DELETE webhooks. The body is whatever the trigger or
// automation builds (JSON, XML or form); for event-subscription webhooks it
// is the event JSON, whose "type" ("zen:event-type:ticket.created") becomes
// Type and whose "subject" becomes ObjectID. Without a JSON "type", Type is
// "" (allowed_event_types then needs "*").
//
// Key rule: ID is JoinKey(X-Zendesk-Webhook-Id, X-Zendesk-Webhook-Invocation-Id):
// one invocation of a webhook, kept by every attempt Zendesk makes for it
// (the Webhooks API lists the attempts of an invocation,
// https://developer.zendesk.com/api-reference/webhooks/webhooks-api/webhooks/),
// scoped by the webhook so that webhooks of several accounts can share a
// source. Scope is X-Zendesk-Account-Id.
//
// Redelivery: Zendesk retries an invocation a few times on 409, on 429 and
// 503 with a short Retry-After, and on timeouts, and opens a circuit
// breaker on an endpoint that keeps failing
// (https://developer.zendesk.com/api-reference/webhooks/introduction/).
type zendeskVerifier struct {
	keys  [][]byte
	tol   time.Duration
	now   func() time.Time
	types TypeFilter
}

func init() {
	Register(Provider{
		Type: TypeZendesk,
		Name: "Zendesk",
		Docs: []string{
			"https://developer.zendesk.com/documentation/webhooks/verifying/",
			"https://developer.zendesk.com/api-reference/webhooks/introduction/",
			"https://developer.zendesk.com/api-reference/webhooks/webhooks-api/webhooks/",
		},
		Build: func(core Core, _ any) (Verifier, error) {
			return &zendeskVerifier{keys: secretKeys(core.Secrets), tol: core.Tolerance, now: core.Now, types: core.Types()}, nil
		},
		SignsTimestamp:    true,
		CredentialHeaders: func(any) []string { return []string{ZendeskSignatureHeader} },
		Setup:             Setup{Secrets: "the webhook's signing secret (Admin Center → Apps and integrations → Webhooks → the webhook → Reveal secret)"},
		Redelivery: Redelivery{
			Key:     "headers `X-Zendesk-Webhook-Id` + `X-Zendesk-Webhook-Invocation-Id`",
			Retries: "a few attempts per invocation on 409, 429/503 with a short Retry-After and timeouts; a circuit breaker pauses failing endpoints",
			Horizon: "forever (one id per invocation)",
			Batches: "no",
			Resends: "no",
		},
	})
}

func (*zendeskVerifier) Type() Type { return TypeZendesk }

func (v *zendeskVerifier) Verify(r Request) (Result, error) {
	raw := header(r.Header, ZendeskSignatureHeader)
	if raw == "" {
		return Result{}, missingHeader(ZendeskSignatureHeader)
	}
	sig, ok := macFromBase64(raw, "", sha256.Size)
	if !ok {
		return Result{}, headerErr(CodeMalformedHeader, ZendeskSignatureHeader, "must be the base64 of a 32-byte HMAC-SHA256")
	}
	rawTS := header(r.Header, ZendeskTimestampHeader)
	if rawTS == "" {
		return Result{}, missingHeader(ZendeskTimestampHeader)
	}
	ts, err := time.Parse(time.RFC3339, rawTS)
	if err != nil {
		return Result{}, headerErr(CodeMalformedHeader, ZendeskTimestampHeader, "is not an RFC 3339 timestamp")
	}
	if !anyMACMatches(sha256.New, v.keys, [][]byte{sig}, []byte(rawTS), r.Body) {
		return Result{}, headerErr(CodeBadSignature, ZendeskSignatureHeader, "signature does not match timestamp and body under any configured signing secret")
	}
	if now := v.now(); !within(now, ts, v.tol) {
		return Result{}, windowErr(InHeader, ZendeskTimestampHeader, now, ts, v.tol)
	}
	id := header(r.Header, ZendeskInvocationIDHeader)
	if id == "" {
		return Result{}, authenticated(missingHeader(ZendeskInvocationIDHeader))
	}
	webhook := header(r.Header, ZendeskWebhookIDHeader)
	if webhook == "" {
		return Result{}, authenticated(missingHeader(ZendeskWebhookIDHeader))
	}
	typ, subject := "", ""
	if b := bytes.TrimSpace(r.Body); len(b) > 0 && b[0] == '{' && json.Valid(b) {
		var ev struct {
			Type    flexString `json:"type"`
			Subject flexString `json:"subject"`
		}
		if e := unmarshalBody(r.Body, &ev); e != nil {
			return Result{}, authenticated(e)
		}
		typ, subject = string(ev.Type), string(ev.Subject)
	}
	if err := v.types.Check(typ, InBody, "/type"); err != nil {
		return Result{}, err
	}
	return Result{Events: []Event{{ID: JoinKey(webhook, id), Type: typ, Scope: header(r.Header, ZendeskAccountIDHeader), ObjectID: subject, Timestamp: ts}}}, nil
}
