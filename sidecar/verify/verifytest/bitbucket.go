package verifytest

import (
	"net/http"
	"strconv"
	"time"
)

// BitbucketDelivery returns the headers Bitbucket Cloud sends with a
// webhook request
// (https://support.atlassian.com/bitbucket-cloud/docs/event-payloads/#HTTP-headers):
// X-Hub-Signature ("sha256=" and the hex HMAC-SHA256 of body, the layout
// GitHub returns), X-Event-Key, X-Request-UUID, X-Hook-UUID and
// X-Attempt-Number.
func BitbucketDelivery(secret, eventKey, requestUUID string, attempt int, body []byte) http.Header {
	h := http.Header{}
	h.Set("X-Hub-Signature", GitHub(secret, body))
	h.Set("X-Event-Key", eventKey)
	h.Set("X-Request-UUID", requestUUID)
	h.Set("X-Hook-UUID", "{2f5e1c3a-0000-4000-8000-00000000b0b0}")
	h.Set("X-Attempt-Number", strconv.Itoa(attempt))
	return h
}

func init() {
	const secret = "bitbucket-fixture-secret"
	RegisterFixture(Fixture{
		Type:    "bitbucket",
		Secrets: []string{secret},
		Cases: func(time.Time) Cases {
			pr := func(state, updated string) []byte {
				return []byte(`{"pullrequest":{"id":7,"state":"` + state + `","updated_on":"` + updated + `"},"repository":{"full_name":"team/repo"}}`)
			}
			created := pr("OPEN", "2026-12-05T04:00:00Z")
			merged := pr("MERGED", "2026-12-05T04:00:09Z")
			d := func(event, id string, attempt int, body []byte) Delivery {
				return Delivery{Header: BitbucketDelivery(secret, event, id, attempt, body), Body: body}
			}
			tampered := d("pullrequest:created", "{c0ffee00-0000-4000-8000-000000000003}", 1, created)
			tampered.Body = pr("DECLINED", "2026-12-05T04:00:00Z")
			return Cases{
				Distinct: []Delivery{
					d("pullrequest:created", "{c0ffee00-0000-4000-8000-000000000001}", 1, created),
					d("pullrequest:fulfilled", "{c0ffee00-0000-4000-8000-000000000002}", 1, merged),
				},
				Redelivery: []Delivery{
					d("pullrequest:created", "{c0ffee00-0000-4000-8000-000000000001}", 1, created),
					d("pullrequest:created", "{c0ffee00-0000-4000-8000-000000000001}", 2, created),
					d("pullrequest:created", "{c0ffee00-0000-4000-8000-000000000001}", 3, created),
				},
				Tampered: tampered,
			}
		},
	})
}
