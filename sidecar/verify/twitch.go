package verify

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"time"
)

// Twitch EventSub webhook headers
// (https://dev.twitch.tv/docs/eventsub/handling-webhook-events/#list-of-request-headers).
const (
	TwitchMessageIDHeader        = "Twitch-Eventsub-Message-Id"
	TwitchMessageTimestampHeader = "Twitch-Eventsub-Message-Timestamp"
	TwitchMessageSignatureHeader = "Twitch-Eventsub-Message-Signature"
	TwitchMessageTypeHeader      = "Twitch-Eventsub-Message-Type"
	TwitchMessageRetryHeader     = "Twitch-Eventsub-Message-Retry"
)

// TypeTwitch is Twitch EventSub over the webhook transport.
const TypeTwitch Type = "twitch"

// TwitchTolerance is Twitch's documented replay window: a message whose
// Twitch-Eventsub-Message-Timestamp is older than 10 minutes is to be
// refused
// (https://dev.twitch.tv/docs/eventsub/#guarding-against-replay-attacks).
const TwitchTolerance = 10 * time.Minute

// Twitch EventSub message types (Twitch-Eventsub-Message-Type).
const (
	twitchNotification = "notification"
	twitchVerification = "webhook_callback_verification"
	twitchRevocation   = "revocation"
)

// The "twitch" provider verifies Twitch EventSub webhook messages, per
// https://dev.twitch.tv/docs/eventsub/handling-webhook-events/#verifying-the-event-message:
//
//   - Twitch-Eventsub-Message-Signature is "sha256=" and the lower-case hex
//     HMAC-SHA256, keyed with the subscription's secret (the string given
//     when the subscription was created, 10 to 100 ASCII characters), of
//     Twitch-Eventsub-Message-Id + Twitch-Eventsub-Message-Timestamp + the
//     raw body, concatenated without separators;
//   - Twitch-Eventsub-Message-Timestamp is RFC 3339 (with nanoseconds) and
//     must lie within the tolerance of the clock: 10 minutes by default,
//     Twitch's documented window (a source's tolerance_seconds overrides);
//   - several secrets may be configured while subscriptions are re-created
//     under a new one: any of them verifies.
//
// Message types (Twitch-Eventsub-Message-Type, not covered by the
// signature, so the verified body must have the matching shape):
//
//   - webhook_callback_verification: a handshake, answered 200 with the
//     body's "challenge" as text/plain and no event
//     (https://dev.twitch.tv/docs/eventsub/handling-webhook-events/#responding-to-a-challenge-request);
//   - notification: one event;
//   - revocation: one event of type "revocation" (the subscription was
//     revoked: a workflow may want to re-create it), answered 2xx as Twitch
//     asks (https://dev.twitch.tv/docs/eventsub/handling-webhook-events/#revoking-your-subscription).
//
// Key rule: ID is Twitch-Eventsub-Message-Id. Twitch delivers at least once
// and resends a message it is unsure was received with the same message id
// (https://dev.twitch.tv/docs/eventsub/#handling-duplicate-events), adding
// Twitch-Eventsub-Message-Retry. Type is subscription.type (or
// "revocation"), Scope is the condition's broadcaster_user_id when there is
// one, ObjectID the subscription id.
type twitchVerifier struct {
	keys  [][]byte
	tol   time.Duration
	now   func() time.Time
	types TypeFilter
}

func init() {
	Register(Provider{
		Type: TypeTwitch,
		Name: "Twitch EventSub (webhook transport)",
		Docs: []string{
			"https://dev.twitch.tv/docs/eventsub/handling-webhook-events/",
			"https://dev.twitch.tv/docs/eventsub/",
		},
		DefaultTolerance: TwitchTolerance,
		Build: func(core Core, _ any) (Verifier, error) {
			return &twitchVerifier{keys: secretKeys(core.Secrets), tol: core.Tolerance, now: core.Now, types: core.Types()}, nil
		},
		SignsTimestamp:    true,
		CredentialHeaders: func(any) []string { return []string{TwitchMessageSignatureHeader} },
		Setup:             Setup{Secrets: "the `secret` given when the EventSub subscription was created (10 to 100 characters of your choosing)"},
		Redelivery: Redelivery{
			Key:     "header `Twitch-Eventsub-Message-Id`",
			Retries: "resends a message it is unsure was received, same message id, `Twitch-Eventsub-Message-Retry` set; repeated failures revoke the subscription (`notification_failures_exceeded`)",
			Horizon: "forever (a message id names one message); messages older than 10 minutes are refused as replays",
			Batches: "no",
			Resends: "no",
		},
	})
}

