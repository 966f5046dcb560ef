package verify_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// PagerDuty's signature page shows the header layout with two v1 values
// (https://github.com/PagerDuty/developer-docs/blob/main/docs/webhooks/04-Signatures.md) but
// not the secret or body they were made from, so the vectors are computed
// here from the documented construction (hex HMAC-SHA256 of the body).

func pdSig(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "v1=" + hex.EncodeToString(m.Sum(nil))
}

func pdHeaders(sig string) http.Header {
	h := http.Header{}
	if sig != "" {
		h.Set("X-PagerDuty-Signature", sig)
	}
	h.Set("X-Webhook-Subscription", "PSUB")
	return h
}

func TestPagerDuty(t *testing.T) {
	v := pvBuild(t, verify.TypePagerDuty, verify.Core{Secrets: []string{"new"}}, nil)
	body := []byte(`{"event":{"id":"5ac64822-4adc-4fda-ade0-410becf0de4f","event_type":"incident.priority_updated","resource_type":"incident","data":{"id":"PGR0VU2","type":"incident"}}}`)

	ev := oneEvent(t, v, verify.Request{Header: pdHeaders(pdSig("new", body)), Body: body})
	require.Equal(t, verify.Event{ID: "5ac64822-4adc-4fda-ade0-410becf0de4f", Type: "incident.priority_updated", Scope: "PSUB", ObjectID: "PGR0VU2"}, ev)
	require.Equal(t, pdSig("new", body), verifytest.PagerDuty(body, "new"))

	// Rotation as PagerDuty sends it: one v1 per secret, comma-separated;
	// the receiver knows only the new secret, or only the old one.
	both := verifytest.PagerDuty(body, "old", "new")
	oneEvent(t, v, verify.Request{Header: pdHeaders(both), Body: body})
	oldOnly := pvBuild(t, verify.TypePagerDuty, verify.Core{Secrets: []string{"old"}}, nil)
	oneEvent(t, oldOnly, verify.Request{Header: pdHeaders(both), Body: body})
	// Unknown versions and unreadable entries are skipped.
	oneEvent(t, v, verify.Request{Header: pdHeaders("v2=abc, v1=zz," + pdSig("new", body)), Body: body})

	_, err := v.Verify(verify.Request{Header: pdHeaders(""), Body: body})
	requireCode(t, err, verify.CodeMissingHeader, "X-PagerDuty-Signature")
	_, err = v.Verify(verify.Request{Header: pdHeaders("v0=00"), Body: body})
	requireCode(t, err, verify.CodeMalformedHeader, "X-PagerDuty-Signature")
	_, err = v.Verify(verify.Request{Header: pdHeaders(pdSig("other", body)), Body: body})
	requireCode(t, err, verify.CodeBadSignature, "X-PagerDuty-Signature")
	_, err = v.Verify(verify.Request{Header: pdHeaders(pdSig("new", body)), Body: append([]byte(" "), body...)})
	requireCode(t, err, verify.CodeBadSignature, "X-PagerDuty-Signature")
	noID := []byte(`{"event":{"event_type":"pagey.ping"}}`)
	_, err = v.Verify(verify.Request{Header: pdHeaders(pdSig("new", noID)), Body: noID})
	require.True(t, requireCode(t, err, verify.CodeMissingField, "/event/id").Authenticated)

	only := pvBuild(t, verify.TypePagerDuty, verify.Core{Secrets: []string{"new"}, AllowedEventTypes: []string{"incident.resolved"}}, nil)
	_, err = only.Verify(verify.Request{Header: pdHeaders(pdSig("new", body)), Body: body})
	requireCode(t, err, verify.CodeEventTypeNotAllowed, "/event/event_type")
}

func TestPagerDutyFixture(t *testing.T) { replayFixture(t, "pagerduty") }
