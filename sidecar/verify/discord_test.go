package verify_test

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"testing"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Discord publishes no signed example, so this vector was computed
// independently: Python's cryptography package signed "1700000000" + the
// PING body with the private key of RFC 8032 §7.1 TEST 1
// (https://www.rfc-editor.org/rfc/rfc8032#section-7.1), whose public key
// is d75a98…511a.
func TestDiscordVector(t *testing.T) {
	t.Parallel()
	const (
		pub = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
		sig = "119ef392d1dc5e951de27717aa8f398173373324759c9b492fb4cba335211fb9e5e8763e7285fdfa1e5de9c0b264dee554709c3d26b5303edef48f308bf88709"
	)
	body := []byte(`{"application_id":"1100000000000000000","id":"1600000000000000000","token":"aW50ZXJhY3Rpb24","type":1,"user":{"id":"1500000000000000000"},"version":1}`)
	v := mustBuild(t, verify.TypeDiscord, verify.Core{Now: fixedClock(time.Unix(1700000100, 0))}, map[string]any{"public_keys": []string{pub}})
	d := verifytest.Delivery{Header: http.Header{verify.DiscordSignatureHeader: {sig}, verify.DiscordTimestampHeader: {"1700000000"}}, Body: body}
	res, err := v.Verify(deliveryRequest(d))
	if err != nil || !res.IsHandshake() {
		t.Fatalf("got %+v %v", res, err)
	}
	if res.Handshake.Status != http.StatusOK || string(res.Handshake.Body) != `{"type":1}` || res.Handshake.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("PONG: %d %q %v", res.Handshake.Status, res.Handshake.Body, res.Handshake.Header)
	}
	seed, _ := hex.DecodeString("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
	if got := verifytest.Discord(ed25519.NewKeyFromSeed(seed), "1700000000", body); got != sig {
		t.Fatalf("fixture signer: %s", got)
	}
}

