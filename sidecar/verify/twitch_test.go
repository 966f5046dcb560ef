package verify_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Twitch publishes no signature vector with its secret, so this one was
// computed independently (Python's hmac module, from the algorithm at
// https://dev.twitch.tv/docs/eventsub/handling-webhook-events/#verifying-the-event-message):
// HMAC-SHA256(secret, message id + timestamp + body).
func TestTwitchVector(t *testing.T) {
	t.Parallel()
	const (
		id  = "befa7b53-d79d-478f-86b9-120f112b044e"
		ts  = "2023-07-15T18:16:11.171067130Z"
		sig = "sha256=ac49a9c5d5e510a592f9335a7a655357539dc7358de7a6b4b10d1d1b7453c212"
	)
	body := verifytest.TwitchFollow("1234")
	if got := verifytest.Twitch(verifytest.TwitchSecret, id, ts, body); got != sig {
		t.Fatalf("fixture signer: got %s, want %s", got, sig)
	}
	at, _ := time.Parse(time.RFC3339Nano, ts)
	v := mustBuild(t, verify.TypeTwitch, verify.Core{Secrets: []string{verifytest.TwitchSecret}, Now: fixedClock(at.Add(9 * time.Minute))}, nil)
	d := verifytest.TwitchDelivery(verifytest.TwitchSecret, id, "notification", at, 0, body)
	d.Header.Set(verify.TwitchMessageTimestampHeader, ts)
	d.Header.Set(verify.TwitchMessageSignatureHeader, sig)
	evs := verifyEvents(t, v, d)
	if len(evs) != 1 || evs[0].ID != id || evs[0].Type != "channel.follow" || evs[0].Scope != "1337" || !evs[0].Timestamp.Equal(at) {
		t.Fatalf("got %+v", evs)
	}
}

