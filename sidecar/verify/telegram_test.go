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
	v := p26MustBuild(t, verify.TypeTelegram, verify.Core{Secrets: []string{verifytest.TelegramSecretToken}}, nil)
	body := verifytest.TelegramMessage(10, 1, "hi")
	good := func() verifytest.Delivery { return verifytest.TelegramDelivery(verifytest.TelegramSecretToken, body) }

	t.Run("fixture", func(t *testing.T) { p26Fixture(t, "telegram", verify.Core{}) })

	t.Run("configuration", func(t *testing.T) {
		for _, s := range []string{"has space", "dot.ted", strings.Repeat("a", 257)} {
			_, err := p26Build(t, verify.TypeTelegram, verify.Core{Secrets: []string{"ok_1", s}}, nil)
			p26ConfigField(t, err, "Secrets[1]")
		}
		_, err := p26Build(t, verify.TypeTelegram, verify.Core{Secrets: []string{"ok"}}, map[string]any{"bot": "12345:AAE"})
		p26ConfigField(t, err, "Bot")
	})

	t.Run("token", func(t *testing.T) {
		p26Code(t, v, verifytest.TelegramDelivery("", body), verify.CodeMissingHeader, verify.InHeader, verify.TelegramSecretTokenHeader)
		bad := verifytest.TelegramDelivery("another_token", body)
		p26Code(t, v, bad, verify.CodeBadSignature, verify.InHeader, verify.TelegramSecretTokenHeader)
		rot := p26MustBuild(t, verify.TypeTelegram, verify.Core{Secrets: []string{"another_token", verifytest.TelegramSecretToken}}, nil)
		p26Events(t, rot, bad)
		p26Events(t, rot, good())
	})

	t.Run("key rule", func(t *testing.T) {
		a := p26Events(t, v, good())[0]
		again := p26Events(t, v, good())[0]
		edit := p26Events(t, v, verifytest.TelegramDelivery(verifytest.TelegramSecretToken, verifytest.TelegramEdited(11, 1, "hi!")))[0]
		if a.ID != "10" || a.Type != "message" || again.ID != a.ID || edit.ID == a.ID || edit.Type != "edited_message" {
			t.Fatalf("a %+v again %+v edit %+v", a, again, edit)
		}
		scoped := p26MustBuild(t, verify.TypeTelegram, verify.Core{Secrets: []string{verifytest.TelegramSecretToken}}, map[string]any{"bot": "777"})
		if s := p26Events(t, scoped, good())[0]; s.ID != verify.JoinKey("777", "10") || s.Scope != "777" {
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
			if e := p26Code(t, v, verifytest.TelegramDelivery(verifytest.TelegramSecretToken, []byte(c.body)), c.code, verify.InBody, c.field); !e.Authenticated {
				t.Errorf("%s: not authenticated", c.body)
			}
		}
		only := p26MustBuild(t, verify.TypeTelegram, verify.Core{Secrets: []string{verifytest.TelegramSecretToken}, AllowedEventTypes: []string{"callback_query"}}, nil)
		p26Code(t, only, good(), verify.CodeEventTypeNotAllowed, verify.InBody, "/message")
	})
}
