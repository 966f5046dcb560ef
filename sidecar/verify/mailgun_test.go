package verify_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Mailgun's page shows a signature object but no key it was made with, so
// this vector was computed independently (Python's hmac module, from the
// algorithm at
// https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/securing-webhooks):
// hex HMAC-SHA256(key, timestamp + token).
func TestMailgunVector(t *testing.T) {
	t.Parallel()
	const (
		key = "key-3ax6xnjp29jd6fds4gc373sgvjxteol0"
		ts  = "1529006854"
		tok = "a8ce0edb2dd8301dee6c2405235584e45aa91d1e9f979f3de0"
		sig = "b63c0701c4f4b614f272106a1b367c5c3369bcdca664ae73ebd52787e45eef07"
	)
	if got := verifytest.Mailgun(key, ts, tok); got != sig {
		t.Fatalf("fixture signer: %s", got)
	}
	body := []byte(`{"signature":{"timestamp":"` + ts + `","token":"` + tok + `","signature":"` + sig + `"},"event-data":{"event":"opened","timestamp":1529006854.329574,"id":"DACSsAdVSeGpLid7TN03WA"}}`)
	v := mustBuild(t, verify.TypeMailgun, verify.Core{Secrets: []string{key}, Now: fixedClock(time.Unix(1529006854, 0))}, nil)
	evs := verifyEvents(t, v, verifytest.Delivery{Body: body})
	if evs[0].ID != verify.JoinKey("DACSsAdVSeGpLid7TN03WA", "2018-06-14") || evs[0].Type != "opened" {
		t.Fatalf("got %+v", evs[0])
	}
	// The signature object is not kept with the event.
	var p map[string]json.RawMessage
	if err := json.Unmarshal(evs[0].Payload, &p); err != nil || p["signature"] != nil || p["event-data"] == nil {
		t.Fatalf("payload %s", evs[0].Payload)
	}
}

