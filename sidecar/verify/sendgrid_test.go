package verify_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// The vector SendGrid's own helper libraries verify against (for example
// https://github.com/sendgrid/sendgrid-go, helpers/eventwebhook, and the
// same key, payload and signature in sendgrid-python, -ruby, -java, -php
// and -nodejs). Its payload is a single object, not the array the Event
// Webhook posts: the signature verifies, then the body is refused as an
// authenticated malformed body.
func TestSendGridPublishedVector(t *testing.T) {
	t.Parallel()
	const (
		pub = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEEDr2LjtURuePQzplybdC+u4CwrqDqBaWjcMMsTbhdbcwHBcepxo7yAQGhHPTnlvFYPAZFceEu/1FwCM/QmGUhA=="
		sig = "MEUCIQCtIHJeH93Y+qpYeWrySphQgpNGNr/U+UyUlBkU6n7RAwIgJTz2C+8a8xonZGi6BpSzoQsbVRamr2nlxFDWYNH2j/0="
		ts  = "1588788367"
	)
	body := []byte(`{"category":"example_payload","event":"test_event","message_id":"message_id"}`)
	v := mustBuild(t, verify.TypeSendGrid, verify.Core{Now: fixedClock(time.Unix(1588788367, 0))}, map[string]any{"public_keys": []string{pub}})
	d := verifytest.Delivery{Header: http.Header{verify.SendGridSignatureHeader: {sig}, verify.SendGridTimestampHeader: {ts}}, Body: body}
	e := requireRefused(t, v, d, verify.CodeMalformedBody, verify.InBody, "")
	if !e.Authenticated {
		t.Fatal("the published signature did not verify")
	}
	d.Header.Set(verify.SendGridTimestampHeader, "1588788368")
	requireRefused(t, v, d, verify.CodeBadSignature, verify.InHeader, verify.SendGridSignatureHeader)
}

// An array signed independently (Python's cryptography package, ECDSA
// P-256 with SHA-256 over timestamp + body, from the algorithm SendGrid
// documents).
func TestSendGridIndependentVector(t *testing.T) {
	t.Parallel()
	const (
		pub = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEX4L8DjyUr27TgvQy7q8Mjuq6QUE/yn0skx1NyFHkLgxbRbDD3wCPkxmnkrBLApjJ6+asmX6RzMrA+sUlaCWm3Q=="
		sig = "MEUCIGIBKq391bv2epVY8HO9Di6O94k1NIffG8um6+Ql1dPGAiEA5dN4JPQ1mR6lI3cAKMmwaMcaeAzpQWcQNB4g4lVTqEc="
	)
	body := []byte(`[{"email":"alice@example.com","timestamp":1700000000,"smtp-id":"<14c5d75ce93.dfd.64b469@ismtpd-555>","event":"delivered","sg_event_id":"ZGVsaXZlcmVkLTAtMjk3ODAzNjItVjdvaEhLdUFRQUd5REFSUmZzY3JGZw","sg_message_id":"14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.0"}]`)
	v := mustBuild(t, verify.TypeSendGrid, verify.Core{Now: fixedClock(time.Unix(1700000010, 0))}, map[string]any{"public_keys": []string{pub}})
	evs := verifyEvents(t, v, verifytest.Delivery{Header: http.Header{verify.SendGridSignatureHeader: {sig}, verify.SendGridTimestampHeader: {"1700000000"}}, Body: body})
	if len(evs) != 1 || evs[0].ID != "ZGVsaXZlcmVkLTAtMjk3ODAzNjItVjdvaEhLdUFRQUd5REFSUmZzY3JGZw" || evs[0].Type != "delivered" || string(evs[0].Payload) != string(body[1:len(body)-1]) {
		t.Fatalf("got %+v", evs)
	}
}

