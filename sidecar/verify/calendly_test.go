package verify_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Calendly publishes no example signature, so this vector was computed
// independently (Python's hmac module) from
// https://developer.calendly.com/api-docs/overview/webhooks/webhook-signatures:
// v1 is the hex HMAC-SHA256 of t + "." + body.
func TestCalendlyVector(t *testing.T) {
	t.Parallel()
	const uri = "https://api.calendly.com/scheduled_events/GBGBDCAADAEDCRZ2/invitees/AAAAAAAAAAAAAAAA"
	body := []byte(`{"created_at":"2020-11-23T17:51:19.000000Z","created_by":"https://api.calendly.com/users/AAAAAAAAAAAAAAAA","event":"invitee.created","payload":{"uri":"` + uri + `"}}`)
	at := time.Unix(1606153880, 0)
	v := mustBuild(t, verify.TypeCalendly, verify.Core{Secrets: []string{verifytest.CalendlyKey}, Now: fixedClock(at.Add(170 * time.Second))}, nil)
	h := http.Header{}
	h.Set(verify.CalendlySignatureHeader, "t=1606153880,v1=93d02355cf952b23bcd9f4cfb08aacff674e9bc31e35e127f171d9d316f1b648")
	evs := verifyEvents(t, v, verifytest.Delivery{Header: h, Body: body})
	if len(evs) != 1 || evs[0].ID != verify.JoinKey("invitee.created", uri, "2020-11-23T17:51:19.000000Z") || evs[0].Type != "invitee.created" ||
		evs[0].ObjectID != uri || !evs[0].Timestamp.Equal(at) {
		t.Fatalf("got %+v", evs)
	}
}

