package verify_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/strictjson"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// Sentry publishes a verification snippet but no example secret and
// signature: the vectors are computed here from the documented
// construction (hex HMAC-SHA256 of the body under the client secret,
// https://docs.sentry.io/organization/integrations/integration-platform/webhooks/#verifying-the-signature).

func sentryHeaders(sig, resource, requestID string) http.Header {
	h := http.Header{}
	if sig != "" {
		h.Set("Sentry-Hook-Signature", sig)
	}
	if resource != "" {
		h.Set("Sentry-Hook-Resource", resource)
	}
	h.Set("Request-ID", requestID)
	return h
}

func TestSentry(t *testing.T) {
	v := pvBuild(t, verify.TypeSentry, verify.Core{Secrets: []string{"old", "new"}}, nil)

	errBody := []byte(`{"action":"created","installation":{"uuid":"inst-1"},"data":{"error":{"event_id":"a7e2f3b1c9d84e0f","issue_id":"11"}}}`)
	ev := oneEvent(t, v, verify.Request{Header: sentryHeaders(hmacHex("new", errBody), "error", "req-1"), Body: errBody})
	require.Equal(t, verify.Event{ID: verify.JoinKey("error", "a7e2f3b1c9d84e0f"), Type: "error.created", Scope: "inst-1", ObjectID: "a7e2f3b1c9d84e0f"}, ev)
	// A new Request-ID does not make a new event.
	require.Equal(t, ev.ID, oneEvent(t, v, verify.Request{Header: sentryHeaders(hmacHex("old", errBody), "error", "req-2"), Body: errBody}).ID)

	alert := []byte(`{"action":"triggered","installation":{"uuid":"inst-1"},"data":{"event":{"event_id":"e1"},"triggered_rule":"Send to n8n"}}`)
	require.Equal(t, verify.JoinKey("event_alert", "e1", "Send to n8n"), oneEvent(t, v, verify.Request{Header: sentryHeaders(hmacHex("new", alert), "event_alert", "r"), Body: alert}).ID)

	inst := []byte(`{"action":"deleted","installation":{"uuid":"inst-1"},"data":{"installation":{"uuid":"inst-1"}}}`)
	require.Equal(t, verify.JoinKey("installation", "inst-1", "deleted"), oneEvent(t, v, verify.Request{Header: sentryHeaders(hmacHex("new", inst), "installation", "r"), Body: inst}).ID)

	// Other resources: the canonical body digest; whitespace does not
	// change it, a change of state does.
	issue := []byte(`{"action":"assigned","installation":{"uuid":"inst-1"},"data":{"issue":{"id":"11","assignedTo":"a"}}}`)
	spaced := []byte(`{ "action": "assigned", "installation": {"uuid":"inst-1"}, "data": {"issue": {"id":"11","assignedTo":"a"}} }`)
	other := []byte(`{"action":"assigned","installation":{"uuid":"inst-1"},"data":{"issue":{"id":"11","assignedTo":"b"}}}`)
	ev = oneEvent(t, v, verify.Request{Header: sentryHeaders(hmacHex("new", issue), "issue", "r1"), Body: issue})
	sum, err := strictjson.Hash(issue)
	require.NoError(t, err)
	require.Equal(t, "sha256:"+sum, ev.ID)
	require.True(t, ev.Digest)
	require.Equal(t, "11", ev.ObjectID)
	require.Equal(t, ev.ID, oneEvent(t, v, verify.Request{Header: sentryHeaders(hmacHex("new", spaced), "issue", "r2"), Body: spaced}).ID)
	require.NotEqual(t, ev.ID, oneEvent(t, v, verify.Request{Header: sentryHeaders(hmacHex("new", other), "issue", "r3"), Body: other}).ID)

	_, err = v.Verify(verify.Request{Header: sentryHeaders("", "issue", "r"), Body: issue})
	requireCode(t, err, verify.CodeMissingHeader, "Sentry-Hook-Signature")
	_, err = v.Verify(verify.Request{Header: sentryHeaders("v1="+hmacHex("new", issue), "issue", "r"), Body: issue})
	requireCode(t, err, verify.CodeMalformedHeader, "Sentry-Hook-Signature")
	_, err = v.Verify(verify.Request{Header: sentryHeaders(hmacHex("nope", issue), "issue", "r"), Body: issue})
	requireCode(t, err, verify.CodeBadSignature, "Sentry-Hook-Signature")
	_, err = v.Verify(verify.Request{Header: sentryHeaders(hmacHex("new", issue), "", "r"), Body: issue})
	require.True(t, requireCode(t, err, verify.CodeMissingHeader, "Sentry-Hook-Resource").Authenticated)
	noAction := []byte(`{"data":{}}`)
	_, err = v.Verify(verify.Request{Header: sentryHeaders(hmacHex("new", noAction), "issue", "r"), Body: noAction})
	require.True(t, requireCode(t, err, verify.CodeMissingField, "/action").Authenticated)

	only := pvBuild(t, verify.TypeSentry, verify.Core{Secrets: []string{"new"}, AllowedEventTypes: []string{"error.*"}}, nil)
	_, err = only.Verify(verify.Request{Header: sentryHeaders(hmacHex("new", issue), "issue", "r"), Body: issue})
	requireCode(t, err, verify.CodeEventTypeNotAllowed, "Sentry-Hook-Resource")
}

func TestSentryFixture(t *testing.T) { replayFixture(t, "sentry") }
