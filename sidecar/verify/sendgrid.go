package verify

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"
)

// SendGrid Event Webhook signature headers
// (https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/getting-started-event-webhook-security-features).
const (
	SendGridSignatureHeader = "X-Twilio-Email-Event-Webhook-Signature"
	SendGridTimestampHeader = "X-Twilio-Email-Event-Webhook-Timestamp"
)

// TypeSendGrid is Twilio SendGrid's Event Webhook.
const TypeSendGrid Type = "sendgrid"

// SendGrid key rules (SendGridOptions.Key).
const (
	SendGridKeyEvent   = "event"
	SendGridKeyMessage = "message"
)

// SendGridOptions are the "sendgrid" provider's options.
type SendGridOptions struct {
	// PublicKeys are the Signed Event Webhook's verification keys as
	// SendGrid shows them (base64 of the DER SubjectPublicKeyInfo of a
	// P-256 key; a PEM block is accepted too). At least one; several while
	// a key is replaced.
	PublicKeys []string `json:"public_keys" yaml:"public_keys" required:"true" doc:"the Signed Event Webhook's verification keys (base64 or PEM)"`
	// Key is the key rule: "event" (default) keys each event by
	// sg_event_id; "message" by sg_message_id + event + timestamp, the
	// second-line business key for an event SendGrid sends again under a
	// new sg_event_id.
	Key string `json:"key" yaml:"key" doc:"event (default: sg_event_id) or message (sg_message_id + event + timestamp)"`
}

// The "sendgrid" provider verifies SendGrid's Signed Event Webhook, per
// https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/getting-started-event-webhook-security-features:
//
//   - X-Twilio-Email-Event-Webhook-Signature is the base64 of an ASN.1 DER
//     ECDSA signature (P-256, SHA-256) of
//     X-Twilio-Email-Event-Webhook-Timestamp + the raw body, by the key
//     SendGrid generated for the webhook; the verification key (options
//     public_keys) is public, no shared secret;
//   - the timestamp (unix seconds) must lie within the source's tolerance
//     (default 300 s; SendGrid documents no window).
//
// The body is a JSON array of events: each item is one Event with its own
// Payload; an item that lacks what its key needs is rejected alone
// (Result.Rejected). Key rule: "event" (default) is sg_event_id, "unique
// for every event" per
// https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/troubleshooting#duplicate-events,
// which advises deduplicating on it; SendGrid retries a POST not answered
// 2xx for up to 24 hours after the event. SendGrid may also post one event
// again with a new sg_event_id: "message" keys by JoinKey(sg_message_id,
// event, timestamp) so such a resend is a duplicate (two events of one type
// on one message in one second become one: the price of that key). Type is
// event, ObjectID sg_message_id, Timestamp the signed timestamp.
type sendgridVerifier struct {
	keys    []*ecdsa.PublicKey
	tol     time.Duration
	now     func() time.Time
	types   TypeFilter
	message bool
}

func init() {
	Register(Provider{
		Type: TypeSendGrid,
		Name: "Twilio SendGrid Event Webhook",
		Docs: []string{
			"https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/getting-started-event-webhook-security-features",
			"https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/troubleshooting",
			"https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/event",
		},
		Options:           func() any { return &SendGridOptions{} },
		Build:             buildSendGrid,
		SignsTimestamp:    true,
		SecretsOptional:   true,
		CredentialHeaders: func(any) []string { return []string{SendGridSignatureHeader} },
		Setup:             Setup{Secrets: "none: SendGrid signs with an ECDSA key; put its verification key in `options.public_keys` (Settings → Mail Settings → Event Webhook → Signature Verification)"},
		Redelivery: Redelivery{
			Key:     "each item's `sg_event_id` (option `key: message`: `sg_message_id` + `event` + `timestamp`)",
			Retries: "up to 24 hours after the event, increasing intervals, until a 2xx",
			Horizon: "forever (`sg_event_id` is unique for every event)",
			Batches: "yes: a JSON array of events, split into one record per item",
			Resends: "yes: an event posted again under a new `sg_event_id`; claim on `sg_message_id` + `event` + `timestamp` with `key: message`",
		},
	})
}

func buildSendGrid(core Core, opts any) (Verifier, error) {
	o, _ := opts.(*SendGridOptions)
	if o == nil {
		o = &SendGridOptions{}
	}
	cfgErr := func(field, reason string) error {
		return &ConfigError{Type: TypeSendGrid, Field: field, Reason: reason}
	}
	if len(core.Secrets) > 0 {
		return nil, cfgErr("Secrets", "SendGrid signs with ECDSA: put its verification key in options.public_keys, no secrets")
	}
	if len(o.PublicKeys) == 0 {
		return nil, cfgErr("PublicKeys", "at least one verification key (base64 DER from the Signed Event Webhook settings) is required")
	}
	v := &sendgridVerifier{tol: core.Tolerance, now: core.Now, types: core.Types()}
	switch o.Key {
	case "", SendGridKeyEvent:
	case SendGridKeyMessage:
		v.message = true
	default:
		return nil, cfgErr("Key", `must be "event" or "message"`)
	}
	for i, s := range o.PublicKeys {
		k, err := parseSendGridKey(s)
		if err != nil {
			return nil, cfgErr("PublicKeys["+strconv.Itoa(i)+"]", err.Error())
		}
		v.keys = append(v.keys, k)
	}
	return v, nil
}

