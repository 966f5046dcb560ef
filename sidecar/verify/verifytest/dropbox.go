package verifytest

import (
	"encoding/hex"
	"net/http"
	"strconv"
	"time"
)

// DropboxAppSecret is the app secret of the "dropbox" fixture.
const DropboxAppSecret = "dropbox-fixture-app-secret"

// Dropbox returns an X-Dropbox-Signature value: the hex HMAC-SHA256 of body
// keyed with the app secret
// (https://www.dropbox.com/developers/reference/webhooks#notifications).
func Dropbox(secret string, body []byte) string {
	return hex.EncodeToString(mac([]byte(secret), body))
}

// DropboxNotification returns a notification POST naming account, signed
// with secret.
func DropboxNotification(secret, account string, user int) Delivery {
	body := []byte(`{"list_folder":{"accounts":["` + account + `"]},"delta":{"users":[` + strconv.Itoa(user) + `]}}`)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "DropboxWebhooks/1.0")
	h.Set("X-Dropbox-Signature", Dropbox(secret, body))
	return Delivery{Header: h, Body: body}
}

// DropboxChallenge returns the verification request.
func DropboxChallenge(challenge string) Delivery {
	return Delivery{Method: http.MethodGet, RawQuery: "challenge=" + challenge}
}

func init() {
	RegisterFixture(Fixture{
		Type:    "dropbox",
		Secrets: []string{DropboxAppSecret},
		Cases: func(time.Time) Cases {
			const account = "dbid:AAH4f99T0taONIb-OurWxbNQ6ywGRopQngc"
			tampered := DropboxNotification(DropboxAppSecret, account, 12345678)
			tampered.Body = []byte(`{"list_folder":{"accounts":["dbid:AAH4f99T0taONIb-OurWxbNQ6ywGRopQngd"]},"delta":{"users":[12345678]}}`)
			return Cases{
				// Two changes of one account: the same body twice, two
				// nudges.
				Distinct: []Delivery{
					DropboxNotification(DropboxAppSecret, account, 12345678),
					DropboxNotification(DropboxAppSecret, account, 12345678),
				},
				// A retry cannot be told from a new nudge: each is an event.
				Nudges:   true,
				Tampered: tampered,
				Handshakes: []Handshake{{
					Delivery: DropboxChallenge("ypOJyjCHHGxkszyZaQQ7uK3cUeyKZwSTNd6h3Hc0VD8"),
					Status:   http.StatusOK,
					Body:     []byte("ypOJyjCHHGxkszyZaQQ7uK3cUeyKZwSTNd6h3Hc0VD8"),
				}},
			}
		},
	})
}
