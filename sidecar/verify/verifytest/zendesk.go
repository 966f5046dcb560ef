package verifytest

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"time"
)

// ZendeskSecret is the signing secret of the "zendesk" fixture.
const ZendeskSecret = "zendesk-fixture-signing-secret"

// Zendesk returns an X-Zendesk-Webhook-Signature value: the base64
// HMAC-SHA256 of timestamp + body
// (https://developer.zendesk.com/documentation/webhooks/verifying/).
func Zendesk(secret, timestamp string, body []byte) string {
	return base64.StdEncoding.EncodeToString(mac([]byte(secret), []byte(timestamp), body))
}

// ZendeskDelivery returns an attempt of invocation signed at at.
func ZendeskDelivery(secret, invocation string, at time.Time, body []byte) Delivery {
	ts := at.UTC().Format(time.RFC3339)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Zendesk-Account-Id", "12514403")
	h.Set("X-Zendesk-Webhook-Id", "01GE5RV6JB6HFY6EBVGT7WZPVZ")
	h.Set("X-Zendesk-Webhook-Invocation-Id", invocation)
	h.Set("X-Zendesk-Webhook-Signature-Timestamp", ts)
	h.Set("X-Zendesk-Webhook-Signature", Zendesk(secret, ts, body))
	return Delivery{Header: h, Body: body}
}

// ZendeskEvent returns an event-subscription webhook body about ticket.
func ZendeskEvent(id, typ string, ticket int) []byte {
	return fmt.Appendf(nil, `{"account_id":12514403,"detail":{"id":"%d","status":"OPEN"},"event":{},"id":%q,"subject":"zen:ticket:%d","time":"2026-03-01T11:59:58Z","type":%q,"zendesk_event_version":"2022-11-06"}`, ticket, id, ticket, typ)
}

func init() {
	RegisterFixture(Fixture{
		Type:    "zendesk",
		Secrets: []string{ZendeskSecret},
		Cases: func(now time.Time) Cases {
			body := ZendeskEvent("cbe4028c-7239-495d-b020-f22348516046", "zen:event-type:ticket.priority_changed", 35436)
			tampered := ZendeskDelivery(ZendeskSecret, "9001", now, body)
			tampered.Body = ZendeskEvent("cbe4028c-7239-495d-b020-f22348516046", "zen:event-type:ticket.priority_changed", 35437)
			return Cases{
				Distinct: []Delivery{
					ZendeskDelivery(ZendeskSecret, "8001", now, ZendeskEvent("0b5b6fd2-9c36-4b57-8e5c-2f0c3b8bd1a1", "zen:event-type:ticket.created", 35436)),
					ZendeskDelivery(ZendeskSecret, "8002", now, ZendeskEvent("0b5b6fd2-9c36-4b57-8e5c-2f0c3b8bd1a2", "zen:event-type:ticket.status_changed", 35436)),
				},
				Redelivery: []Delivery{
					ZendeskDelivery(ZendeskSecret, "8003", now.Add(-time.Minute), body),
					ZendeskDelivery(ZendeskSecret, "8003", now, body),
				},
				Tampered: tampered,
			}
		},
	})
}
