package verify

import (
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// TelegramSecretTokenHeader carries the secret_token given to setWebhook
// (https://core.telegram.org/bots/api#setwebhook).
const TelegramSecretTokenHeader = "X-Telegram-Bot-Api-Secret-Token"

// TypeTelegram is Telegram Bot API webhooks.
const TypeTelegram Type = "telegram"

// TelegramOptions are the telegram provider's options.
type TelegramOptions struct {
	// Bot is the bot's numeric id (the digits before ':' in its token),
	// optional: when set, event ids are scoped by it, so that one source
	// can take the updates of several bots.
	Bot string `doc:"the bot's numeric id; when set, event ids are scoped by it"`
}

// The "telegram" provider takes Telegram Bot API webhook updates, per
// https://core.telegram.org/bots/api#setwebhook:
//
//   - updates carry no signature. The secret_token given to setWebhook (1
//     to 256 characters of A-Z, a-z, 0-9, '_' and '-') comes back in
//     X-Telegram-Bot-Api-Secret-Token on every request; it must equal one of
//     the source's secrets, compared in constant time (several may be
//     configured while setWebhook is called again with a new token). A
//     webhook set without secret_token cannot feed a source.
//
// The body is an Update (https://core.telegram.org/bots/api#update):
// "update_id" and exactly one optional field naming its kind ("message",
// "edited_message", "callback_query"…), which becomes Type. Key rule: ID is
// update_id (JoinKey(bot, update_id) when options.bot is set; Scope is the
// bot). Update ids increase one by one per bot; after a week without
// updates the next id is chosen at random, so an id seen long ago may in
// principle come back: such a later update has another body, so it is a
// conflict (reported), not a silent duplicate.
//
// Redelivery: Telegram resends an update not answered 2xx and "gives up
// after a reasonable amount of attempts"; it keeps the updates of a bot
// queued up to 24 hours (https://core.telegram.org/bots/api#getting-updates).
type telegramVerifier struct {
	tokens []string
	bot    string
	types  TypeFilter
}

func init() {
	Register(Provider{
		Type: TypeTelegram,
		Name: "Telegram Bot API",
		Docs: []string{
			"https://core.telegram.org/bots/api#setwebhook",
			"https://core.telegram.org/bots/api#update",
			"https://core.telegram.org/bots/api#getting-updates",
		},
		Options: func() any { return &TelegramOptions{} },
		Build:   buildTelegram,
		CredentialHeaders: func(any) []string {
			return []string{TelegramSecretTokenHeader}
		},
		Setup: Setup{Secrets: "the `secret_token` given to `setWebhook`, sent back in `X-Telegram-Bot-Api-Secret-Token`"},
		Redelivery: Redelivery{
			Key:     "`update_id` (with options.bot: bot + `update_id`)",
			Retries: "resent until answered 2xx, \"a reasonable amount of attempts\"; updates are kept up to 24 hours",
			Horizon: "per bot; ids restart at random after a week without updates (a reused id with another body is a conflict)",
			Batches: "no",
			Resends: "no",
		},
	})
}

func telegramTokenOK(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func buildTelegram(core Core, opts any) (Verifier, error) {
	for i, s := range core.Secrets {
		if !telegramTokenOK(s) {
			return nil, &ConfigError{Type: TypeTelegram, Field: "Secrets[" + strconv.Itoa(i) + "]", Reason: "a secret_token is 1 to 256 characters of A-Z, a-z, 0-9, _ and -"}
		}
	}
	o, _ := opts.(*TelegramOptions)
	if o == nil {
		o = &TelegramOptions{}
	}
	if o.Bot != "" {
		if _, ok := parseUnix(o.Bot); !ok {
			return nil, &ConfigError{Type: TypeTelegram, Field: "Bot", Reason: "must be the bot's numeric id (the digits before ':' in its token)"}
		}
	}
	return &telegramVerifier{tokens: append([]string(nil), core.Secrets...), bot: o.Bot, types: core.Types()}, nil
}

// pointerEscaper escapes a member name as a JSON Pointer reference token
// (RFC 6901 section 3).
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

func (*telegramVerifier) Type() Type { return TypeTelegram }

func (v *telegramVerifier) Verify(r Request) (Result, error) {
	token := header(r.Header, TelegramSecretTokenHeader)
	if token == "" {
		return Result{}, missingHeader(TelegramSecretTokenHeader)
	}
	ok := false
	for _, s := range v.tokens {
		if equalSecret(token, s) {
			ok = true
		}
	}
	if !ok {
		return Result{}, headerErr(CodeBadSignature, TelegramSecretTokenHeader, "secret token matches no configured secret")
	}
	var u map[string]jsontext.Value
	if e := unmarshalBody(r.Body, &u); e != nil {
		return Result{}, authenticated(e)
	}
	var id struct {
		UpdateID *flexString `json:"update_id"`
	}
	if e := unmarshalBody(r.Body, &id); e != nil {
		return Result{}, authenticated(e)
	}
	if id.UpdateID == nil || *id.UpdateID == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/update_id", "the update has no update_id"))
	}
	if _, ok := parseUnix(string(*id.UpdateID)); !ok {
		return Result{}, authenticated(bodyErr(CodeMalformedBody, "/update_id", "update_id is not a non-negative integer"))
	}
	var kinds []string
	for k := range u {
		if k != "update_id" {
			kinds = append(kinds, k)
		}
	}
	if len(kinds) != 1 {
		return Result{}, authenticated(bodyErr(CodeMalformedBody, "", "an update carries exactly one field besides update_id, found "+strconv.Itoa(len(kinds))))
	}
	if err := v.types.Check(kinds[0], InBody, "/"+pointerEscaper.Replace(kinds[0])); err != nil {
		return Result{}, err
	}
	key := string(*id.UpdateID)
	if v.bot != "" {
		key = JoinKey(v.bot, key)
	}
	return Result{Events: []Event{{ID: key, Type: kinds[0], Scope: v.bot}}}, nil
}
