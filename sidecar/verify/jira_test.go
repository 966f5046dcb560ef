package verify_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// Jira publishes no example signature: the vectors are computed here from
// the documented construction ("sha256=" and the hex HMAC-SHA256 of the
// body, https://developer.atlassian.com/cloud/jira/platform/webhooks/#secure-admin-webhooks).

func jiraHeaders(sig, id string) http.Header {
	h := http.Header{}
	if sig != "" {
		h.Set("X-Hub-Signature", sig)
	}
	if id != "" {
		h.Set("X-Atlassian-Webhook-Identifier", id)
	}
	return h
}

func TestJira(t *testing.T) {
	v := pvBuild(t, verify.TypeJira, verify.Core{Secrets: []string{"s1", "s2"}}, nil)
	body := []byte(`{"timestamp":1,"webhookEvent":"comment_created","issue":{"id":"10002"},"comment":{"id":"10400"}}`)

	ev := oneEvent(t, v, verify.Request{Header: jiraHeaders(hubSHA256("s2", body), "77"), Body: body})
	require.Equal(t, verify.Event{ID: "77", Type: "comment_created", ObjectID: "10400"}, ev)
	oneEvent(t, v, verify.Request{Header: jiraHeaders(hubSHA256("s1", body), "77"), Body: body})

	_, err := v.Verify(verify.Request{Header: jiraHeaders("", "77"), Body: body})
	requireCode(t, err, verify.CodeMissingHeader, "X-Hub-Signature")
	_, err = v.Verify(verify.Request{Header: jiraHeaders("sha512=00", "77"), Body: body})
	requireCode(t, err, verify.CodeMalformedHeader, "X-Hub-Signature")
	_, err = v.Verify(verify.Request{Header: jiraHeaders(hubSHA256("s3", body), "77"), Body: body})
	requireCode(t, err, verify.CodeBadSignature, "X-Hub-Signature")
	_, err = v.Verify(verify.Request{Header: jiraHeaders(hubSHA256("s1", body), ""), Body: body})
	require.True(t, requireCode(t, err, verify.CodeMissingHeader, "X-Atlassian-Webhook-Identifier").Authenticated)
	nob := []byte(`{"timestamp":1}`)
	_, err = v.Verify(verify.Request{Header: jiraHeaders(hubSHA256("s1", nob), "77"), Body: nob})
	require.True(t, requireCode(t, err, verify.CodeMissingField, "/webhookEvent").Authenticated)

	only := pvBuild(t, verify.TypeJira, verify.Core{Secrets: []string{"s1"}, AllowedEventTypes: []string{"jira:issue_*"}}, nil)
	_, err = only.Verify(verify.Request{Header: jiraHeaders(hubSHA256("s1", body), "77"), Body: body})
	requireCode(t, err, verify.CodeEventTypeNotAllowed, "/webhookEvent")
}

func TestJiraFixture(t *testing.T) { replayFixture(t, "jira") }
