package verifytest

import (
	"encoding/hex"
	"net/http"
	"time"
)

// LemonSqueezySecret is the signing secret of the "lemonsqueezy" fixture.
const LemonSqueezySecret = "lemon-fixture-signing-secret"

// LemonSqueezy returns an X-Signature value: the hex HMAC-SHA256 of body
// keyed with the signing secret
// (https://docs.lemonsqueezy.com/help/webhooks/signing-requests).
func LemonSqueezy(secret string, body []byte) string {
	return hex.EncodeToString(mac([]byte(secret), body))
}

// LemonSqueezyDelivery returns a Lemon Squeezy webhook delivery of the
// event named name carrying body.
func LemonSqueezyDelivery(secret, name string, body []byte) Delivery {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Event-Name", name)
	h.Set("X-Signature", LemonSqueezy(secret, body))
	return Delivery{Header: h, Body: body}
}

// LemonSqueezySubscription returns the body of event name about
// subscription id in state status, last updated at updated.
func LemonSqueezySubscription(name, id, status string, updated time.Time) []byte {
	u := updated.UTC().Format("2006-01-02T15:04:05.000000Z")
	return []byte(`{"meta":{"test_mode":true,"event_name":"` + name + `","custom_data":{"customer_id":25}},"data":{"type":"subscriptions","id":"` + id +
		`","attributes":{"store_id":31,"customer_id":1,"order_id":1,"product_id":1,"variant_id":1,"product_name":"Example Product","variant_name":"Example Variant","user_name":"Darlene Daugherty","user_email":"darlene@example.com","status":"` + status +
		`","status_formatted":"Active","card_brand":"visa","card_last_four":"4242","cancelled":false,"renews_at":"2026-04-14T15:09:26.000000Z","ends_at":null,"created_at":"2026-02-14T15:09:26.000000Z","updated_at":"` + u +
		`","test_mode":true},"relationships":{},"links":{"self":"https://api.lemonsqueezy.com/v1/subscriptions/` + id + `"}}}`)
}

func init() {
	RegisterFixture(Fixture{
		Type:    "lemonsqueezy",
		Secrets: []string{LemonSqueezySecret},
		Cases: func(now time.Time) Cases {
			created := LemonSqueezySubscription("subscription_created", "101", "active", now)
			updated := LemonSqueezySubscription("subscription_updated", "101", "active", now)
			paused := LemonSqueezySubscription("subscription_paused", "102", "paused", now)
			tampered := LemonSqueezyDelivery(LemonSqueezySecret, "subscription_paused", paused)
			tampered.Body = LemonSqueezySubscription("subscription_paused", "103", "paused", now)
			return Cases{
				// One subscription created and (at the same moment)
				// updated: two events.
				Distinct: []Delivery{
					LemonSqueezyDelivery(LemonSqueezySecret, "subscription_created", created),
					LemonSqueezyDelivery(LemonSqueezySecret, "subscription_updated", updated),
				},
				// Retries resend the body as it was.
				Redelivery: []Delivery{
					LemonSqueezyDelivery(LemonSqueezySecret, "subscription_paused", paused),
					LemonSqueezyDelivery(LemonSqueezySecret, "subscription_paused", paused),
				},
				Tampered: tampered,
			}
		},
	})
}
