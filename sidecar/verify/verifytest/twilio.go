package verifytest

import (
	"net/http"
	"net/url"
	"time"
)

// The "twilio" fixture's auth token and the webhook URL configured in
// Twilio (options.url).
const (
	TwilioFixtureToken = "fixture-twilio-auth-token-0001"
	TwilioFixtureURL   = "https://hooks.example.com/ingest/twilio"
)

func twilioDelivery(form url.Values, extra ...string) Delivery {
	h := http.Header{}
	h.Set("Content-Type", "application/x-www-form-urlencoded")
	h.Set("X-Twilio-Signature", Twilio(TwilioFixtureToken, TwilioFixtureURL, form))
	for i := 0; i+1 < len(extra); i += 2 {
		h.Set(extra[i], extra[i+1])
	}
	return Delivery{Header: h, Body: []byte(form.Encode())}
}

func twilioStatus(status string) url.Values {
	return url.Values{"AccountSid": {"ACfx"}, "MessageSid": {"SMfx1"}, "MessageStatus": {status}, "To": {"+15005550006"}}
}

func init() {
	RegisterFixture(Fixture{
		Type:    "twilio",
		Secrets: []string{TwilioFixtureToken},
		Options: map[string]any{"url": TwilioFixtureURL},
		Cases: func(time.Time) Cases {
			tampered := twilioDelivery(twilioStatus("sent"))
			tampered.Body = []byte(twilioStatus("failed").Encode())
			return Cases{
				// A message passes through each status once: sid + status.
				Distinct: []Delivery{
					twilioDelivery(twilioStatus("sent")),
					twilioDelivery(twilioStatus("delivered")),
				},
				// Twilio's retry (connection overrides) resends the same
				// request with the same idempotency token.
				Redelivery: []Delivery{
					twilioDelivery(twilioStatus("read"), "I-Twilio-Idempotency-Token", "fx-token-3"),
					twilioDelivery(twilioStatus("read"), "I-Twilio-Idempotency-Token", "fx-token-3"),
				},
				Tampered: tampered,
			}
		},
	})
}