// parseSendGridKey reads a base64 DER (or PEM) SubjectPublicKeyInfo of a
// P-256 key.
func parseSendGridKey(s string) (*ecdsa.PublicKey, error) {
	s = strings.TrimSpace(s)
	var der []byte
	if b, _ := pem.Decode([]byte(s)); b != nil {
		der = b.Bytes
	} else {
		var err error
		if der, err = base64.StdEncoding.DecodeString(strings.Join(strings.Fields(s), "")); err != nil {
			return nil, errors.New("is neither base64 DER nor PEM")
		}
	}
	pub, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, errors.New("is not a DER SubjectPublicKeyInfo")
	}
	k, ok := pub.(*ecdsa.PublicKey)
	if !ok || k.Curve != elliptic.P256() {
		return nil, errors.New("is not a P-256 ECDSA public key")
	}
	return k, nil
}

func (*sendgridVerifier) Type() Type { return TypeSendGrid }

type sendgridItem struct {
	EventID   string     `json:"sg_event_id"`
	MessageID string     `json:"sg_message_id"`
	Event     string     `json:"event"`
	Timestamp flexString `json:"timestamp"`
}

func (v *sendgridVerifier) Verify(r Request) (Result, error) {
	rawSig := header(r.Header, SendGridSignatureHeader)
	if rawSig == "" {
		return Result{}, missingHeader(SendGridSignatureHeader)
	}
	rawTS := header(r.Header, SendGridTimestampHeader)
	if rawTS == "" {
		return Result{}, missingHeader(SendGridTimestampHeader)
	}
	sig, err := base64.StdEncoding.DecodeString(rawSig)
	if err != nil || len(sig) == 0 || len(sig) > 80 {
		return Result{}, headerErr(CodeMalformedHeader, SendGridSignatureHeader, "is not a base64 DER ECDSA signature")
	}
	secs, ok := parseUnix(rawTS)
	if !ok {
		return Result{}, headerErr(CodeMalformedHeader, SendGridTimestampHeader, "is not a unix timestamp in seconds")
	}
	h := sha256.New()
	h.Write([]byte(rawTS))
	h.Write(r.Body)
	digest := h.Sum(nil)
	good := false
	for _, k := range v.keys {
		if ecdsa.VerifyASN1(k, digest, sig) {
			good = true
			break
		}
	}
	if !good {
		return Result{}, headerErr(CodeBadSignature, SendGridSignatureHeader, "signature does not verify under any configured public key")
	}
	ts := time.Unix(secs, 0)
	if now := v.now(); !within(now, ts, v.tol) {
		return Result{}, windowErr(InHeader, SendGridTimestampHeader, now, ts, v.tol)
	}
	var items []jsontext.Value
	if e := unmarshalBody(r.Body, &items); e != nil {
		if e.Field == "" {
			e.Reason = "body is not the JSON array of events SendGrid posts"
		}
		return Result{}, authenticated(e)
	}
	if len(items) == 0 {
		return Result{}, authenticated(bodyErr(CodeMalformedBody, "", "the array holds no event"))
	}
	return splitBatch(items, func(i int, raw jsontext.Value) (Event, error) { return v.item(i, raw, ts) })
}

func (v *sendgridVerifier) item(i int, raw jsontext.Value, ts time.Time) (Event, error) {
	base := "/" + strconv.Itoa(i)
	var it sendgridItem
	if e := unmarshalBody(raw, &it); e != nil {
		e.Field = base + e.Field
		return Event{}, authenticated(e)
	}
	if err := v.types.Check(it.Event, InBody, base+"/event"); err != nil {
		return Event{}, err
	}
	var id string
	if v.message {
		switch {
		case it.MessageID == "":
			return Event{}, authenticated(bodyErr(CodeMissingField, base+"/sg_message_id", "the event has no sg_message_id (key: message)"))
		case it.Event == "":
			return Event{}, authenticated(bodyErr(CodeMissingField, base+"/event", "the event has no event type (key: message)"))
		case it.Timestamp == "":
			return Event{}, authenticated(bodyErr(CodeMissingField, base+"/timestamp", "the event has no timestamp (key: message)"))
		}
		id = JoinKey(it.MessageID, it.Event, string(it.Timestamp))
	} else {
		if it.EventID == "" {
			return Event{}, authenticated(bodyErr(CodeMissingField, base+"/sg_event_id", "the event has no sg_event_id"))
		}
		id = it.EventID
	}
	return Event{ID: id, Type: it.Event, ObjectID: it.MessageID, Timestamp: ts, Payload: append([]byte(nil), raw...)}, nil
}
