package verifytest

import (
	"encoding/hex"
	"fmt"
	"net/http"
	"time"
)

// CalcomSecret is the webhook secret of the "calcom" fixture.
const CalcomSecret = "calcom-fixture-webhook-secret"

// Calcom returns an X-Cal-Signature-256 value: the hex HMAC-SHA256 of body
// (https://cal.com/docs/developing/guides/automation/webhooks).
func Calcom(secret string, body []byte) string {
	return hex.EncodeToString(mac([]byte(secret), body))
}

// CalcomDelivery returns a webhook POST signed with secret.
func CalcomDelivery(secret string, body []byte) Delivery {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Cal-Signature-256", Calcom(secret, body))
	return Delivery{Header: h, Body: body}
}

// CalcomBooking returns a booking trigger body.
func CalcomBooking(trigger, uid, createdAt string) []byte {
	return fmt.Appendf(nil, `{"triggerEvent":%q,"createdAt":%q,"payload":{"type":"30min","title":"30 min between Pro Example and John Doe","startTime":"2026-03-02T10:00:00Z","endTime":"2026-03-02T10:30:00Z","organizer":{"id":5,"name":"Pro Example","email":"pro@example.com","timeZone":"Europe/London"},"attendees":[{"email":"john.doe@example.com","name":"John Doe","timeZone":"Asia/Kolkata"}],"uid":%q,"bookingId":91,"status":"ACCEPTED"}}`, trigger, createdAt, uid)
}

func init() {
	RegisterFixture(Fixture{
		Type:    "calcom",
		Secrets: []string{CalcomSecret},
		Cases: func(time.Time) Cases {
			retry := CalcomBooking("BOOKING_CREATED", "bFJeNb2uX8ANpT3JL5EfXw", "2026-03-01T11:57:00.000Z")
			tampered := CalcomDelivery(CalcomSecret, CalcomBooking("BOOKING_CANCELLED", "bFJeNb2uX8ANpT3JL5EfXx", "2026-03-01T11:59:00.000Z"))
			tampered.Body = CalcomBooking("BOOKING_CREATED", "bFJeNb2uX8ANpT3JL5EfXx", "2026-03-01T11:59:00.000Z")
			return Cases{
				Distinct: []Delivery{
					CalcomDelivery(CalcomSecret, CalcomBooking("BOOKING_CREATED", "aFJeNb2uX8ANpT3JL5EfXw", "2026-03-01T11:50:00.000Z")),
					CalcomDelivery(CalcomSecret, CalcomBooking("BOOKING_RESCHEDULED", "aFJeNb2uX8ANpT3JL5EfXw", "2026-03-01T11:55:00.000Z")),
				},
				Redelivery: []Delivery{CalcomDelivery(CalcomSecret, retry), CalcomDelivery(CalcomSecret, retry)},
				Tampered:   tampered,
			}
		},
	})
}
