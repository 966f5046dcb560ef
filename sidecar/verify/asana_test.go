package verify_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Asana publishes no example signature, so this vector was computed
// independently (Python's hmac module) from
// https://developers.asana.com/docs/webhooks-guide: the hex
// HMAC-SHA256 of the body keyed with the X-Hook-Secret (the one of Asana's
// handshake example at https://developers.asana.com/reference/createwebhook).
func TestAsanaVector(t *testing.T) {
	t.Parallel()
	body := []byte(`{"events":[{"user":{"gid":"1516","resource_type":"user"},"created_at":"2026-03-01T11:58:00.001Z","action":"added","resource":{"gid":"1204","resource_type":"task"},"parent":{"gid":"1331","resource_type":"project"}}]}`)
	v := mustBuild(t, verify.TypeAsana, verify.Core{Secrets: []string{verifytest.AsanaSecret}}, nil)
	h := http.Header{}
	h.Set(verify.AsanaHookSignatureHeader, "eb9a6471571da59d81859a22ea8774ed8a5b2544b0fad855d5c174e1613fc10c")
	evs := verifyEvents(t, v, verifytest.Delivery{Header: h, Body: body})
	if len(evs) != 1 || !strings.HasPrefix(evs[0].ID, "sha256:") || !evs[0].Digest || evs[0].Type != "task.added" || evs[0].ObjectID != "1204" {
		t.Fatalf("got %+v", evs)
	}
}

