package verify

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/idempotent-claim/idempotent-claim/sidecar/strictjson"
)

// Zoom webhook headers (https://developers.zoom.us/docs/api/webhooks/#verify-webhook-events).
const (
	ZoomSignatureHeader = "x-zm-signature"
	ZoomTimestampHeader = "x-zm-request-timestamp"
)

// The "zoom" provider type, per
// https://developers.zoom.us/docs/api/webhooks/#verify-webhook-events:
//
//   - x-zm-signature is "v0=" followed by the hex HMAC-SHA256 of
//     "v0:<x-zm-request-timestamp>:<raw body>", keyed with the app's secret
//     token;
//   - the timestamp must be within Tolerance of the clock (default 300 s).
//
// A verified endpoint.url_validation event
// (https://developers.zoom.us/docs/api/webhooks/#validate-your-webhook-endpoint)
// is a [Handshake]: 200 application/json {"plainToken": p, "encryptedToken":
// hex(HMAC-SHA256(secret token, p))}.
//
// Zoom documents no event or delivery id
// (https://developers.zoom.us/docs/api/webhooks/; its retries resend the
// same notification, https://developers.zoom.us/blog/webhook-delays/), so
// the identity is a composite of what the event says: ID is JoinKey(event,
// payload.object.uuid (or payload.object.id), event_ts, "sha256:" and the
// hex SHA-256 of the canonical JSON of payload). The object and the
// millisecond alone do not tell events apart: two participants joining one
// meeting in the same millisecond are two meeting.participant_joined events
// about one meeting uuid at one event_ts, told apart only by the
// participant inside the payload; the payload digest covers every such
// "who" or "what" without a per-event list. A retry carries the same
// payload, so it keeps the key. Fields outside payload (a download_token
// issued per delivery) are not part of it. The object part is left out when
// the payload names no object; a body without a payload is keyed
// JoinKey(event, event_ts). Type is event, Scope is payload.account_id,
// ObjectID is the object uuid/id.
func init() {
	Register(Provider{
		Type: TypeZoom,
		Name: "Zoom",
		Docs: []string{
			"https://developers.zoom.us/docs/api/webhooks/#verify-webhook-events",
			"https://developers.zoom.us/docs/api/webhooks/#validate-your-webhook-endpoint",
			"https://developers.zoom.us/blog/webhook-delays/",
		},
		Build:             buildZoom,
		SignsTimestamp:    true,
		CredentialHeaders: func(any) []string { return []string{ZoomSignatureHeader} },
		Setup:             Setup{Secrets: "the app's Secret Token (Marketplace → the app → Features → Access → Secret Token)"},
		Redelivery: Redelivery{
			Key:     "`event` + `payload.object.uuid` (or `id`) + `event_ts` + SHA-256 of `payload`; without a payload, `event` + `event_ts`",
			Retries: "3 times, 5, 25 and 85 minutes after the first attempt, re-signed, same payload",
			Horizon: "forever (a composite: Zoom documents no event id)",
			Batches: "no",
			Resends: "no",
		},
	})
}

func buildZoom(c Core, _ any) (Verifier, error) {
	return &zoomVerifier{keys: secretKeys(c.Secrets), tol: c.Tolerance, now: c.Now, types: newTypeFilter(c.AllowedEventTypes)}, nil
}

type zoomVerifier struct {
	keys  [][]byte
	tol   time.Duration
	now   func() time.Time
	types typeFilter
}

func (*zoomVerifier) Type() Type { return TypeZoom }

func (v *zoomVerifier) Verify(r Request) (Result, error) {
	sigRaw := header(r.Header, ZoomSignatureHeader)
	if sigRaw == "" {
		return Result{}, missingHeader(ZoomSignatureHeader)
	}
	tsRaw := header(r.Header, ZoomTimestampHeader)
	if tsRaw == "" {
		return Result{}, missingHeader(ZoomTimestampHeader)
	}
	n, ok := parseUnix(tsRaw)
	if !ok {
		return Result{}, headerErr(CodeMalformedHeader, ZoomTimestampHeader, "must be a unix timestamp in seconds")
	}
	sig, ok := parseSlackSignature(sigRaw) // same "v0=<hex>" shape
	if !ok {
		return Result{}, headerErr(CodeMalformedHeader, ZoomSignatureHeader, "must be v0= followed by 64 hex digits")
	}
	var key []byte
	for _, k := range v.keys {
		if anyMACMatches(sha256.New, [][]byte{k}, [][]byte{sig}, []byte("v0:"), []byte(tsRaw), []byte{':'}, r.Body) {
			key = k
			break
		}
	}
	if key == nil {
		return Result{}, headerErr(CodeBadSignature, ZoomSignatureHeader, "signature does not match the payload under any configured secret")
	}
	ts := time.Unix(n, 0)
	if now := v.now(); !within(now, ts, v.tol) {
		return Result{}, windowErr(InHeader, ZoomTimestampHeader, now, ts, v.tol)
	}
	var b struct {
		Event   string         `json:"event"`
		EventTS flexString     `json:"event_ts"`
		Payload jsontext.Value `json:"payload"`
	}
	if e := unmarshalBody(r.Body, &b); e != nil {
		return Result{}, authenticated(e)
	}
	var p struct {
		PlainToken string `json:"plainToken"`
		AccountID  string `json:"account_id"`
		Object     struct {
			UUID string     `json:"uuid"`
			ID   flexString `json:"id"`
		} `json:"object"`
	}
	if len(b.Payload) > 0 {
		if e := unmarshalBody(b.Payload, &p); e != nil {
			e.Field = "/payload" + e.Field
			return Result{}, authenticated(e)
		}
	}
	if b.Event == "endpoint.url_validation" {
		if p.PlainToken == "" {
			return Result{}, authenticated(bodyErr(CodeMissingField, "/payload/plainToken", "url_validation has no plainToken"))
		}
		out, _ := json.Marshal(struct {
			PlainToken     string `json:"plainToken"`
			EncryptedToken string `json:"encryptedToken"`
		}{p.PlainToken, hex.EncodeToString(macOf(sha256.New, key, []byte(p.PlainToken)))})
		return Result{Handshake: &Handshake{Status: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Body: out}}, nil
	}
	if b.Event == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/event", "the event has no name"))
	}
	if b.EventTS == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/event_ts", "the event has no event_ts"))
	}
	if err := v.types.check(b.Event, InBody, "/event"); err != nil {
		return Result{}, err
	}
	obj := p.Object.UUID
	if obj == "" {
		obj = string(p.Object.ID)
	}
	parts := []string{b.Event}
	if obj != "" {
		parts = append(parts, obj)
	}
	parts = append(parts, string(b.EventTS))
	if len(b.Payload) > 0 {
		// The canonical form (strictjson): a copy that spells the same
		// payload otherwise (whitespace, member order, 1e3 for 1000) gets
		// the same digest.
		sum, err := strictjson.Hash(b.Payload)
		if err != nil {
			e := strictErr(err)
			e.Field = "/payload" + e.Field
			return Result{}, authenticated(e)
		}
		parts = append(parts, "sha256:"+sum)
	}
	return Result{Events: []Event{{ID: JoinKey(parts...), Type: b.Event, Scope: p.AccountID, ObjectID: obj, Timestamp: ts}}}, nil
}
