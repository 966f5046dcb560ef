package verifytest

import (
	"net/http"
	"strconv"
	"time"
)

// StripeFixtureSecret is the endpoint secret of the "stripe" fixture.
const StripeFixtureSecret = "whsec_fixture_stripe_0001"

// stripeDelivery is a Stripe delivery of body signed at.
func stripeDelivery(at time.Time, body string) Delivery {
	h := http.Header{}
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Stripe-Signature", StripeHeader(at.Unix(), []byte(body), StripeFixtureSecret))
	return Delivery{Header: h, Body: []byte(body)}
}

// stripeEvent is an invoice event; pending counts the endpoints Stripe
// still has to reach (pending_webhooks), which changes between retries.
func stripeEvent(id, typ, status string, pending int) string {
	return `{"id":"` + id + `","object":"event","type":"` + typ + `","created":1745332200,"pending_webhooks":` + strconv.Itoa(pending) +
		`,"data":{"object":{"id":"in_fx1","object":"invoice","status":"` + status + `"}}}`
}

func init() {
	RegisterFixture(Fixture{
		Type:    "stripe",
		Secrets: []string{StripeFixtureSecret},
		Cases: func(now time.Time) Cases {
			retried := stripeEvent("evt_fx3", "invoice.finalized", "open", 2)
			tampered := stripeDelivery(now, retried)
			tampered.Body = []byte(stripeEvent("evt_fx3", "invoice.finalized", "paid", 2))
			return Cases{
				// invoice.updated and invoice.paid about one invoice in one
				// second: one event object, one id, each.
				Distinct: []Delivery{
					stripeDelivery(now, stripeEvent("evt_fx1", "invoice.updated", "open", 1)),
					stripeDelivery(now, stripeEvent("evt_fx2", "invoice.paid", "paid", 1)),
				},
				// Retries resend the event signed anew; pending_webhooks
				// drops as other endpoints take it (volatile by default).
				Redelivery: []Delivery{
					stripeDelivery(now.Add(-2*time.Minute), retried),
					stripeDelivery(now.Add(-time.Minute), retried),
					stripeDelivery(now, stripeEvent("evt_fx3", "invoice.finalized", "open", 1)),
				},
				Tampered: tampered,
			}
		},
	})
}
