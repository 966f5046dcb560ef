package verifytest

import (
	"net/http"
	"time"
)

// CloudEventsFixtureKey is the HMAC key of the "cloudevents" fixture,
// whose source authenticates with auth: hmac (a bearer token would not
// cover the body, so a tampered body could not be told apart).
const CloudEventsFixtureKey = "fixture-cloudevents-key-0001"

func ceSigned(h http.Header, body string) Delivery {
	h.Set("X-CE-Signature", "sha256="+HexHMACSHA256(CloudEventsFixtureKey, []byte(body)))
	return Delivery{Header: h, Body: []byte(body)}
}

func ceBinary(id, data string) Delivery {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("ce-specversion", "1.0")
	h.Set("ce-id", id)
	h.Set("ce-source", "/fixture/orders")
	h.Set("ce-type", "com.example.order.updated")
	h.Set("ce-subject", "order-1")
	return ceSigned(h, data)
}

func ceStructured(id, data string) Delivery {
	h := http.Header{}
	h.Set("Content-Type", "application/cloudevents+json")
	return ceSigned(h, `{"specversion":"1.0","id":"`+id+`","source":"/fixture/orders","type":"com.example.order.updated","subject":"order-1","data":`+data+`}`)
}

func init() {
	RegisterFixture(Fixture{
		Type:    "cloudevents",
		Secrets: []string{CloudEventsFixtureKey},
		Options: map[string]any{"auth": "hmac", "signature": map[string]any{"header": "X-CE-Signature", "prefix": "sha256="}},
		Cases: func(time.Time) Cases {
			tampered := ceBinary("ce-fx-9", `{"status":"paid"}`)
			tampered.Body = []byte(`{"status":"refunded"}`)
			return Cases{
				// Two events of one source about one order: two ids.
				Distinct: []Delivery{
					ceBinary("ce-fx-1", `{"status":"paid"}`),
					ceBinary("ce-fx-2", `{"status":"paid"}`),
				},
				// The same event again, in binary and in structured mode:
				// source + id, and the data, are the same.
				Redelivery: []Delivery{
					ceBinary("ce-fx-3", `{"status":"shipped"}`),
					ceBinary("ce-fx-3", `{"status":"shipped"}`),
					ceStructured("ce-fx-3", `{"status":"shipped"}`),
				},
				Tampered: tampered,
			}
		},
	})
}
