package verify_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// ClickUp's signature page shows a request but a shortened signature, so
// this vector was computed independently (Python's hmac module) from
// https://developer.clickup.com/docs/webhooksignature: the hex HMAC-SHA256
// of that page's example body under a webhook secret.
func TestClickUpVector(t *testing.T) {
	t.Parallel()
	body := []byte(`{"webhook_id":"7689a169-a000-4985-8676-6902b96d6627","event":"taskCreated","task_id":"c0j"}`)
	v := mustBuild(t, verify.TypeClickUp, verify.Core{Secrets: []string{verifytest.ClickUpSecret}}, nil)
	h := http.Header{}
	h.Set(verify.ClickUpSignatureHeader, "57dc30578a1b62e7ccccabf660de6397725dcd282b8119e98d8d83ed3529ed5b")
	evs := verifyEvents(t, v, verifytest.Delivery{Header: h, Body: body})
	if len(evs) != 1 || !strings.HasPrefix(evs[0].ID, verify.JoinKey("7689a169-a000-4985-8676-6902b96d6627", "taskCreated")+"|71:sha256:") ||
		evs[0].Type != "taskCreated" || evs[0].ObjectID != "c0j" || evs[0].Scope != "7689a169-a000-4985-8676-6902b96d6627" {
		t.Fatalf("got %+v", evs)
	}
}

func TestClickUp(t *testing.T) {
	t.Parallel()
	v := mustBuild(t, verify.TypeClickUp, verify.Core{Secrets: []string{verifytest.ClickUpSecret}}, nil)
	body := verifytest.ClickUpTaskEvent("taskUpdated", "t1", "h1", "name")
	good := func() verifytest.Delivery { return verifytest.ClickUpDelivery(verifytest.ClickUpSecret, body) }

	t.Run("fixture", func(t *testing.T) { replayFixture(t, "clickup") })

	t.Run("signature", func(t *testing.T) {
		d := good()
		d.Header.Del(verify.ClickUpSignatureHeader)
		requireRefused(t, v, d, verify.CodeMissingHeader, verify.InHeader, verify.ClickUpSignatureHeader)
		for _, bad := range []string{"sha256=57dc30578a1b62e7ccccabf660de6397725dcd282b8119e98d8d83ed3529ed5b", "f7bc83f430538424b13298e6aa6"} {
			d = good()
			d.Header.Set(verify.ClickUpSignatureHeader, bad)
			requireRefused(t, v, d, verify.CodeMalformedHeader, verify.InHeader, verify.ClickUpSignatureHeader)
		}
		other := verifytest.ClickUpDelivery("SECOND-WEBHOOK-SECRET", body)
		requireRefused(t, v, other, verify.CodeBadSignature, verify.InHeader, verify.ClickUpSignatureHeader)
		rot := mustBuild(t, verify.TypeClickUp, verify.Core{Secrets: []string{"SECOND-WEBHOOK-SECRET", verifytest.ClickUpSecret}}, nil)
		verifyEvents(t, rot, other)
		verifyEvents(t, rot, good())
	})

	t.Run("key rule", func(t *testing.T) {
		a := verifyEvents(t, v, good())[0]
		if a.ID != verify.JoinKey("7fa3ec74-69a8-4530-a251-8a13730bd204", "taskUpdated", "h1") || a.ObjectID != "t1" {
			t.Fatalf("got %+v", a)
		}
		again := verifyEvents(t, v, good())[0]
		next := verifyEvents(t, v, verifytest.ClickUpDelivery(verifytest.ClickUpSecret, verifytest.ClickUpTaskEvent("taskUpdated", "t1", "h2", "name")))[0]
		if again.ID != a.ID || next.ID == a.ID {
			t.Fatalf("again %q next %q first %q", again.ID, next.ID, a.ID)
		}
		two := []byte(`{"event":"taskUpdated","history_items":[{"id":"h1"},{"id":"h2"}],"task_id":"t1","webhook_id":"w"}`)
		if got := verifyEvents(t, v, verifytest.ClickUpDelivery(verifytest.ClickUpSecret, two))[0].ID; got != verify.JoinKey("w", "taskUpdated", "h1", "h2") {
			t.Fatalf("got %q", got)
		}
		list := []byte(`{"event":"listUpdated","list_id":"162641285","webhook_id":"w"}`)
		l1 := verifyEvents(t, v, verifytest.ClickUpDelivery(verifytest.ClickUpSecret, list))[0]
		l2 := verifyEvents(t, v, verifytest.ClickUpDelivery(verifytest.ClickUpSecret, []byte(`{"event":"listUpdated","list_id":"162641286","webhook_id":"w"}`)))[0]
		if l1.ID == l2.ID || l1.ObjectID != "162641285" {
			t.Fatalf("l1 %+v l2 %+v", l1, l2)
		}
	})

	t.Run("body", func(t *testing.T) {
		for _, c := range []struct{ body, field string }{
			{`{"event":"taskCreated"}`, "/webhook_id"},
			{`{"webhook_id":"w"}`, "/event"},
			{`{"webhook_id":"w","event":"taskCreated","history_items":[{"type":1}]}`, "/history_items/0/id"},
		} {
			if e := requireRefused(t, v, verifytest.ClickUpDelivery(verifytest.ClickUpSecret, []byte(c.body)), verify.CodeMissingField, verify.InBody, c.field); !e.Authenticated {
				t.Errorf("%s: not authenticated", c.body)
			}
		}
		only := mustBuild(t, verify.TypeClickUp, verify.Core{Secrets: []string{verifytest.ClickUpSecret}, AllowedEventTypes: []string{"taskCreated"}}, nil)
		requireRefused(t, only, good(), verify.CodeEventTypeNotAllowed, verify.InBody, "/event")
	})
}