func TestCalendly(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	v := mustBuild(t, verify.TypeCalendly, verify.Core{Secrets: []string{verifytest.CalendlyKey}, Now: fixedClock(now)}, nil)
	body := verifytest.CalendlyInvitee("invitee.created", "https://api.calendly.com/x/invitees/1", "2026-03-01T11:59:00.000000Z")
	good := func() verifytest.Delivery { return verifytest.CalendlyDelivery(verifytest.CalendlyKey, now, body) }

	t.Run("fixture", func(t *testing.T) { replayFixture(t, "calendly") })

	t.Run("header", func(t *testing.T) {
		d := good()
		d.Header.Del(verify.CalendlySignatureHeader)
		requireRefused(t, v, d, verify.CodeMissingHeader, verify.InHeader, verify.CalendlySignatureHeader)
		sig := good().Header.Get(verify.CalendlySignatureHeader)
		v1 := sig[strings.Index(sig, "v1="):]
		for _, bad := range []string{v1, "t=1772366400", "t=1772366400,v1=abc", "t=x," + v1, "t=1772366400,t=1772366400," + v1, "t=1772366400;" + v1} {
			d = good()
			d.Header.Set(verify.CalendlySignatureHeader, bad)
			requireRefused(t, v, d, verify.CodeMalformedHeader, verify.InHeader, verify.CalendlySignatureHeader)
		}
		// Unknown elements are ignored, a second v1 may match.
		d = good()
		d.Header.Set(verify.CalendlySignatureHeader, "t=1772366400,v0=x,v1="+strings.Repeat("0", 64)+","+v1)
		verifyEvents(t, v, d)
	})

	t.Run("wrong key, rotation, t signed", func(t *testing.T) {
		other := verifytest.CalendlyDelivery("the-next-signing-key", now, body)
		requireRefused(t, v, other, verify.CodeBadSignature, verify.InHeader, verify.CalendlySignatureHeader)
		rot := mustBuild(t, verify.TypeCalendly, verify.Core{Secrets: []string{"the-next-signing-key", verifytest.CalendlyKey}, Now: fixedClock(now)}, nil)
		verifyEvents(t, rot, other)
		verifyEvents(t, rot, good())
		d := good()
		sig := d.Header.Get(verify.CalendlySignatureHeader)
		d.Header.Set(verify.CalendlySignatureHeader, "t=1772366401"+sig[strings.Index(sig, ","):])
		requireRefused(t, v, d, verify.CodeBadSignature, verify.InHeader, verify.CalendlySignatureHeader)
	})

	t.Run("tolerance", func(t *testing.T) {
		verifyEvents(t, v, verifytest.CalendlyDelivery(verifytest.CalendlyKey, now.Add(-3*time.Minute), body))
		old := verifytest.CalendlyDelivery(verifytest.CalendlyKey, now.Add(-3*time.Minute-time.Second), body)
		requireRefused(t, v, old, verify.CodeTimestampOutsideTolerance, verify.InHeader, verify.CalendlySignatureHeader)
		wide := mustBuild(t, verify.TypeCalendly, verify.Core{Secrets: []string{verifytest.CalendlyKey}, Tolerance: 10 * time.Minute, Now: fixedClock(now)}, nil)
		verifyEvents(t, wide, old)
	})

	t.Run("key rule", func(t *testing.T) {
		a := verifyEvents(t, v, good())[0]
		retry := verifyEvents(t, v, verifytest.CalendlyDelivery(verifytest.CalendlyKey, now.Add(-time.Minute), body))[0]
		canceled := verifyEvents(t, v, verifytest.CalendlyDelivery(verifytest.CalendlyKey, now, verifytest.CalendlyInvitee("invitee.canceled", "https://api.calendly.com/x/invitees/1", "2026-03-01T11:59:30.000000Z")))[0]
		if retry.ID != a.ID || canceled.ID == a.ID || canceled.ObjectID != a.ObjectID {
			t.Fatalf("a %+v retry %+v canceled %+v", a, retry, canceled)
		}
		nouri := []byte(`{"created_at":"2026-03-01T11:59:00Z","event":"routing_form_submission.created","payload":{"submitter":"x"}}`)
		n := verifyEvents(t, v, verifytest.CalendlyDelivery(verifytest.CalendlyKey, now, nouri))[0]
		if !strings.Contains(n.ID, "sha256:") || n.ObjectID != "" {
			t.Fatalf("got %+v", n)
		}
		for _, c := range []struct{ body, field string }{
			{`{"created_at":"x","payload":{}}`, "/event"},
			{`{"event":"invitee.created","payload":{}}`, "/created_at"},
			{`{"event":"invitee.created","created_at":"x"}`, "/payload"},
			{`{"event":"invitee.created","created_at":"x","payload":[]}`, "/payload"},
		} {
			if e := requireRefused(t, v, verifytest.CalendlyDelivery(verifytest.CalendlyKey, now, []byte(c.body)), verify.CodeMissingField, verify.InBody, c.field); !e.Authenticated {
				t.Errorf("%s: not authenticated", c.body)
			}
		}
		only := mustBuild(t, verify.TypeCalendly, verify.Core{Secrets: []string{verifytest.CalendlyKey}, AllowedEventTypes: []string{"invitee.canceled"}, Now: fixedClock(now)}, nil)
		requireRefused(t, only, good(), verify.CodeEventTypeNotAllowed, verify.InBody, "/event")
	})
}

// Through verify.New (the sources file's path) a Calendly source that sets
// no tolerance gets Calendly's 3 minutes.
func TestCalendlyDefaultToleranceThroughNew(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	v, err := verify.New(verify.TypeCalendly, verify.Core{Secrets: []string{verifytest.CalendlyKey}, Now: fixedClock(now)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	body := verifytest.CalendlyInvitee("invitee.created", "https://api.calendly.com/x/invitees/1", "2026-03-01T11:59:00.000000Z")
	verifyEvents(t, v, verifytest.CalendlyDelivery(verifytest.CalendlyKey, now.Add(-3*time.Minute), body))
	requireRefused(t, v, verifytest.CalendlyDelivery(verifytest.CalendlyKey, now.Add(-3*time.Minute-time.Second), body), verify.CodeTimestampOutsideTolerance, verify.InHeader, verify.CalendlySignatureHeader)
}
