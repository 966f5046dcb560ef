package verify_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Slack has resent one message as several event_callback deliveries, each
// under a new event_id and without X-Slack-Retry-Num. With options.key
// "message" a message event is keyed by team + channel + ts, the message's
// identity (ts is unique per channel,
// https://api.slack.com/events/message), so the copies are duplicates.
const (
	slackMsgSecret = "slack-signing-secret-0001"
	slackMsgTS     = int64(1767225600)
	// slackMsgBody1's signature, computed independently with openssl
	// (printf 'v0:1767225600:%s' "$body" | openssl dgst -sha256 -hmac slack-signing-secret-0001)
	// from https://api.slack.com/authentication/verifying-requests-from-slack.
	slackMsgSig1 = "v0=7b6ee3545bc4f4a1630c3e5497f387b9de3bfc4a8bff28c59d0ff9d8de3a1655"
	// slackMsgKey is JoinKey("T123ABC456", "C123ABC456", "1767225599.000100").
	slackMsgKey = "10:T123ABC456|10:C123ABC456|17:1767225599.000100"
)

// slackMsgBody is an event_callback for the message posted at ts in
// channel, delivered under eventID.
func slackMsgBody(eventID, channel, ts string, eventTime int64) []byte {
	return []byte(`{"token":"XXYYZZ","team_id":"T123ABC456","api_app_id":"A123ABC456","event":{"type":"message","channel":"` + channel +
		`","user":"U123ABC456","text":"Live long and prospect.","ts":"` + ts + `","event_ts":"` + ts +
		`","channel_type":"channel"},"type":"event_callback","event_id":"` + eventID + `","event_time":` + strconv.FormatInt(eventTime, 10) + `}`)
}

func slackMsgDelivery(body []byte) verifytest.Delivery {
	h := http.Header{}
	h.Set(verify.SlackTimestampHeader, strconv.FormatInt(slackMsgTS, 10))
	h.Set(verify.SlackSignatureHeader, verifytest.Slack(slackMsgSecret, slackMsgTS, body))
	h.Set("Content-Type", "application/json")
	return verifytest.Delivery{Header: h, Body: body}
}

