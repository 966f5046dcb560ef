package verifytest

import (
	"net/http"
	"strconv"
	"time"
)

// JiraDelivery returns the headers Jira Cloud sends with an admin webhook
// registered with a secret
// (https://developer.atlassian.com/cloud/jira/platform/webhooks/):
// X-Hub-Signature "sha256=" and the hex HMAC-SHA256 of body,
// X-Atlassian-Webhook-Identifier and, for retry > 0,
// X-Atlassian-Webhook-Retry.
func JiraDelivery(secret, identifier string, retry int, body []byte) http.Header {
	h := http.Header{}
	h.Set("X-Hub-Signature", GitHub(secret, body))
	h.Set("X-Atlassian-Webhook-Identifier", identifier)
	h.Set("X-Atlassian-Webhook-Flow", "Primary")
	if retry > 0 {
		h.Set("X-Atlassian-Webhook-Retry", strconv.Itoa(retry))
	}
	return h
}

func init() {
	const secret = "jira-fixture-secret"
	RegisterFixture(Fixture{
		Type:    "jira",
		Secrets: []string{secret},
		Cases: func(now time.Time) Cases {
			ms := strconv.FormatInt(now.UnixMilli(), 10)
			issue := func(event, status string) []byte {
				return []byte(`{"timestamp":` + ms + `,"webhookEvent":"` + event + `","issue_event_type_name":"issue_generic","issue":{"id":"10002","key":"PROJ-2","fields":{"status":{"name":"` + status + `"}}}}`)
			}
			created := issue("jira:issue_created", "To Do")
			updated := issue("jira:issue_updated", "In Progress")
			d := func(id string, retry int, body []byte) Delivery {
				return Delivery{Header: JiraDelivery(secret, id, retry, body), Body: body}
			}
			tampered := d("1000003", 0, updated)
			tampered.Body = issue("jira:issue_updated", "Done")
			return Cases{
				Distinct: []Delivery{d("1000001", 0, created), d("1000002", 0, updated)},
				Redelivery: []Delivery{
					d("1000002", 0, updated),
					d("1000002", 1, updated),
					d("1000002", 2, updated),
				},
				Tampered: tampered,
			}
		},
	})
}
