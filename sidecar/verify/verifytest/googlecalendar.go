package verifytest

import (
	"net/http"
	"strconv"
	"time"
)

// GoogleCalendarToken is the channel token of the "googlecalendar"
// fixture.
const GoogleCalendarToken = "target=n8n-calendar-sync&k=7d1f0c9e"

// GoogleCalendarMessage returns a push notification of channel with the
// token, state and message number given
// (https://developers.google.com/calendar/api/guides/push).
func GoogleCalendarMessage(token, channel, state string, number int, expires time.Time) Delivery {
	h := http.Header{}
	h.Set("X-Goog-Channel-ID", channel)
	if token != "" {
		h.Set("X-Goog-Channel-Token", token)
	}
	h.Set("X-Goog-Channel-Expiration", expires.UTC().Format(http.TimeFormat))
	h.Set("X-Goog-Resource-ID", "ret08u3rv24htgh289g")
	h.Set("X-Goog-Resource-URI", "https://www.googleapis.com/calendar/v3/calendars/primary/events?alt=json")
	h.Set("X-Goog-Resource-State", state)
	h.Set("X-Goog-Message-Number", strconv.Itoa(number))
	return Delivery{Header: h}
}

func init() {
	RegisterFixture(Fixture{
		Type:    "googlecalendar",
		Secrets: []string{GoogleCalendarToken},
		Cases: func(now time.Time) Cases {
			const channel = "01234567-89ab-cdef-0123456789ab"
			exp := now.Add(7 * 24 * time.Hour).Truncate(time.Second)
			return Cases{
				// Two changes of the watched calendar: two messages.
				Distinct: []Delivery{
					GoogleCalendarMessage(GoogleCalendarToken, channel, "exists", 10, exp),
					GoogleCalendarMessage(GoogleCalendarToken, channel, "exists", 12, exp),
				},
				Redelivery: []Delivery{
					GoogleCalendarMessage(GoogleCalendarToken, channel, "exists", 15, exp),
					GoogleCalendarMessage(GoogleCalendarToken, channel, "exists", 15, exp),
				},
				// Unsigned: what an attacker can change is the token.
				Tampered: GoogleCalendarMessage("guessed-token", channel, "exists", 16, exp),
				Handshakes: []Handshake{{
					Delivery: GoogleCalendarMessage(GoogleCalendarToken, channel, "sync", 1, exp),
					Status:   http.StatusOK,
					Body:     []byte{},
				}},
			}
		},
	})
}
