package verify

import (
	"net/http"
	"strconv"
)

// Google Calendar push notification headers
// (https://developers.google.com/calendar/api/guides/push).
const (
	GoogleChannelIDHeader         = "X-Goog-Channel-ID"
	GoogleChannelTokenHeader      = "X-Goog-Channel-Token"
	GoogleChannelExpirationHeader = "X-Goog-Channel-Expiration"
	GoogleResourceIDHeader        = "X-Goog-Resource-ID"
	GoogleResourceURIHeader       = "X-Goog-Resource-URI"
	GoogleResourceStateHeader     = "X-Goog-Resource-State"
	GoogleMessageNumberHeader     = "X-Goog-Message-Number"
)

// TypeGoogleCalendar is Google Calendar API push notifications.
const TypeGoogleCalendar Type = "googlecalendar"

// The "googlecalendar" provider takes Google Calendar API push
// notifications, per https://developers.google.com/calendar/api/guides/push:
//
//   - they carry no signature. The channel's token (the "token" given to
//     events.watch, calendarList.watch… when the channel is created, up to
//     256 characters) comes back in X-Goog-Channel-Token on every message;
//     it must equal one of the source's secrets, compared in constant time
//     (several may be configured, one per channel or while channels are
//     renewed with a new token). A channel created without a token cannot
//     feed a source;
//   - X-Goog-Resource-State "sync" is the message Google sends when the
//     channel is created: answered 200 as a handshake, nothing stored;
//     "exists" and "not_exists" are events.
//
// A message is a nudge: it has no body and says only that the watched
// collection changed. The workflow lists the changes with its stored sync
// token (events.list with syncToken, https://developers.google.com/calendar/api/guides/sync)
// and claims per changed event (id + updated or etag), which is what makes
// side effects exactly once. Key rule for the nudge itself: ID is
// JoinKey(X-Goog-Channel-ID, X-Goog-Channel-Expiration, X-Goog-Message-Number);
// message numbers increase on a channel (not consecutively) and a retry of
// one message keeps its number; the expiration tells a channel created
// again under a reused id from the old one. Type is the resource state,
// Scope the channel id, ObjectID X-Goog-Resource-ID.
//
// Redelivery: a message answered 500, 502, 503 or 504 is retried with
// exponential backoff; any other status but 200, 201, 202, 204 and 102 is a
// failure (https://developers.google.com/calendar/api/guides/push).
type googleCalendarVerifier struct {
	tokens []string
	types  TypeFilter
}

func init() {
	Register(Provider{
		Type: TypeGoogleCalendar,
		Name: "Google Calendar push notifications",
		Docs: []string{
			"https://developers.google.com/calendar/api/guides/push",
			"https://developers.google.com/calendar/api/guides/sync",
		},
		Build: func(core Core, _ any) (Verifier, error) {
			for i, s := range core.Secrets {
				if len(s) > 256 {
					return nil, &ConfigError{Type: TypeGoogleCalendar, Field: "Secrets[" + strconv.Itoa(i) + "]", Reason: "a channel token is at most 256 characters"}
				}
			}
			return &googleCalendarVerifier{tokens: append([]string(nil), core.Secrets...), types: core.Types()}, nil
		},
		CredentialHeaders: func(any) []string { return []string{GoogleChannelTokenHeader} },
		Setup:             Setup{Secrets: "the `token` given when the notification channel was created (Calendar API `watch`), echoed in `X-Goog-Channel-Token`"},
		Redelivery: Redelivery{
			Key:     "nudge: `X-Goog-Channel-ID` + `X-Goog-Channel-Expiration` + `X-Goog-Message-Number`; the workflow syncs with its sync token and claims per changed event",
			Retries: "exponential backoff on 500, 502, 503, 504",
			Horizon: "forever within a channel (message numbers only increase)",
			Batches: "no (one nudge may stand for many changes, listed by the workflow)",
			Resends: "a nudge says only that the collection changed: never key side effects on it",
		},
	})
}

func (*googleCalendarVerifier) Type() Type { return TypeGoogleCalendar }

func (v *googleCalendarVerifier) Verify(r Request) (Result, error) {
	token := header(r.Header, GoogleChannelTokenHeader)
	if token == "" {
		return Result{}, missingHeader(GoogleChannelTokenHeader)
	}
	ok := false
	for _, s := range v.tokens {
		if equalSecret(token, s) {
			ok = true
		}
	}
	if !ok {
		return Result{}, headerErr(CodeBadSignature, GoogleChannelTokenHeader, "channel token matches no configured secret")
	}
	channel := header(r.Header, GoogleChannelIDHeader)
	if channel == "" {
		return Result{}, authenticated(missingHeader(GoogleChannelIDHeader))
	}
	state := header(r.Header, GoogleResourceStateHeader)
	switch state {
	case "":
		return Result{}, authenticated(missingHeader(GoogleResourceStateHeader))
	case "sync":
		return Result{Handshake: &Handshake{Status: http.StatusOK, Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, Body: []byte{}}}, nil
	}
	num := header(r.Header, GoogleMessageNumberHeader)
	if num == "" {
		return Result{}, authenticated(missingHeader(GoogleMessageNumberHeader))
	}
	if _, ok := parseUnix(num); !ok {
		return Result{}, authenticated(headerErr(CodeMalformedHeader, GoogleMessageNumberHeader, "is not a decimal message number"))
	}
	if err := v.types.Check(state, InHeader, GoogleResourceStateHeader); err != nil {
		return Result{}, err
	}
	return Result{Events: []Event{{
		ID:       JoinKey(channel, header(r.Header, GoogleChannelExpirationHeader), num),
		Type:     state,
		Scope:    channel,
		ObjectID: header(r.Header, GoogleResourceIDHeader),
	}}}, nil
}
