package verifytest

import (
	"net/http"
	"time"
)

// TokenFixtureSecret is the shared token of the "token" fixture, sent in
// X-Api-Key.
const TokenFixtureSecret = "fixture-shared-token-0001"

func tokenDelivery(token, id, body string) Delivery {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Api-Key", token)
	h.Set("X-Event-Id", id)
	return Delivery{Header: h, Body: []byte(body)}
}

func init() {
	RegisterFixture(Fixture{
		Type:    "token",
		Secrets: []string{TokenFixtureSecret},
		Options: map[string]any{"header": "X-Api-Key", "key": map[string]any{"id_header": "X-Event-Id"}},
		Cases: func(time.Time) Cases {
			return Cases{
				Distinct: []Delivery{
					tokenDelivery(TokenFixtureSecret, "tk-fx-1", `{"status":"open"}`),
					tokenDelivery(TokenFixtureSecret, "tk-fx-2", `{"status":"open"}`),
				},
				Redelivery: []Delivery{
					tokenDelivery(TokenFixtureSecret, "tk-fx-3", `{"status":"open"}`),
					tokenDelivery(TokenFixtureSecret, "tk-fx-3", `{"status":"open"}`),
				},
				// A token signs nothing, so a changed body cannot be told
				// apart: the refused delivery is one with another token.
				Tampered: tokenDelivery("not-the-token", "tk-fx-9", `{"status":"open"}`),
			}
		},
	})
}
