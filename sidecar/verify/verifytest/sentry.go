package verifytest

import (
	"net/http"
	"strconv"
	"time"
)

// SentryDelivery returns the headers a Sentry integration webhook carries
// (https://docs.sentry.io/organization/integrations/integration-platform/webhooks/):
// Sentry-Hook-Signature (the bare hex HMAC-SHA256 of body under the client
// secret), Sentry-Hook-Resource, Sentry-Hook-Timestamp and Request-ID
// (random for every send).
func SentryDelivery(clientSecret, resource, requestID string, ts int64, body []byte) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Request-ID", requestID)
	h.Set("Sentry-Hook-Resource", resource)
	h.Set("Sentry-Hook-Timestamp", strconv.FormatInt(ts, 10))
	h.Set("Sentry-Hook-Signature", HexHMACSHA256(clientSecret, body))
	return h
}

func init() {
	const secret = "sentry-fixture-client-secret"
	RegisterFixture(Fixture{
		Type:    "sentry",
		Secrets: []string{secret},
		Cases: func(now time.Time) Cases {
			issue := func(action, status string) []byte {
				return []byte(`{"action":"` + action + `","installation":{"uuid":"7a485448-a9e2-4c85-8a3c-4f44175783c9"},"data":{"issue":{"id":"1170820242","shortId":"PROJ-1","status":"` + status + `","project":{"slug":"front-end"}}},"actor":{"type":"application","id":"sentry","name":"Sentry"}}`)
			}
			created := issue("created", "unresolved")
			resolved := issue("resolved", "resolved")
			d := func(requestID string, ts int64, body []byte) Delivery {
				return Delivery{Header: SentryDelivery(secret, "issue", requestID, ts, body), Body: body}
			}
			tampered := d("r-3", now.Unix(), created)
			tampered.Body = issue("created", "ignored")
			return Cases{
				Distinct: []Delivery{d("r-1", now.Unix(), created), d("r-2", now.Unix(), resolved)},
				// A second send of one webhook: new Request-ID and
				// timestamp, same signed body.
				Redelivery: []Delivery{
					d("r-1", now.Unix(), created),
					d("0b6e4b2c9a5d4f10a1e2c3d4e5f60718", now.Unix()+60, created),
				},
				Tampered: tampered,
			}
		},
	})
}
