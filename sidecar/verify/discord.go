package verify

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Discord signature headers
// (https://docs.discord.com/developers/interactions/overview#setting-up-an-endpoint-validating-security-request-headers).
const (
	DiscordSignatureHeader = "X-Signature-Ed25519"
	DiscordTimestampHeader = "X-Signature-Timestamp"
)

// Discord provider types: interactions (slash commands, components,
// modals) and webhook events (APPLICATION_AUTHORIZED, ENTITLEMENT_CREATE…),
// which Discord sends to two different URLs of an app, signed alike.
const (
	TypeDiscord       Type = "discord"
	TypeDiscordEvents Type = "discord-events"
)

// DiscordOptions are the options of the "discord" and "discord-events"
// providers.
type DiscordOptions struct {
	// PublicKeys are the application's Ed25519 public keys, hex (64 hex
	// digits), as the developer portal shows them under General
	// Information. At least one; several are accepted at once.
	PublicKeys []string `json:"public_keys" yaml:"public_keys" required:"true" doc:"the application's Ed25519 public keys, hex, as the Developer Portal shows them"`
}

// discordInteractionTypes names Discord's interaction types
// (https://docs.discord.com/developers/interactions/receiving-and-responding#interaction-object-interaction-type).
var discordInteractionTypes = map[int]string{
	2: "APPLICATION_COMMAND",
	3: "MESSAGE_COMPONENT",
	4: "APPLICATION_COMMAND_AUTOCOMPLETE",
	5: "MODAL_SUBMIT",
}

// discordReplies are the interaction responses a taken interaction is
// answered with, by interaction type: the callback types
// DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE (5), DEFERRED_UPDATE_MESSAGE (6) and,
// for autocomplete, which cannot be deferred, an empty
// APPLICATION_COMMAND_AUTOCOMPLETE_RESULT (8)
// (https://docs.discord.com/developers/interactions/receiving-and-responding#interaction-response-object-interaction-callback-type).
var discordReplies = map[int]string{
	2: `{"type":5}`,
	3: `{"type":6}`,
	4: `{"type":8,"data":{"choices":[]}}`,
	5: `{"type":5}`,
}

// The "discord" and "discord-events" providers verify Discord's signed HTTP
// requests, per
// https://docs.discord.com/developers/interactions/overview#setting-up-an-endpoint-validating-security-request-headers
// and https://docs.discord.com/developers/events/webhook-events#security:
//
//   - X-Signature-Ed25519 is the hex Ed25519 signature, by the
//     application's key, of X-Signature-Timestamp + the raw body
//     (concatenated); the public key is the application's (options
//     public_keys, hex), no shared secret;
//   - X-Signature-Timestamp is unix seconds; Discord documents no window,
//     so the source's tolerance applies (default 300 s).
//
// "discord" is the interactions endpoint
// (https://docs.discord.com/developers/interactions/receiving-and-responding):
// a PING (type 1) is a handshake answered 200 {"type":1} as application/json
// (PONG); any other interaction is one event keyed by the interaction `id`
// (a snowflake, unique forever). Type is the interaction type's name
// (APPLICATION_COMMAND…), Scope guild_id, ObjectID data.name (the command)
// when present.
//
// Discord does not retry an interaction, and it must be answered within 3
// seconds with an interaction response
// (https://docs.discord.com/developers/interactions/receiving-and-responding#responding-to-an-interaction):
// anything else (claimd's JSON receipt) makes Discord show "This
// interaction failed". So an interaction that was taken (stored, or found
// a duplicate of one stored) is answered with Result.Reply, 200 and an
// application/json interaction response whose callback type
// (https://docs.discord.com/developers/interactions/receiving-and-responding#interaction-response-object-interaction-callback-type)
// defers the real answer to the workflow, which sends it later with the
// interaction's token (edit the original response or send a follow-up,
// within 15 minutes):
//
//   - APPLICATION_COMMAND (2) and MODAL_SUBMIT (5): {"type":5},
//     DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE (the user sees "thinking…"
//     until the workflow edits the original response);
//   - MESSAGE_COMPONENT (3): {"type":6}, DEFERRED_UPDATE_MESSAGE (no
//     loading state; the workflow edits the message later);
//   - APPLICATION_COMMAND_AUTOCOMPLETE (4) cannot be deferred: Discord
//     takes only APPLICATION_COMMAND_AUTOCOMPLETE_RESULT (8) with the
//     choices, in the 3 seconds, and a workflow run started through
//     claimd's door cannot supply them. It is answered
//     {"type":8,"data":{"choices":[]}}, no suggestions, so the user can
//     still type the value; the event is stored like any other. A command
//     whose options need suggestions should have them served by something
//     that answers synchronously, not through claimd, and a source can
//     leave autocomplete out with allowed_event_types (then its filtered
//     answer is claimd's JSON, which Discord shows as options that failed
//     to load).
//
// A refused interaction (bad signature, stale timestamp, an event claimd
// could not store) keeps claimd's own answer: Discord then shows the
// failure, which is what happened.
//
// "discord-events" is the webhook events URL
// (https://docs.discord.com/developers/events/webhook-events): a PING (type
// 0) is a handshake answered 204; an event (type 1) is one event whose body
// carries no id, so ID is a digest of the body (Event.Digest): a resend of
// the same body is a duplicate. Type is event.type, Scope application_id.
// Accepted deliveries are answered 204 as Discord asks.
type discordVerifier struct {
	keys   []ed25519.PublicKey
	tol    time.Duration
	now    func() time.Time
	types  TypeFilter
	events bool
}

