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
	v := p26MustBuild(t, verify.TypeGoogleCalendar, verify.Core{Secrets: []string{verifytest.GoogleCalendarToken}}, nil)
	exp := time.Date(2026, 3, 8, 12, 0, 0, 0, time.UTC)
	msg := func(state string, n int) verifytest.Delivery {
		return verifytest.GoogleCalendarMessage(verifytest.GoogleCalendarToken, "chan-1", state, n, exp)
	}

	t.Run("fixture", func(t *testing.T) { p26Fixture(t, "googlecalendar", verify.Core{}) })

	t.Run("configuration", func(t *testing.T) {
		_, err := p26Build(t, verify.TypeGoogleCalendar, verify.Core{Secrets: []string{"ok", strings.Repeat("t", 257)}}, nil)
		p26ConfigField(t, err, "Secrets[1]")
		_, err = p26Build(t, verify.TypeGoogleCalendar, verify.Core{}, nil)
		p26ConfigField(t, err, "Secrets")
	})

	t.Run("token", func(t *testing.T) {
		d := msg("exists", 2)
		d.Header.Del(verify.GoogleChannelTokenHeader)
		p26Code(t, v, d, verify.CodeMissingHeader, verify.InHeader, verify.GoogleChannelTokenHeader)
		bad := verifytest.GoogleCalendarMessage("another-token", "chan-1", "exists", 2, exp)
		p26Code(t, v, bad, verify.CodeBadSignature, verify.InHeader, verify.GoogleChannelTokenHeader)
		// A sync message with a wrong token is not answered as a handshake.
		p26Code(t, v, verifytest.GoogleCalendarMessage("another-token", "chan-1", "sync", 1, exp), verify.CodeBadSignature, verify.InHeader, verify.GoogleChannelTokenHeader)
		rot := p26MustBuild(t, verify.TypeGoogleCalendar, verify.Core{Secrets: []string{"another-token", verifytest.GoogleCalendarToken}}, nil)
		p26Events(t, rot, bad)
		p26Events(t, rot, msg("exists", 2))
	})

	t.Run("headers", func(t *testing.T) {
		for _, h := range []string{verify.GoogleChannelIDHeader, verify.GoogleResourceStateHeader, verify.GoogleMessageNumberHeader} {
			d := msg("exists", 2)
			d.Header.Del(h)
			if e := p26Code(t, v, d, verify.CodeMissingHeader, verify.InHeader, h); !e.Authenticated {
				t.Errorf("%s: not authenticated", h)
			}
		}
		d := msg("exists", 2)
		d.Header.Set(verify.GoogleMessageNumberHeader, "-3")
		p26Code(t, v, d, verify.CodeMalformedHeader, verify.InHeader, verify.GoogleMessageNumberHeader)
	})

	t.Run("sync is a handshake", func(t *testing.T) {
		res, err := v.Verify(p26Req(msg("sync", 1)))
		if err != nil || !res.IsHandshake() || res.Handshake.Status != http.StatusOK || len(res.Events) != 0 {
			t.Fatalf("got %+v, %v", res, err)
		}
	})

	t.Run("nudge key", func(t *testing.T) {
		a := p26Events(t, v, msg("exists", 2))[0]
		retry := p26Events(t, v, msg("exists", 2))[0]
		next := p26Events(t, v, msg("exists", 3))[0]
		gone := p26Events(t, v, msg("not_exists", 4))[0]
		other := p26Events(t, v, verifytest.GoogleCalendarMessage(verifytest.GoogleCalendarToken, "chan-2", "exists", 2, exp))[0]
		again := p26Events(t, v, verifytest.GoogleCalendarMessage(verifytest.GoogleCalendarToken, "chan-1", "exists", 2, exp.Add(7*24*time.Hour)))[0]
		if a.ID != verify.JoinKey("chan-1", "Sun, 08 Mar 2026 12:00:00 GMT", "2") || retry.ID != a.ID || next.ID == a.ID || other.ID == a.ID || again.ID == a.ID {
			t.Fatalf("a %q retry %q next %q other %q recreated %q", a.ID, retry.ID, next.ID, other.ID, again.ID)
		}
		if a.Type != "exists" || gone.Type != "not_exists" || a.Scope != "chan-1" || a.ObjectID != "ret08u3rv24htgh289g" {
			t.Fatalf("a %+v gone %+v", a, gone)
		}
		only := p26MustBuild(t, verify.TypeGoogleCalendar, verify.Core{Secrets: []string{verifytest.GoogleCalendarToken}, AllowedEventTypes: []string{"not_exists"}}, nil)
		p26Code(t, only, msg("exists", 2), verify.CodeEventTypeNotAllowed, verify.InHeader, verify.GoogleResourceStateHeader)
	})
}
