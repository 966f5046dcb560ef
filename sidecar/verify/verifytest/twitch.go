package verifytest

import (
	"encoding/hex"
	"net/http"
	"strconv"
	"time"
)

// TwitchSecret is the subscription secret of the "twitch" fixture.
const TwitchSecret = "twitch-fixture-secret-0123456789"

// Twitch returns a Twitch-Eventsub-Message-Signature value: "sha256=" and
// the hex HMAC-SHA256 of message id + timestamp + body
// (https://dev.twitch.tv/docs/eventsub/handling-webhook-events/#verifying-the-event-message).
func Twitch(secret, messageID, timestamp string, body []byte) string {
	return "sha256=" + hex.EncodeToString(mac([]byte(secret), []byte(messageID), []byte(timestamp), body))
}

// TwitchDelivery returns an EventSub message of type mt signed with secret.
func TwitchDelivery(secret, messageID, mt string, at time.Time, retry int, body []byte) Delivery {
	ts := at.UTC().Format(time.RFC3339Nano)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Twitch-Eventsub-Message-Id", messageID)
	h.Set("Twitch-Eventsub-Message-Timestamp", ts)
	h.Set("Twitch-Eventsub-Message-Signature", Twitch(secret, messageID, ts, body))
	h.Set("Twitch-Eventsub-Message-Type", mt)
	h.Set("Twitch-Eventsub-Message-Retry", strconv.Itoa(retry))
	h.Set("Twitch-Eventsub-Subscription-Type", "channel.follow")
	h.Set("Twitch-Eventsub-Subscription-Version", "2")
	return Delivery{Header: h, Body: body}
}

const twitchSub = `"subscription":{"id":"f1c2a387-161a-49f9-a165-0f21d7a4e1c4","type":"channel.follow","version":"2","status":"enabled","cost":0,"condition":{"broadcaster_user_id":"1337","moderator_user_id":"1337"},"transport":{"method":"webhook","callback":"https://example.com/webhooks/callback"},"created_at":"2019-11-16T10:11:12.634234626Z"}`

// TwitchFollow returns a channel.follow notification body for user.
func TwitchFollow(user string) []byte {
	return []byte(`{` + twitchSub + `,"event":{"user_id":"` + user + `","user_login":"cool_user","user_name":"Cool_User","broadcaster_user_id":"1337","broadcaster_user_login":"cooler_user","broadcaster_user_name":"Cooler_User","followed_at":"2020-07-15T18:16:11.17106713Z"}}`)
}

func init() {
	RegisterFixture(Fixture{
		Type:    "twitch",
		Secrets: []string{TwitchSecret},
		Cases: func(now time.Time) Cases {
			follow := TwitchFollow("1234")
			tampered := TwitchDelivery(TwitchSecret, "befa7b53-d79d-478f-86b9-120f112b044e", "notification", now, 0, follow)
			tampered.Body = TwitchFollow("9999")
			challenge := []byte(`{"challenge":"pogchamp-kappa-360noscope-vohiyo",` + twitchSub + `}`)
			return Cases{
				Distinct: []Delivery{
					TwitchDelivery(TwitchSecret, "befa7b53-d79d-478f-86b9-120f112b0001", "notification", now, 0, follow),
					TwitchDelivery(TwitchSecret, "befa7b53-d79d-478f-86b9-120f112b0002", "notification", now, 0, follow),
				},
				Redelivery: []Delivery{
					TwitchDelivery(TwitchSecret, "befa7b53-d79d-478f-86b9-120f112b0003", "notification", now.Add(-2*time.Minute), 0, follow),
					TwitchDelivery(TwitchSecret, "befa7b53-d79d-478f-86b9-120f112b0003", "notification", now, 1, follow),
				},
				Tampered: tampered,
				Handshakes: []Handshake{{
					Delivery: TwitchDelivery(TwitchSecret, "e76c6bd4-55c9-4987-8304-da1588d8988b", "webhook_callback_verification", now, 0, challenge),
					Status:   http.StatusOK,
					Body:     []byte("pogchamp-kappa-360noscope-vohiyo"),
				}},
			}
		},
	})
}
