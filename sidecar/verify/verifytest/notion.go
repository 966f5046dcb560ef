package verifytest

import (
	"encoding/hex"
	"fmt"
	"net/http"
	"time"
)

// NotionToken is the verification token of the "notion" fixture.
const NotionToken = "secret_tMrlL1qK5vuQAh1b6cZGhFChZTSYJlce98V0pYn7yBl"

// Notion returns an X-Notion-Signature value: "sha256=" and the hex
// HMAC-SHA256 of body keyed with the verification token
// (https://developers.notion.com/reference/webhooks).
func Notion(token string, body []byte) string {
	return "sha256=" + hex.EncodeToString(mac([]byte(token), body))
}

// NotionDelivery returns an event POST signed with token.
func NotionDelivery(token string, body []byte) Delivery {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Notion-Signature", Notion(token, body))
	return Delivery{Header: h, Body: body}
}

// NotionEvent returns an event body about page; attempt is attempt_number.
func NotionEvent(id, typ, page string, attempt int) []byte {
	return fmt.Appendf(nil, `{"id":%q,"timestamp":"2026-03-01T11:59:30.000Z","workspace_id":"13950b26-c203-4f3b-b97d-93ec06319565","workspace_name":"Quantify Labs","subscription_id":"29d75c0d-5546-4414-8459-7b7a92f1fc4b","integration_id":"0ef2e755-4912-8096-91c1-00376a88a5ca","type":%q,"authors":[{"id":"c7c11cca-1d73-471d-9b6e-bdef51470190","type":"person"}],"accessible_by":[{"id":"556a1abf-4f08-40c6-878a-75890d2a88ba","type":"person"}],"attempt_number":%d,"entity":{"id":%q,"type":"page"},"data":{"parent":{"id":"13950b26-c203-4f3b-b97d-93ec06319565","type":"space"}}}`, id, typ, attempt, page)
}

func init() {
	RegisterFixture(Fixture{
		Type:    "notion",
		Secrets: []string{NotionToken},
		Cases: func(time.Time) Cases {
			page := "153104cd-477e-809d-8dc4-ff2d96ae3090"
			tampered := NotionDelivery(NotionToken, NotionEvent("5a7f2e0c-0000-4000-8000-000000000009", "page.deleted", page, 1))
			tampered.Body = NotionEvent("5a7f2e0c-0000-4000-8000-000000000009", "page.undeleted", page, 1)
			return Cases{
				Distinct: []Delivery{
					NotionDelivery(NotionToken, NotionEvent("5a7f2e0c-0000-4000-8000-000000000001", "page.created", page, 1)),
					NotionDelivery(NotionToken, NotionEvent("5a7f2e0c-0000-4000-8000-000000000002", "page.content_updated", page, 1)),
				},
				Redelivery: []Delivery{
					NotionDelivery(NotionToken, NotionEvent("5a7f2e0c-0000-4000-8000-000000000003", "page.properties_updated", page, 1)),
					NotionDelivery(NotionToken, NotionEvent("5a7f2e0c-0000-4000-8000-000000000003", "page.properties_updated", page, 2)),
				},
				Tampered: tampered,
				Handshakes: []Handshake{{
					Delivery: Delivery{Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"verification_token":"secret_tMrlL1qK5vuQAh1b6cZGhFChZTSYJlce98V0pYn7yBl"}`)},
					Status:   http.StatusOK,
					Body:     []byte{},
				}},
			}
		},
	})
}
