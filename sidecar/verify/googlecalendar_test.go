package verify_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Google Calendar push notifications carry no signature (nothing to
// compute a vector of): the channel token is compared with the configured
// ones (https://developers.google.com/calendar/api/guides/push).
func TestGoogleCalendar(t *testing.T) {
	t.Parallel()
	v := mustBuild(t, verify.TypeGoogleCalendar, verify.Core{Secrets: []string{verifytest.GoogleCalendarToken}}, nil)
	exp := time.Date(2026, 3, 8, 12, 0, 0, 0, time.UTC)
	msg := func(state string, n int) verifytest.Delivery {
		return verifytest.GoogleCalendarMessage(verifytest.GoogleCalendarToken, "chan-1", state, n, exp)
	}

	t.Run("fixture", func(t *testing.T) { replayFixture(t, "googlecalendar") })

	t.Run("configuration", func(t *testing.T) {
		_, err := tryBuild(t, verify.TypeGoogleCalendar, verify.Core{Secrets: []string{"ok", strings.Repeat("t", 257)}}, nil)
		requireConfigField(t, err, "Secrets[1]")
		_, err = tryBuild(t, verify.TypeGoogleCalendar, verify.Core{}, nil)
		requireConfigField(t, err, "Secrets")
	})

	t.Run("token", func(t *testing.T) {
		d := msg("exists", 2)
		d.Header.Del(verify.GoogleChannelTokenHeader)
		requireRefused(t, v, d, verify.CodeMissingHeader, verify.InHeader, verify.GoogleChannelTokenHeader)
		bad := verifytest.GoogleCalendarMessage("another-token", "chan-1", "exists", 2, exp)
		requireRefused(t, v, bad, verify.CodeBadSignature, verify.InHeader, verify.GoogleChannelTokenHeader)
		// A sync message with a wrong token is not answered as a handshake.
		requireRefused(t, v, verifytest.GoogleCalendarMessage("another-token", "chan-1", "sync", 1, exp), verify.CodeBadSignature, verify.InHeader, verify.GoogleChannelTokenHeader)
		rot := mustBuild(t, verify.TypeGoogleCalendar, verify.Core{Secrets: []string{"another-token", verifytest.GoogleCalendarToken}}, nil)
		verifyEvents(t, rot, bad)
		verifyEvents(t, rot, msg("exists", 2))
	})

	t.Run("headers", func(t *testing.T) {
		for _, h := range []string{verify.GoogleChannelIDHeader, verify.GoogleResourceStateHeader, verify.GoogleMessageNumberHeader} {
			d := msg("exists", 2)
			d.Header.Del(h)
			if e := requireRefused(t, v, d, verify.CodeMissingHeader, verify.InHeader, h); !e.Authenticated {
				t.Errorf("%s: not authenticated", h)
			}
		}
		d := msg("exists", 2)
		d.Header.Set(verify.GoogleMessageNumberHeader, "-3")
		requireRefused(t, v, d, verify.CodeMalformedHeader, verify.InHeader, verify.GoogleMessageNumberHeader)
	})

	t.Run("sync is a handshake", func(t *testing.T) {
		res, err := v.Verify(deliveryRequest(msg("sync", 1)))
		if err != nil || !res.IsHandshake() || res.Handshake.Status != http.StatusOK || len(res.Events) != 0 {
			t.Fatalf("got %+v, %v", res, err)
		}
	})

	t.Run("nudge key", func(t *testing.T) {
		a := verifyEvents(t, v, msg("exists", 2))[0]
		retry := verifyEvents(t, v, msg("exists", 2))[0]
		next := verifyEvents(t, v, msg("exists", 3))[0]
		gone := verifyEvents(t, v, msg("not_exists", 4))[0]
		other := verifyEvents(t, v, verifytest.GoogleCalendarMessage(verifytest.GoogleCalendarToken, "chan-2", "exists", 2, exp))[0]
		again := verifyEvents(t, v, verifytest.GoogleCalendarMessage(verifytest.GoogleCalendarToken, "chan-1", "exists", 2, exp.Add(7*24*time.Hour)))[0]
		if a.ID != verify.JoinKey("chan-1", "Sun, 08 Mar 2026 12:00:00 GMT", "2") || retry.ID != a.ID || next.ID == a.ID || other.ID == a.ID || again.ID == a.ID {
			t.Fatalf("a %q retry %q next %q other %q recreated %q", a.ID, retry.ID, next.ID, other.ID, again.ID)
		}
		if a.Type != "exists" || gone.Type != "not_exists" || a.Scope != "chan-1" || a.ObjectID != "ret08u3rv24htgh289g" {
			t.Fatalf("a %+v gone %+v", a, gone)
		}
		only := mustBuild(t, verify.TypeGoogleCalendar, verify.Core{Secrets: []string{verifytest.GoogleCalendarToken}, AllowedEventTypes: []string{"not_exists"}}, nil)
		requireRefused(t, only, msg("exists", 2), verify.CodeEventTypeNotAllowed, verify.InHeader, verify.GoogleResourceStateHeader)
	})
}
