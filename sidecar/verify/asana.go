package verify

import (
	"crypto/sha256"
	"net/http"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/idempotent-claim/idempotent-claim/sidecar/strictjson"
)

// Asana webhook headers
// (https://developers.asana.com/docs/webhooks-guide).
const (
	AsanaHookSecretHeader    = "X-Hook-Secret"
	AsanaHookSignatureHeader = "X-Hook-Signature"
)

// TypeAsana is Asana webhooks.
const TypeAsana Type = "asana"

// maxAsanaHookSecret bounds the X-Hook-Secret a handshake may echo (Asana's
// are 64 hex digits).
const maxAsanaHookSecret = 256

// The "asana" provider verifies Asana webhooks, per
// https://developers.asana.com/docs/webhooks-guide and
// https://developers.asana.com/reference/createwebhook:
//
//   - the handshake: while a webhook is being created, Asana POSTs to the
//     target with an X-Hook-Secret header and expects 200 (or 204) with the
//     same X-Hook-Secret in the response. It is answered 200 with that
//     header (a value of 1 to 256 characters from [A-Za-z0-9+/=_.~-] only,
//     so nothing else is reflected into a response header), stores nothing
//     and creates no event. The handshake is the only time Asana sends the
//     secret, and claimd keeps none: the operator reads X-Hook-Secret where
//     the handshake is visible to them (an access log of the proxy in front
//     of claimd that records that header, for instance) and adds it to the
//     source's secrets. A handshake is answered whether or not secrets are
//     configured (recreating a webhook yields a new secret), which confirms
//     nothing but that the URL expects Asana webhooks: events signed with a
//     secret that is not configured are refused;
//   - events: X-Hook-Signature is the lower-case hex HMAC-SHA256 of the raw
//     body keyed with the webhook's X-Hook-Secret; several secrets may be
//     configured (one per webhook delivering to the source, or old and new
//     while a webhook is recreated). With no secret configured every event
//     is refused. Asana signs no timestamp: no replay window.
//
// The body is {"events": [...]}: one Event per item, whose Payload is the
// item. A delivery with no events is Asana's heartbeat, sent right after
// the handshake and then every 8 hours; a webhook whose heartbeats go
// unanswered for 24 hours is deleted
// (https://developers.asana.com/docs/webhook-heartbeat-events). A verified
// heartbeat is answered 200 as a handshake, with nothing stored; so is an
// unverifiable one ({"events":[]} exactly) while the source has no secret
// yet, which keeps the webhook alive until the operator adds the secret.
// Events are "skinny": the workflow fetches the resource for its current
// state. Asana events carry no id, so
// the key rule is a digest: ID is "sha256:" and the hex SHA-256 of the
// item's canonical JSON (strictjson.Canonical), identical for the same
// event however it is batched or spaced; two items equal in every field
// (same user, resource, action, change and created_at to the millisecond)
// are one event. Type is resource.resource_type + "." + action
// ("task.changed"), ObjectID resource.gid.
//
// Redelivery: Asana resends a delivery that got no 2xx within 10 seconds
// with exponential backoff for up to 24 hours, then deletes the webhook
// (https://developers.asana.com/docs/webhooks-guide); it describes its delivery as
// at-most-once in exceptional circumstances (events may be lost), so
// workflows that must not miss a change also poll
// (https://developers.asana.com/docs/webhooks-guide).
type asanaVerifier struct {
	keys  [][]byte
	types TypeFilter
}

func init() {
	Register(Provider{
		Type: TypeAsana,
		Name: "Asana",
		Docs: []string{
			"https://developers.asana.com/docs/webhooks-guide",
			"https://developers.asana.com/reference/createwebhook",
			"https://developers.asana.com/docs/webhook-heartbeat-events",
		},
		Build: func(core Core, _ any) (Verifier, error) {
			return &asanaVerifier{keys: secretKeys(core.Secrets), types: core.Types()}, nil
		},
		SecretsOptional:   true,
		CredentialHeaders: func(any) []string { return []string{AsanaHookSignatureHeader, AsanaHookSecretHeader} },
		Setup:             Setup{Secrets: "the `X-Hook-Secret` Asana sent in the webhook's handshake (claimd answers the handshake and keeps nothing: read it in your proxy's log); events are refused until it is set"},
		Redelivery: Redelivery{
			Key:     "per event: digest of the event's canonical JSON (Asana events have no id)",
			Retries: "resent for up to 24 hours without a 2xx within 10 s; at-most-once in exceptional cases",
			Horizon: "forever (a digest names the event's content)",
			Batches: "yes: `events` array, one record per item; an empty array (heartbeat) stores nothing",
			Resends: "no",
		},
	})
}

