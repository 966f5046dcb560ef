package verifytest

import (
	"encoding/hex"
	"fmt"
	"net/http"
	"time"
)

// ClickUpSecret is the webhook secret of the "clickup" fixture.
const ClickUpSecret = "O94LK7UYW8GZ0GJ1X3E8XSDAZWIIVBAN5CDKDNUBK4EDJ37OFDXG4DW8BTW4N4S4"

// ClickUp returns an X-Signature value: the hex HMAC-SHA256 of body
// (https://developer.clickup.com/docs/webhooksignature).
func ClickUp(secret string, body []byte) string {
	return hex.EncodeToString(mac([]byte(secret), body))
}

// ClickUpDelivery returns an event POST signed with secret.
func ClickUpDelivery(secret string, body []byte) Delivery {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Signature", ClickUp(secret, body))
	return Delivery{Header: h, Body: body}
}

// ClickUpTaskEvent returns a task event body with one history item.
func ClickUpTaskEvent(event, task, historyID, field string) []byte {
	return fmt.Appendf(nil, `{"event":%q,"history_items":[{"id":%q,"type":1,"date":"1642736394447","field":%q,"parent_id":"162641062","data":{},"source":null,"user":{"id":183,"username":"John","email":"john@company.com"},"before":null,"after":null}],"task_id":%q,"webhook_id":"7fa3ec74-69a8-4530-a251-8a13730bd204"}`, event, historyID, field, task)
}

func init() {
	RegisterFixture(Fixture{
		Type:    "clickup",
		Secrets: []string{ClickUpSecret},
		Cases: func(time.Time) Cases {
			retry := ClickUpTaskEvent("taskAssigneeUpdated", "1vj37mc", "2800789353792024445", "assignee_add")
			tampered := ClickUpDelivery(ClickUpSecret, ClickUpTaskEvent("taskDeleted", "1vj37mc", "2800789353792024446", "status"))
			tampered.Body = ClickUpTaskEvent("taskDeleted", "1vj37md", "2800789353792024446", "status")
			return Cases{
				Distinct: []Delivery{
					ClickUpDelivery(ClickUpSecret, ClickUpTaskEvent("taskCreated", "1vj37mc", "2800763136717140857", "status")),
					ClickUpDelivery(ClickUpSecret, ClickUpTaskEvent("taskStatusUpdated", "1vj37mc", "2800787904948409391", "status")),
				},
				Redelivery: []Delivery{
					ClickUpDelivery(ClickUpSecret, retry),
					ClickUpDelivery(ClickUpSecret, retry),
				},
				Tampered: tampered,
			}
		},
	})
}
