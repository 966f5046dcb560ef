package verifytest

import (
	"crypto/hmac"
	"crypto/sha512"
	"encoding/hex"
	"net/http"
	"strconv"
	"time"
)

// PaystackSecret is the secret key of the "paystack" fixture.
const PaystackSecret = "sk_test_paystackfixture0123456789abcdef"

// Paystack returns an x-paystack-signature value: the hex HMAC-SHA512 of
// body keyed with the secret key (https://paystack.com/docs/payments/webhooks/).
func Paystack(secret string, body []byte) string {
	m := hmac.New(sha512.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// PaystackDelivery returns a Paystack webhook delivery of body.
func PaystackDelivery(secret string, body []byte) Delivery {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Paystack-Signature", Paystack(secret, body))
	return Delivery{Header: h, Body: body}
}

// PaystackTransfer returns a transfer event body (transfer.success,
// transfer.failed, …) about transfer id with the given status.
func PaystackTransfer(event string, id int, status string, at time.Time) []byte {
	return []byte(`{"event":"` + event + `","data":{"amount":30000,"currency":"NGN","domain":"test","failures":null,"id":` + strconv.Itoa(id) +
		`,"integration":{"id":463433,"is_live":false,"business_name":"Fixture Ltd"},"reason":"Payout","reference":"trf_` + strconv.Itoa(id) +
		`","source":"balance","status":"` + status + `","transfer_code":"TRF_` + strconv.Itoa(id) + `","transferred_at":"` + at.UTC().Format(time.RFC3339) +
		`","recipient":{"recipient_code":"RCP_a8wkxiychzdzfgs","type":"nuban"}}}`)
}

func init() {
	RegisterFixture(Fixture{
		Type:    "paystack",
		Secrets: []string{PaystackSecret},
		Cases: func(now time.Time) Cases {
			success := PaystackTransfer("transfer.success", 476948, "success", now)
			tampered := PaystackDelivery(PaystackSecret, success)
			tampered.Body = PaystackTransfer("transfer.success", 476949, "success", now)
			retried := PaystackTransfer("transfer.reversed", 476950, "reversed", now)
			return Cases{
				// Two events about one transfer: its failure and its
				// reversal.
				Distinct: []Delivery{
					PaystackDelivery(PaystackSecret, PaystackTransfer("transfer.failed", 476948, "failed", now)),
					PaystackDelivery(PaystackSecret, PaystackTransfer("transfer.reversed", 476948, "reversed", now)),
				},
				// Paystack's retries resend the body as it was.
				Redelivery: []Delivery{
					PaystackDelivery(PaystackSecret, retried),
					PaystackDelivery(PaystackSecret, retried),
				},
				Tampered: tampered,
			}
		},
	})
}