func (*twitchVerifier) Type() Type { return TypeTwitch }

// parseTwitchSignature decodes "sha256=<64 hex digits>".
func parseTwitchSignature(s string) ([]byte, bool) {
	hexSig, ok := strings.CutPrefix(s, "sha256=")
	if !ok || len(hexSig) != hex.EncodedLen(sha256.Size) {
		return nil, false
	}
	b, err := hex.DecodeString(hexSig)
	return b, err == nil
}

func (v *twitchVerifier) Verify(r Request) (Result, error) {
	id := header(r.Header, TwitchMessageIDHeader)
	if id == "" {
		return Result{}, missingHeader(TwitchMessageIDHeader)
	}
	rawTS := header(r.Header, TwitchMessageTimestampHeader)
	if rawTS == "" {
		return Result{}, missingHeader(TwitchMessageTimestampHeader)
	}
	rawSig := header(r.Header, TwitchMessageSignatureHeader)
	if rawSig == "" {
		return Result{}, missingHeader(TwitchMessageSignatureHeader)
	}
	sig, ok := parseTwitchSignature(rawSig)
	if !ok {
		return Result{}, headerErr(CodeMalformedHeader, TwitchMessageSignatureHeader, `must be "sha256=" followed by 64 hex digits`)
	}
	ts, err := time.Parse(time.RFC3339Nano, rawTS)
	if err != nil {
		return Result{}, headerErr(CodeMalformedHeader, TwitchMessageTimestampHeader, "is not an RFC 3339 timestamp")
	}
	if !anyMACMatches(sha256.New, v.keys, [][]byte{sig}, []byte(id), []byte(rawTS), r.Body) {
		return Result{}, headerErr(CodeBadSignature, TwitchMessageSignatureHeader, "signature does not match the message under any configured secret")
	}
	if now := v.now(); !within(now, ts, v.tol) {
		return Result{}, windowErr(InHeader, TwitchMessageTimestampHeader, now, ts, v.tol)
	}
	mt := header(r.Header, TwitchMessageTypeHeader)
	var body struct {
		Challenge    *string `json:"challenge"`
		Subscription struct {
			ID        string `json:"id"`
			Type      string `json:"type"`
			Condition struct {
				Broadcaster flexString `json:"broadcaster_user_id"`
			} `json:"condition"`
		} `json:"subscription"`
		Event *struct{} `json:"event"`
	}
	if e := unmarshalBody(r.Body, &body); e != nil {
		return Result{}, authenticated(e)
	}
	switch mt {
	case twitchVerification:
		if body.Challenge == nil || *body.Challenge == "" {
			return Result{}, authenticated(bodyErr(CodeMissingField, "/challenge", "a webhook_callback_verification message has no challenge"))
		}
		return Result{Handshake: &Handshake{
			Status: http.StatusOK,
			Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}, "X-Content-Type-Options": {"nosniff"}},
			Body:   []byte(*body.Challenge),
		}}, nil
	case twitchNotification, twitchRevocation:
	case "":
		return Result{}, authenticated(missingHeader(TwitchMessageTypeHeader))
	default:
		return Result{}, authenticated(headerErr(CodeMalformedHeader, TwitchMessageTypeHeader, "is not notification, webhook_callback_verification or revocation"))
	}
	if body.Challenge != nil {
		return Result{}, authenticated(bodyErr(CodeMalformedBody, "/challenge", "a "+mt+" message carries a challenge"))
	}
	typ, field := body.Subscription.Type, "/subscription/type"
	if mt == twitchNotification {
		if body.Event == nil {
			return Result{}, authenticated(bodyErr(CodeMissingField, "/event", "a notification has no event"))
		}
		if typ == "" {
			return Result{}, authenticated(bodyErr(CodeMissingField, field, "the subscription has no type"))
		}
	} else {
		if body.Event != nil {
			return Result{}, authenticated(bodyErr(CodeMalformedBody, "/event", "a revocation carries an event"))
		}
		typ, field = twitchRevocation, ""
	}
	if err := v.types.Check(typ, InBody, field); err != nil {
		return Result{}, err
	}
	return Result{Events: []Event{{
		ID:        id,
		Type:      typ,
		Scope:     string(body.Subscription.Condition.Broadcaster),
		ObjectID:  body.Subscription.ID,
		Timestamp: ts,
	}}}, nil
}
