package verify_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Zendesk publishes no example signature, so this vector was computed
// independently (Python's hmac module) from
// https://developer.zendesk.com/documentation/webhooks/verifying/:
// base64(HMAC-SHA256(secret, timestamp + body)). The body is a trigger
// webhook's custom JSON, which carries no type.
func TestZendeskVector(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	v := mustBuild(t, verify.TypeZendesk, verify.Core{Secrets: []string{verifytest.ZendeskSecret}, Now: fixedClock(at)}, nil)
	h := http.Header{}
	h.Set(verify.ZendeskSignatureHeader, "pGs6DZ/dFO9Xzf+agUFIVi4r9kG24yskuxQmv/VsIw4=")
	h.Set(verify.ZendeskTimestampHeader, "2026-03-01T12:00:00Z")
	h.Set(verify.ZendeskInvocationIDHeader, "5432")
	h.Set(verify.ZendeskWebhookIDHeader, "01GE5RV6JB6HFY6EBVGT7WZPVZ")
	evs := verifyEvents(t, v, verifytest.Delivery{Header: h, Body: []byte(`{"ticket_id":"35436","status":"Open"}`)})
	if len(evs) != 1 || evs[0].ID != verify.JoinKey("01GE5RV6JB6HFY6EBVGT7WZPVZ", "5432") || evs[0].Type != "" || !evs[0].Timestamp.Equal(at) {
		t.Fatalf("got %+v", evs)
	}
}

func TestZendesk(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	v := mustBuild(t, verify.TypeZendesk, verify.Core{Secrets: []string{verifytest.ZendeskSecret}, Now: fixedClock(now)}, nil)
	body := verifytest.ZendeskEvent("e-1", "zen:event-type:ticket.created", 7)
	good := func() verifytest.Delivery {
		return verifytest.ZendeskDelivery(verifytest.ZendeskSecret, "inv-1", now, body)
	}

	t.Run("fixture", func(t *testing.T) { replayFixture(t, "zendesk") })

	t.Run("headers", func(t *testing.T) {
		for _, h := range []string{verify.ZendeskSignatureHeader, verify.ZendeskTimestampHeader} {
			d := good()
			d.Header.Del(h)
			requireRefused(t, v, d, verify.CodeMissingHeader, verify.InHeader, h)
		}
		for _, h := range []string{verify.ZendeskInvocationIDHeader, verify.ZendeskWebhookIDHeader} {
			d := good()
			d.Header.Del(h)
			if e := requireRefused(t, v, d, verify.CodeMissingHeader, verify.InHeader, h); !e.Authenticated {
				t.Errorf("a signed request without %s is authenticated", h)
			}
		}
		for _, bad := range []string{"sha256=abc", "pGs6DZ/dFO9Xzf+agUFIVi4r9kG24yskuxQmv/VsIw4", "a5a1f9e3c0"} {
			d := good()
			d.Header.Set(verify.ZendeskSignatureHeader, bad)
			requireRefused(t, v, d, verify.CodeMalformedHeader, verify.InHeader, verify.ZendeskSignatureHeader)
		}
		d := good()
		d.Header.Set(verify.ZendeskTimestampHeader, "1772366400")
		requireRefused(t, v, d, verify.CodeMalformedHeader, verify.InHeader, verify.ZendeskTimestampHeader)
	})

	t.Run("wrong secret, rotation, timestamp signed", func(t *testing.T) {
		other := verifytest.ZendeskDelivery("the-reset-signing-secret", "inv-1", now, body)
		requireRefused(t, v, other, verify.CodeBadSignature, verify.InHeader, verify.ZendeskSignatureHeader)
		rot := mustBuild(t, verify.TypeZendesk, verify.Core{Secrets: []string{"the-reset-signing-secret", verifytest.ZendeskSecret}, Now: fixedClock(now)}, nil)
		verifyEvents(t, rot, other)
		verifyEvents(t, rot, good())
		d := good()
		d.Header.Set(verify.ZendeskTimestampHeader, "2026-03-01T12:00:01Z")
		requireRefused(t, v, d, verify.CodeBadSignature, verify.InHeader, verify.ZendeskSignatureHeader)
	})

	t.Run("tolerance", func(t *testing.T) {
		old := verifytest.ZendeskDelivery(verifytest.ZendeskSecret, "inv-1", now.Add(-301*time.Second), body)
		requireRefused(t, v, old, verify.CodeTimestampOutsideTolerance, verify.InHeader, verify.ZendeskTimestampHeader)
		future := verifytest.ZendeskDelivery(verifytest.ZendeskSecret, "inv-1", now.Add(301*time.Second), body)
		requireRefused(t, v, future, verify.CodeTimestampOutsideTolerance, verify.InHeader, verify.ZendeskTimestampHeader)
		wide := mustBuild(t, verify.TypeZendesk, verify.Core{Secrets: []string{verifytest.ZendeskSecret}, Tolerance: time.Hour, Now: fixedClock(now)}, nil)
		verifyEvents(t, wide, old)
	})

	t.Run("key rule and type", func(t *testing.T) {
		a := verifyEvents(t, v, good())[0]
		if a.ID != verify.JoinKey("01GE5RV6JB6HFY6EBVGT7WZPVZ", "inv-1") || a.Type != "zen:event-type:ticket.created" || a.ObjectID != "zen:ticket:7" || a.Scope != "12514403" {
			t.Fatalf("got %+v", a)
		}
		retry := verifyEvents(t, v, verifytest.ZendeskDelivery(verifytest.ZendeskSecret, "inv-1", now.Add(-time.Minute), body))[0]
		next := verifyEvents(t, v, verifytest.ZendeskDelivery(verifytest.ZendeskSecret, "inv-2", now, body))[0]
		if retry.ID != a.ID || next.ID == a.ID {
			t.Fatalf("retry %q next %q first %q", retry.ID, next.ID, a.ID)
		}
		xml := verifyEvents(t, v, verifytest.ZendeskDelivery(verifytest.ZendeskSecret, "inv-3", now, []byte(`<ticket><id>7</id></ticket>`)))[0]
		if xml.ID != verify.JoinKey("01GE5RV6JB6HFY6EBVGT7WZPVZ", "inv-3") || xml.Type != "" {
			t.Fatalf("got %+v", xml)
		}
		only := mustBuild(t, verify.TypeZendesk, verify.Core{Secrets: []string{verifytest.ZendeskSecret}, AllowedEventTypes: []string{"zen:event-type:user.*"}, Now: fixedClock(now)}, nil)
		requireRefused(t, only, good(), verify.CodeEventTypeNotAllowed, verify.InBody, "/type")
	})
}
