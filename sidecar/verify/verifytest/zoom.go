package verifytest

import (
	"net/http"
	"strconv"
	"time"
)

// ZoomFixtureSecret is the app secret token of the "zoom" fixture.
const ZoomFixtureSecret = "fixture-zoom-secret-token-0001"

func zoomDelivery(at time.Time, body string) Delivery {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("x-zm-request-timestamp", strconv.FormatInt(at.Unix(), 10))
	h.Set("x-zm-signature", Zoom(ZoomFixtureSecret, at.Unix(), []byte(body)))
	return Delivery{Header: h, Body: []byte(body)}
}

func zoomJoined(user string) string {
	return `{"event":"meeting.participant_joined","event_ts":1745332200123,"payload":{"account_id":"acc-fx","object":{"uuid":"mtg-fx-1==","id":"81234567890","participant":{"user_id":"` +
		user + `","user_name":"` + user + `","join_time":"2025-04-22T14:30:00Z"}}}}`
}

func init() {
	RegisterFixture(Fixture{
		Type:    "zoom",
		Secrets: []string{ZoomFixtureSecret},
		Cases: func(now time.Time) Cases {
			tampered := zoomDelivery(now, zoomJoined("u-fx-9"))
			tampered.Body = []byte(zoomJoined("u-fx-8"))
			return Cases{
				// Two participants joining one meeting in one millisecond.
				Distinct: []Delivery{
					zoomDelivery(now, zoomJoined("u-fx-1")),
					zoomDelivery(now, zoomJoined("u-fx-2")),
				},
				// Zoom retries the notification with a new timestamp and
				// signature, the same payload.
				Redelivery: []Delivery{
					zoomDelivery(now.Add(-time.Minute), zoomJoined("u-fx-3")),
					zoomDelivery(now, zoomJoined("u-fx-3")),
				},
				Tampered: tampered,
				Handshakes: []Handshake{{
					Delivery: zoomDelivery(now, `{"event":"endpoint.url_validation","payload":{"plainToken":"fx-plain-1"},"event_ts":1745332200123}`),
					Status:   http.StatusOK,
					Body: []byte(`{"plainToken":"fx-plain-1","encryptedToken":"` +
						HexHMACSHA256(ZoomFixtureSecret, []byte("fx-plain-1")) + `"}`),
				}},
			}
		},
	})
}
