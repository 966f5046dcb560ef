package verify

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"time"
)

// Slack request-signing headers
// (https://api.slack.com/authentication/verifying-requests-from-slack).
const (
	SlackSignatureHeader = "X-Slack-Signature"
	SlackTimestampHeader = "X-Slack-Request-Timestamp"
)

// The "slack" provider type, per
// https://api.slack.com/authentication/verifying-requests-from-slack:
//
//   - X-Slack-Signature is "v0=" followed by the hex HMAC-SHA256 of
//     "v0:<X-Slack-Request-Timestamp>:<raw body>", keyed with the app's
//     signing secret;
//   - the timestamp must be within Tolerance of the clock (Slack documents
//     five minutes, the default).
//
// After verification the body decides the outcome:
//   - Events API url_verification
//     (https://api.slack.com/events/url_verification) is a [Handshake]:
//     200 application/json {"challenge": "<challenge>"};
//   - Events API app_rate_limited
//     (https://api.slack.com/apis/events-api#rate_limiting) is a [Handshake]:
//     an empty 200, nothing to process;
//   - Events API event_callback: ID is event_id (kept across Slack's retries,
//     https://api.slack.com/apis/events-api#retries), Type is event.type,
//     Scope is team_id;
//   - slash commands (https://api.slack.com/interactivity/slash-commands),
//     form-encoded: ID is trigger_id, Type is the command (e.g. "/deploy"),
//     Scope is team_id;
//   - interactivity payloads (https://api.slack.com/interactivity/handling#payloads),
//     form field payload=<JSON>: ID is trigger_id, Type is the payload type
//     (block_actions, view_submission, …), Scope is team.id.
//
// Slack has also resent one message as several event_callback deliveries,
// each under a new event_id and without X-Slack-Retry-Num: the default key
// makes every copy a new event. [SlackOptions].Key "message" is the
// documented second-line key for that case.
func init() {
	Register(Provider{
		Type: TypeSlack,
		Name: "Slack",
		Docs: []string{
			"https://api.slack.com/authentication/verifying-requests-from-slack",
			"https://api.slack.com/apis/events-api#retries",
			"https://api.slack.com/interactivity/slash-commands",
			"https://api.slack.com/interactivity/handling#payloads",
			"https://api.slack.com/events/message",
		},
		Options:           func() any { return &SlackOptions{} },
		Build:             buildSlack,
		SignsTimestamp:    true,
		CredentialHeaders: func(any) []string { return []string{SlackSignatureHeader} },
		// The envelope fields that name one delivery of a fact rather
		// than the fact (https://api.slack.com/apis/events-api#callback-field):
		// a copy of one message resent under a new event_id carries a new
		// event_id, event_time and event_context, so with options.key
		// message it is a duplicate, not a conflict. Under the default
		// key they change nothing: Slack retries one event_id with the
		// same body.
		VolatileFields: []string{"/event_id", "/event_time", "/event_context"},
		Setup:          Setup{Secrets: "the app's signing secret (api.slack.com/apps → the app → Basic Information → App Credentials → Signing Secret)"},
		Redelivery: Redelivery{
			Key:     "Events API `event_id` (with `options.key: message`, a message event: `team_id` + `event.channel` + `event.ts`); slash commands and interactivity: `trigger_id`",
			Retries: "Events API: up to 3 times (`X-Slack-Retry-Num`), re-signed, same body; commands and interactions: never",
			Horizon: "forever: `event_id` is globally unique",
			Batches: "no",
			Resends: "yes: one message has come as several events with new `event_id`s and no retry headers; `options.key: message` keys message events by team + channel + `ts`, so the copies are duplicates",
		},
	})
}

// Slack Events API key rules ([SlackOptions].Key).
const (
	SlackKeyEventID = "event_id"
	SlackKeyMessage = "message"
)

// SlackOptions are the options of the "slack" provider type.
type SlackOptions struct {
	// Key is how an Events API event_callback is keyed:
	//
	//   - "event_id" (the default): by its event_id, which Slack keeps
	//     across its retries (https://api.slack.com/apis/events-api#retries);
	//   - "message": a message event (event.type "message", any subtype)
	//     by JoinKey(team_id, event.channel, event.ts), the message's own
	//     identity (ts is "the unique (per-channel) timestamp",
	//     https://api.slack.com/events/message), so copies of one message
	//     that Slack resends under new event_ids are duplicates. An edit
	//     (subtype message_changed) or a deletion carries its own ts and is
	//     an event of its own. A message event without team_id, channel or
	//     ts is refused (authenticated missing_field naming it): the key
	//     would lack a part. Every other event type keeps its event_id.
	//
	// Slash commands and interactivity payloads are keyed by trigger_id
	// either way.
	Key string `doc:"event_id (default) or message (a message event keyed by team, channel and ts)"`
}

func buildSlack(c Core, opts any) (Verifier, error) {
	o, _ := opts.(*SlackOptions)
	if o == nil {
		o = &SlackOptions{}
	}
	switch o.Key {
	case "", SlackKeyEventID, SlackKeyMessage:
	default:
		return nil, &ConfigError{Type: TypeSlack, Field: "Key", Reason: "must be event_id (the default) or message"}
	}
	return &slackVerifier{keys: secretKeys(c.Secrets), tol: c.Tolerance, now: c.Now, types: newTypeFilter(c.AllowedEventTypes),
		byMessage: o.Key == SlackKeyMessage}, nil
}

type slackVerifier struct {
	keys      [][]byte
	tol       time.Duration
	now       func() time.Time
	types     typeFilter
	byMessage bool // SlackOptions.Key "message"
}

func (*slackVerifier) Type() Type { return TypeSlack }

