package verifytest

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"time"
)

// TypeformSecret is the webhook secret of the "typeform" fixture.
const TypeformSecret = "typeform-fixture-webhook-secret"

// Typeform returns a Typeform-Signature value: "sha256=" and the base64
// HMAC-SHA256 of body
// (https://www.typeform.com/developers/webhooks/secure-your-webhooks/).
func Typeform(secret string, body []byte) string {
	return "sha256=" + base64.StdEncoding.EncodeToString(mac([]byte(secret), body))
}

// TypeformDelivery returns an event POST signed with secret.
func TypeformDelivery(secret string, body []byte) Delivery {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Typeform-Signature", Typeform(secret, body))
	return Delivery{Header: h, Body: body}
}

// TypeformResponse returns a form_response event body.
func TypeformResponse(eventID, token, answer string) []byte {
	return fmt.Appendf(nil, `{"event_id":%q,"event_type":"form_response","form_response":{"form_id":"lT4Z3j","token":%q,"landed_at":"2026-03-01T11:58:49Z","submitted_at":"2026-03-01T11:59:41Z","definition":{"id":"lT4Z3j","title":"Webhooks example","fields":[{"id":"DlXFaesGBpoF","title":"Name?","type":"short_text","ref":"name"}]},"answers":[{"type":"text","text":%q,"field":{"id":"DlXFaesGBpoF","type":"short_text","ref":"name"}}]}}`, eventID, token, answer)
}

func init() {
	RegisterFixture(Fixture{
		Type:    "typeform",
		Secrets: []string{TypeformSecret},
		Cases: func(time.Time) Cases {
			retry := TypeformResponse("01HQ7ZJ3W1S2Q5B9M8N4K6T0R3", "a3a12ec67a1365927098a606107fac17", "Laura")
			tampered := TypeformDelivery(TypeformSecret, TypeformResponse("01HQ7ZJ3W1S2Q5B9M8N4K6T0R4", "a3a12ec67a1365927098a606107fac18", "Laura"))
			tampered.Body = TypeformResponse("01HQ7ZJ3W1S2Q5B9M8N4K6T0R4", "a3a12ec67a1365927098a606107fac18", "Mallory")
			return Cases{
				Distinct: []Delivery{
					TypeformDelivery(TypeformSecret, TypeformResponse("01HQ7ZJ3W1S2Q5B9M8N4K6T0R1", "a3a12ec67a1365927098a606107fac15", "Laura")),
					TypeformDelivery(TypeformSecret, TypeformResponse("01HQ7ZJ3W1S2Q5B9M8N4K6T0R2", "a3a12ec67a1365927098a606107fac16", "Laura")),
				},
				Redelivery: []Delivery{TypeformDelivery(TypeformSecret, retry), TypeformDelivery(TypeformSecret, retry)},
				Tampered:   tampered,
			}
		},
	})
}
