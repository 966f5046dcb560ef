package verifytest

import (
	"net/http"
	"strconv"
	"time"
)

// SlackFixtureSecret is the signing secret of the "slack" fixture.
const SlackFixtureSecret = "fixture-slack-signing-secret-0001"

// slackDelivery is body signed at; extra header pairs follow
// (X-Slack-Retry-Num…).
func slackDelivery(at time.Time, body string, extra ...string) Delivery {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Slack-Request-Timestamp", strconv.FormatInt(at.Unix(), 10))
	h.Set("X-Slack-Signature", Slack(SlackFixtureSecret, at.Unix(), []byte(body)))
	for i := 0; i+1 < len(extra); i += 2 {
		h.Set(extra[i], extra[i+1])
	}
	return Delivery{Header: h, Body: []byte(body)}
}

func slackReaction(eventID, user string) string {
	return `{"token":"t","team_id":"T0FX","api_app_id":"A0FX","type":"event_callback","event_id":"` + eventID +
		`","event_time":1745332200,"event":{"type":"reaction_added","user":"` + user + `","reaction":"thumbsup","item":{"type":"message","channel":"C0FX","ts":"1745332199.000100"},"event_ts":"1745332200.000200"}}`
}

func init() {
	RegisterFixture(Fixture{
		Type:    "slack",
		Secrets: []string{SlackFixtureSecret},
		Cases: func(now time.Time) Cases {
			tampered := slackDelivery(now, slackReaction("Ev0FX9", "U0FX9"))
			tampered.Body = []byte(slackReaction("Ev0FX9", "U0FX8"))
			return Cases{
				// Two users reacting to one message in one second: two
				// event_ids.
				Distinct: []Delivery{
					slackDelivery(now, slackReaction("Ev0FX1", "U0FX1")),
					slackDelivery(now, slackReaction("Ev0FX2", "U0FX2")),
				},
				// Slack retries with X-Slack-Retry-Num, a new timestamp
				// and signature, the same body and event_id.
				Redelivery: []Delivery{
					slackDelivery(now.Add(-time.Minute), slackReaction("Ev0FX3", "U0FX3")),
					slackDelivery(now, slackReaction("Ev0FX3", "U0FX3"), "X-Slack-Retry-Num", "1", "X-Slack-Retry-Reason", "http_timeout"),
				},
				Tampered: tampered,
				Handshakes: []Handshake{{
					Delivery: slackDelivery(now, `{"token":"t","challenge":"fx-challenge-1","type":"url_verification"}`),
					Status:   http.StatusOK,
					Body:     []byte(`{"challenge":"fx-challenge-1"}`),
				}},
			}
		},
	})
}
