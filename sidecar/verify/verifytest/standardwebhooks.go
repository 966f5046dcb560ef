package verifytest

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"strconv"
	"time"
)

// StandardWebhooksFixtureSecret is the whsec_ secret of the
// "standard-webhooks" fixture.
var StandardWebhooksFixtureSecret = "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32))

func standardDelivery(id string, at time.Time, body string) Delivery {
	sig, err := StandardWebhooks(StandardWebhooksFixtureSecret, id, at.Unix(), []byte(body))
	if err != nil {
		panic(err) // the fixture's own secret is base64
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(at.Unix(), 10))
	h.Set("webhook-signature", sig)
	return Delivery{Header: h, Body: []byte(body)}
}

func standardEvent(typ string) string {
	return `{"type":"` + typ + `","timestamp":"2025-04-22T14:30:00Z","data":{"id":"user_1"}}`
}

func init() {
	RegisterFixture(Fixture{
		Type:    "standard-webhooks",
		Secrets: []string{StandardWebhooksFixtureSecret},
		Cases: func(now time.Time) Cases {
			tampered := standardDelivery("msg_fx9", now, standardEvent("user.deleted"))
			tampered.Body = []byte(standardEvent("user.created"))
			return Cases{
				// Two messages about one user at one moment: webhook-id is
				// "unique across all messages".
				Distinct: []Delivery{
					standardDelivery("msg_fx1", now, standardEvent("user.updated")),
					standardDelivery("msg_fx2", now, standardEvent("user.updated")),
				},
				// A retry keeps webhook-id, signed with a new timestamp.
				Redelivery: []Delivery{
					standardDelivery("msg_fx3", now.Add(-time.Minute), standardEvent("user.created")),
					standardDelivery("msg_fx3", now, standardEvent("user.created")),
				},
				Tampered: tampered,
			}
		},
	})
}
