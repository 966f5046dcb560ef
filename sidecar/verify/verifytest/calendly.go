package verifytest

import (
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// CalendlyKey is the webhook signing key of the "calendly" fixture.
const CalendlyKey = "calendly-fixture-signing-key-0123456789"

// Calendly returns a Calendly-Webhook-Signature value "t=<t>,v1=<hex
// HMAC-SHA256 of t.body>"
// (https://developer.calendly.com/api-docs/overview/webhooks/webhook-signatures).
func Calendly(key string, t int64, body []byte) string {
	ts := strconv.FormatInt(t, 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac([]byte(key), []byte(ts+"."), body))
}

// CalendlyDelivery returns a webhook POST signed at at.
func CalendlyDelivery(key string, at time.Time, body []byte) Delivery {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Calendly-Webhook-Signature", Calendly(key, at.Unix(), body))
	return Delivery{Header: h, Body: body}
}

// CalendlyInvitee returns an invitee event body about invitee, created at
// createdAt.
func CalendlyInvitee(event, invitee, createdAt string) []byte {
	return fmt.Appendf(nil, `{"created_at":%q,"created_by":"https://api.calendly.com/users/AAAAAAAAAAAAAAAA","event":%q,"payload":{"cancel_url":"https://calendly.com/cancellations/AAAAAAAAAAAAAAAA","created_at":"2026-03-01T11:50:00.000000Z","email":"test@example.com","event":"https://api.calendly.com/scheduled_events/GBGBDCAADAEDCRZ2","name":"John Doe","status":"active","timezone":"America/New_York","uri":%q}}`, createdAt, event, invitee)
}

func init() {
	RegisterFixture(Fixture{
		Type:    "calendly",
		Secrets: []string{CalendlyKey},
		Cases: func(now time.Time) Cases {
			invitee := "https://api.calendly.com/scheduled_events/GBGBDCAADAEDCRZ2/invitees/AAAAAAAAAAAAAAAA"
			retry := CalendlyInvitee("invitee.created", "https://api.calendly.com/scheduled_events/GBGBDCAADAEDCRZ3/invitees/BBBBBBBBBBBBBBBB", "2026-03-01T11:55:00.000000Z")
			tampered := CalendlyDelivery(CalendlyKey, now, CalendlyInvitee("invitee.canceled", invitee, "2026-03-01T11:59:00.000000Z"))
			tampered.Body = CalendlyInvitee("invitee.created", invitee, "2026-03-01T11:59:00.000000Z")
			return Cases{
				Distinct: []Delivery{
					CalendlyDelivery(CalendlyKey, now, CalendlyInvitee("invitee.created", invitee, "2026-03-01T11:50:00.000000Z")),
					CalendlyDelivery(CalendlyKey, now, CalendlyInvitee("invitee.canceled", invitee, "2026-03-01T11:58:00.000000Z")),
				},
				Redelivery: []Delivery{
					CalendlyDelivery(CalendlyKey, now.Add(-2*time.Minute), retry),
					CalendlyDelivery(CalendlyKey, now, retry),
				},
				Tampered: tampered,
			}
		},
	})
}
