package verify

import (
	"crypto/sha1" //nolint:gosec // Trello signs with HMAC-SHA1.
	"encoding/base64"
	"net/http"
	"net/url"
)

// TrelloSignatureHeader carries Trello's webhook signature
// (https://developer.atlassian.com/cloud/trello/guides/rest-api/webhooks/#webhook-signatures).
const TrelloSignatureHeader = "X-Trello-Webhook"

// TypeTrello is the "trello" provider: Trello webhooks created through the
// REST API (POST /1/webhooks) for a board, list, card or member.
//
// Handshake: when a webhook is created, Trello sends a HEAD request to the
// callback URL and creates the webhook only if it is answered 200
// (https://developer.atlassian.com/cloud/trello/guides/rest-api/webhooks/#creating-a-webhook).
// A HEAD is answered 200 with an empty body and creates no event.
//
// Verification, per
// https://developer.atlassian.com/cloud/trello/guides/rest-api/webhooks/#webhook-signatures:
// X-Trello-Webhook is the base64 HMAC-SHA1 of the raw body followed by the
// callback URL exactly as given when the webhook was created
// (options.callback_url, required), keyed with the application's secret
// (several may be configured while one is changed). Nothing is
// timestamped, so there is no replay window.
//
// Identity: ID is action.id, the id of the action that changed the model
// (unique; a retry carries the same action). Type is action.type
// ("updateCard"), ObjectID model.id, Scope webhook.id.
//
// Redelivery: a POST not answered 2xx is retried (3 times, after 30, 60
// and 120 seconds, per the guide's "Webhook Retries").
const TypeTrello Type = "trello"

// TrelloOptions are the trello provider's options.
type TrelloOptions struct {
	// CallbackURL is the webhook's callbackURL exactly as sent to Trello
	// when it was created (scheme, host, path and query): it is part of
	// the signed content. Required.
	CallbackURL string `required:"true" doc:"the webhook's callbackURL exactly as sent to Trello (Trello signs it)"`
}

func init() {
	Register(Provider{
		Type: TypeTrello,
		Name: "Trello",
		Docs: []string{
			"https://developer.atlassian.com/cloud/trello/guides/rest-api/webhooks/",
		},
		Options: func() any { return &TrelloOptions{} },
		Build: func(core Core, opts any) (Verifier, error) {
			o, _ := opts.(*TrelloOptions)
			if o == nil || o.CallbackURL == "" {
				return nil, &ConfigError{Type: TypeTrello, Field: "CallbackURL", Reason: "the webhook's callbackURL is required: Trello signs the body followed by it"}
			}
			u, err := url.Parse(o.CallbackURL)
			if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
				return nil, &ConfigError{Type: TypeTrello, Field: "CallbackURL", Reason: "must be the absolute http(s) URL the webhook was created with"}
			}
			return &trelloVerifier{keys: secretKeys(core.Secrets), callback: []byte(o.CallbackURL), types: core.Types()}, nil
		},
		CredentialHeaders: func(any) []string { return []string{TrelloSignatureHeader} },
		Methods:           []string{http.MethodHead},
		Setup:             Setup{Secrets: "the application's secret (Power-Up admin → the app → API key → Secret), which signs the body and `options.callback_url`"},
		Redelivery: Redelivery{
			Key:     "`action.id` (body, signed)",
			Retries: "3 retries, after 30, 60 and 120 seconds",
			Horizon: "forever (action ids)",
			Batches: "no",
			Resends: "no",
		},
	})
}

type trelloVerifier struct {
	keys     [][]byte
	callback []byte
	types    TypeFilter
}

func (*trelloVerifier) Type() Type { return TypeTrello }

func (v *trelloVerifier) Verify(r Request) (Result, error) {
	if r.Method == http.MethodHead {
		// Trello's check of the callback URL when the webhook is created:
		// nothing is signed and nothing is stored.
		return Result{Handshake: &Handshake{Status: http.StatusOK, Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, Body: []byte{}}}, nil
	}
	raw := header(r.Header, TrelloSignatureHeader)
	if raw == "" {
		return Result{}, missingHeader(TrelloSignatureHeader)
	}
	sig, err := base64.StdEncoding.DecodeString(raw)
	if err != nil || len(sig) != sha1.Size {
		return Result{}, headerErr(CodeMalformedHeader, TrelloSignatureHeader, "must be the base64 of a 20-byte HMAC-SHA1")
	}
	if !anyMACMatches(sha1.New, v.keys, [][]byte{sig}, r.Body, v.callback) {
		return Result{}, headerErr(CodeBadSignature, TrelloSignatureHeader, "signature does not match the payload and callback URL under any configured secret")
	}
	var body struct {
		Action struct {
			ID   string `json:"id"`
			Type string `json:"type"`
		} `json:"action"`
		Model struct {
			ID string `json:"id"`
		} `json:"model"`
		Webhook struct {
			ID string `json:"id"`
		} `json:"webhook"`
	}
	if e := unmarshalBody(r.Body, &body); e != nil {
		return Result{}, authenticated(e)
	}
	if body.Action.ID == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/action/id", "the delivery has no action id"))
	}
	if err := v.types.Check(body.Action.Type, InBody, "/action/type"); err != nil {
		return Result{}, err
	}
	return Result{Events: []Event{{ID: body.Action.ID, Type: body.Action.Type, Scope: body.Webhook.ID, ObjectID: body.Model.ID}}}, nil
}
