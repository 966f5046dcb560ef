package verifytest

import (
	"encoding/hex"
	"net/http"
	"net/url"
	"time"
)

// The "mollie" fixture's next-gen signing secret and classic URL token.
const (
	MollieSigningSecret = "mollie-fixture-signing-secret"
	MollieToken         = "mollie-fixture-url-token-0123456789"
)

// Mollie returns an X-Mollie-Signature value: "sha256=" and the hex
// HMAC-SHA256 of body keyed with the signing secret
// (https://docs.mollie.com/reference/webhooks-best-practices).
func Mollie(secret string, body []byte) string {
	return "sha256=" + hex.EncodeToString(mac([]byte(secret), body))
}

// MollieEvent returns a next-gen event body: event id of type typ about
// entity, created at at.
func MollieEvent(id, typ, entity string, at time.Time) []byte {
	return []byte(`{"resource":"event","id":"` + id + `","type":"` + typ + `","entityId":"` + entity + `","createdAt":"` + at.UTC().Format("2006-01-02T15:04:05.0Z") +
		`","_links":{"self":{"href":"https://api.mollie.com/v2/events/` + id + `","type":"application/hal+json"},"entity":{"href":"https://api.mollie.com/v2/sales-invoices/` + entity + `","type":"application/hal+json"}}}`)
}

// MollieNextGenDelivery returns a signed next-gen delivery of body.
func MollieNextGenDelivery(secret string, body []byte) Delivery {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "Mollie HTTP Hooks")
	h.Set("X-Mollie-Signature", Mollie(secret, body))
	return Delivery{Header: h, Body: body}
}

// MollieNudge returns a classic webhook call: the form id=<id>, unsigned,
// to a webhookUrl carrying token in its query.
func MollieNudge(token, id string) Delivery {
	h := http.Header{}
	h.Set("Content-Type", "application/x-www-form-urlencoded")
	return Delivery{Header: h, RawQuery: "token=" + url.QueryEscape(token), Body: []byte("id=" + url.QueryEscape(id))}
}

// The fixture is a next-gen source: a classic nudge is a new event every
// time by design (the claim on id + status dedupes, in the workflow), so
// it has no redelivery that is a duplicate; mollie_test.go tests it.
func init() {
	RegisterFixture(Fixture{
		Type:    "mollie",
		Secrets: []string{MollieSigningSecret},
		Options: map[string]any{"webhooks": "next-gen"},
		Cases: func(now time.Time) Cases {
			issued := MollieEvent("event_GvJ8WHrp5isUdRub9CJyH", "sales-invoice.issued", "invoice_4Y0eZitmBnQ6IDoMqZQKh", now)
			tampered := MollieNextGenDelivery(MollieSigningSecret, issued)
			tampered.Body = MollieEvent("event_GvJ8WHrp5isUdRub9CJyH", "sales-invoice.paid", "invoice_4Y0eZitmBnQ6IDoMqZQKh", now)
			return Cases{
				// One invoice, created and issued.
				Distinct: []Delivery{
					MollieNextGenDelivery(MollieSigningSecret, MollieEvent("event_Q3ZoUs5pKKn38wzeZ2hLm", "sales-invoice.created", "invoice_4Y0eZitmBnQ6IDoMqZQKh", now)),
					MollieNextGenDelivery(MollieSigningSecret, MollieEvent("event_Rb0nS5s1jXzkpqBJ2B5Jz", "sales-invoice.issued", "invoice_4Y0eZitmBnQ6IDoMqZQKh", now)),
				},
				// A retry sends the event again, the same.
				Redelivery: []Delivery{
					MollieNextGenDelivery(MollieSigningSecret, issued),
					MollieNextGenDelivery(MollieSigningSecret, issued),
				},
				Tampered: tampered,
			}
		},
	})
}
