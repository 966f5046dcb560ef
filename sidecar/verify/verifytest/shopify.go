package verifytest

import (
	"net/http"
	"time"
)

// ShopifyFixtureSecret is the app client secret of the "shopify" fixture.
const ShopifyFixtureSecret = "shpss_fixture_0001"

func shopifyDelivery(topic, eventID, webhookID, body string) Delivery {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Shopify-Topic", topic)
	h.Set("X-Shopify-Event-Id", eventID)
	h.Set("X-Shopify-Webhook-Id", webhookID)
	h.Set("X-Shopify-Shop-Domain", "fixture.myshopify.com")
	h.Set("X-Shopify-Triggered-At", "2025-04-22T14:30:00.000000Z")
	h.Set("X-Shopify-API-Version", "2025-04")
	h.Set("X-Shopify-Hmac-Sha256", Shopify(ShopifyFixtureSecret, []byte(body)))
	return Delivery{Header: h, Body: []byte(body)}
}

const shopifyOrder = `{"id":820982911946154508,"admin_graphql_api_id":"gid://shopify/Order/820982911946154508","financial_status":"paid"}`

func init() {
	RegisterFixture(Fixture{
		Type:    "shopify",
		Secrets: []string{ShopifyFixtureSecret},
		Cases: func(time.Time) Cases {
			tampered := shopifyDelivery("orders/create", "evt-fx-9", "wh-fx-9", shopifyOrder)
			tampered.Body = []byte(`{"id":820982911946154508,"financial_status":"refunded"}`)
			return Cases{
				// One merchant action fires orders/create and orders/paid
				// under one event id, with the same body: two events.
				Distinct: []Delivery{
					shopifyDelivery("orders/create", "evt-fx-1", "wh-fx-1", shopifyOrder),
					shopifyDelivery("orders/paid", "evt-fx-1", "wh-fx-2", shopifyOrder),
				},
				// A retry keeps both ids; a second subscription to the
				// topic sends the event id under a new webhook id.
				Redelivery: []Delivery{
					shopifyDelivery("orders/create", "evt-fx-3", "wh-fx-3", shopifyOrder),
					shopifyDelivery("orders/create", "evt-fx-3", "wh-fx-3", shopifyOrder),
					shopifyDelivery("orders/create", "evt-fx-3", "wh-fx-4", shopifyOrder),
				},
				Tampered: tampered,
			}
		},
	})
}
