package verifytest

import (
	"net/http"
	"strconv"
	"time"
)

// LinearDelivery returns the headers Linear sends
// (https://linear.app/developers/webhooks): Linear-Signature, the hex
// HMAC-SHA256 of body, Linear-Delivery and Linear-Event.
func LinearDelivery(secret, delivery, event string, body []byte) http.Header {
	h := http.Header{}
	h.Set("Linear-Signature", HexHMACSHA256(secret, body))
	h.Set("Linear-Delivery", delivery)
	h.Set("Linear-Event", event)
	return h
}

// LinearIssueBody returns an Issue webhook payload stamped at
// webhookTimestamp (unix milliseconds).
func LinearIssueBody(action, createdAt, state string, webhookTimestamp int64) []byte {
	return []byte(`{"action":"` + action + `","type":"Issue","createdAt":"` + createdAt + `","organizationId":"org-1","webhookId":"wh-1","url":"https://linear.app/acme/issue/ENG-1","data":{"id":"9f6c2b1e-0000-4000-8000-00000000a001","identifier":"ENG-1","state":{"name":"` + state + `"}},"webhookTimestamp":` + strconv.FormatInt(webhookTimestamp, 10) + `}`)
}

func init() {
	const secret = "lin_wh_fixture_secret"
	RegisterFixture(Fixture{
		Type:    "linear",
		Secrets: []string{secret},
		Cases: func(now time.Time) Cases {
			ms := now.UnixMilli()
			d := func(delivery string, body []byte) Delivery {
				return Delivery{Header: LinearDelivery(secret, delivery, "Issue", body), Body: body}
			}
			created := LinearIssueBody("create", "2026-12-05T04:00:00.000Z", "Todo", ms)
			updated := LinearIssueBody("update", "2026-12-05T04:00:05.000Z", "In Progress", ms)
			tampered := d("d-3", updated)
			tampered.Body = LinearIssueBody("update", "2026-12-05T04:00:05.000Z", "Done", ms)
			return Cases{
				Distinct: []Delivery{d("d-1", created), d("d-2", updated)},
				// Linear re-stamps webhookTimestamp on every attempt
				// (within the 60 s window of the moment it is sent).
				Redelivery: []Delivery{
					d("d-2", updated),
					d("d-2", LinearIssueBody("update", "2026-12-05T04:00:05.000Z", "In Progress", ms-30_000)),
					d("d-2r", LinearIssueBody("update", "2026-12-05T04:00:05.000Z", "In Progress", ms+20_000)),
				},
				Tampered: tampered,
			}
		},
	})
}