func (*asanaVerifier) Type() Type { return TypeAsana }

// asanaSecretOK reports whether s may be echoed in a response header.
func asanaSecretOK(s string) bool {
	if s == "" || len(s) > maxAsanaHookSecret {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=' || c == '_' || c == '.' || c == '~' || c == '-') {
			return false
		}
	}
	return true
}

func (v *asanaVerifier) Verify(r Request) (Result, error) {
	raw := header(r.Header, AsanaHookSignatureHeader)
	if raw == "" {
		secret := header(r.Header, AsanaHookSecretHeader)
		if secret == "" {
			return Result{}, missingHeader(AsanaHookSignatureHeader)
		}
		if !asanaSecretOK(secret) {
			return Result{}, headerErr(CodeMalformedHeader, AsanaHookSecretHeader, "must be 1 to 256 characters of [A-Za-z0-9+/=_.~-]")
		}
		return Result{Handshake: &Handshake{
			Status: http.StatusOK,
			Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}, AsanaHookSecretHeader: {secret}},
			Body:   []byte{},
		}}, nil
	}
	sig, ok := macFromHex(raw, "", sha256.Size)
	if !ok {
		return Result{}, headerErr(CodeMalformedHeader, AsanaHookSignatureHeader, "must be 64 hex digits")
	}
	if len(v.keys) == 0 {
		if asanaEmptyEvents(r.Body) {
			return asanaHeartbeat(), nil
		}
		return Result{}, headerErr(CodeBadSignature, AsanaHookSignatureHeader, "no secret is configured yet: add the X-Hook-Secret of the handshake to the source's secrets")
	}
	if !anyMACMatches(sha256.New, v.keys, [][]byte{sig}, r.Body) {
		return Result{}, headerErr(CodeBadSignature, AsanaHookSignatureHeader, "signature does not match the body under any configured secret")
	}
	var body struct {
		Events *[]jsontext.Value `json:"events"`
	}
	if e := unmarshalBody(r.Body, &body); e != nil {
		return Result{}, authenticated(e)
	}
	if body.Events == nil {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/events", "the delivery has no events array"))
	}
	if len(*body.Events) == 0 {
		return asanaHeartbeat(), nil
	}
	return splitBatch(*body.Events, v.item)
}

// asanaHeartbeat is the answer to a heartbeat: 200, nothing stored.
func asanaHeartbeat() Result {
	return Result{Handshake: &Handshake{Status: http.StatusOK, Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, Body: []byte{}}}
}

// asanaEmptyEvents reports whether body is {"events":[]} (whitespace
// aside) and nothing else.
func asanaEmptyEvents(body []byte) bool {
	var b struct {
		Events *[]jsontext.Value `json:"events"`
	}
	if unmarshalBody(body, &b) != nil || b.Events == nil || len(*b.Events) != 0 {
		return false
	}
	var all map[string]jsontext.Value
	return unmarshalBody(body, &all) == nil && len(all) == 1
}

func (v *asanaVerifier) item(i int, raw jsontext.Value) (Event, error) {
	base := "/events/" + strconv.Itoa(i)
	var ev struct {
		Action   string `json:"action"`
		Resource struct {
			GID          flexString `json:"gid"`
			ResourceType string     `json:"resource_type"`
		} `json:"resource"`
	}
	if e := unmarshalBody(raw, &ev); e != nil {
		e.Field = base + e.Field
		return Event{}, authenticated(e)
	}
	if ev.Action == "" {
		return Event{}, authenticated(bodyErr(CodeMissingField, base+"/action", "the event has no action"))
	}
	typ := ev.Action
	if ev.Resource.ResourceType != "" {
		typ = ev.Resource.ResourceType + "." + ev.Action
	}
	if err := v.types.Check(typ, InBody, base+"/action"); err != nil {
		return Event{}, err
	}
	sum, err := strictjson.Hash(raw)
	if err != nil {
		return Event{}, authenticated(bodyErr(CodeMalformedBody, base, "the event is not strict JSON"))
	}
	return Event{ID: "sha256:" + sum, Type: typ, ObjectID: string(ev.Resource.GID), Digest: true, Payload: append([]byte(nil), raw...)}, nil
}
