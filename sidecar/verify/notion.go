package verify

import (
	"crypto/sha256"
	"net/http"
)

// NotionSignatureHeader carries Notion's webhook signature
// (https://developers.notion.com/reference/webhooks).
const NotionSignatureHeader = "X-Notion-Signature"

// TypeNotion is Notion integration webhooks.
const TypeNotion Type = "notion"

// The "notion" provider verifies Notion integration webhooks, per
// https://developers.notion.com/reference/webhooks:
//
//   - the verification request: when a subscription is created (or the
//     token resent), Notion POSTs {"verification_token": "secret_…"}, with
//     no signature, to the URL. It is answered 200 as a handshake: nothing
//     is stored or logged and no event is created. The operator reads the
//     token where the request is visible to them and (1) pastes it into the
//     integration's Webhooks tab to verify the subscription and (2) adds it
//     to the source's secrets. Until a secret is configured every event is
//     refused;
//   - events: X-Notion-Signature is "sha256=" and the lower-case hex
//     HMAC-SHA256 of the raw body keyed with the verification token; several
//     tokens may be configured (old and new subscriptions). Notion signs no
//     timestamp: no replay window.
//
// Events are signals: they say that a page, database, data source or
// comment changed, not what it is now, and Notion aggregates frequent
// events (page.content_updated…) over a short window into one, with all
// their authors; the workflow fetches the entity from the API
// (https://developers.notion.com/reference/webhooks-events-delivery).
// Key rule: ID is the event's "id" (a UUID per event, kept on retries).
// Type is "type", Scope "workspace_id", ObjectID entity.id (the event's
// "timestamp" is when the change happened, to order events by).
// attempt_number, which counts delivery attempts, is volatile.
//
// Redelivery (https://developers.notion.com/reference/webhooks-events-delivery):
// a delivery that is not acknowledged is retried up to 8 times with
// exponential backoff, the last about 24 hours after the event
// (attempt_number counts 1 to 8); Notion aims at at-most-once delivery
// and events can arrive out of order (order them by timestamp).
type notionVerifier struct {
	keys  [][]byte
	types TypeFilter
}

func init() {
	Register(Provider{
		Type: TypeNotion,
		Name: "Notion",
		Docs: []string{
			"https://developers.notion.com/reference/webhooks",
			"https://developers.notion.com/reference/webhooks-events-delivery",
		},
		Build: func(core Core, _ any) (Verifier, error) {
			return &notionVerifier{keys: secretKeys(core.Secrets), types: core.Types()}, nil
		},
		SecretsOptional:   true,
		CredentialHeaders: func(any) []string { return []string{NotionSignatureHeader} },
		VolatileFields:    []string{"/attempt_number"},
		Setup:             Setup{Secrets: "the `verification_token` Notion posts to the URL when the subscription is created (claimd answers it and keeps nothing: read it in your proxy's log, paste it in the integration's Webhooks tab); events are refused until it is set"},
		Redelivery: Redelivery{
			Key:     "event `id` (UUID)",
			Retries: "up to 8 attempts with exponential backoff over about 24 hours; aims at at-most-once; out of order",
			Horizon: "forever (UUIDs)",
			Batches: "no, but frequent changes are aggregated into one signal event (fetch the entity)",
			Resends: "no",
		},
	})
}

func (*notionVerifier) Type() Type { return TypeNotion }

func (v *notionVerifier) Verify(r Request) (Result, error) {
	raw := header(r.Header, NotionSignatureHeader)
	if raw == "" {
		var probe struct {
			Token *string `json:"verification_token"`
		}
		if unmarshalBody(r.Body, &probe) == nil && probe.Token != nil && *probe.Token != "" {
			var all map[string]any
			if unmarshalBody(r.Body, &all) == nil && len(all) == 1 {
				return Result{Handshake: &Handshake{Status: http.StatusOK, Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, Body: []byte{}}}, nil
			}
		}
		return Result{}, missingHeader(NotionSignatureHeader)
	}
	sig, ok := macFromHex(raw, "sha256=", sha256.Size)
	if !ok {
		return Result{}, headerErr(CodeMalformedHeader, NotionSignatureHeader, `must be "sha256=" followed by 64 hex digits`)
	}
	if len(v.keys) == 0 {
		return Result{}, headerErr(CodeBadSignature, NotionSignatureHeader, "no verification token is configured yet: add the token of the verification request to the source's secrets")
	}
	if !anyMACMatches(sha256.New, v.keys, [][]byte{sig}, r.Body) {
		return Result{}, headerErr(CodeBadSignature, NotionSignatureHeader, "signature does not match the body under any configured verification token")
	}
	var ev struct {
		ID          string `json:"id"`
		Type        string `json:"type"`
		WorkspaceID string `json:"workspace_id"`
		Entity      struct {
			ID string `json:"id"`
		} `json:"entity"`
	}
	if e := unmarshalBody(r.Body, &ev); e != nil {
		return Result{}, authenticated(e)
	}
	if ev.ID == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/id", "the event has no id"))
	}
	if ev.Type == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/type", "the event has no type"))
	}
	if err := v.types.Check(ev.Type, InBody, "/type"); err != nil {
		return Result{}, err
	}
	return Result{Events: []Event{{ID: ev.ID, Type: ev.Type, Scope: ev.WorkspaceID, ObjectID: ev.Entity.ID}}}, nil
}