func TestDiscord(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	pub := verifytest.DiscordPublicKey(verifytest.DiscordKey)
	opts := map[string]any{"public_keys": []string{pub}}
	v := mustBuild(t, verify.TypeDiscord, verify.Core{Now: fixedClock(now)}, opts)
	cmd := verifytest.DiscordCommand("1600000000000000001")

	t.Run("fixture", func(t *testing.T) { replayFixture(t, "discord") })
	t.Run("fixture events", func(t *testing.T) { replayFixture(t, "discord-events") })

	t.Run("event", func(t *testing.T) {
		evs := verifyEvents(t, v, verifytest.DiscordDelivery(verifytest.DiscordKey, now, cmd))
		if len(evs) != 1 || evs[0].ID != "1600000000000000001" || evs[0].Type != "APPLICATION_COMMAND" || evs[0].Scope != "1400000000000000000" || evs[0].ObjectID != "refund" {
			t.Fatalf("got %+v", evs)
		}
		other := verifyEvents(t, v, verifytest.DiscordDelivery(verifytest.DiscordKey, now, verifytest.DiscordCommand("1600000000000000002")))
		again := verifyEvents(t, v, verifytest.DiscordDelivery(verifytest.DiscordKey, now.Add(time.Second), cmd))
		if other[0].ID == evs[0].ID || again[0].ID != evs[0].ID {
			t.Fatal("key rule")
		}
	})

	t.Run("headers", func(t *testing.T) {
		for _, h := range []string{verify.DiscordSignatureHeader, verify.DiscordTimestampHeader} {
			d := verifytest.DiscordDelivery(verifytest.DiscordKey, now, cmd)
			d.Header.Del(h)
			requireRefused(t, v, d, verify.CodeMissingHeader, verify.InHeader, h)
		}
		d := verifytest.DiscordDelivery(verifytest.DiscordKey, now, cmd)
		d.Header.Set(verify.DiscordSignatureHeader, "abcd")
		requireRefused(t, v, d, verify.CodeMalformedHeader, verify.InHeader, verify.DiscordSignatureHeader)
		d = verifytest.DiscordDelivery(verifytest.DiscordKey, now, cmd)
		d.Header.Set(verify.DiscordTimestampHeader, "2026-03-01T12:00:00Z")
		requireRefused(t, v, d, verify.CodeMalformedHeader, verify.InHeader, verify.DiscordTimestampHeader)
	})

	t.Run("wrong key, rotation, tampering", func(t *testing.T) {
		_, other, _ := ed25519.GenerateKey(nil)
		d := verifytest.DiscordDelivery(other, now, cmd)
		requireRefused(t, v, d, verify.CodeBadSignature, verify.InHeader, verify.DiscordSignatureHeader)
		both := mustBuild(t, verify.TypeDiscord, verify.Core{Now: fixedClock(now)}, map[string]any{"public_keys": []string{verifytest.DiscordPublicKey(other), pub}})
		verifyEvents(t, both, d)
		verifyEvents(t, both, verifytest.DiscordDelivery(verifytest.DiscordKey, now, cmd))
		// The timestamp is signed.
		d = verifytest.DiscordDelivery(verifytest.DiscordKey, now, cmd)
		d.Header.Set(verify.DiscordTimestampHeader, "1772366401")
		requireRefused(t, v, d, verify.CodeBadSignature, verify.InHeader, verify.DiscordSignatureHeader)
	})

	t.Run("window", func(t *testing.T) {
		requireRefused(t, v, verifytest.DiscordDelivery(verifytest.DiscordKey, now.Add(-6*time.Minute), cmd), verify.CodeTimestampOutsideTolerance, verify.InHeader, verify.DiscordTimestampHeader)
		verifyEvents(t, v, verifytest.DiscordDelivery(verifytest.DiscordKey, now.Add(-4*time.Minute), cmd))
	})

	t.Run("body", func(t *testing.T) {
		requireRefused(t, v, verifytest.DiscordDelivery(verifytest.DiscordKey, now, []byte(`{"id":"1"}`)), verify.CodeMissingField, verify.InBody, "/type")
		requireRefused(t, v, verifytest.DiscordDelivery(verifytest.DiscordKey, now, []byte(`{"id":"1","type":99}`)), verify.CodeMalformedBody, verify.InBody, "/type")
		requireRefused(t, v, verifytest.DiscordDelivery(verifytest.DiscordKey, now, []byte(`{"type":2}`)), verify.CodeMissingField, verify.InBody, "/id")
		only := mustBuild(t, verify.TypeDiscord, verify.Core{AllowedEventTypes: []string{"MODAL_SUBMIT"}, Now: fixedClock(now)}, opts)
		requireRefused(t, only, verifytest.DiscordDelivery(verifytest.DiscordKey, now, cmd), verify.CodeEventTypeNotAllowed, verify.InBody, "/type")
	})

	t.Run("webhook events", func(t *testing.T) {
		ev := mustBuild(t, verify.TypeDiscordEvents, verify.Core{Now: fixedClock(now)}, opts)
		body := verifytest.DiscordWebhookEvent("APPLICATION_AUTHORIZED", "1", "2024-10-18T14:42:53.064834")
		got := verifyEvents(t, ev, verifytest.DiscordDelivery(verifytest.DiscordKey, now, body))
		sum := sha256.Sum256(body)
		if got[0].ID != "sha256:"+hex.EncodeToString(sum[:]) || !got[0].Digest || got[0].Type != "APPLICATION_AUTHORIZED" || got[0].Scope != "1100000000000000000" {
			t.Fatalf("got %+v", got[0])
		}
		res, err := ev.Verify(deliveryRequest(verifytest.DiscordDelivery(verifytest.DiscordKey, now, []byte(`{"version":1,"application_id":"1","type":0}`))))
		if err != nil || !res.IsHandshake() || res.Handshake.Status != http.StatusNoContent || len(res.Handshake.Body) != 0 {
			t.Fatalf("PING: %+v %v", res, err)
		}
		requireRefused(t, ev, verifytest.DiscordDelivery(verifytest.DiscordKey, now, []byte(`{"version":1,"type":1}`)), verify.CodeMissingField, verify.InBody, "/event/type")
		if p := mustProvider(t, verify.TypeDiscordEvents); p.AcceptedStatus != http.StatusNoContent {
			t.Fatalf("accepted status %d", p.AcceptedStatus)
		}
	})

	t.Run("config", func(t *testing.T) {
		_, err := tryBuild(t, verify.TypeDiscord, verify.Core{}, nil)
		requireConfigField(t, err, "PublicKeys")
		_, err = tryBuild(t, verify.TypeDiscord, verify.Core{}, map[string]any{"public_keys": []string{"zz"}})
		requireConfigField(t, err, "PublicKeys[0]")
		_, err = tryBuild(t, verify.TypeDiscord, verify.Core{Secrets: []string{"s"}}, opts)
		requireConfigField(t, err, "Secrets")
	})
}
