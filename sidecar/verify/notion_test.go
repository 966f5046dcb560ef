package verify_test

import (
	"net/http"
	"testing"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Notion publishes no example signature, so this vector was computed
// independently (Python's hmac module) from
// https://developers.notion.com/reference/webhooks:
// "sha256=" and the hex HMAC-SHA256 of the body keyed with the
// verification token.
func TestNotionVector(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"367cba44-b6f3-4c92-81e7-6a2e9659efd4","timestamp":"2024-12-05T23:55:34.285Z","workspace_id":"13950b26-c203-4f3b-b97d-93ec06319565","type":"page.created","entity":{"id":"153104cd-477e-809d-8dc4-ff2d96ae3090","type":"page"},"attempt_number":1}`)
	v := mustBuild(t, verify.TypeNotion, verify.Core{Secrets: []string{verifytest.NotionToken}}, nil)
	h := http.Header{}
	h.Set(verify.NotionSignatureHeader, "sha256=088d6783358d95b12ff1756a9c03fe5709f764237c1139de61f1998316f1f201")
	evs := verifyEvents(t, v, verifytest.Delivery{Header: h, Body: body})
	if len(evs) != 1 || evs[0].ID != "367cba44-b6f3-4c92-81e7-6a2e9659efd4" || evs[0].Type != "page.created" ||
		evs[0].Scope != "13950b26-c203-4f3b-b97d-93ec06319565" || evs[0].ObjectID != "153104cd-477e-809d-8dc4-ff2d96ae3090" {
		t.Fatalf("got %+v", evs)
	}
}

func TestNotion(t *testing.T) {
	t.Parallel()
	v := mustBuild(t, verify.TypeNotion, verify.Core{Secrets: []string{verifytest.NotionToken}}, nil)
	body := verifytest.NotionEvent("e-1", "comment.created", "p-1", 1)
	good := func() verifytest.Delivery { return verifytest.NotionDelivery(verifytest.NotionToken, body) }

	t.Run("fixture", func(t *testing.T) { replayFixture(t, "notion") })

	t.Run("verification request", func(t *testing.T) {
		unset := mustBuild(t, verify.TypeNotion, verify.Core{}, nil)
		for _, src := range []verify.Verifier{v, unset} {
			res, err := src.Verify(verify.Request{Body: []byte(`{"verification_token":"secret_x"}`)})
			if err != nil || !res.IsHandshake() || res.Handshake.Status != http.StatusOK || len(res.Handshake.Body) != 0 {
				t.Fatalf("got %+v, %v", res, err)
			}
		}
		// Anything else without a signature is refused.
		for _, b := range []string{`{}`, `{"verification_token":""}`, `{"verification_token":"x","type":"page.created"}`, `not json`} {
			requireRefused(t, v, verifytest.Delivery{Body: []byte(b)}, verify.CodeMissingHeader, verify.InHeader, verify.NotionSignatureHeader)
		}
		requireRefused(t, unset, good(), verify.CodeBadSignature, verify.InHeader, verify.NotionSignatureHeader)
	})

	t.Run("signature", func(t *testing.T) {
		for _, bad := range []string{"088d6783358d95b12ff1756a9c03fe5709f764237c1139de61f1998316f1f201", "sha256=088d", "sha1=088d6783358d95b12ff1756a9c03fe5709f764237c1139de61f1998316f1f201"} {
			d := good()
			d.Header.Set(verify.NotionSignatureHeader, bad)
			requireRefused(t, v, d, verify.CodeMalformedHeader, verify.InHeader, verify.NotionSignatureHeader)
		}
		other := verifytest.NotionDelivery("secret_another", body)
		requireRefused(t, v, other, verify.CodeBadSignature, verify.InHeader, verify.NotionSignatureHeader)
		rot := mustBuild(t, verify.TypeNotion, verify.Core{Secrets: []string{"secret_another", verifytest.NotionToken}}, nil)
		verifyEvents(t, rot, other)
		verifyEvents(t, rot, good())
	})

	t.Run("key rule", func(t *testing.T) {
		a := verifyEvents(t, v, good())[0]
		retry := verifyEvents(t, v, verifytest.NotionDelivery(verifytest.NotionToken, verifytest.NotionEvent("e-1", "comment.created", "p-1", 3)))[0]
		next := verifyEvents(t, v, verifytest.NotionDelivery(verifytest.NotionToken, verifytest.NotionEvent("e-2", "comment.created", "p-1", 1)))[0]
		if a.ID != "e-1" || retry.ID != a.ID || next.ID == a.ID {
			t.Fatalf("first %+v retry %+v next %+v", a, retry, next)
		}
		requireRefused(t, v, verifytest.NotionDelivery(verifytest.NotionToken, []byte(`{"type":"page.created"}`)), verify.CodeMissingField, verify.InBody, "/id")
		requireRefused(t, v, verifytest.NotionDelivery(verifytest.NotionToken, []byte(`{"id":"x"}`)), verify.CodeMissingField, verify.InBody, "/type")
		only := mustBuild(t, verify.TypeNotion, verify.Core{Secrets: []string{verifytest.NotionToken}, AllowedEventTypes: []string{"page.*"}}, nil)
		requireRefused(t, only, good(), verify.CodeEventTypeNotAllowed, verify.InBody, "/type")
	})
}
