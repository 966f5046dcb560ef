package verifytest

import (
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// MetaVerifyToken is the meta fixture's Verify Token.
const MetaVerifyToken = "meta-fixture-verify-token"

// MetaHeaders returns the signature headers Meta sends with a webhook
// notification
// (https://developers.facebook.com/docs/graph-api/webhooks/getting-started/#event-notifications):
// X-Hub-Signature-256 "sha256=" and the hex HMAC-SHA256 of body under the
// app secret.
func MetaHeaders(appSecret string, body []byte) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Hub-Signature-256", GitHub(appSecret, body))
	return h
}

// MetaVerificationQuery returns the query of Meta's verification request
// (https://developers.facebook.com/docs/graph-api/webhooks/getting-started/#verification-requests).
func MetaVerificationQuery(token, challenge string) string {
	return url.Values{"hub.mode": {"subscribe"}, "hub.verify_token": {token}, "hub.challenge": {challenge}}.Encode()
}

// WhatsAppStatus returns a WhatsApp Cloud API change carrying one status
// of message wamid.
func WhatsAppStatus(wamid, status string, ts int64) string {
	return `{"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15550001111","phone_number_id":"106540352242922"},"statuses":[{"id":"` + wamid + `","status":"` + status + `","timestamp":"` + strconv.FormatInt(ts, 10) + `","recipient_id":"15551234567"}]}}`
}

// WhatsAppMessage returns a WhatsApp Cloud API change carrying one inbound
// text message.
func WhatsAppMessage(wamid, text string, ts int64) string {
	return `{"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15550001111","phone_number_id":"106540352242922"},"contacts":[{"profile":{"name":"Kerry"},"wa_id":"15551234567"}],"messages":[{"from":"15551234567","id":"` + wamid + `","timestamp":"` + strconv.FormatInt(ts, 10) + `","type":"text","text":{"body":"` + text + `"}}]}}`
}

// WhatsAppNotification wraps changes in one entry of a
// whatsapp_business_account notification.
func WhatsAppNotification(changes ...string) []byte {
	b := `{"object":"whatsapp_business_account","entry":[{"id":"102290129340398","changes":[`
	for i, c := range changes {
		if i > 0 {
			b += ","
		}
		b += c
	}
	return []byte(b + `]}]}`)
}

func init() {
	const secret = "meta-fixture-app-secret"
	RegisterFixture(Fixture{
		Type:    "meta",
		Secrets: []string{secret},
		Options: map[string]any{"verify_token": MetaVerifyToken},
		Cases: func(now time.Time) Cases {
			ts := now.Unix()
			const wamid = "wamid.HBgLMTU1NTEyMzQ1NjcVAgARGBI5QTNDQTVCM0Q0Q0Q2RTY3RTcA"
			first := WhatsAppNotification(WhatsAppStatus(wamid, "sent", ts), WhatsAppStatus(wamid, "delivered", ts+1))
			second := WhatsAppNotification(WhatsAppStatus(wamid, "read", ts+5), WhatsAppMessage("wamid.HBgLMTU1NTEyMzQ1NjcVAgASGBQzQUI0", "thanks", ts+6))
			d := func(body []byte) Delivery { return Delivery{Header: MetaHeaders(secret, body), Body: body} }
			tampered := d(second)
			tampered.Body = WhatsAppNotification(WhatsAppStatus(wamid, "failed", ts+5), WhatsAppMessage("wamid.HBgLMTU1NTEyMzQ1NjcVAgASGBQzQUI0", "thanks", ts+6))
			return Cases{
				Distinct:          []Delivery{d(first), d(second)},
				EventsPerDelivery: 2,
				// Meta sends an unacknowledged notification again as it was.
				Redelivery: []Delivery{d(first), d(first)},
				Tampered:   tampered,
				Handshakes: []Handshake{{
					Delivery: Delivery{Method: http.MethodGet, Header: http.Header{}, RawQuery: MetaVerificationQuery(MetaVerifyToken, "1158201444")},
					Status:   http.StatusOK,
					Body:     []byte("1158201444"),
				}},
			}
		},
	})
}
