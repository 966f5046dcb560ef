package verifytest

import (
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"time"
)

// AirtableMACSecret is the macSecretBase64 of the "airtable" fixture's
// webhook.
const AirtableMACSecret = "kV9sEGsH4c2QG3Ky5vB5w0yq2m9oYw3I4x6Zr1Tn8Aw="

// Airtable returns an X-Airtable-Content-MAC value: "hmac-sha256=" and the
// hex HMAC-SHA256 of body keyed with the decoded macSecretBase64
// (https://airtable.com/developers/web/api/webhooks-overview).
func Airtable(macSecretBase64 string, body []byte) string {
	key, err := base64.StdEncoding.DecodeString(macSecretBase64)
	if err != nil {
		panic("verifytest: macSecretBase64 is not base64")
	}
	return "hmac-sha256=" + hex.EncodeToString(mac(key, body))
}

// AirtableDelivery returns a notification for webhook of base at ts,
// signed with macSecretBase64.
func AirtableDelivery(macSecretBase64, base, webhook, ts string) Delivery {
	body := []byte(`{"base":{"id":"` + base + `"},"webhook":{"id":"` + webhook + `"},"timestamp":"` + ts + `"}`)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Airtable-Content-MAC", Airtable(macSecretBase64, body))
	return Delivery{Header: h, Body: body}
}

func init() {
	RegisterFixture(Fixture{
		Type:    "airtable",
		Secrets: []string{AirtableMACSecret},
		Cases: func(now time.Time) Cases {
			at := func(d time.Duration) string { return now.Add(d).UTC().Format("2006-01-02T15:04:05.000Z") }
			tampered := AirtableDelivery(AirtableMACSecret, "appA6OKQ1Jd4hEMrl", "achW8hEz8rN3XAgNU", at(0))
			tampered.Body = []byte(`{"base":{"id":"appA6OKQ1Jd4hEMrl"},"webhook":{"id":"achW8hEz8rN3XAgNV"},"timestamp":"` + at(0) + `"}`)
			return Cases{
				// Two nudges of one webhook, a few seconds apart.
				Distinct: []Delivery{
					AirtableDelivery(AirtableMACSecret, "appA6OKQ1Jd4hEMrl", "achW8hEz8rN3XAgNU", at(-5*time.Second)),
					AirtableDelivery(AirtableMACSecret, "appA6OKQ1Jd4hEMrl", "achW8hEz8rN3XAgNU", at(0)),
				},
				Redelivery: []Delivery{
					AirtableDelivery(AirtableMACSecret, "appA6OKQ1Jd4hEMrl", "achW8hEz8rN3XAgNU", at(-time.Minute)),
					AirtableDelivery(AirtableMACSecret, "appA6OKQ1Jd4hEMrl", "achW8hEz8rN3XAgNU", at(-time.Minute)),
				},
				Tampered: tampered,
			}
		},
	})
}
