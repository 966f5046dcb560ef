package verify_test

import (
	"strings"
	"testing"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Telegram updates carry no signature (nothing to compute a vector of):
// the secret token is compared with the configured ones
// (https://core.telegram.org/bots/api#setwebhook).
func TestTelegram(t *testing.T) {
	t.Parallel()
	v := mustBuild(t, verify.TypeTelegram, verify.Core{Secrets: []string{verifytest.TelegramSecretToken}}, nil)
	body := verifytest.TelegramMessage(10, 1, "hi")
	good := func() verifytest.Delivery { return verifytest.TelegramDelivery(verifytest.TelegramSecretToken, body) }

	t.Run("fixture", func(t *testing.T) { replayFixture(t, "telegram") })

	t.Run("configuration", func(t *testing.T) {
		for _, s := range []string{"has space", "dot.ted", strings.Repeat("a", 257)} {
			_, err := tryBuild(t, verify.TypeTelegram, verify.Core{Secrets: []string{"ok_1", s}}, nil)
			requireConfigField(t, err, "Secrets[1]")
		}
		_, err := tryBuild(t, verify.TypeTelegram, verify.Core{Secrets: []string{"ok"}}, map[string]any{"bot": "12345:AAE"})
		requireConfigField(t, err, "Bot")
	})

	t.Run("token", func(t *testing.T) {
		requireRefused(t, v, verifytest.TelegramDelivery("", body), verify.CodeMissingHeader, verify.InHeader, verify.TelegramSecretTokenHeader)
		bad := verifytest.TelegramDelivery("another_token", body)
		requireRefused(t, v, bad, verify.CodeBadSignature, verify.InHeader, verify.TelegramSecretTokenHeader)
		rot := mustBuild(t, verify.TypeTelegram, verify.Core{Secrets: []string{"another_token", verifytest.TelegramSecretToken}}, nil)
		verifyEvents(t, rot, bad)
		verifyEvents(t, rot, good())
	})

	t.Run("key rule", func(t *testing.T) {
		a := verifyEvents(t, v, good())[0]
		again := verifyEvents(t, v, good())[0]
		edit := verifyEvents(t, v, verifytest.TelegramDelivery(verifytest.TelegramSecretToken, verifytest.TelegramEdited(11, 1, "hi!")))[0]
		if a.ID != "10" || a.Type != "message" || again.ID != a.ID || edit.ID == a.ID || edit.Type != "edited_message" {
			t.Fatalf("a %+v again %+v edit %+v", a, again, edit)
		}
		scoped := mustBuild(t, verify.TypeTelegram, verify.Core{Secrets: []string{verifytest.TelegramSecretToken}}, map[string]any{"bot": "777"})
		if s := verifyEvents(t, scoped, good())[0]; s.ID != verify.JoinKey("777", "10") || s.Scope != "777" {
			t.Fatalf("got %+v", s)
		}
	})

	t.Run("body", func(t *testing.T) {
		for _, c := range []struct {
			body  string
			code  verify.Code
			field string
		}{
			{`{"message":{}}`, verify.CodeMissingField, "/update_id"},
			{`{"update_id":-1,"message":{}}`, verify.CodeMalformedBody, "/update_id"},
			{`{"update_id":1}`, verify.CodeMalformedBody, ""},
			{`{"update_id":1,"message":{},"edited_message":{}}`, verify.CodeMalformedBody, ""},
			{`[1]`, verify.CodeMalformedBody, ""},
		} {
			if e := requireRefused(t, v, verifytest.TelegramDelivery(verifytest.TelegramSecretToken, []byte(c.body)), c.code, verify.InBody, c.field); !e.Authenticated {
				t.Errorf("%s: not authenticated", c.body)
			}
		}
		only := mustBuild(t, verify.TypeTelegram, verify.Core{Secrets: []string{verifytest.TelegramSecretToken}, AllowedEventTypes: []string{"callback_query"}}, nil)
		requireRefused(t, only, good(), verify.CodeEventTypeNotAllowed, verify.InBody, "/message")
	})
}
