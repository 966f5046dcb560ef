package verify_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Intercom publishes no example signature, so this vector was computed
// independently (Python's hmac module) from
// https://developers.intercom.com/intercom-api-reference/v1.0/reference/signed-notifications:
// "sha1=" and the hex HMAC-SHA1 of the body under the client secret.
func TestIntercomVector(t *testing.T) {
	t.Parallel()
	body := []byte(`{"type":"notification_event","app_id":"abc123de","id":"notif_1","topic":"ping","data":{"item":{"type":"ping","message":"something"}}}`)
	v := mustBuild(t, verify.TypeIntercom, verify.Core{Secrets: []string{verifytest.IntercomSecret}}, nil)
	h := http.Header{}
	h.Set(verify.IntercomSignatureHeader, "sha1=4c1bfa2eea932193e7aa859dc6e9ed968bc5a874")
	evs := verifyEvents(t, v, verifytest.Delivery{Header: h, Body: body})
	if len(evs) != 1 || evs[0].ID != "notif_1" || evs[0].Type != "ping" || evs[0].Scope != "abc123de" {
		t.Fatalf("got %+v", evs)
	}
}

func TestIntercom(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	v := mustBuild(t, verify.TypeIntercom, verify.Core{Secrets: []string{verifytest.IntercomSecret}}, nil)
	body := verifytest.IntercomNotification("notif_a", "conversation.user.created", "42", 1, now)
	good := func() verifytest.Delivery { return verifytest.IntercomDelivery(verifytest.IntercomSecret, body) }

	t.Run("fixture", func(t *testing.T) { replayFixture(t, "intercom") })

	t.Run("headers", func(t *testing.T) {
		d := good()
		d.Header.Del(verify.IntercomSignatureHeader)
		requireRefused(t, v, d, verify.CodeMissingHeader, verify.InHeader, verify.IntercomSignatureHeader)
		for _, bad := range []string{"sha256=4c1bfa2eea932193e7aa859dc6e9ed968bc5a874", "4c1bfa2eea932193e7aa859dc6e9ed968bc5a874", "sha1=4c1b", "sha1=zc1bfa2eea932193e7aa859dc6e9ed968bc5a874"} {
			d = good()
			d.Header.Set(verify.IntercomSignatureHeader, bad)
			requireRefused(t, v, d, verify.CodeMalformedHeader, verify.InHeader, verify.IntercomSignatureHeader)
		}
	})

	t.Run("wrong secret and rotation", func(t *testing.T) {
		other := verifytest.IntercomDelivery("the-next-client-secret", body)
		requireRefused(t, v, other, verify.CodeBadSignature, verify.InHeader, verify.IntercomSignatureHeader)
		rot := mustBuild(t, verify.TypeIntercom, verify.Core{Secrets: []string{"the-next-client-secret", verifytest.IntercomSecret}}, nil)
		verifyEvents(t, rot, other)
		verifyEvents(t, rot, good())
	})

	t.Run("key rule", func(t *testing.T) {
		a := verifyEvents(t, v, good())[0]
		if a.ID != "notif_a" || a.Type != "conversation.user.created" || a.ObjectID != "42" {
			t.Fatalf("got %+v", a)
		}
		retry := verifyEvents(t, v, verifytest.IntercomDelivery(verifytest.IntercomSecret, verifytest.IntercomNotification("notif_a", "conversation.user.created", "42", 2, now)))[0]
		other := verifyEvents(t, v, verifytest.IntercomDelivery(verifytest.IntercomSecret, verifytest.IntercomNotification("notif_b", "conversation.user.created", "42", 1, now)))[0]
		if retry.ID != a.ID || other.ID == a.ID {
			t.Fatalf("retry %q, other %q, first %q", retry.ID, other.ID, a.ID)
		}
		p, _ := verify.Lookup(verify.TypeIntercom)
		if len(p.VolatileFields) == 0 || p.VolatileFields[0] != "/delivery_attempts" {
			t.Fatalf("volatile fields %v", p.VolatileFields)
		}
	})

	t.Run("body", func(t *testing.T) {
		e := requireRefused(t, v, verifytest.IntercomDelivery(verifytest.IntercomSecret, []byte(`{"topic":"ping"}`)), verify.CodeMissingField, verify.InBody, "/id")
		if !e.Authenticated {
			t.Error("a signed body without id is authenticated")
		}
		requireRefused(t, v, verifytest.IntercomDelivery(verifytest.IntercomSecret, []byte(`{"id":"notif_1"}`)), verify.CodeMissingField, verify.InBody, "/topic")
		requireRefused(t, v, verifytest.IntercomDelivery(verifytest.IntercomSecret, []byte(`not json`)), verify.CodeMalformedBody, verify.InBody, "")
		only := mustBuild(t, verify.TypeIntercom, verify.Core{Secrets: []string{verifytest.IntercomSecret}, AllowedEventTypes: []string{"contact.*"}}, nil)
		requireRefused(t, only, good(), verify.CodeEventTypeNotAllowed, verify.InBody, "/topic")
	})
}
