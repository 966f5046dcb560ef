package verifytest

import (
	"encoding/hex"
	"net/http"
	"strconv"
	"time"
)

// RazorpaySecret is the webhook secret of the "razorpay" fixture.
const RazorpaySecret = "razorpay-fixture-webhook-secret"

// Razorpay returns an X-Razorpay-Signature value: the hex HMAC-SHA256 of
// body keyed with the webhook secret
// (https://razorpay.com/docs/webhooks/validate-test/).
func Razorpay(secret string, body []byte) string {
	return hex.EncodeToString(mac([]byte(secret), body))
}

// RazorpayDelivery returns a Razorpay webhook delivery of event eventID
// carrying body, signed with secret.
func RazorpayDelivery(secret, eventID string, body []byte) Delivery {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Razorpay-Event-Id", eventID)
	h.Set("X-Razorpay-Signature", Razorpay(secret, body))
	return Delivery{Header: h, Body: body}
}

// RazorpayPayment returns a payment event body (event "payment.authorized",
// "payment.captured", …) about payment id in state status, created at at.
func RazorpayPayment(event, id, status string, at time.Time) []byte {
	return []byte(`{"entity":"event","account_id":"acc_BFQ7uQEaa7j2z7","event":"` + event +
		`","contains":["payment"],"payload":{"payment":{"entity":{"id":"` + id +
		`","entity":"payment","amount":50000,"currency":"INR","status":"` + status +
		`","order_id":"order_DESlLckIVRkHWj","method":"card","captured":` + strconv.FormatBool(status == "captured") +
		`,"email":"gaurav.kumar@example.com","contact":"+919876543210","created_at":` + strconv.FormatInt(at.Unix()-5, 10) +
		`}}},"created_at":` + strconv.FormatInt(at.Unix(), 10) + `}`)
}

func init() {
	RegisterFixture(Fixture{
		Type:    "razorpay",
		Secrets: []string{RazorpaySecret},
		Cases: func(now time.Time) Cases {
			authorized := RazorpayPayment("payment.authorized", "pay_DESlfW9H8K9uqM", "authorized", now)
			captured := RazorpayPayment("payment.captured", "pay_DESlfW9H8K9uqM", "captured", now)
			tampered := RazorpayDelivery(RazorpaySecret, "Gb5kMCdcAZ8jJ9", captured)
			tampered.Body = RazorpayPayment("payment.captured", "pay_DESlfW9H8K9uqN", "captured", now)
			return Cases{
				Distinct: []Delivery{
					RazorpayDelivery(RazorpaySecret, "Gb5kMCdcAZ8jJ1", authorized),
					RazorpayDelivery(RazorpaySecret, "Gb5kMCdcAZ8jJ2", captured),
				},
				// Razorpay's retries repeat the event id and the body, so
				// the signature too.
				Redelivery: []Delivery{
					RazorpayDelivery(RazorpaySecret, "Gb5kMCdcAZ8jJ3", captured),
					RazorpayDelivery(RazorpaySecret, "Gb5kMCdcAZ8jJ3", captured),
				},
				Tampered: tampered,
			}
		},
	})
}
