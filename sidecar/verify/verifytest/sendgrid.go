package verifytest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// NewSendGridKey generates a P-256 key as SendGrid does for a Signed Event
// Webhook.
func NewSendGridKey() *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	return k
}

// SendGridKey is the "sendgrid" fixture's signing key.
var SendGridKey = NewSendGridKey()

// SendGridPublicKey returns the verification key as SendGrid shows it:
// base64 of the DER SubjectPublicKeyInfo.
func SendGridPublicKey(k *ecdsa.PrivateKey) string {
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		panic(err)
	}
	return base64.StdEncoding.EncodeToString(der)
}

// SendGrid returns the X-Twilio-Email-Event-Webhook-Signature value: the
// base64 DER ECDSA (P-256, SHA-256) signature of timestamp + body
// (https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/getting-started-event-webhook-security-features).
func SendGrid(k *ecdsa.PrivateKey, timestamp string, body []byte) string {
	d := sha256.Sum256(append([]byte(timestamp), body...))
	sig, err := ecdsa.SignASN1(rand.Reader, k, d[:])
	if err != nil {
		panic(err)
	}
	return base64.StdEncoding.EncodeToString(sig)
}

// SendGridDelivery returns body signed by k at unix time at.
func SendGridDelivery(k *ecdsa.PrivateKey, at time.Time, body []byte) Delivery {
	ts := strconv.FormatInt(at.Unix(), 10)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "SendGrid Event API")
	h.Set("X-Twilio-Email-Event-Webhook-Signature", SendGrid(k, ts, body))
	h.Set("X-Twilio-Email-Event-Webhook-Timestamp", ts)
	return Delivery{Header: h, Body: body}
}

// SendGridEvent returns one event object of the Event Webhook.
func SendGridEvent(eventID, messageID, event string, at int64) string {
	return fmt.Sprintf(`{"email":"alice@example.com","timestamp":%d,"smtp-id":"<14c5d75ce93.dfd.64b469@ismtpd-555>","event":%q,"category":["receipt"],"sg_event_id":%q,"sg_message_id":%q}`, at, event, eventID, messageID)
}

// SendGridBody returns the JSON array of events.
func SendGridBody(events ...string) []byte {
	return []byte("[" + strings.Join(events, ",") + "]")
}

func init() {
	RegisterFixture(Fixture{
		Type:    "sendgrid",
		Options: map[string]any{"public_keys": []string{SendGridPublicKey(SendGridKey)}},
		Cases: func(now time.Time) Cases {
			at := now.Add(-time.Minute).Unix()
			const msg = "14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.0"
			batch := func(a, b string) []byte {
				return SendGridBody(SendGridEvent(a, msg, "processed", at), SendGridEvent(b, msg, "delivered", at+2))
			}
			tampered := SendGridDelivery(SendGridKey, now, batch("ev-t1", "ev-t2"))
			tampered.Body = batch("ev-t1", "ev-t3")
			return Cases{
				Distinct: []Delivery{
					SendGridDelivery(SendGridKey, now, batch("ZXYtMDAwMQ", "ZXYtMDAwMg")),
					SendGridDelivery(SendGridKey, now, batch("ZXYtMDAwMw", "ZXYtMDAwNA")),
				},
				// A retry posts the same events, signed anew.
				Redelivery: []Delivery{
					SendGridDelivery(SendGridKey, now.Add(-2*time.Minute), batch("ZXYtMDAwNQ", "ZXYtMDAwNg")),
					SendGridDelivery(SendGridKey, now, batch("ZXYtMDAwNQ", "ZXYtMDAwNg")),
				},
				Tampered:          tampered,
				EventsPerDelivery: 2,
			}
		},
	})
}
