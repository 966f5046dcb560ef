package verifytest

import (
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // Intercom signs with HMAC-SHA1.
	"encoding/hex"
	"fmt"
	"net/http"
	"time"
)

// IntercomSecret is the client secret of the "intercom" fixture.
const IntercomSecret = "intercom-fixture-client-secret"

// Intercom returns an X-Hub-Signature value: "sha1=" and the hex
// HMAC-SHA1 of body
// (https://developers.intercom.com/intercom-api-reference/v1.0/reference/signed-notifications).
func Intercom(secret string, body []byte) string {
	m := hmac.New(sha1.New, []byte(secret))
	m.Write(body)
	return "sha1=" + hex.EncodeToString(m.Sum(nil))
}

// IntercomDelivery returns a notification POST signed with secret.
func IntercomDelivery(secret string, body []byte) Delivery {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Hub-Signature", Intercom(secret, body))
	return Delivery{Header: h, Body: body}
}

// IntercomNotification returns a notification body; attempts is
// delivery_attempts, which Intercom counts up on retries.
func IntercomNotification(id, topic, conversation string, attempts int, at time.Time) []byte {
	return fmt.Appendf(nil, `{"type":"notification_event","app_id":"abc123de","data":{"type":"notification_event_data","item":{"type":"conversation","id":%q,"state":"open"}},"links":{},"id":%q,"topic":%q,"delivery_status":"pending","delivery_attempts":%d,"delivered_at":0,"first_sent_at":%d,"created_at":%d,"self":null}`,
		conversation, id, topic, attempts, at.Unix(), at.Unix())
}

func init() {
	RegisterFixture(Fixture{
		Type:    "intercom",
		Secrets: []string{IntercomSecret},
		Cases: func(now time.Time) Cases {
			tampered := IntercomDelivery(IntercomSecret, IntercomNotification("notif_t", "conversation.user.created", "1911149811", 1, now))
			tampered.Body = IntercomNotification("notif_t", "conversation.admin.closed", "1911149811", 1, now)
			return Cases{
				Distinct: []Delivery{
					IntercomDelivery(IntercomSecret, IntercomNotification("notif_ccd8a4d0-f965-11e3-a367-c779cae3e1b3", "conversation.user.created", "1911149811", 1, now)),
					IntercomDelivery(IntercomSecret, IntercomNotification("notif_ccd8a4d0-f965-11e3-a367-c779cae3e1b4", "conversation.admin.closed", "1911149811", 1, now)),
				},
				Redelivery: []Delivery{
					IntercomDelivery(IntercomSecret, IntercomNotification("notif_0e4b6b40-1c1f-4f2b-9a7e-3d2f1b0c9a88", "conversation.user.replied", "1911149811", 1, now)),
					IntercomDelivery(IntercomSecret, IntercomNotification("notif_0e4b6b40-1c1f-4f2b-9a7e-3d2f1b0c9a88", "conversation.user.replied", "1911149811", 2, now)),
				},
				Tampered: tampered,
			}
		},
	})
}
