package verify_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// Bitbucket publishes no example signature: vectors here are computed from
// the documented construction ("sha256=" and the hex HMAC-SHA256 of the raw
// body under the secret,
// https://support.atlassian.com/bitbucket-cloud/docs/manage-webhooks/#Secure-webhooks).

func hubSHA256(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

func bitbucketHeaders(sig, event, id string) http.Header {
	h := http.Header{}
	if sig != "" {
		h.Set("X-Hub-Signature", sig)
	}
	if event != "" {
		h.Set("X-Event-Key", event)
	}
	if id != "" {
		h.Set("X-Request-UUID", id)
	}
	h.Set("X-Hook-UUID", "{hook}")
	return h
}

func TestBitbucket(t *testing.T) {
	v := pvBuild(t, verify.TypeBitbucket, verify.Core{Secrets: []string{"old", "new"}}, nil)
	body := []byte(`{"push":{"changes":[]}}`)

	ev := oneEvent(t, v, verify.Request{Header: bitbucketHeaders(hubSHA256("new", body), "repo:push", "{r-1}"), Body: body})
	require.Equal(t, verify.Event{ID: "{r-1}", Type: "repo:push", Scope: "{hook}"}, ev)
	// Rotation, and upper-case hex.
	oneEvent(t, v, verify.Request{Header: bitbucketHeaders(strings.ToUpper(hubSHA256("old", body)), "repo:push", "{r-1}"), Body: body})

	_, err := v.Verify(verify.Request{Header: bitbucketHeaders("", "repo:push", "{r-1}"), Body: body})
	requireCode(t, err, verify.CodeMissingHeader, "X-Hub-Signature")
	_, err = v.Verify(verify.Request{Header: bitbucketHeaders("sha1="+strings.Repeat("0", 40), "repo:push", "{r-1}"), Body: body})
	requireCode(t, err, verify.CodeMalformedHeader, "X-Hub-Signature")
	_, err = v.Verify(verify.Request{Header: bitbucketHeaders("sha256=zz", "repo:push", "{r-1}"), Body: body})
	requireCode(t, err, verify.CodeMalformedHeader, "X-Hub-Signature")
	_, err = v.Verify(verify.Request{Header: bitbucketHeaders(hubSHA256("other", body), "repo:push", "{r-1}"), Body: body})
	requireCode(t, err, verify.CodeBadSignature, "X-Hub-Signature")
	_, err = v.Verify(verify.Request{Header: bitbucketHeaders(hubSHA256("new", body), "repo:push", "{r-1}"), Body: []byte(`{"push":{}}`)})
	requireCode(t, err, verify.CodeBadSignature, "X-Hub-Signature")
	_, err = v.Verify(verify.Request{Header: bitbucketHeaders(hubSHA256("new", body), "repo:push", ""), Body: body})
	require.True(t, requireCode(t, err, verify.CodeMissingHeader, "X-Request-UUID").Authenticated)
	_, err = v.Verify(verify.Request{Header: bitbucketHeaders(hubSHA256("new", body), "", "{r-1}"), Body: body})
	require.True(t, requireCode(t, err, verify.CodeMissingHeader, "X-Event-Key").Authenticated)

	_, err = pvTryBuild(t, verify.TypeBitbucket, verify.Core{}, nil)
	requireConfigField(t, err, "Secrets")
}

func TestBitbucketFixture(t *testing.T) { replayFixture(t, "bitbucket") }
