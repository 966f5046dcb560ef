package verifytest

import (
	"encoding/hex"
	"net/http"
	"strings"
	"time"
)

// PagerDuty returns an X-PagerDuty-Signature value with one
// "v1=<hex HMAC-SHA256 of body>" per secret, comma-separated, as PagerDuty
// sends during a secret rotation
// (https://github.com/PagerDuty/developer-docs/blob/main/docs/webhooks/04-Signatures.md).
func PagerDuty(body []byte, secrets ...string) string {
	parts := make([]string, len(secrets))
	for i, s := range secrets {
		parts[i] = "v1=" + hex.EncodeToString(mac([]byte(s), body))
	}
	return strings.Join(parts, ",")
}

func init() {
	const secret = "pagerduty-fixture-secret"
	RegisterFixture(Fixture{
		Type:    "pagerduty",
		Secrets: []string{secret},
		Cases: func(time.Time) Cases {
			ev := func(id, typ, status string) []byte {
				return []byte(`{"event":{"id":"` + id + `","event_type":"` + typ + `","resource_type":"incident","occurred_at":"2026-12-05T04:00:00.000Z","data":{"id":"PGR0VU2","type":"incident","status":"` + status + `"}}}`)
			}
			triggered := ev("01DEN1HKC0000000000000000A", "incident.triggered", "triggered")
			acked := ev("01DEN1HKC0000000000000000B", "incident.acknowledged", "acknowledged")
			d := func(webhookID string, body []byte) Delivery {
				h := http.Header{}
				h.Set("X-PagerDuty-Signature", PagerDuty(body, secret))
				h.Set("X-Webhook-Id", webhookID)
				h.Set("X-Webhook-Subscription", "PSUB001")
				h.Set("User-Agent", "PagerDuty-Webhook/V3.0")
				return Delivery{Header: h, Body: body}
			}
			tampered := d("wh-3", acked)
			tampered.Body = ev("01DEN1HKC0000000000000000B", "incident.acknowledged", "resolved")
			return Cases{
				Distinct: []Delivery{d("wh-1", triggered), d("wh-2", acked)},
				// Every attempt repeats X-Webhook-Id and the body.
				Redelivery: []Delivery{d("wh-1", triggered), d("wh-1", triggered), d("wh-1", triggered)},
				Tampered:   tampered,
			}
		},
	})
}
