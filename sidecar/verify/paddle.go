package verify

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"time"
)

// PaddleSignatureHeader is the header Paddle Billing signs deliveries in
// (https://developer.paddle.com/webhooks/signature-verification).
const PaddleSignatureHeader = "Paddle-Signature"

// The "paddle" provider type (Paddle Billing), per
// https://developer.paddle.com/webhooks/signature-verification:
//
//   - Paddle-Signature is a ';'-separated list: ts=<unix seconds> and one or
//     more h1=<hex HMAC-SHA256> (several while a secret is rotated);
//   - the signed content is "<ts>:<raw body>", keyed with the notification
//     destination's secret key string (pdl_ntfset_…, used as is);
//   - ts must be within Tolerance of the clock (default 300 s; Paddle's SDKs
//     allow only 5 s, which rejects legitimately delayed deliveries).
//
// The identity: ID is the body's event_id, the same for every notification
// of one event (notification_id differs per destination and is not used);
// Type is event_type, ObjectID is data.id.
func init() {
	Register(Provider{
		Type: TypePaddle,
		Name: "Paddle Billing",
		Docs: []string{
			"https://developer.paddle.com/webhooks/signature-verification",
			"https://developer.paddle.com/webhooks/about/how-webhooks-work",
			"https://developer.paddle.com/api-reference/notifications/replay-notification",
		},
		Build:             buildPaddle,
		SignsTimestamp:    true,
		CredentialHeaders: func(any) []string { return []string{PaddleSignatureHeader} },
		// A replay is a new notification (a new notification_id) of
		// the same event: a duplicate, not a conflict
		// (https://developer.paddle.com/api-reference/notifications/replay-notification).
		VolatileFields: []string{"/notification_id"},
		Setup:          Setup{Secrets: "the notification destination's secret key (`pdl_ntfset_…`; Developer tools → Notifications → the destination)"},
		Redelivery: Redelivery{
			Key:     "`event_id`",
			Retries: "retried when unanswered, the same notification re-signed",
			Horizon: "forever",
			Batches: "no",
			Resends: "a replay is a new `notification_id` of the same `event_id` (volatile by default): a duplicate",
		},
	})
}

func buildPaddle(c Core, _ any) (Verifier, error) {
	return &paddleVerifier{keys: secretKeys(c.Secrets), tol: c.Tolerance, now: c.Now, types: newTypeFilter(c.AllowedEventTypes)}, nil
}

type paddleVerifier struct {
	keys  [][]byte
	tol   time.Duration
	now   func() time.Time
	types typeFilter
}

func (*paddleVerifier) Type() Type { return TypePaddle }

type paddleSignature struct {
	ts string
	n  int64
	h1 [][]byte
}

// parsePaddleSignature parses "ts=<digits>;h1=<hex>[;h1=<hex>…]". Every
// element must be key=value, exactly one ts; unreadable h1 values and unknown
// keys are skipped.
func parsePaddleSignature(h string) (paddleSignature, error) {
	var s paddleSignature
	seen := false
	for _, item := range strings.Split(h, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return s, errors.New("every element must be key=value")
		}
		switch k {
		case "ts":
			if seen {
				return s, errors.New("more than one ts element")
			}
			n, ok := parseUnix(v)
			if !ok {
				return s, errors.New("ts is not a unix timestamp in seconds")
			}
			s.ts, s.n, seen = v, n, true
		case "h1":
			if len(v) != hex.EncodedLen(sha256.Size) {
				continue
			}
			if b, err := hex.DecodeString(v); err == nil {
				s.h1 = append(s.h1, b)
			}
		}
	}
	if !seen {
		return s, errors.New("no ts element")
	}
	return s, nil
}

func (v *paddleVerifier) Verify(r Request) (Result, error) {
	raw := header(r.Header, PaddleSignatureHeader)
	if raw == "" {
		return Result{}, missingHeader(PaddleSignatureHeader)
	}
	sig, err := parsePaddleSignature(raw)
	if err != nil {
		return Result{}, headerErr(CodeMalformedHeader, PaddleSignatureHeader, err.Error())
	}
	if len(sig.h1) == 0 {
		return Result{}, headerErr(CodeBadSignature, PaddleSignatureHeader, "no readable h1 signature")
	}
	if !anyMACMatches(sha256.New, v.keys, sig.h1, []byte(sig.ts), []byte{':'}, r.Body) {
		return Result{}, headerErr(CodeBadSignature, PaddleSignatureHeader, "no h1 signature matches the payload under any configured secret")
	}
	ts := time.Unix(sig.n, 0)
	if now := v.now(); !within(now, ts, v.tol) {
		return Result{}, windowErr(InHeader, PaddleSignatureHeader, now, ts, v.tol)
	}
	var b struct {
		EventID   string `json:"event_id"`
		EventType string `json:"event_type"`
		Data      struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if e := unmarshalBody(r.Body, &b); e != nil {
		return Result{}, authenticated(e)
	}
	if b.EventID == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/event_id", "the event has no event_id"))
	}
	if err := v.types.check(b.EventType, InBody, "/event_type"); err != nil {
		return Result{}, err
	}
	return Result{Events: []Event{{ID: b.EventID, Type: b.EventType, ObjectID: b.Data.ID, Timestamp: ts}}}, nil
}
