package verifytest

import (
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // Trello signs with HMAC-SHA1.
	"encoding/base64"
	"net/http"
	"time"
)

// Trello returns an X-Trello-Webhook value: the base64 HMAC-SHA1 of body
// followed by callbackURL, keyed with the application secret
// (https://developer.atlassian.com/cloud/trello/guides/rest-api/webhooks/#webhook-signatures).
func Trello(secret, callbackURL string, body []byte) string {
	m := hmac.New(sha1.New, []byte(secret))
	m.Write(body)
	m.Write([]byte(callbackURL))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// TrelloFixtureCallbackURL is the callback URL of the trello fixture.
const TrelloFixtureCallbackURL = "https://claimd.example.com/ingest/trello?board=5abbe4b7ddc1b351ef961414"

func init() {
	const secret = "trello-fixture-application-secret"
	RegisterFixture(Fixture{
		Type:    "trello",
		Secrets: []string{secret},
		Options: map[string]any{"callback_url": TrelloFixtureCallbackURL},
		Cases: func(time.Time) Cases {
			action := func(id, typ, list string) []byte {
				return []byte(`{"model":{"id":"5a4537e5e0af6c1e8e1d2a3f","name":"Board"},"action":{"id":"` + id + `","idMemberCreator":"5a4537e5e0af6c1e8e1d0001","type":"` + typ + `","date":"2026-12-05T04:00:00.000Z","data":{"card":{"id":"5abbe4b7ddc1b351ef961414","name":"Card"},"listAfter":{"name":"` + list + `"}}},"webhook":{"id":"5b0b6a2d3f8e1c0a1b2c3d4e","idModel":"5a4537e5e0af6c1e8e1d2a3f"}}`)
			}
			created := action("5c1d2e3f4a5b6c7d8e9f0a01", "createCard", "To Do")
			moved := action("5c1d2e3f4a5b6c7d8e9f0a02", "updateCard", "Doing")
			d := func(body []byte) Delivery {
				h := http.Header{}
				h.Set("X-Trello-Webhook", Trello(secret, TrelloFixtureCallbackURL, body))
				return Delivery{Header: h, Body: body, RawQuery: "board=5abbe4b7ddc1b351ef961414"}
			}
			tampered := d(moved)
			tampered.Body = action("5c1d2e3f4a5b6c7d8e9f0a02", "updateCard", "Done")
			return Cases{
				Distinct:   []Delivery{d(created), d(moved)},
				Redelivery: []Delivery{d(moved), d(moved)},
				Tampered:   tampered,
				Handshakes: []Handshake{{
					Delivery: Delivery{Method: http.MethodHead, Header: http.Header{}, RawQuery: "board=5abbe4b7ddc1b351ef961414"},
					Status:   http.StatusOK,
				}},
			}
		},
	})
}