func init() {
	creds := func(any) []string { return []string{DiscordSignatureHeader} }
	Register(Provider{
		Type: TypeDiscord,
		Name: "Discord interactions",
		Docs: []string{
			"https://docs.discord.com/developers/interactions/overview#setting-up-an-endpoint-validating-security-request-headers",
			"https://docs.discord.com/developers/interactions/receiving-and-responding",
		},
		Options:           func() any { return &DiscordOptions{} },
		Build:             func(core Core, opts any) (Verifier, error) { return buildDiscord(TypeDiscord, core, opts) },
		SecretsOptional:   true,
		SignsTimestamp:    true,
		CredentialHeaders: creds,
		Setup:             Setup{Secrets: "none: Discord signs with the application's Ed25519 key; put its public key in `options.public_keys` (Developer Portal → the application → General Information → Public Key)"},
		Redelivery: Redelivery{
			Key:     "interaction `id`",
			Retries: "no: sent once, to be answered within 3 s; a taken interaction is answered with a deferred interaction response (`{\"type\":5}`; components `{\"type\":6}`; autocomplete `{\"type\":8}` with no choices), the workflow answers later with the interaction token",
			Horizon: "forever (a snowflake)",
			Batches: "no",
			Resends: "no",
		},
	})
	Register(Provider{
		Type: TypeDiscordEvents,
		Name: "Discord webhook events",
		Docs: []string{
			"https://docs.discord.com/developers/events/webhook-events",
			"https://docs.discord.com/developers/interactions/overview#setting-up-an-endpoint-validating-security-request-headers",
		},
		Options:           func() any { return &DiscordOptions{} },
		Build:             func(core Core, opts any) (Verifier, error) { return buildDiscord(TypeDiscordEvents, core, opts) },
		SecretsOptional:   true,
		SignsTimestamp:    true,
		CredentialHeaders: creds,
		AcceptedStatus:    http.StatusNoContent,
		Setup:             Setup{Secrets: "none: Discord signs with the application's Ed25519 key; put its public key in `options.public_keys` (Developer Portal → the application → General Information → Public Key)"},
		Redelivery: Redelivery{
			Key:     "digest of the body (events carry no id)",
			Retries: "an event not acknowledged with 204 within 3 s is sent again (schedule not documented)",
			Horizon: "forever (the digest covers the event's type, timestamp and data)",
			Batches: "no",
			Resends: "no",
		},
	})
}

func buildDiscord(t Type, core Core, opts any) (Verifier, error) {
	o, _ := opts.(*DiscordOptions)
	if o == nil {
		o = &DiscordOptions{}
	}
	if len(core.Secrets) > 0 {
		return nil, &ConfigError{Type: t, Field: "Secrets", Reason: "Discord signs with the application's Ed25519 key: put its public key in options.public_keys, no secrets"}
	}
	if len(o.PublicKeys) == 0 {
		return nil, &ConfigError{Type: t, Field: "PublicKeys", Reason: "at least one application public key (hex) is required"}
	}
	v := &discordVerifier{tol: core.Tolerance, now: core.Now, types: core.Types(), events: t == TypeDiscordEvents}
	for i, k := range o.PublicKeys {
		b, err := hex.DecodeString(strings.TrimSpace(k))
		if err != nil || len(b) != ed25519.PublicKeySize {
			return nil, &ConfigError{Type: t, Field: "PublicKeys[" + strconv.Itoa(i) + "]", Reason: "must be 64 hex digits (an Ed25519 public key)"}
		}
		v.keys = append(v.keys, ed25519.PublicKey(b))
	}
	return v, nil
}