func TestSlackMessageKey(t *testing.T) {
	t.Parallel()
	core := verify.Core{Secrets: []string{slackMsgSecret}, Now: fixedClock(time.Unix(slackMsgTS, 0))}.WithDefaults(0)
	byMessage := mustBuild(t, verify.TypeSlack, core, map[string]any{"key": "message"})
	byEventID := mustBuild(t, verify.TypeSlack, core, nil)
	explicit := mustBuild(t, verify.TypeSlack, core, map[string]any{"key": "event_id"})

	first := slackMsgBody("Ev0A1B2C3D4E", "C123ABC456", "1767225599.000100", 1767225599)
	resent := slackMsgBody("Ev0F5G6H7I8J", "C123ABC456", "1767225599.000100", 1767225600)
	other := slackMsgBody("Ev0K9L0M1N2O", "C123ABC456", "1767225599.000200", 1767225599)
	otherChannel := slackMsgBody("Ev0P3Q4R5S6T", "C999ZZZ999", "1767225599.000100", 1767225599)

	if got := verifytest.Slack(slackMsgSecret, slackMsgTS, first); got != slackMsgSig1 {
		t.Fatalf("signer: got %s, want %s", got, slackMsgSig1)
	}
	if got := verify.JoinKey("T123ABC456", "C123ABC456", "1767225599.000100"); got != slackMsgKey {
		t.Fatalf("JoinKey = %q, want %q", got, slackMsgKey)
	}
	id := func(v verify.Verifier, body []byte) string {
		t.Helper()
		evs := verifyEvents(t, v, slackMsgDelivery(body))
		if len(evs) != 1 {
			t.Fatalf("%d events", len(evs))
		}
		if evs[0].Type != "message" || evs[0].Scope != "T123ABC456" || !evs[0].Timestamp.Equal(time.Unix(slackMsgTS, 0)) {
			t.Fatalf("got %+v", evs[0])
		}
		return evs[0].ID
	}

	t.Run("key message: one message resent under a new event_id is one event", func(t *testing.T) {
		if a, b := id(byMessage, first), id(byMessage, resent); a != slackMsgKey || b != slackMsgKey {
			t.Fatalf("got %q and %q, want %q for both", a, b, slackMsgKey)
		}
	})
	t.Run("key message: two messages are two events", func(t *testing.T) {
		if got := id(byMessage, other); got != "10:T123ABC456|10:C123ABC456|17:1767225599.000200" {
			t.Fatalf("got %q", got)
		}
		if got := id(byMessage, otherChannel); got != "10:T123ABC456|10:C999ZZZ999|17:1767225599.000100" {
			t.Fatalf("got %q", got)
		}
	})
	t.Run("default event_id: the resent copy is another event", func(t *testing.T) {
		for _, v := range []verify.Verifier{byEventID, explicit} {
			if a, b := id(v, first), id(v, resent); a != "Ev0A1B2C3D4E" || b != "Ev0F5G6H7I8J" {
				t.Fatalf("got %q and %q", a, b)
			}
			if got := id(v, other); got != "Ev0K9L0M1N2O" {
				t.Fatalf("got %q", got)
			}
		}
	})
	t.Run("key message: other events keep their event_id", func(t *testing.T) {
		body := []byte(`{"team_id":"T123ABC456","event":{"type":"reaction_added","user":"U123ABC456","reaction":"thumbsup","item":{"type":"message","channel":"C123ABC456","ts":"1767225599.000100"},"event_ts":"1767225599.000300"},"type":"event_callback","event_id":"Ev0U7V8W9X0Y","event_time":1767225599}`)
		evs := verifyEvents(t, byMessage, slackMsgDelivery(body))
		if evs[0].ID != "Ev0U7V8W9X0Y" || evs[0].Type != "reaction_added" {
			t.Fatalf("got %+v", evs[0])
		}
	})
	t.Run("events whose channel is an object verify under both keys", func(t *testing.T) {
		body := []byte(`{"team_id":"T123ABC456","event":{"type":"channel_created","channel":{"id":"C024BE91L","name":"fun","created":1360782804,"creator":"U024BE7LH"},"event_ts":"1767225599.000500"},"type":"event_callback","event_id":"Ev0E5F6G7H8I","event_time":1767225599}`)
		for _, v := range []verify.Verifier{byMessage, byEventID} {
			if evs := verifyEvents(t, v, slackMsgDelivery(body)); evs[0].ID != "Ev0E5F6G7H8I" {
				t.Fatalf("got %q", evs[0].ID)
			}
		}
	})
	t.Run("key message: an edit is not the message it edits", func(t *testing.T) {
		// message_changed carries the edit's own ts; the edited
		// message's ts is in event.message.ts.
		body := []byte(`{"team_id":"T123ABC456","event":{"type":"message","subtype":"message_changed","channel":"C123ABC456","hidden":true,"ts":"1767225599.000400","event_ts":"1767225599.000400","message":{"type":"message","user":"U123ABC456","text":"Live long and prosper.","ts":"1767225599.000100"}},"type":"event_callback","event_id":"Ev0Z1A2B3C4D","event_time":1767225599}`)
		evs := verifyEvents(t, byMessage, slackMsgDelivery(body))
		if evs[0].ID != "10:T123ABC456|10:C123ABC456|17:1767225599.000400" {
			t.Fatalf("got %q", evs[0].ID)
		}
	})
	t.Run("key message: a message without its key parts is refused, authenticated", func(t *testing.T) {
		for _, c := range []struct{ from, to, field string }{
			{`"team_id":"T123ABC456",`, ``, "/team_id"},
			{`"channel":"C123ABC456",`, ``, "/event/channel"},
			{`"ts":"1767225599.000100",`, ``, "/event/ts"},
		} {
			body := []byte(strings.Replace(string(first), c.from, c.to, 1))
			e := requireRefused(t, byMessage, slackMsgDelivery(body), verify.CodeMissingField, verify.InBody, c.field)
			if !e.Authenticated {
				t.Errorf("%s: not authenticated", c.field)
			}
		}
	})
	t.Run("tampered", func(t *testing.T) {
		d := slackMsgDelivery(first)
		d.Body = []byte(strings.Replace(string(first), "prospect", "prosper", 1))
		requireRefused(t, byMessage, d, verify.CodeBadSignature, verify.InHeader, verify.SlackSignatureHeader)
	})
	t.Run("slash commands and interactions keep trigger_id", func(t *testing.T) {
		body := []byte("command=%2Fdeploy&team_id=T123ABC456&channel_id=C123ABC456&trigger_id=13345224609.738474920.8088930838d88f008e0")
		evs := verifyEvents(t, byMessage, slackMsgDelivery(body))
		if evs[0].ID != "13345224609.738474920.8088930838d88f008e0" {
			t.Fatalf("got %q", evs[0].ID)
		}
	})
	t.Run("an unknown key is a config error naming it", func(t *testing.T) {
		_, err := tryBuild(t, verify.TypeSlack, verify.Core{Secrets: []string{slackMsgSecret}}, map[string]any{"key": "ts"})
		requireConfigField(t, err, "Key")
	})
}
