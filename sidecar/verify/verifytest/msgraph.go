package verifytest

import (
	"net/http"
	"time"
)

// MSGraphFixtureState is the clientState of the "msgraph" fixture.
const MSGraphFixtureState = "fixture-graph-client-state-0001"

func graphDelivery(items ...string) Delivery {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	body := `{"value":[`
	for i, it := range items {
		if i > 0 {
			body += ","
		}
		body += it
	}
	return Delivery{Header: h, Body: []byte(body + `]}`)}
}

func graphNotification(id, state, etag string) string {
	return `{"subscriptionId":"sub-fx-1","id":"` + id + `","clientState":"` + state + `","changeType":"updated","resource":"Users/u1/Messages/m1","tenantId":"tn-fx","resourceData":{"id":"m1","@odata.etag":"` + etag + `"}}`
}

func init() {
	RegisterFixture(Fixture{
		Type:    "msgraph",
		Secrets: []string{MSGraphFixtureState},
		Cases: func(time.Time) Cases {
			h := http.Header{}
			return Cases{
				// Two edits of one message: two notifications.
				Distinct: []Delivery{
					graphDelivery(graphNotification("n-fx-1", MSGraphFixtureState, `W/\"1\"`)),
					graphDelivery(graphNotification("n-fx-2", MSGraphFixtureState, `W/\"2\"`)),
				},
				// Graph resends a notification whose 202 did not reach it
				// in time, unchanged.
				Redelivery: []Delivery{
					graphDelivery(graphNotification("n-fx-3", MSGraphFixtureState, `W/\"3\"`)),
					graphDelivery(graphNotification("n-fx-3", MSGraphFixtureState, `W/\"3\"`)),
				},
				// Graph signs nothing: the clientState is the proof, so a
				// notification whose clientState was changed is refused.
				Tampered: graphDelivery(graphNotification("n-fx-9", "not-the-client-state", `W/\"9\"`)),
				Handshakes: []Handshake{{
					Delivery: Delivery{Header: h, RawQuery: "validationToken=Validation%3A+fixture+1"},
					Status:   http.StatusOK,
					Body:     []byte("Validation: fixture 1"),
				}},
			}
		},
	})
}