func TestMailgun(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	v := mustBuild(t, verify.TypeMailgun, verify.Core{Secrets: []string{verifytest.MailgunKey}, Now: fixedClock(now)}, nil)
	day := func(d time.Time) float64 { return float64(d.UnixMicro()) / 1e6 }
	deliver := func(tok, id string, at time.Time) verifytest.Delivery {
		return verifytest.MailgunDelivery(verifytest.MailgunKey, now, verifytest.MailgunToken(tok), verifytest.MailgunEventData(id, "delivered", day(at)))
	}

	t.Run("fixture", func(t *testing.T) { replayFixture(t, "mailgun") })

	t.Run("id reused the next day is a new event, a retry the same day is not", func(t *testing.T) {
		first := verifyEvents(t, v, deliver("a", "reused-id-1", now.Add(-2*time.Hour)))[0].ID
		retry := verifyEvents(t, v, deliver("b", "reused-id-1", now.Add(-2*time.Hour)))[0].ID
		sameDayOther := verifyEvents(t, v, deliver("c", "another-id", now.Add(-2*time.Hour)))[0].ID
		nextDay := verifyEvents(t, v, deliver("d", "reused-id-1", now.Add(22*time.Hour)))[0].ID
		if first != retry || first == sameDayOther || first == nextDay {
			t.Fatalf("ids %q %q %q %q", first, retry, sameDayOther, nextDay)
		}
		if nextDay != verify.JoinKey("reused-id-1", "2026-03-02") {
			t.Fatalf("next day key %q", nextDay)
		}
	})

	t.Run("fields", func(t *testing.T) {
		d := deliver("a", "x", now)
		for _, c := range []struct{ from, to, field string }{
			{`"signature":{`, `"sig":{`, "/signature"},
			{`"token":"`, `"tok":"`, "/signature/token"},
			{`"timestamp":"`, `"ts":"`, "/signature/timestamp"},
		} {
			b := bytes.Replace(d.Body, []byte(c.from), []byte(c.to), 1)
			requireRefused(t, v, verifytest.Delivery{Body: b}, verify.CodeMissingField, verify.InBody, c.field)
		}
		b := bytes.Replace(d.Body, []byte(`"signature":"`), []byte(`"signature":"zz`), 1)
		requireRefused(t, v, verifytest.Delivery{Body: b}, verify.CodeMalformedBody, verify.InBody, "/signature/signature")
		requireRefused(t, v, verifytest.Delivery{Body: []byte(`[1]`)}, verify.CodeMalformedBody, verify.InBody, "")
		noData := verifytest.MailgunDelivery(verifytest.MailgunKey, now, verifytest.MailgunToken("z"), `{"event":"delivered","timestamp":1}`)
		e := requireRefused(t, v, noData, verify.CodeMissingField, verify.InBody, "/event-data/id")
		if !e.Authenticated {
			t.Error("not authenticated")
		}
		noTS := verifytest.MailgunDelivery(verifytest.MailgunKey, now, verifytest.MailgunToken("z"), `{"event":"delivered","id":"x"}`)
		requireRefused(t, v, noTS, verify.CodeMissingField, verify.InBody, "/event-data/timestamp")
	})

	t.Run("wrong key, rotation, parent signature, tampering", func(t *testing.T) {
		other := verifytest.MailgunDelivery("other-key", now, verifytest.MailgunToken("a"), verifytest.MailgunEventData("x", "delivered", day(now)))
		requireRefused(t, v, other, verify.CodeBadSignature, verify.InBody, "/signature/signature")
		rot := mustBuild(t, verify.TypeMailgun, verify.Core{Secrets: []string{"other-key", verifytest.MailgunKey}, Now: fixedClock(now)}, nil)
		verifyEvents(t, rot, other)
		verifyEvents(t, rot, deliver("a", "x", now))
		// A subaccount's event: signature by its own key, parent-signature by
		// the primary account's key (configured here).
		ts := "1772366400"
		tok := verifytest.MailgunToken("p")
		parent := []byte(`{"signature":{"timestamp":"` + ts + `","token":"` + tok + `","signature":"` + verifytest.Mailgun("subaccount-key", ts, tok) + `","parent-signature":"` + verifytest.Mailgun(verifytest.MailgunKey, ts, tok) + `"},"event-data":` + verifytest.MailgunEventData("p1", "delivered", day(now)) + `}`)
		verifyEvents(t, v, verifytest.Delivery{Body: parent})
		// The token and the timestamp are signed.
		d := deliver("a", "x", now)
		d.Body = bytes.Replace(d.Body, []byte(verifytest.MailgunToken("a")), []byte(verifytest.MailgunToken("b")), 1)
		requireRefused(t, v, d, verify.CodeBadSignature, verify.InBody, "/signature/signature")
	})

	t.Run("window", func(t *testing.T) {
		old := verifytest.MailgunDelivery(verifytest.MailgunKey, now.Add(-6*time.Minute), verifytest.MailgunToken("a"), verifytest.MailgunEventData("x", "delivered", day(now)))
		requireRefused(t, v, old, verify.CodeTimestampOutsideTolerance, verify.InBody, "/signature/timestamp")
		long := mustBuild(t, verify.TypeMailgun, verify.Core{Secrets: []string{verifytest.MailgunKey}, Tolerance: 9 * time.Hour, Now: fixedClock(now)}, nil)
		verifyEvents(t, long, old)
	})

	t.Run("allowed types", func(t *testing.T) {
		only := mustBuild(t, verify.TypeMailgun, verify.Core{Secrets: []string{verifytest.MailgunKey}, AllowedEventTypes: []string{"failed"}, Now: fixedClock(now)}, nil)
		requireRefused(t, only, deliver("a", "x", now), verify.CodeEventTypeNotAllowed, verify.InBody, "/event-data/event")
	})

	t.Run("config", func(t *testing.T) {
		_, err := tryBuild(t, verify.TypeMailgun, verify.Core{}, nil)
		requireConfigField(t, err, "Secrets")
		if h := mustProvider(t, verify.TypeMailgun).CredentialHeaders; h != nil {
			t.Fatal("mailgun signs in the body")
		}
	})
}

// Mailgun signs timestamp + token, not event-data, and advises refusing a
// token seen before
// (https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/securing-webhooks):
// the token is the Result's Nonce, for the caller's replay check, kept for
// twice the tolerance and a margin.
func TestMailgunNonceIsTheToken(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tol := range []time.Duration{0, 10 * time.Minute} {
		v := mustBuild(t, verify.TypeMailgun, verify.Core{Secrets: []string{verifytest.MailgunKey}, Tolerance: tol, Now: fixedClock(now)}, nil)
		tok := verifytest.MailgunToken("nonce")
		d := verifytest.MailgunDelivery(verifytest.MailgunKey, now, tok, verifytest.MailgunEventData("nonce-id", "delivered", float64(now.Unix())))
		res, err := v.Verify(verify.Request{Header: d.Header, Body: d.Body})
		if err != nil {
			t.Fatal(err)
		}
		want := 2*verify.DefaultTolerance + time.Minute
		if tol != 0 {
			want = 2*tol + time.Minute
		}
		if n := res.Nonce; n == nil || n.Value != tok || n.TTL != want || n.In != verify.InBody || n.Field != "/signature/token" {
			t.Fatalf("tolerance %v: nonce %+v", tol, n)
		}
	}
}