func TestSendGrid(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := now.Add(-time.Minute).Unix()
	pub := verifytest.SendGridPublicKey(verifytest.SendGridKey)
	opts := map[string]any{"public_keys": []string{pub}}
	v := mustBuild(t, verify.TypeSendGrid, verify.Core{Now: fixedClock(now)}, opts)
	byMsg := mustBuild(t, verify.TypeSendGrid, verify.Core{Now: fixedClock(now)}, map[string]any{"public_keys": []string{pub}, "key": "message"})
	const msg = "14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.0"
	sign := func(events ...string) verifytest.Delivery {
		return verifytest.SendGridDelivery(verifytest.SendGridKey, now, verifytest.SendGridBody(events...))
	}

	t.Run("fixture", func(t *testing.T) { replayFixture(t, "sendgrid") })

	t.Run("an event resent under a new sg_event_id", func(t *testing.T) {
		first := sign(verifytest.SendGridEvent("ZXYtYQ", msg, "processed", at), verifytest.SendGridEvent("ZXYtYg", msg, "delivered", at+2))
		// SendGrid posts the delivered event again with a new sg_event_id,
		// beside a new open.
		again := sign(verifytest.SendGridEvent("ZXYtYw", msg, "delivered", at+2), verifytest.SendGridEvent("ZXYtZA", msg, "open", at+60))
		e1, e2 := verifyEvents(t, v, first), verifyEvents(t, v, again)
		if len(e1) != 2 || len(e2) != 2 || e1[1].ID == e2[0].ID {
			t.Fatalf("event key: %+v %+v", e1, e2)
		}
		m1, m2 := verifyEvents(t, byMsg, first), verifyEvents(t, byMsg, again)
		if m1[1].ID != m2[0].ID || m1[1].ID != verify.JoinKey(msg, "delivered", "1772366342") || m2[1].ID == m1[0].ID || m1[0].ID == m1[1].ID {
			t.Fatalf("message key: %q %q %q %q", m1[0].ID, m1[1].ID, m2[0].ID, m2[1].ID)
		}
	})

	t.Run("items fail alone", func(t *testing.T) {
		res, err := v.Verify(deliveryRequest(sign(verifytest.SendGridEvent("ZXYtYQ", msg, "processed", at), `{"email":"x","event":"open"}`, `7`)))
		if err != nil || len(res.Events) != 1 || len(res.Rejected) != 2 {
			t.Fatalf("got %+v %v", res, err)
		}
		if e := requireCode(t, res.Rejected[0].Err, verify.CodeMissingField, "/1/sg_event_id"); res.Rejected[0].Index != 1 || !e.Authenticated {
			t.Fatalf("rejected %+v", res.Rejected[0])
		}
		var e *verify.Error
		if !errors.As(res.Rejected[1].Err, &e) || e.Field != "/2" {
			t.Fatalf("rejected %+v", res.Rejected[1].Err)
		}
		requireRefused(t, v, sign(`{"event":"open"}`), verify.CodeMissingField, verify.InBody, "/0/sg_event_id")
		requireRefused(t, v, sign(), verify.CodeMalformedBody, verify.InBody, "")
		requireRefused(t, byMsg, sign(`{"event":"open","timestamp":1}`), verify.CodeMissingField, verify.InBody, "/0/sg_message_id")
		only := mustBuild(t, verify.TypeSendGrid, verify.Core{AllowedEventTypes: []string{"bounce"}, Now: fixedClock(now)}, opts)
		requireRefused(t, only, sign(verifytest.SendGridEvent("ZXYtYQ", msg, "processed", at)), verify.CodeEventTypeNotAllowed, verify.InBody, "/0/event")
	})

	t.Run("headers", func(t *testing.T) {
		good := sign(verifytest.SendGridEvent("ZXYtYQ", msg, "processed", at))
		for _, h := range []string{verify.SendGridSignatureHeader, verify.SendGridTimestampHeader} {
			d := sign(verifytest.SendGridEvent("ZXYtYQ", msg, "processed", at))
			d.Header.Del(h)
			requireRefused(t, v, d, verify.CodeMissingHeader, verify.InHeader, h)
		}
		d := good
		d.Header = good.Header.Clone()
		d.Header.Set(verify.SendGridSignatureHeader, "not base64!")
		requireRefused(t, v, d, verify.CodeMalformedHeader, verify.InHeader, verify.SendGridSignatureHeader)
		d.Header = good.Header.Clone()
		d.Header.Set(verify.SendGridTimestampHeader, "-5")
		requireRefused(t, v, d, verify.CodeMalformedHeader, verify.InHeader, verify.SendGridTimestampHeader)
	})

	t.Run("wrong key, rotation, window", func(t *testing.T) {
		other := verifytest.NewSendGridKey()
		d := verifytest.SendGridDelivery(other, now, verifytest.SendGridBody(verifytest.SendGridEvent("ZXYtYQ", msg, "processed", at)))
		requireRefused(t, v, d, verify.CodeBadSignature, verify.InHeader, verify.SendGridSignatureHeader)
		both := mustBuild(t, verify.TypeSendGrid, verify.Core{Now: fixedClock(now)}, map[string]any{"public_keys": []string{verifytest.SendGridPublicKey(other), pub}})
		verifyEvents(t, both, d)
		verifyEvents(t, both, sign(verifytest.SendGridEvent("ZXYtYQ", msg, "processed", at)))
		old := verifytest.SendGridDelivery(verifytest.SendGridKey, now.Add(-10*time.Minute), verifytest.SendGridBody(verifytest.SendGridEvent("ZXYtYQ", msg, "processed", at)))
		requireRefused(t, v, old, verify.CodeTimestampOutsideTolerance, verify.InHeader, verify.SendGridTimestampHeader)
	})

	t.Run("config", func(t *testing.T) {
		_, err := tryBuild(t, verify.TypeSendGrid, verify.Core{}, nil)
		requireConfigField(t, err, "PublicKeys")
		_, err = tryBuild(t, verify.TypeSendGrid, verify.Core{}, map[string]any{"public_keys": []string{"bm90IGEga2V5"}})
		requireConfigField(t, err, "PublicKeys[0]")
		_, err = tryBuild(t, verify.TypeSendGrid, verify.Core{}, map[string]any{"public_keys": []string{pub}, "key": "email"})
		requireConfigField(t, err, "Key")
		_, err = tryBuild(t, verify.TypeSendGrid, verify.Core{Secrets: []string{"s"}}, opts)
		requireConfigField(t, err, "Secrets")
		pem := "-----BEGIN PUBLIC KEY-----\n" + pub + "\n-----END PUBLIC KEY-----\n"
		mustBuild(t, verify.TypeSendGrid, verify.Core{}, map[string]any{"public_keys": []string{pem}})
	})
}