func TestAsana(t *testing.T) {
	t.Parallel()
	v := mustBuild(t, verify.TypeAsana, verify.Core{Secrets: []string{verifytest.AsanaSecret}}, nil)
	e1 := verifytest.AsanaEvent("changed", "1", "name", "2026-03-01T11:58:00.001Z")
	e2 := verifytest.AsanaEvent("changed", "1", "notes", "2026-03-01T11:58:00.001Z")
	good := func() verifytest.Delivery {
		return verifytest.AsanaDelivery(verifytest.AsanaSecret, verifytest.AsanaEvents(e1))
	}

	t.Run("fixture", func(t *testing.T) { replayFixture(t, "asana") })

	t.Run("handshake", func(t *testing.T) {
		for _, src := range []verify.Verifier{v, mustBuild(t, verify.TypeAsana, verify.Core{}, nil)} {
			res, err := src.Verify(verify.Request{Header: verifytest.AsanaHandshake("abc123").Header})
			if err != nil || !res.IsHandshake() || res.Handshake.Status != http.StatusOK || res.Handshake.Header.Get(verify.AsanaHookSecretHeader) != "abc123" || len(res.Events) != 0 {
				t.Fatalf("got %+v, %v", res, err)
			}
		}
		for _, bad := range []string{"a b", "a\r\nSet-Cookie: x=1", strings.Repeat("a", 257), "é"} {
			h := http.Header{}
			h[verify.AsanaHookSecretHeader] = []string{bad}
			requireRefused(t, v, verifytest.Delivery{Header: h}, verify.CodeMalformedHeader, verify.InHeader, verify.AsanaHookSecretHeader)
		}
		requireRefused(t, v, verifytest.Delivery{Header: http.Header{}}, verify.CodeMissingHeader, verify.InHeader, verify.AsanaHookSignatureHeader)
	})

	t.Run("heartbeat stores nothing", func(t *testing.T) {
		res, err := v.Verify(verify.Request{Header: verifytest.AsanaDelivery(verifytest.AsanaSecret, []byte(`{"events":[]}`)).Header, Body: []byte(`{"events":[]}`)})
		if err != nil || !res.IsHandshake() || len(res.Events) != 0 {
			t.Fatalf("got %+v, %v", res, err)
		}
		d := verifytest.AsanaDelivery("another-secret", []byte(`{"events":[]}`))
		requireRefused(t, v, d, verify.CodeBadSignature, verify.InHeader, verify.AsanaHookSignatureHeader)
		// Before the secret is configured, a heartbeat (whatever its
		// signature) is answered so Asana keeps the webhook; nothing else is.
		unset := mustBuild(t, verify.TypeAsana, verify.Core{}, nil)
		res, err = unset.Verify(deliveryRequest(d))
		if err != nil || !res.IsHandshake() || len(res.Events) != 0 {
			t.Fatalf("got %+v, %v", res, err)
		}
		for _, b := range []string{`{"events":[],"x":1}`, `{"events":[{}]}`, `{}`} {
			requireRefused(t, unset, verifytest.AsanaDelivery("another-secret", []byte(b)), verify.CodeBadSignature, verify.InHeader, verify.AsanaHookSignatureHeader)
		}
	})

	t.Run("signature", func(t *testing.T) {
		for _, bad := range []string{"sha256=eb9a6471571da59d81859a22ea8774ed8a5b2544b0fad855d5c174e1613fc10c", "eb9a64", "zz9a6471571da59d81859a22ea8774ed8a5b2544b0fad855d5c174e1613fc10c"} {
			d := good()
			d.Header.Set(verify.AsanaHookSignatureHeader, bad)
			requireRefused(t, v, d, verify.CodeMalformedHeader, verify.InHeader, verify.AsanaHookSignatureHeader)
		}
		other := verifytest.AsanaDelivery("second-webhook-secret", verifytest.AsanaEvents(e1))
		requireRefused(t, v, other, verify.CodeBadSignature, verify.InHeader, verify.AsanaHookSignatureHeader)
		rot := mustBuild(t, verify.TypeAsana, verify.Core{Secrets: []string{"second-webhook-secret", verifytest.AsanaSecret}}, nil)
		verifyEvents(t, rot, other)
		verifyEvents(t, rot, good())
		unset := mustBuild(t, verify.TypeAsana, verify.Core{}, nil)
		requireRefused(t, unset, good(), verify.CodeBadSignature, verify.InHeader, verify.AsanaHookSignatureHeader)
	})

	t.Run("batch split and key rule", func(t *testing.T) {
		both := verifyEvents(t, v, verifytest.AsanaDelivery(verifytest.AsanaSecret, verifytest.AsanaEvents(e1, e2)))
		alone := verifyEvents(t, v, good())
		if len(both) != 2 || both[0].ID == both[1].ID || alone[0].ID != both[0].ID || string(both[1].Payload) != e2 {
			t.Fatalf("both %+v alone %+v", both, alone)
		}
		// Whitespace and member order do not change the event.
		spaced := `{ "action" : "changed", "user":{"gid":"1516","resource_type":"user"},"created_at":"2026-03-01T11:58:00.001Z","resource":{"resource_subtype":"default_task","gid":"1","resource_type":"task"},"parent":null,"change":{"field":"name","action":"changed"}}`
		if got := verifyEvents(t, v, verifytest.AsanaDelivery(verifytest.AsanaSecret, verifytest.AsanaEvents(spaced)))[0].ID; got != alone[0].ID {
			t.Fatalf("reformatted event: %q, want %q", got, alone[0].ID)
		}
	})

	t.Run("body", func(t *testing.T) {
		requireRefused(t, v, verifytest.AsanaDelivery(verifytest.AsanaSecret, []byte(`{}`)), verify.CodeMissingField, verify.InBody, "/events")
		res, err := v.Verify(deliveryRequest(verifytest.AsanaDelivery(verifytest.AsanaSecret, verifytest.AsanaEvents(`{"resource":{"gid":"1"}}`, e1))))
		if err != nil || len(res.Events) != 1 || len(res.Rejected) != 1 {
			t.Fatalf("got %+v, %v", res, err)
		}
		only := mustBuild(t, verify.TypeAsana, verify.Core{Secrets: []string{verifytest.AsanaSecret}, AllowedEventTypes: []string{"story.*"}}, nil)
		requireRefused(t, only, good(), verify.CodeEventTypeNotAllowed, verify.InBody, "/events/0/action")
	})
}