func TestTwitch(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	core := verify.Core{Secrets: []string{verifytest.TwitchSecret}, Now: fixedClock(now)}
	v := mustBuild(t, verify.TypeTwitch, core, nil)
	body := verifytest.TwitchFollow("1234")
	good := func() verifytest.Delivery {
		return verifytest.TwitchDelivery(verifytest.TwitchSecret, "m-1", "notification", now, 0, body)
	}

	t.Run("fixture", func(t *testing.T) { replayFixture(t, "twitch") })

	t.Run("missing and malformed headers", func(t *testing.T) {
		for _, h := range []string{verify.TwitchMessageIDHeader, verify.TwitchMessageTimestampHeader, verify.TwitchMessageSignatureHeader} {
			d := good()
			d.Header.Del(h)
			requireRefused(t, v, d, verify.CodeMissingHeader, verify.InHeader, h)
		}
		for _, bad := range []string{"sha1=00", "ac49a9c5", "sha256=zz49a9c5d5e510a592f9335a7a655357539dc7358de7a6b4b10d1d1b7453c212"} {
			d := good()
			d.Header.Set(verify.TwitchMessageSignatureHeader, bad)
			requireRefused(t, v, d, verify.CodeMalformedHeader, verify.InHeader, verify.TwitchMessageSignatureHeader)
		}
		d := good()
		d.Header.Set(verify.TwitchMessageTimestampHeader, "1700000000")
		requireRefused(t, v, d, verify.CodeMalformedHeader, verify.InHeader, verify.TwitchMessageTimestampHeader)
		d = good()
		d.Header.Del(verify.TwitchMessageTypeHeader)
		e := requireRefused(t, v, d, verify.CodeMissingHeader, verify.InHeader, verify.TwitchMessageTypeHeader)
		if !e.Authenticated {
			t.Error("a signed message without its type is authenticated")
		}
	})

	t.Run("wrong secret and rotation", func(t *testing.T) {
		d := verifytest.TwitchDelivery("another-secret-0123456789", "m-1", "notification", now, 0, body)
		requireRefused(t, v, d, verify.CodeBadSignature, verify.InHeader, verify.TwitchMessageSignatureHeader)
		rot := mustBuild(t, verify.TypeTwitch, verify.Core{Secrets: []string{"another-secret-0123456789", verifytest.TwitchSecret}, Now: fixedClock(now)}, nil)
		verifyEvents(t, rot, d)
		verifyEvents(t, rot, good())
		// The id and timestamp are signed: changing either breaks it.
		d = good()
		d.Header.Set(verify.TwitchMessageIDHeader, "m-2")
		requireRefused(t, v, d, verify.CodeBadSignature, verify.InHeader, verify.TwitchMessageSignatureHeader)
	})

	t.Run("ten minute window", func(t *testing.T) {
		ok := verifytest.TwitchDelivery(verifytest.TwitchSecret, "m-1", "notification", now.Add(-9*time.Minute), 0, body)
		verifyEvents(t, v, ok)
		old := verifytest.TwitchDelivery(verifytest.TwitchSecret, "m-1", "notification", now.Add(-11*time.Minute), 0, body)
		requireRefused(t, v, old, verify.CodeTimestampOutsideTolerance, verify.InHeader, verify.TwitchMessageTimestampHeader)
		future := verifytest.TwitchDelivery(verifytest.TwitchSecret, "m-1", "notification", now.Add(11*time.Minute), 0, body)
		requireRefused(t, v, future, verify.CodeTimestampOutsideTolerance, verify.InHeader, verify.TwitchMessageTimestampHeader)
		short := mustBuild(t, verify.TypeTwitch, verify.Core{Secrets: []string{verifytest.TwitchSecret}, Tolerance: time.Minute, Now: fixedClock(now)}, nil)
		requireRefused(t, short, ok, verify.CodeTimestampOutsideTolerance, verify.InHeader, verify.TwitchMessageTimestampHeader)
	})

	t.Run("key rule", func(t *testing.T) {
		a := verifyEvents(t, v, verifytest.TwitchDelivery(verifytest.TwitchSecret, "m-a", "notification", now, 0, body))
		b := verifyEvents(t, v, verifytest.TwitchDelivery(verifytest.TwitchSecret, "m-b", "notification", now, 0, body))
		retry := verifyEvents(t, v, verifytest.TwitchDelivery(verifytest.TwitchSecret, "m-a", "notification", now.Add(time.Minute), 3, body))
		if a[0].ID == b[0].ID || a[0].ID != retry[0].ID || a[0].ID != "m-a" {
			t.Fatalf("ids %q %q %q", a[0].ID, b[0].ID, retry[0].ID)
		}
	})

	t.Run("challenge", func(t *testing.T) {
		ch := []byte(`{"challenge":"<b>x</b>","subscription":{"id":"s","type":"channel.follow"}}`)
		res, err := v.Verify(deliveryRequest(verifytest.TwitchDelivery(verifytest.TwitchSecret, "m-c", "webhook_callback_verification", now, 0, ch)))
		if err != nil || !res.IsHandshake() {
			t.Fatalf("got %+v %v", res, err)
		}
		if res.Handshake.Status != http.StatusOK || string(res.Handshake.Body) != "<b>x</b>" || res.Handshake.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
			t.Fatalf("got %d %q %v", res.Handshake.Status, res.Handshake.Body, res.Handshake.Header)
		}
		// An unsigned challenge is refused like any message.
		d := verifytest.TwitchDelivery("another-secret-0123456789", "m-c", "webhook_callback_verification", now, 0, ch)
		requireRefused(t, v, d, verify.CodeBadSignature, verify.InHeader, verify.TwitchMessageSignatureHeader)
		// The type header is not signed: a notification relabelled as a
		// challenge, or a challenge relabelled as a notification, is refused.
		d = verifytest.TwitchDelivery(verifytest.TwitchSecret, "m-1", "webhook_callback_verification", now, 0, body)
		requireRefused(t, v, d, verify.CodeMissingField, verify.InBody, "/challenge")
		d = verifytest.TwitchDelivery(verifytest.TwitchSecret, "m-c", "notification", now, 0, ch)
		requireRefused(t, v, d, verify.CodeMalformedBody, verify.InBody, "/challenge")
	})

	t.Run("revocation", func(t *testing.T) {
		rev := []byte(`{"subscription":{"id":"f1c2a387","status":"authorization_revoked","type":"channel.follow","version":"2","condition":{"broadcaster_user_id":"1337"}}}`)
		evs := verifyEvents(t, v, verifytest.TwitchDelivery(verifytest.TwitchSecret, "m-r", "revocation", now, 0, rev))
		if evs[0].ID != "m-r" || evs[0].Type != "revocation" || evs[0].ObjectID != "f1c2a387" {
			t.Fatalf("got %+v", evs[0])
		}
	})

	t.Run("allowed event types", func(t *testing.T) {
		only := mustBuild(t, verify.TypeTwitch, verify.Core{Secrets: []string{verifytest.TwitchSecret}, AllowedEventTypes: []string{"stream.*"}, Now: fixedClock(now)}, nil)
		e := requireRefused(t, only, good(), verify.CodeEventTypeNotAllowed, verify.InBody, "/subscription/type")
		if !e.Authenticated {
			t.Error("not authenticated")
		}
	})

	t.Run("config", func(t *testing.T) {
		_, err := tryBuild(t, verify.TypeTwitch, verify.Core{}, nil)
		requireConfigField(t, err, "Secrets")
		_, err = tryBuild(t, verify.TypeTwitch, verify.Core{Secrets: []string{" x "}}, nil)
		requireConfigField(t, err, "Secrets[0]")
	})
}
