package verifytest

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"time"
)

// The "square" fixture's signature key and notification URL.
const (
	SquareSignatureKey    = "square-fixture-signature-key"
	SquareNotificationURL = "https://claimd.example.com/ingest/square"
)

// Square returns an x-square-hmacsha256-signature value: the base64
// HMAC-SHA256 of the notification URL followed by body, keyed with the
// signature key (https://developer.squareup.com/docs/webhooks/step3validate).
func Square(key, notificationURL string, body []byte) string {
	return base64.StdEncoding.EncodeToString(mac([]byte(key), []byte(notificationURL), body))
}

// SquareDelivery returns a Square notification of body; retry > 0 adds the
// headers of that retry, first delivered at first.
func SquareDelivery(key, notificationURL string, body []byte, retry int, first time.Time) Delivery {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Square-Environment", "Sandbox")
	h.Set("X-Square-Hmacsha256-Signature", Square(key, notificationURL, body))
	if retry > 0 {
		h.Set("Square-Initial-Delivery-Timestamp", first.UTC().Format(time.RFC3339Nano))
		h.Set("Square-Retry-Number", strconv.Itoa(retry))
		h.Set("Square-Retry-Reason", "http_timeout")
	}
	return Delivery{Header: h, Body: body}
}

// SquarePayment returns the body of event type about payment id in state
// status, with event id eventID.
func SquarePayment(eventID, typ, id, status string, at time.Time) []byte {
	ts := at.UTC().Format("2006-01-02T15:04:05.000Z")
	return []byte(`{"merchant_id":"6SSW7HV8K2ST5","type":"` + typ + `","event_id":"` + eventID + `","created_at":"` + ts +
		`","data":{"type":"payment","id":"` + id + `","object":{"payment":{"id":"` + id + `","amount_money":{"amount":100,"currency":"USD"},"status":"` + status +
		`","location_id":"S8GWD5R9QB376","order_id":"03O3USaPaAaFnI6kkwB1JxGgBsUZY","created_at":"` + ts + `","updated_at":"` + ts + `"}}}}`)
}

func init() {
	RegisterFixture(Fixture{
		Type:    "square",
		Secrets: []string{SquareSignatureKey},
		Options: map[string]any{"notification_url": SquareNotificationURL},
		Cases: func(now time.Time) Cases {
			created := SquarePayment("13b867cf-db3d-4b1c-90b6-2f32a9d78124", "payment.created", "hYy9pRFVxpDsO1FB05SunFWUe9JZY", "APPROVED", now)
			updated := SquarePayment("6a8f5f28-54a1-4eb0-a98a-3111513fd4fc", "payment.updated", "hYy9pRFVxpDsO1FB05SunFWUe9JZY", "COMPLETED", now)
			retried := SquarePayment("b3adf364-4937-436e-a833-49c72b4baee8", "payment.updated", "KkAkhdMsgzn59SM8A89WgKwekxLZY", "COMPLETED", now)
			tampered := SquareDelivery(SquareSignatureKey, SquareNotificationURL, retried, 0, now)
			tampered.Body = SquarePayment("b3adf364-4937-436e-a833-49c72b4baee8", "payment.updated", "KkAkhdMsgzn59SM8A89WgKwekxLZY", "FAILED", now)
			return Cases{
				Distinct: []Delivery{
					SquareDelivery(SquareSignatureKey, SquareNotificationURL, created, 0, now),
					SquareDelivery(SquareSignatureKey, SquareNotificationURL, updated, 0, now),
				},
				// The first delivery, then Square's first and second retries.
				Redelivery: []Delivery{
					SquareDelivery(SquareSignatureKey, SquareNotificationURL, retried, 0, now),
					SquareDelivery(SquareSignatureKey, SquareNotificationURL, retried, 1, now.Add(-time.Minute)),
					SquareDelivery(SquareSignatureKey, SquareNotificationURL, retried, 2, now.Add(-3*time.Minute)),
				},
				Tampered: tampered,
			}
		},
	})
}
