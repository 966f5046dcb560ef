package verifytest

import (
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// AsanaSecret is the X-Hook-Secret of the "asana" fixture's webhook.
const AsanaSecret = "b537207f20cbfa02357cf448134da559e8bd39d61597dcd5631b8012eae53e81"

// Asana returns an X-Hook-Signature value: the hex HMAC-SHA256 of body
// keyed with the hook secret (https://developers.asana.com/docs/webhooks-guide).
func Asana(secret string, body []byte) string {
	return hex.EncodeToString(mac([]byte(secret), body))
}

// AsanaDelivery returns an event delivery signed with secret.
func AsanaDelivery(secret string, body []byte) Delivery {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Hook-Signature", Asana(secret, body))
	return Delivery{Header: h, Body: body}
}

// AsanaHandshake returns the handshake Asana sends while a webhook is
// created.
func AsanaHandshake(secret string) Delivery {
	h := http.Header{}
	h.Set("X-Hook-Secret", secret)
	return Delivery{Header: h}
}

// AsanaEvent returns one event of a delivery: action on task, changing
// field (none when field is "").
func AsanaEvent(action, task, field, createdAt string) string {
	change := ""
	if field != "" {
		change = fmt.Sprintf(`,"change":{"field":%q,"action":"changed"}`, field)
	}
	return fmt.Sprintf(`{"user":{"gid":"1516","resource_type":"user"},"created_at":%q,"action":%q,"resource":{"gid":%q,"resource_type":"task","resource_subtype":"default_task"},"parent":null%s}`, createdAt, action, task, change)
}

// AsanaEvents returns a delivery body of events.
func AsanaEvents(events ...string) []byte {
	return []byte(`{"events":[` + strings.Join(events, ",") + `]}`)
}

func init() {
	RegisterFixture(Fixture{
		Type:    "asana",
		Secrets: []string{AsanaSecret},
		Cases: func(time.Time) Cases {
			retry := AsanaEvents(AsanaEvent("changed", "1204", "assignee", "2026-03-01T11:59:00.120Z"), AsanaEvent("changed", "1204", "notes", "2026-03-01T11:59:00.140Z"))
			tampered := AsanaDelivery(AsanaSecret, AsanaEvents(AsanaEvent("removed", "1204", "", "2026-03-01T11:59:00.000Z")))
			tampered.Body = AsanaEvents(AsanaEvent("deleted", "1204", "", "2026-03-01T11:59:00.000Z"))
			return Cases{
				Distinct: []Delivery{
					AsanaDelivery(AsanaSecret, AsanaEvents(AsanaEvent("added", "1204", "", "2026-03-01T11:58:00.001Z"), AsanaEvent("changed", "1204", "name", "2026-03-01T11:58:00.002Z"))),
					AsanaDelivery(AsanaSecret, AsanaEvents(AsanaEvent("changed", "1204", "due_on", "2026-03-01T11:58:30.000Z"), AsanaEvent("changed", "1204", "completed", "2026-03-01T11:58:31.000Z"))),
				},
				Redelivery: []Delivery{
					AsanaDelivery(AsanaSecret, retry),
					AsanaDelivery(AsanaSecret, retry),
				},
				Tampered:          tampered,
				EventsPerDelivery: 2,
				Handshakes: []Handshake{
					{Delivery: AsanaHandshake("b537207f20cbfa02357cf448134da559e8bd39d61597dcd5631b8012eae53e82"), Status: http.StatusOK},
					{Delivery: AsanaDelivery(AsanaSecret, []byte(`{"events":[]}`)), Status: http.StatusOK},
				},
			}
		},
	})
}
