package verifytest

import (
	"net/http"
	"time"
)

// PaddleFixtureSecret is the endpoint secret key of the "paddle" fixture.
const PaddleFixtureSecret = "pdl_ntfset_fixture_0001"

func paddleDelivery(at time.Time, body string) Delivery {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Paddle-Signature", Paddle(at.Unix(), []byte(body), PaddleFixtureSecret))
	return Delivery{Header: h, Body: []byte(body)}
}

func paddleEvent(eventID, notificationID, typ string) string {
	return `{"event_id":"` + eventID + `","event_type":"` + typ + `","occurred_at":"2025-04-22T14:30:00.000000Z","notification_id":"` + notificationID +
		`","data":{"id":"txn_fx1","status":"completed"}}`
}

func init() {
	RegisterFixture(Fixture{
		Type:    "paddle",
		Secrets: []string{PaddleFixtureSecret},
		Cases: func(now time.Time) Cases {
			tampered := paddleDelivery(now, paddleEvent("evt_fx9", "ntf_fx9", "transaction.completed"))
			tampered.Body = []byte(paddleEvent("evt_fx9", "ntf_fx9", "transaction.canceled"))
			return Cases{
				// transaction.updated and transaction.completed of one
				// transaction at one moment: two event_ids.
				Distinct: []Delivery{
					paddleDelivery(now, paddleEvent("evt_fx1", "ntf_fx1", "transaction.updated")),
					paddleDelivery(now, paddleEvent("evt_fx2", "ntf_fx2", "transaction.completed")),
				},
				// A retry resends the notification signed anew; a replay
				// is a new notification_id (volatile by default) of the
				// same event.
				Redelivery: []Delivery{
					paddleDelivery(now.Add(-time.Minute), paddleEvent("evt_fx3", "ntf_fx3", "transaction.completed")),
					paddleDelivery(now, paddleEvent("evt_fx3", "ntf_fx3", "transaction.completed")),
					paddleDelivery(now, paddleEvent("evt_fx3", "ntf_fx3b", "transaction.completed")),
				},
				Tampered: tampered,
			}
		},
	})
}
