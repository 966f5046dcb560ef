package verify

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/strictjson"
)

// TypeMailgun is Mailgun's webhooks (JSON, signature in the body).
const TypeMailgun Type = "mailgun"

// The "mailgun" provider verifies Mailgun webhooks, per
// https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/securing-webhooks:
//
//   - the JSON body carries {"signature":{"timestamp","token","signature"},
//     "event-data":{…}}; signature is the lower-case hex HMAC-SHA256, keyed
//     with the HTTP webhook signing key (a source's secrets; several for
//     rotation), of timestamp + token concatenated; for a subaccount's
//     domain a "parent-signature" made with the primary account's key may
//     stand beside it, and either verifies;
//   - timestamp (unix seconds) must lie within the source's tolerance
//     (default 300 s; Mailgun documents no window).
//
// Mailgun signs the timestamp and token only, not event-data: whoever holds
// one captured signature could pair it with another body until the
// timestamp leaves the window, and the claim ledger would take the new
// event id. Mailgun's advice is to "cache the token value locally and not
// honor any subsequent request with the same token" (securing-webhooks,
// above): this verifier keeps no state, so the token is the Result's
// [Nonce] (TTL [MailgunNonceTTL] of the tolerance), which the caller
// records and refuses under another body (see [Result.Nonce]). Mailgun's
// retry page does not say whether a retry keeps the token: under a new
// token it is a new nonce and the ledger finds the event a duplicate;
// under the same token with the same body it is bound to that delivery
// and answered as a duplicate too, never refused.
// The signature object is a reusable credential: the event's Payload is the
// body without it.
//
// Key rule: event-data.id is "unique within a day"
// (https://documentation.mailgun.com/docs/mailgun/user-manual/events/event-structure),
// while keys are kept far longer, so ID is JoinKey(id, the UTC date of
// event-data.timestamp): a retry carries the same event-data and is a
// duplicate, an id reused on another day is a new event. Mailgun retries a
// webhook not answered 200 (nor 406) for 8 hours (5, 10, 15 min, 1, 2, 4 h)
// (https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/webhook-retries).
// Type is event-data.event, ObjectID the message's Message-Id header.
type mailgunVerifier struct {
	keys  [][]byte
	tol   time.Duration
	now   func() time.Time
	types TypeFilter
}

func init() {
	Register(Provider{
		Type: TypeMailgun,
		Name: "Mailgun",
		Docs: []string{
			"https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/securing-webhooks",
			"https://documentation.mailgun.com/docs/mailgun/user-manual/events/event-structure",
			"https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/webhook-retries",
		},
		Build: func(core Core, _ any) (Verifier, error) {
			core = core.WithDefaults(0)
			if err := core.Validate(TypeMailgun, false); err != nil {
				return nil, err
			}
			return &mailgunVerifier{keys: secretKeys(core.Secrets), tol: core.Tolerance, now: core.Now, types: core.Types()}, nil
		},
		SignsTimestamp: true,
		Setup:          Setup{Secrets: "the HTTP webhook signing key (shown under that name in the control panel's webhook and API security settings), not the sending API key"},
		Redelivery: Redelivery{
			Key:     "`event-data.id` + the UTC date of `event-data.timestamp`",
			Retries: "8 hours (5, 10, 15 min, 1, 2, 4 h) unless answered 200 or 406",
			Horizon: "`event-data.id` is unique within a day: the key folds in the event's UTC date",
			Batches: "no",
			Resends: "no",
		},
	})
}

func (*mailgunVerifier) Type() Type { return TypeMailgun }

