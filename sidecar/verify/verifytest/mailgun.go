package verifytest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// MailgunKey is the "mailgun" fixture's HTTP webhook signing key.
const MailgunKey = "mailgun-fixture-signing-key-0123456789"

// Mailgun returns the hex HMAC-SHA256 of timestamp + token
// (https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/securing-webhooks).
func Mailgun(key, timestamp, token string) string {
	return hex.EncodeToString(mac([]byte(key), []byte(timestamp), []byte(token)))
}

// MailgunToken returns a 50-character token derived from seed (Mailgun's
// are random; the fixture's are reproducible).
func MailgunToken(seed string) string {
	s := sha256.Sum256([]byte(seed))
	return hex.EncodeToString(s[:])[:50]
}

// MailgunEventData returns an event-data object for event id at unix time
// at (seconds, with a fraction as Mailgun sends).
func MailgunEventData(id, event string, at float64) string {
	return fmt.Sprintf(`{"event":%q,"timestamp":%s,"id":%q,"recipient":"alice@example.com","log-level":"info","message":{"headers":{"message-id":"20240117101112.1.ABCDEF@mg.example.com","from":"shop@mg.example.com","to":"alice@example.com","subject":"Your order"}},"flags":{"is-test-mode":false}}`,
		event, strconv.FormatFloat(at, 'f', 6, 64), id)
}

// MailgunDelivery returns a webhook POST with eventData signed by key at
// unix time at with token.
func MailgunDelivery(key string, at time.Time, token, eventData string) Delivery {
	ts := strconv.FormatInt(at.Unix(), 10)
	body := fmt.Sprintf(`{"signature":{"timestamp":%q,"token":%q,"signature":%q},"event-data":%s}`, ts, token, Mailgun(key, ts, token), eventData)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "mailgun/treq-16.12.0")
	return Delivery{Header: h, Body: []byte(body)}
}

func init() {
	RegisterFixture(Fixture{
		Type:    "mailgun",
		Secrets: []string{MailgunKey},
		Cases: func(now time.Time) Cases {
			at := float64(now.Add(-time.Minute).UnixMicro()) / 1e6
			tampered := MailgunDelivery(MailgunKey, now, MailgunToken("t0"), MailgunEventData("DACSsAdVSeGpLid7TN03WA", "delivered", at))
			// The token is signed; event-data is not (see verify): a
			// changed token is what fails.
			tampered.Body = bytes.Replace(tampered.Body, []byte(MailgunToken("t0")), []byte(MailgunToken("other")), 1)
			return Cases{
				Distinct: []Delivery{
					MailgunDelivery(MailgunKey, now, MailgunToken("t1"), MailgunEventData("Ase7i2zsRYeDXztHGENqRA", "delivered", at)),
					MailgunDelivery(MailgunKey, now, MailgunToken("t2"), MailgunEventData("czsjqFATSlC3QtAK-C80nw", "delivered", at)),
				},
				// A retry: the same event-data under a new timestamp and
				// token.
				Redelivery: []Delivery{
					MailgunDelivery(MailgunKey, now.Add(-2*time.Minute), MailgunToken("t3"), MailgunEventData("-Agny091SquKnsrW2NEKUA", "opened", at)),
					MailgunDelivery(MailgunKey, now, MailgunToken("t4"), MailgunEventData("-Agny091SquKnsrW2NEKUA", "opened", at)),
				},
				Tampered: tampered,
			}
		},
	})
}
