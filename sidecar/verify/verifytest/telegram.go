package verifytest

import (
	"fmt"
	"net/http"
	"time"
)

// TelegramSecretToken is the secret_token of the "telegram" fixture.
const TelegramSecretToken = "n8n_telegram-fixture_0123456789"

// TelegramDelivery returns an update POST carrying token.
func TelegramDelivery(token string, body []byte) Delivery {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	if token != "" {
		h.Set("X-Telegram-Bot-Api-Secret-Token", token)
	}
	return Delivery{Header: h, Body: body}
}

// TelegramMessage returns a message update
// (https://core.telegram.org/bots/api#update).
func TelegramMessage(updateID int64, messageID int, text string) []byte {
	return fmt.Appendf(nil, `{"update_id":%d,"message":{"message_id":%d,"from":{"id":111111111,"is_bot":false,"first_name":"Ada","language_code":"en"},"chat":{"id":111111111,"first_name":"Ada","type":"private"},"date":1772366340,"text":%q}}`, updateID, messageID, text)
}

// TelegramEdited returns an edited_message update.
func TelegramEdited(updateID int64, messageID int, text string) []byte {
	return fmt.Appendf(nil, `{"update_id":%d,"edited_message":{"message_id":%d,"from":{"id":111111111,"is_bot":false,"first_name":"Ada"},"chat":{"id":111111111,"first_name":"Ada","type":"private"},"date":1772366340,"edit_date":1772366390,"text":%q}}`, updateID, messageID, text)
}

func init() {
	RegisterFixture(Fixture{
		Type:    "telegram",
		Secrets: []string{TelegramSecretToken},
		Options: map[string]any{"bot": "123456789"},
		Cases: func(time.Time) Cases {
			retry := TelegramMessage(815000003, 44, "/start")
			return Cases{
				// A message, then its edit: two updates about one message.
				Distinct: []Delivery{
					TelegramDelivery(TelegramSecretToken, TelegramMessage(815000001, 42, "hello")),
					TelegramDelivery(TelegramSecretToken, TelegramEdited(815000002, 42, "hello!")),
				},
				Redelivery: []Delivery{TelegramDelivery(TelegramSecretToken, retry), TelegramDelivery(TelegramSecretToken, retry)},
				// Unsigned: what an attacker can change is the token.
				Tampered: TelegramDelivery("guessed_token", TelegramMessage(815000004, 45, "hi")),
			}
		},
	})
}
