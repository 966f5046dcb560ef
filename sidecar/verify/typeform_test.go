package verify_test

import (
	"net/http"
	"testing"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Typeform publishes no example signature, so this vector was computed
// independently (Python's hmac and base64 modules) from
// https://www.typeform.com/developers/webhooks/secure-your-webhooks/:
// "sha256=" and the base64 HMAC-SHA256 of the body.
func TestTypeformVector(t *testing.T) {
	t.Parallel()
	body := []byte(`{"event_id":"LtWXD3crgy","event_type":"form_response","form_response":{"form_id":"lT4Z3j","token":"a3a12ec67a1365927098a606107fac15"}}`)
	v := mustBuild(t, verify.TypeTypeform, verify.Core{Secrets: []string{verifytest.TypeformSecret}}, nil)
	h := http.Header{}
	h.Set(verify.TypeformSignatureHeader, "sha256=ahwwT/RxQT2y7wVrx/7Rd9uPRyGL7JAKHTEVS+uKby0=")
	evs := verifyEvents(t, v, verifytest.Delivery{Header: h, Body: body})
	if len(evs) != 1 || evs[0].ID != "LtWXD3crgy" || evs[0].Type != "form_response" || evs[0].Scope != "lT4Z3j" || evs[0].ObjectID != "a3a12ec67a1365927098a606107fac15" {
		t.Fatalf("got %+v", evs)
	}
}

func TestTypeform(t *testing.T) {
	t.Parallel()
	v := mustBuild(t, verify.TypeTypeform, verify.Core{Secrets: []string{verifytest.TypeformSecret}}, nil)
	body := verifytest.TypeformResponse("ev-1", "tok-1", "Laura")
	good := func() verifytest.Delivery { return verifytest.TypeformDelivery(verifytest.TypeformSecret, body) }

	t.Run("fixture", func(t *testing.T) { replayFixture(t, "typeform") })

	t.Run("signature", func(t *testing.T) {
		d := good()
		d.Header.Del(verify.TypeformSignatureHeader)
		requireRefused(t, v, d, verify.CodeMissingHeader, verify.InHeader, verify.TypeformSignatureHeader)
		for _, bad := range []string{
			"ahwwT/RxQT2y7wVrx/7Rd9uPRyGL7JAKHTEVS+uKby0=",
			"sha256=6a1c304ff471413db2ef056bc7fed17ddb8f47218bec900a1d31154be2b86f2d", // hex, not base64
			"sha256=ahwwT/RxQT2y7wVrx/7Rd9uPRyGL7JAKHTEVS+uKby0",
		} {
			d = good()
			d.Header.Set(verify.TypeformSignatureHeader, bad)
			requireRefused(t, v, d, verify.CodeMalformedHeader, verify.InHeader, verify.TypeformSignatureHeader)
		}
		other := verifytest.TypeformDelivery("the-new-secret", body)
		requireRefused(t, v, other, verify.CodeBadSignature, verify.InHeader, verify.TypeformSignatureHeader)
		rot := mustBuild(t, verify.TypeTypeform, verify.Core{Secrets: []string{"the-new-secret", verifytest.TypeformSecret}}, nil)
		verifyEvents(t, rot, other)
		verifyEvents(t, rot, good())
	})

	t.Run("key rule", func(t *testing.T) {
		a := verifyEvents(t, v, good())[0]
		again := verifyEvents(t, v, good())[0]
		next := verifyEvents(t, v, verifytest.TypeformDelivery(verifytest.TypeformSecret, verifytest.TypeformResponse("ev-2", "tok-2", "Laura")))[0]
		if a.ID != "ev-1" || again.ID != a.ID || next.ID == a.ID {
			t.Fatalf("a %q again %q next %q", a.ID, again.ID, next.ID)
		}
		e := requireRefused(t, v, verifytest.TypeformDelivery(verifytest.TypeformSecret, []byte(`{"event_type":"form_response"}`)), verify.CodeMissingField, verify.InBody, "/event_id")
		if !e.Authenticated {
			t.Error("not authenticated")
		}
		only := mustBuild(t, verify.TypeTypeform, verify.Core{Secrets: []string{verifytest.TypeformSecret}, AllowedEventTypes: []string{"form_partial*"}}, nil)
		requireRefused(t, only, good(), verify.CodeEventTypeNotAllowed, verify.InBody, "/event_type")
	})
}