func (v *discordVerifier) Type() Type {
	if v.events {
		return TypeDiscordEvents
	}
	return TypeDiscord
}

func (v *discordVerifier) Verify(r Request) (Result, error) {
	rawSig := header(r.Header, DiscordSignatureHeader)
	if rawSig == "" {
		return Result{}, missingHeader(DiscordSignatureHeader)
	}
	rawTS := header(r.Header, DiscordTimestampHeader)
	if rawTS == "" {
		return Result{}, missingHeader(DiscordTimestampHeader)
	}
	sig, err := hex.DecodeString(rawSig)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return Result{}, headerErr(CodeMalformedHeader, DiscordSignatureHeader, "must be 128 hex digits (an Ed25519 signature)")
	}
	secs, ok := parseUnix(rawTS)
	if !ok {
		return Result{}, headerErr(CodeMalformedHeader, DiscordTimestampHeader, "is not a unix timestamp in seconds")
	}
	msg := make([]byte, 0, len(rawTS)+len(r.Body))
	msg = append(append(msg, rawTS...), r.Body...)
	good := false
	for _, k := range v.keys {
		if ed25519.Verify(k, msg, sig) {
			good = true
			break
		}
	}
	if !good {
		return Result{}, headerErr(CodeBadSignature, DiscordSignatureHeader, "signature does not verify under any configured public key")
	}
	ts := time.Unix(secs, 0)
	if now := v.now(); !within(now, ts, v.tol) {
		return Result{}, windowErr(InHeader, DiscordTimestampHeader, now, ts, v.tol)
	}
	if v.events {
		return v.webhookEvent(r.Body, ts)
	}
	return v.interaction(r.Body, ts)
}

func (v *discordVerifier) interaction(body []byte, ts time.Time) (Result, error) {
	var in struct {
		ID      flexString `json:"id"`
		Type    *int       `json:"type"`
		GuildID flexString `json:"guild_id"`
		Data    struct {
			Name flexString `json:"name"`
		} `json:"data"`
	}
	if e := unmarshalBody(body, &in); e != nil {
		return Result{}, authenticated(e)
	}
	if in.Type == nil {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/type", "the interaction has no type"))
	}
	if *in.Type == 1 {
		return Result{Handshake: &Handshake{
			Status: http.StatusOK,
			Header: http.Header{"Content-Type": {"application/json"}},
			Body:   []byte(`{"type":1}`),
		}}, nil
	}
	name, known := discordInteractionTypes[*in.Type]
	if !known {
		return Result{}, authenticated(bodyErr(CodeMalformedBody, "/type", "unknown interaction type"))
	}
	if in.ID == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/id", "the interaction has no id"))
	}
	if err := v.types.Check(name, InBody, "/type"); err != nil {
		return Result{}, err
	}
	return Result{
		Events: []Event{{ID: string(in.ID), Type: name, Scope: string(in.GuildID), ObjectID: string(in.Data.Name), Timestamp: ts}},
		Reply: &Handshake{
			Status: http.StatusOK,
			Header: http.Header{"Content-Type": {"application/json"}},
			Body:   []byte(discordReplies[*in.Type]),
		},
	}, nil
}

func (v *discordVerifier) webhookEvent(body []byte, ts time.Time) (Result, error) {
	var in struct {
		Type          *int       `json:"type"`
		ApplicationID flexString `json:"application_id"`
		Event         *struct {
			Type string `json:"type"`
		} `json:"event"`
	}
	if e := unmarshalBody(body, &in); e != nil {
		return Result{}, authenticated(e)
	}
	switch {
	case in.Type == nil:
		return Result{}, authenticated(bodyErr(CodeMissingField, "/type", "the webhook event has no type"))
	case *in.Type == 0:
		return Result{Handshake: &Handshake{Status: http.StatusNoContent, Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, Body: []byte{}}}, nil
	case *in.Type != 1:
		return Result{}, authenticated(bodyErr(CodeMalformedBody, "/type", "is neither 0 (PING) nor 1 (event)"))
	case in.Event == nil || in.Event.Type == "":
		return Result{}, authenticated(bodyErr(CodeMissingField, "/event/type", "the webhook event has no event type"))
	}
	if err := v.types.Check(in.Event.Type, InBody, "/event/type"); err != nil {
		return Result{}, err
	}
	sum := sha256.Sum256(body)
	return Result{Events: []Event{{
		ID:        "sha256:" + hex.EncodeToString(sum[:]),
		Digest:    true,
		Type:      in.Event.Type,
		Scope:     string(in.ApplicationID),
		Timestamp: ts,
	}}}, nil
}
