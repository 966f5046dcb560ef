package verify

import (
	"crypto/sha256"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/idempotent-claim/idempotent-claim/sidecar/strictjson"
)

// CalendlySignatureHeader carries Calendly's webhook signature
// (https://developer.calendly.com/api-docs/overview/webhooks/webhook-signatures).
const CalendlySignatureHeader = "Calendly-Webhook-Signature"

// TypeCalendly is Calendly webhook subscriptions.
const TypeCalendly Type = "calendly"

// CalendlyTolerance is the replay window of Calendly's own verification
// example: 3 minutes.
const CalendlyTolerance = 3 * time.Minute

// The "calendly" provider verifies Calendly webhooks, per
// https://developer.calendly.com/api-docs/overview/webhooks/webhook-signatures
// and https://developer.calendly.com/docs/webhooks/overview:
//
//   - Calendly-Webhook-Signature is "t=<Unix seconds>,v1=<hex>": v1 is the
//     lower-case hex HMAC-SHA256, keyed with the webhook signing key (chosen
//     when the subscription is created, or generated for an OAuth app), of
//     t + "." + the raw body. Elements other than t and v1 are ignored;
//     several v1 values may be present;
//   - t must lie within the tolerance of the clock, either direction, 3
//     minutes by default (Provider.DefaultTolerance: the window of
//     Calendly's example); every attempt is signed anew;
//   - several signing keys may be configured while one is replaced.
//
// The body is {"event": "invitee.created", "created_at", "created_by",
// "payload": {…, "uri"}}. Calendly sends no event or delivery id, so the
// key rule joins what names the event: ID is JoinKey(event, payload.uri,
// created_at) — the invitee (or other resource) URI, what happened to it,
// and when, which retries keep. A payload without a uri is named by the
// digest of its canonical JSON instead of the uri. Type is "event", Scope
// created_by, ObjectID payload.uri.
//
// Redelivery: a delivery not answered 2xx is retried with exponential
// backoff for 24 hours (or until 24 hours after the booked event), then the
// subscription is disabled; 410 deletes the subscription at once
// (https://developer.calendly.com/api-docs/overview/webhooks/webhook-errors).
type calendlyVerifier struct {
	keys  [][]byte
	tol   time.Duration
	now   func() time.Time
	types TypeFilter
}

func init() {
	Register(Provider{
		Type: TypeCalendly,
		Name: "Calendly",
		Docs: []string{
			"https://developer.calendly.com/api-docs/overview/webhooks/webhook-signatures",
			"https://developer.calendly.com/docs/webhooks/overview",
			"https://developer.calendly.com/api-docs/overview/webhooks/webhook-errors",
		},
		Build: func(core Core, _ any) (Verifier, error) {
			return &calendlyVerifier{keys: secretKeys(core.Secrets), tol: core.Tolerance, now: core.Now, types: core.Types()}, nil
		},
		SignsTimestamp:    true,
		DefaultTolerance:  CalendlyTolerance,
		CredentialHeaders: func(any) []string { return []string{CalendlySignatureHeader} },
		Setup:             Setup{Secrets: "the webhook signing key given when the webhook subscription was created (API: `signing_key`)"},
		Redelivery: Redelivery{
			Key:     "`event` + `payload.uri` + `created_at` (no uri: + payload digest)",
			Retries: "exponential backoff for 24 hours, then the subscription is disabled; 410 deletes it",
			Horizon: "forever (created_at is part of the key)",
			Batches: "no",
			Resends: "no",
		},
	})
}

func (*calendlyVerifier) Type() Type { return TypeCalendly }

func (v *calendlyVerifier) Verify(r Request) (Result, error) {
	raw := header(r.Header, CalendlySignatureHeader)
	if raw == "" {
		return Result{}, missingHeader(CalendlySignatureHeader)
	}
	var t string
	var sigs [][]byte
	for _, el := range strings.Split(raw, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(el), "=")
		if !ok {
			return Result{}, headerErr(CodeMalformedHeader, CalendlySignatureHeader, "every element must be key=value")
		}
		switch k {
		case "t":
			if t != "" {
				return Result{}, headerErr(CodeMalformedHeader, CalendlySignatureHeader, "more than one t element")
			}
			if _, ok := parseUnix(val); !ok {
				return Result{}, headerErr(CodeMalformedHeader, CalendlySignatureHeader, "t is not a Unix timestamp in seconds")
			}
			t = val
		case "v1":
			if b, ok := macFromHex(val, "", sha256.Size); ok {
				sigs = append(sigs, b)
			}
		}
	}
	if t == "" {
		return Result{}, headerErr(CodeMalformedHeader, CalendlySignatureHeader, "no t element")
	}
	if len(sigs) == 0 {
		return Result{}, headerErr(CodeMalformedHeader, CalendlySignatureHeader, "no v1 element of 64 hex digits")
	}
	if !anyMACMatches(sha256.New, v.keys, sigs, []byte(t), []byte{'.'}, r.Body) {
		return Result{}, headerErr(CodeBadSignature, CalendlySignatureHeader, "no v1 signature matches t and the body under any configured signing key")
	}
	sec, _ := parseUnix(t)
	ts := time.Unix(sec, 0)
	if now := v.now(); !within(now, ts, v.tol) {
		return Result{}, windowErr(InHeader, CalendlySignatureHeader, now, ts, v.tol)
	}
	var ev struct {
		Event     string         `json:"event"`
		CreatedAt string         `json:"created_at"`
		CreatedBy string         `json:"created_by"`
		Payload   jsontext.Value `json:"payload"`
	}
	if e := unmarshalBody(r.Body, &ev); e != nil {
		return Result{}, authenticated(e)
	}
	switch {
	case ev.Event == "":
		return Result{}, authenticated(bodyErr(CodeMissingField, "/event", "the webhook has no event"))
	case ev.CreatedAt == "":
		return Result{}, authenticated(bodyErr(CodeMissingField, "/created_at", "the webhook has no created_at"))
	case len(ev.Payload) == 0 || ev.Payload.Kind() != '{':
		return Result{}, authenticated(bodyErr(CodeMissingField, "/payload", "the webhook has no payload object"))
	}
	if err := v.types.Check(ev.Event, InBody, "/event"); err != nil {
		return Result{}, err
	}
	var p struct {
		URI string `json:"uri"`
	}
	if e := unmarshalBody(ev.Payload, &p); e != nil {
		e.Field = "/payload" + e.Field
		return Result{}, authenticated(e)
	}
	name := p.URI
	if name == "" {
		sum, err := strictjson.Hash(ev.Payload)
		if err != nil {
			return Result{}, authenticated(bodyErr(CodeMalformedBody, "/payload", "the payload is not strict JSON"))
		}
		name = "sha256:" + sum
	}
	return Result{Events: []Event{{ID: JoinKey(ev.Event, name, ev.CreatedAt), Type: ev.Event, Scope: ev.CreatedBy, ObjectID: p.URI, Timestamp: ts}}}, nil
}