// parseSlackSignature decodes "v0=<64 hex digits>".
func parseSlackSignature(s string) ([]byte, bool) {
	const prefix = "v0="
	if len(s) != len(prefix)+hex.EncodedLen(sha256.Size) || s[:len(prefix)] != prefix {
		return nil, false
	}
	b, err := hex.DecodeString(s[len(prefix):])
	return b, err == nil
}

func (v *slackVerifier) Verify(r Request) (Result, error) {
	sigRaw := header(r.Header, SlackSignatureHeader)
	if sigRaw == "" {
		return Result{}, missingHeader(SlackSignatureHeader)
	}
	tsRaw := header(r.Header, SlackTimestampHeader)
	if tsRaw == "" {
		return Result{}, missingHeader(SlackTimestampHeader)
	}
	n, ok := parseUnix(tsRaw)
	if !ok {
		return Result{}, headerErr(CodeMalformedHeader, SlackTimestampHeader, "must be a unix timestamp in seconds")
	}
	sig, ok := parseSlackSignature(sigRaw)
	if !ok {
		return Result{}, headerErr(CodeMalformedHeader, SlackSignatureHeader, "must be v0= followed by 64 hex digits")
	}
	if !anyMACMatches(sha256.New, v.keys, [][]byte{sig}, []byte("v0:"), []byte(tsRaw), []byte{':'}, r.Body) {
		return Result{}, headerErr(CodeBadSignature, SlackSignatureHeader, "signature does not match the payload under any configured secret")
	}
	ts := time.Unix(n, 0)
	if now := v.now(); !within(now, ts, v.tol) {
		return Result{}, windowErr(InHeader, SlackTimestampHeader, now, ts, v.tol)
	}
	if firstNonSpace(r.Body) == '{' {
		return v.events(r.Body, ts)
	}
	return v.form(r.Body, ts)
}

// events handles an Events API JSON body.
func (v *slackVerifier) events(body []byte, ts time.Time) (Result, error) {
	var b struct {
		Type      string `json:"type"`
		Challenge string `json:"challenge"`
		EventID   string `json:"event_id"`
		TeamID    string `json:"team_id"`
		Event     struct {
			Type string `json:"type"`
			// Read only for a message event's key; other events
			// carry other shapes here (channel_created: an object).
			Channel flexString `json:"channel"`
			TS      flexString `json:"ts"`
		} `json:"event"`
	}
	if e := unmarshalBody(body, &b); e != nil {
		return Result{}, authenticated(e)
	}
	switch b.Type {
	case "url_verification":
		out, _ := json.Marshal(map[string]string{"challenge": b.Challenge})
		return Result{Handshake: &Handshake{Status: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Body: out}}, nil
	case "app_rate_limited":
		return Result{Handshake: &Handshake{Status: http.StatusOK, Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, Body: []byte{}}}, nil
	}
	if b.EventID == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/event_id", "Events API payload of type "+quoteShort(b.Type)+" has no event_id"))
	}
	typ, field := b.Event.Type, "/event/type"
	if typ == "" {
		typ, field = b.Type, "/type"
	}
	if err := v.types.check(typ, InBody, field); err != nil {
		return Result{}, err
	}
	id := b.EventID
	if v.byMessage && b.Event.Type == "message" {
		for _, part := range [...]struct{ value, field string }{
			{b.TeamID, "/team_id"}, {string(b.Event.Channel), "/event/channel"}, {string(b.Event.TS), "/event/ts"},
		} {
			if part.value == "" {
				return Result{}, authenticated(bodyErr(CodeMissingField, part.field, "a message event is keyed by team_id + event.channel + event.ts (options.key message)"))
			}
		}
		id = JoinKey(b.TeamID, string(b.Event.Channel), string(b.Event.TS))
	}
	return Result{Events: []Event{{ID: id, Type: typ, Scope: b.TeamID, Timestamp: ts}}}, nil
}

// form handles a slash command or an interactivity payload.
func (v *slackVerifier) form(body []byte, ts time.Time) (Result, error) {
	q, err := url.ParseQuery(string(body))
	if err != nil {
		return Result{}, authenticated(bodyErr(CodeMalformedBody, "", "body is neither JSON nor valid application/x-www-form-urlencoded"))
	}
	p, e := formValue(q, "payload")
	if e != nil {
		return Result{}, e
	}
	if p != "" {
		var b struct {
			Type      string `json:"type"`
			TriggerID string `json:"trigger_id"`
			Team      struct {
				ID string `json:"id"`
			} `json:"team"`
		}
		if e := unmarshalBody([]byte(p), &b); e != nil {
			e.Field = "payload" + e.Field
			return Result{}, authenticated(e)
		}
		if b.TriggerID == "" {
			return Result{}, authenticated(bodyErr(CodeMissingField, "payload/trigger_id", "interaction payload has no trigger_id"))
		}
		if err := v.types.check(b.Type, InBody, "payload/type"); err != nil {
			return Result{}, err
		}
		return Result{Events: []Event{{ID: b.TriggerID, Type: b.Type, Scope: b.Team.ID, Timestamp: ts}}}, nil
	}
	command, e := formValue(q, "command")
	if e != nil {
		return Result{}, e
	}
	if command == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "command", "form body is neither a slash command nor an interaction payload"))
	}
	trigger, e := formValue(q, "trigger_id")
	if e != nil {
		return Result{}, e
	}
	if trigger == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "trigger_id", "slash command has no trigger_id"))
	}
	if err := v.types.check(command, InBody, "command"); err != nil {
		return Result{}, err
	}
	team, e := formValue(q, "team_id")
	if e != nil {
		return Result{}, e
	}
	return Result{Events: []Event{{ID: trigger, Type: command, Scope: team, Timestamp: ts}}}, nil
}