func (v *mailgunVerifier) Verify(r Request) (Result, error) {
	var body struct {
		Signature *struct {
			Timestamp       flexString `json:"timestamp"`
			Token           string     `json:"token"`
			Signature       string     `json:"signature"`
			ParentSignature string     `json:"parent-signature"`
		} `json:"signature"`
		EventData *struct {
			ID        string          `json:"id"`
			Event     string          `json:"event"`
			Timestamp json.RawMessage `json:"timestamp"`
			Message   struct {
				Headers struct {
					MessageID string `json:"message-id"`
				} `json:"headers"`
			} `json:"message"`
		} `json:"event-data"`
	}
	if e := unmarshalBody(r.Body, &body); e != nil {
		return Result{}, e
	}
	s := body.Signature
	switch {
	case s == nil:
		return Result{}, bodyErr(CodeMissingField, "/signature", "the webhook has no signature object")
	case s.Timestamp == "":
		return Result{}, bodyErr(CodeMissingField, "/signature/timestamp", "absent or not a string or number")
	case s.Token == "":
		return Result{}, bodyErr(CodeMissingField, "/signature/token", "absent or empty")
	case s.Signature == "":
		return Result{}, bodyErr(CodeMissingField, "/signature/signature", "absent or empty")
	}
	secs, ok := parseUnix(string(s.Timestamp))
	if !ok {
		return Result{}, bodyErr(CodeMalformedBody, "/signature/timestamp", "is not a unix timestamp in seconds")
	}
	var cands [][]byte
	for _, h := range []string{s.Signature, s.ParentSignature} {
		if b, err := hex.DecodeString(h); err == nil && len(b) == sha256.Size {
			cands = append(cands, b)
		}
	}
	if len(cands) == 0 {
		return Result{}, bodyErr(CodeMalformedBody, "/signature/signature", "must be 64 hex digits")
	}
	if !anyMACMatches(sha256.New, v.keys, cands, []byte(s.Timestamp), []byte(s.Token)) {
		return Result{}, bodyErr(CodeBadSignature, "/signature/signature", "signature does not match timestamp and token under any configured key")
	}
	ts := time.Unix(secs, 0)
	if now := v.now(); !within(now, ts, v.tol) {
		return Result{}, windowErr(InBody, "/signature/timestamp", now, ts, v.tol)
	}
	ed := body.EventData
	if ed == nil {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/event-data", "the webhook has no event-data"))
	}
	if ed.ID == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/event-data/id", "the event has no id"))
	}
	var at float64
	if err := json.Unmarshal(ed.Timestamp, &at); err != nil || len(ed.Timestamp) == 0 || at <= 0 || at > math.MaxInt32*4 {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/event-data/timestamp", "the event has no unix timestamp (its date is part of the key)"))
	}
	if err := v.types.Check(ed.Event, InBody, "/event-data/event"); err != nil {
		return Result{}, err
	}
	sec, frac := math.Modf(at)
	evAt := time.Unix(int64(sec), int64(frac*1e9)).UTC()
	return Result{Nonce: &Nonce{Value: s.Token, TTL: MailgunNonceTTL(v.tol), In: InBody, Field: "/signature/token"}, Events: []Event{{
		ID:        JoinKey(ed.ID, evAt.Format(time.DateOnly)),
		Type:      ed.Event,
		ObjectID:  ed.Message.Headers.MessageID,
		Timestamp: ts,
		Payload:   withoutMember(r.Body, "signature"),
	}}}, nil
}

// MailgunNonceTTL is how long a Mailgun token must be remembered for a
// source of tolerance tol: a signed timestamp verifies from tol before the
// clock to tol after it, so a token seen now may verify again for up to
// 2×tol; one minute more covers clock skew between replicas and the
// database.
func MailgunNonceTTL(tol time.Duration) time.Duration { return 2*tol + time.Minute }

// withoutMember returns the JSON object raw without its top-level member
// name (raw itself when it cannot be read as an object).
func withoutMember(raw []byte, name string) []byte {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(strictjson.TrimBOM(raw), &m); err != nil {
		return append([]byte(nil), raw...)
	}
	delete(m, name)
	out, err := json.Marshal(m)
	if err != nil {
		return append([]byte(nil), raw...)
	}
	return out
}
