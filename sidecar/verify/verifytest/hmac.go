package verifytest

import (
	"net/http"
	"strconv"
	"time"
)

// HMACFixtureSecret is the shared secret of the "hmac" fixture: a sender
// signing "<X-Timestamp>.<body>" into X-Signature as sha256=<hex>.
const HMACFixtureSecret = "fixture-hmac-secret-0001"

func hmacDelivery(id string, at time.Time, body string) Delivery {
	ts := strconv.FormatInt(at.Unix(), 10)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Event-Id", id)
	h.Set("X-Timestamp", ts)
	h.Set("X-Signature", "sha256="+HexHMACSHA256(HMACFixtureSecret, []byte(ts+"."), []byte(body)))
	return Delivery{Header: h, Body: []byte(body)}
}

func init() {
	RegisterFixture(Fixture{
		Type:    "hmac",
		Secrets: []string{HMACFixtureSecret},
		Options: map[string]any{
			"signature":        map[string]any{"header": "X-Signature", "prefix": "sha256="},
			"signed_content":   "{timestamp}.{body}",
			"timestamp_header": "X-Timestamp",
			"key":              map[string]any{"id_header": "X-Event-Id"},
		},
		Cases: func(now time.Time) Cases {
			tampered := hmacDelivery("hm-fx-9", now, `{"status":"open"}`)
			tampered.Body = []byte(`{"status":"closed"}`)
			return Cases{
				Distinct: []Delivery{
					hmacDelivery("hm-fx-1", now, `{"status":"open"}`),
					hmacDelivery("hm-fx-2", now, `{"status":"open"}`),
				},
				Redelivery: []Delivery{
					hmacDelivery("hm-fx-3", now.Add(-time.Minute), `{"status":"open"}`),
					hmacDelivery("hm-fx-3", now, `{"status":"open"}`),
				},
				Tampered: tampered,
			}
		},
	})
}
