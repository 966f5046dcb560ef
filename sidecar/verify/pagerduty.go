package verify

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// PagerDuty v3 webhook headers
// (https://github.com/PagerDuty/developer-docs/blob/main/docs/webhooks/01-Overview.md,
// https://github.com/PagerDuty/developer-docs/blob/main/docs/webhooks/04-Signatures.md;
// the sources of developer.pagerduty.com's webhook pages).
const (
	PagerDutySignatureHeader    = "X-PagerDuty-Signature"
	PagerDutyWebhookIDHeader    = "X-Webhook-Id"
	PagerDutySubscriptionHeader = "X-Webhook-Subscription"
)

// TypePagerDuty is the "pagerduty" provider: PagerDuty v3 webhook
// subscriptions.
//
// Verification, per
// https://github.com/PagerDuty/developer-docs/blob/main/docs/webhooks/04-Signatures.md:
// X-PagerDuty-Signature holds one or more comma-separated "v1=<hex>"
// signatures (several during a secret rotation), each the hex HMAC-SHA256
// of the raw body keyed with a subscription secret; one v1 match under any
// configured secret suffices. Entries of other versions and unreadable
// entries are skipped; a header with no readable v1 entry fails. PagerDuty
// signs no timestamp, so there is no replay window.
//
// Identity: ID is event.id, "the unique id of the event"
// (https://github.com/PagerDuty/developer-docs/blob/main/docs/webhooks/01-Overview.md),
// read from the signed body; X-Webhook-Id, which PagerDuty repeats on every
// attempt of one webhook, names the same delivery but is not signed. Type is
// event.event_type ("incident.triggered"), ObjectID event.data.id, Scope
// the X-Webhook-Subscription header.
//
// Redelivery, per
// https://github.com/PagerDuty/developer-docs/blob/main/docs/webhooks/02-Behavior.md:
// no answer within 5 s, a 5xx, a 429 or a connection error is retried
// periodically for up to 48 hours, later webhooks for the same resource
// waiting behind it; other 4xx drop the webhook; delivery is at least
// once; a v3 payload carries exactly one event. A subscription may send an
// OAuth bearer token in Authorization, which is a credential too.
const TypePagerDuty Type = "pagerduty"

func init() {
	Register(Provider{
		Type: TypePagerDuty,
		Name: "PagerDuty (v3 webhooks)",
		Docs: []string{
			"https://github.com/PagerDuty/developer-docs/blob/main/docs/webhooks/04-Signatures.md",
			"https://github.com/PagerDuty/developer-docs/blob/main/docs/webhooks/01-Overview.md",
			"https://github.com/PagerDuty/developer-docs/blob/main/docs/webhooks/02-Behavior.md",
		},
		Build: func(core Core, _ any) (Verifier, error) {
			return &pagerdutyVerifier{keys: secretKeys(core.Secrets), types: core.Types()}, nil
		},
		CredentialHeaders: func(any) []string { return []string{PagerDutySignatureHeader, "Authorization"} },
		Setup:             Setup{Secrets: "the webhook subscription's secret, shown once when the subscription is created (Integrations → Generic Webhooks (v3))"},
		Redelivery: Redelivery{
			Key:     "event `id` (body, signed); `X-Webhook-Id` repeats it per attempt",
			Retries: "timeout (5 s), 5xx, 429, connection errors: retried for up to 48 hours",
			Horizon: "forever (unique event ids)",
			Batches: "no (one event per v3 payload)",
			Resends: "no",
		},
	})
}

type pagerdutyVerifier struct {
	keys  [][]byte
	types TypeFilter
}

func (*pagerdutyVerifier) Type() Type { return TypePagerDuty }

func (v *pagerdutyVerifier) Verify(r Request) (Result, error) {
	raw := header(r.Header, PagerDutySignatureHeader)
	if raw == "" {
		return Result{}, missingHeader(PagerDutySignatureHeader)
	}
	var sigs [][]byte
	for _, item := range strings.Split(raw, ",") {
		ver, sig, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || ver != "v1" || len(sig) != hex.EncodedLen(sha256.Size) {
			continue
		}
		if b, err := hex.DecodeString(sig); err == nil {
			sigs = append(sigs, b)
		}
	}
	if len(sigs) == 0 {
		return Result{}, headerErr(CodeMalformedHeader, PagerDutySignatureHeader, "no readable v1=<64 hex digits> signature")
	}
	if !anyMACMatches(sha256.New, v.keys, sigs, r.Body) {
		return Result{}, headerErr(CodeBadSignature, PagerDutySignatureHeader, "no v1 signature matches the payload under any configured secret")
	}
	var body struct {
		Event struct {
			ID        string `json:"id"`
			EventType string `json:"event_type"`
			Data      struct {
				ID flexString `json:"id"`
			} `json:"data"`
		} `json:"event"`
	}
	if e := unmarshalBody(r.Body, &body); e != nil {
		return Result{}, authenticated(e)
	}
	if body.Event.ID == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/event/id", "the event has no id"))
	}
	if err := v.types.Check(body.Event.EventType, InBody, "/event/event_type"); err != nil {
		return Result{}, err
	}
	return Result{Events: []Event{{
		ID:       body.Event.ID,
		Type:     body.Event.EventType,
		Scope:    header(r.Header, PagerDutySubscriptionHeader),
		ObjectID: string(body.Event.Data.ID),
	}}}, nil
}
