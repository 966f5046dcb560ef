package verifytest

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The "woocommerce" fixture's secret, store and webhook id.
const (
	WooCommerceSecret    = "wc-fixture-webhook-secret"
	WooCommerceSource    = "https://shop.example.com/"
	WooCommerceWebhookID = "7"
)

// WooCommerce returns an X-WC-Webhook-Signature value: the base64
// HMAC-SHA256 of body keyed with the webhook secret
// (WC_Webhook::generate_signature).
func WooCommerce(secret string, body []byte) string {
	return base64.StdEncoding.EncodeToString(mac([]byte(secret), body))
}

// WooCommerceDeliveryID returns the delivery id WooCommerce gives a
// delivery of webhook id in second at: a hash of the two (WooCommerce uses
// wp_hash, an HMAC-MD5 keyed with the site's salt; any hash serves here).
func WooCommerceDeliveryID(webhookID string, at time.Time) string {
	sum := sha256.Sum256([]byte(webhookID + strconv.FormatInt(at.Unix(), 10)))
	return hex.EncodeToString(sum[:16])
}

// WooCommerceDelivery returns a delivery of topic ("order.updated")
// carrying body, sent at at.
func WooCommerceDelivery(secret, topic string, body []byte, at time.Time) Delivery {
	resource, event, _ := strings.Cut(topic, ".")
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "WooCommerce/9.4.0 Hookshot (WordPress/6.7.1)")
	h.Set("X-WC-Webhook-Source", WooCommerceSource)
	h.Set("X-WC-Webhook-Topic", topic)
	h.Set("X-WC-Webhook-Resource", resource)
	h.Set("X-WC-Webhook-Event", event)
	h.Set("X-WC-Webhook-Signature", WooCommerce(secret, body))
	h.Set("X-WC-Webhook-ID", WooCommerceWebhookID)
	h.Set("X-WC-Webhook-Delivery-ID", WooCommerceDeliveryID(WooCommerceWebhookID, at))
	return Delivery{Header: h, Body: body}
}

// WooCommerceOrder returns an order body: order id in state status, last
// modified at modified.
func WooCommerceOrder(id int, status string, modified time.Time) []byte {
	m := modified.UTC().Format("2006-01-02T15:04:05")
	return []byte(`{"id":` + strconv.Itoa(id) + `,"parent_id":0,"status":"` + status + `","currency":"USD","version":"9.4.0","prices_include_tax":false,"date_created":"2026-03-14T10:00:00","date_created_gmt":"2026-03-14T10:00:00","date_modified":"` + m +
		`","date_modified_gmt":"` + m + `","discount_total":"0.00","shipping_total":"10.00","total":"29.35","customer_id":0,"order_key":"wc_order_58d2d042d1d","billing":{"first_name":"John","last_name":"Doe","email":"john.doe@example.com"},"payment_method":"bacs","line_items":[{"id":315,"name":"Woo Single #1","product_id":93,"quantity":2,"total":"6.00"}]}`)
}

// WooCommercePing returns the ping WooCommerce sends when a webhook is
// saved active (WC_Webhook::deliver_ping): form body webhook_id=<id>, no
// signature.
func WooCommercePing(webhookID string) Delivery {
	h := http.Header{}
	h.Set("Content-Type", "application/x-www-form-urlencoded")
	h.Set("User-Agent", "WooCommerce/9.4.0 Hookshot (WordPress/6.7.1)")
	return Delivery{Header: h, Body: []byte("webhook_id=" + webhookID)}
}

func init() {
	RegisterFixture(Fixture{
		Type:    "woocommerce",
		Secrets: []string{WooCommerceSecret},
		Cases: func(now time.Time) Cases {
			order := WooCommerceOrder(727, "processing", now)
			completed := WooCommerceOrder(728, "completed", now)
			tampered := WooCommerceDelivery(WooCommerceSecret, "order.updated", completed, now)
			tampered.Body = WooCommerceOrder(728, "refunded", now)
			return Cases{
				// One order, created and updated in the same second.
				Distinct: []Delivery{
					WooCommerceDelivery(WooCommerceSecret, "order.created", order, now),
					WooCommerceDelivery(WooCommerceSecret, "order.updated", order, now),
				},
				// One change delivered twice, a second apart: the delivery
				// id differs, the body does not.
				Redelivery: []Delivery{
					WooCommerceDelivery(WooCommerceSecret, "order.updated", completed, now),
					WooCommerceDelivery(WooCommerceSecret, "order.updated", completed, now.Add(time.Second)),
				},
				Tampered: tampered,
				Handshakes: []Handshake{{
					Delivery: WooCommercePing(WooCommerceWebhookID),
					Status:   http.StatusOK,
					Body:     []byte{},
				}},
			}
		},
	})
}
