package verify_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Cal.com publishes no example signature, so this vector was computed
// independently (Python's hmac module) from
// https://cal.com/docs/developing/guides/automation/webhooks:
// the hex HMAC-SHA256 of the body under the webhook secret.
func TestCalcomVector(t *testing.T) {
	t.Parallel()
	body := []byte(`{"triggerEvent":"BOOKING_CREATED","createdAt":"2023-05-24T09:30:00.538Z","payload":{"type":"60min","uid":"bFJeNb2uX8ANpT3JL5EfXw","bookingId":91}}`)
	v := mustBuild(t, verify.TypeCalcom, verify.Core{Secrets: []string{verifytest.CalcomSecret}}, nil)
	h := http.Header{}
	h.Set(verify.CalcomSignatureHeader, "b764c7ce38d89513428d68cc73c61df337edb72c0c7a3fca2f1c0d0259c76f32")
	evs := verifyEvents(t, v, verifytest.Delivery{Header: h, Body: body})
	if len(evs) != 1 || evs[0].ID != verify.JoinKey("BOOKING_CREATED", "bFJeNb2uX8ANpT3JL5EfXw", "2023-05-24T09:30:00.538Z") ||
		evs[0].Type != "BOOKING_CREATED" || evs[0].ObjectID != "bFJeNb2uX8ANpT3JL5EfXw" {
		t.Fatalf("got %+v", evs)
	}
}

func TestCalcom(t *testing.T) {
	t.Parallel()
	v := mustBuild(t, verify.TypeCalcom, verify.Core{Secrets: []string{verifytest.CalcomSecret}}, nil)
	body := verifytest.CalcomBooking("BOOKING_CREATED", "u1", "2026-03-01T11:00:00.000Z")
	good := func() verifytest.Delivery { return verifytest.CalcomDelivery(verifytest.CalcomSecret, body) }

	t.Run("fixture", func(t *testing.T) { replayFixture(t, "calcom") })

	t.Run("signature", func(t *testing.T) {
		d := good()
		d.Header.Del(verify.CalcomSignatureHeader)
		requireRefused(t, v, d, verify.CodeMissingHeader, verify.InHeader, verify.CalcomSignatureHeader)
		for _, bad := range []string{"no-secret-provided", "sha256=b764c7ce38d89513428d68cc73c61df337edb72c0c7a3fca2f1c0d0259c76f32", "b764"} {
			d = good()
			d.Header.Set(verify.CalcomSignatureHeader, bad)
			requireRefused(t, v, d, verify.CodeMalformedHeader, verify.InHeader, verify.CalcomSignatureHeader)
		}
		other := verifytest.CalcomDelivery("the-next-secret", body)
		requireRefused(t, v, other, verify.CodeBadSignature, verify.InHeader, verify.CalcomSignatureHeader)
		rot := mustBuild(t, verify.TypeCalcom, verify.Core{Secrets: []string{"the-next-secret", verifytest.CalcomSecret}}, nil)
		verifyEvents(t, rot, other)
		verifyEvents(t, rot, good())
	})

	t.Run("key rule", func(t *testing.T) {
		a := verifyEvents(t, v, good())[0]
		again := verifyEvents(t, v, good())[0]
		cancelled := verifyEvents(t, v, verifytest.CalcomDelivery(verifytest.CalcomSecret, verifytest.CalcomBooking("BOOKING_CANCELLED", "u1", "2026-03-01T11:05:00.000Z")))[0]
		if again.ID != a.ID || cancelled.ID == a.ID || cancelled.ObjectID != "u1" {
			t.Fatalf("a %+v again %+v cancelled %+v", a, again, cancelled)
		}
		byID := verifyEvents(t, v, verifytest.CalcomDelivery(verifytest.CalcomSecret, []byte(`{"triggerEvent":"MEETING_ENDED","createdAt":"x","payload":{"bookingId":7}}`)))[0]
		if byID.ID != verify.JoinKey("MEETING_ENDED", "booking:7", "x") {
			t.Fatalf("got %q", byID.ID)
		}
		form := verifyEvents(t, v, verifytest.CalcomDelivery(verifytest.CalcomSecret, []byte(`{"triggerEvent":"FORM_SUBMITTED","createdAt":"x","payload":{"formId":"f","responses":{}}}`)))[0]
		if !strings.Contains(form.ID, "sha256:") || form.Digest {
			t.Fatalf("got %+v", form)
		}
		custom := verifyEvents(t, v, verifytest.CalcomDelivery(verifytest.CalcomSecret, []byte(`{"content":"A booking was made"}`)))[0]
		text := verifyEvents(t, v, verifytest.CalcomDelivery(verifytest.CalcomSecret, []byte(`A booking was made`)))[0]
		if !custom.Digest || !strings.HasPrefix(custom.ID, "sha256:") || custom.Type != "" || text.ID == custom.ID {
			t.Fatalf("custom %+v text %+v", custom, text)
		}
		e := requireRefused(t, v, verifytest.CalcomDelivery(verifytest.CalcomSecret, []byte(`{"triggerEvent":"PING","payload":{}}`)), verify.CodeMissingField, verify.InBody, "/createdAt")
		if !e.Authenticated {
			t.Error("not authenticated")
		}
		only := mustBuild(t, verify.TypeCalcom, verify.Core{Secrets: []string{verifytest.CalcomSecret}, AllowedEventTypes: []string{"BOOKING_CANCELLED"}}, nil)
		requireRefused(t, only, good(), verify.CodeEventTypeNotAllowed, verify.InBody, "/triggerEvent")
		requireRefused(t, only, verifytest.CalcomDelivery(verifytest.CalcomSecret, []byte(`plain`)), verify.CodeEventTypeNotAllowed, verify.InBody, "/triggerEvent")
	})
}
