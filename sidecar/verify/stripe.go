package verify

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"time"
)

// StripeSignatureHeader is the header Stripe signs deliveries in
// (https://docs.stripe.com/webhooks#verify-manually).
const StripeSignatureHeader = "Stripe-Signature"

// The "stripe" provider type, per
// https://docs.stripe.com/webhooks#verify-manually:
//
//   - the Stripe-Signature header is a comma-separated list of key=value
//     elements: t=<unix seconds> and one or more v1=<hex HMAC-SHA256>;
//   - the signed content is "<t>.<raw body>", the key is the endpoint secret
//     string as shown by Stripe (whsec_…, used as is, not decoded);
//   - only v1 counts: v0 (test-mode legacy) and unknown schemes are ignored, so
//     a header with only v0 fails; unreadable v1 values are skipped (Stripe
//     sends several v1 values while an endpoint secret is rolled,
//     https://docs.stripe.com/webhooks#roll-endpoint-secrets);
//   - t must be within Tolerance of the clock (default 300 s, the tolerance of
//     Stripe's own libraries).
//
// The event identity comes from the verified body: ID is the event "id"
// (stable across Stripe's retries, https://docs.stripe.com/webhooks#handle-duplicate-events);
// for Connect events, which carry "account"
// (https://docs.stripe.com/connect/webhooks), ID is JoinKey(account, id) so an
// id is scoped by the connected account. Type is "type", ObjectID is
// data.object.id (or related_object.id for thin events).
func init() {
	Register(Provider{
		Type: TypeStripe,
		Name: "Stripe",
		Docs: []string{
			"https://docs.stripe.com/webhooks#verify-manually",
			"https://docs.stripe.com/webhooks#handle-duplicate-events",
			"https://docs.stripe.com/connect/webhooks",
		},
		Build:             buildStripe,
		SignsTimestamp:    true,
		CredentialHeaders: func(any) []string { return []string{StripeSignatureHeader} },
		// pending_webhooks counts the endpoints still to be
		// reached: it changes between retries of one event
		// (https://docs.stripe.com/api/events/object#event_object-pending_webhooks).
		VolatileFields: []string{"/pending_webhooks"},
		Setup:          Setup{Secrets: "the endpoint's signing secret (`whsec_…`; Dashboard → Developers → Webhooks → the endpoint → Signing secret; `stripe listen` prints one too)"},
		Redelivery: Redelivery{
			Key:     "event `id`; Connect events: `account` + `id`",
			Retries: "live mode: up to 3 days with exponential backoff, the same event re-signed with a new `t`",
			Horizon: "forever: one event object per occurrence",
			Batches: "no",
			Resends: "no: a retry or a resend keeps the event `id`",
		},
	})
}

func buildStripe(c Core, _ any) (Verifier, error) {
	return &stripeVerifier{keys: secretKeys(c.Secrets), tol: c.Tolerance, now: c.Now, types: newTypeFilter(c.AllowedEventTypes)}, nil
}

type stripeVerifier struct {
	keys  [][]byte
	tol   time.Duration
	now   func() time.Time
	types typeFilter
}

func (*stripeVerifier) Type() Type { return TypeStripe }

// stripeSignature is a parsed Stripe-Signature header.
type stripeSignature struct {
	t  string   // the t element as sent (digits)
	ts int64    // t as unix seconds
	v1 [][]byte // decoded v1 signatures (unreadable ones dropped)
}

// parseStripeSignature parses a Stripe-Signature value. Every element must be
// key=value; exactly one t, decimal; v1 values that are not 64 hex digits are
// skipped; other keys (v0, future schemes) are ignored.
func parseStripeSignature(h string) (stripeSignature, error) {
	var s stripeSignature
	seenT := false
	for _, item := range strings.Split(h, ",") {
		item = strings.TrimSpace(item)
		k, v, ok := strings.Cut(item, "=")
		if !ok {
			return s, errors.New("every element must be key=value")
		}
		switch k {
		case "t":
			if seenT {
				return s, errors.New("more than one t element")
			}
			n, ok := parseUnix(v)
			if !ok {
				return s, errors.New("t is not a unix timestamp in seconds")
			}
			s.t, s.ts, seenT = v, n, true
		case "v1":
			if len(v) != hex.EncodedLen(sha256.Size) {
				continue
			}
			b, err := hex.DecodeString(v)
			if err != nil {
				continue
			}
			s.v1 = append(s.v1, b)
		}
	}
	if !seenT {
		return s, errors.New("no t element")
	}
	return s, nil
}

func (v *stripeVerifier) Verify(r Request) (Result, error) {
	raw := header(r.Header, StripeSignatureHeader)
	if raw == "" {
		return Result{}, missingHeader(StripeSignatureHeader)
	}
	sig, err := parseStripeSignature(raw)
	if err != nil {
		return Result{}, headerErr(CodeMalformedHeader, StripeSignatureHeader, err.Error())
	}
	if len(sig.v1) == 0 {
		return Result{}, headerErr(CodeBadSignature, StripeSignatureHeader, "no readable v1 signature (only v1 is accepted)")
	}
	if !anyMACMatches(sha256.New, v.keys, sig.v1, []byte(sig.t), []byte{'.'}, r.Body) {
		return Result{}, headerErr(CodeBadSignature, StripeSignatureHeader, "no v1 signature matches the payload under any configured secret")
	}
	ts := time.Unix(sig.ts, 0)
	if now := v.now(); !within(now, ts, v.tol) {
		return Result{}, windowErr(InHeader, StripeSignatureHeader, now, ts, v.tol)
	}
	res, err := v.Identify(r.Header, r.Body)
	if err != nil {
		return Result{}, err
	}
	res.Events[0].Timestamp = ts
	return res, nil
}

// Identify implements [Identifier]: the event's identity from its JSON
// (a delivery's body, or an item of GET /v1/events, which is the same
// Event object, https://docs.stripe.com/api/events/object). Timestamp is
// left zero: only a signed delivery carries one.
func (v *stripeVerifier) Identify(_ Header, body []byte) (Result, error) {
	var ev struct {
		ID      string `json:"id"`
		Type    string `json:"type"`
		Account string `json:"account"`
		Context string `json:"context"`
		Data    struct {
			Object struct {
				ID string `json:"id"`
			} `json:"object"`
		} `json:"data"`
		RelatedObject struct {
			ID string `json:"id"`
		} `json:"related_object"`
	}
	if e := unmarshalBody(body, &ev); e != nil {
		return Result{}, authenticated(e)
	}
	if ev.ID == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/id", "the event has no id"))
	}
	if err := v.types.check(ev.Type, InBody, "/type"); err != nil {
		return Result{}, err
	}
	account := ev.Account
	if account == "" {
		account = ev.Context
	}
	id := ev.ID
	if account != "" {
		id = JoinKey(account, ev.ID)
	}
	obj := ev.Data.Object.ID
	if obj == "" {
		obj = ev.RelatedObject.ID
	}
	return Result{Events: []Event{{ID: id, Type: ev.Type, Scope: account, ObjectID: obj}}}, nil
}
