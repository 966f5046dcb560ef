package verify_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// GitLab publishes no example token or signature: the signing-token vector
// below is computed here from the documented construction (HMAC-SHA256
// over "<webhook-id>.<webhook-timestamp>.<body>" under the decoded whsec_
// key, https://gitlab.com/gitlab-org/gitlab/-/merge_requests/230944).

func gitlabHeaders(token, event, uuid, key string) http.Header {
	h := http.Header{}
	if token != "" {
		h.Set("X-Gitlab-Token", token)
	}
	h.Set("X-Gitlab-Event", event)
	h.Set("X-Gitlab-Event-UUID", uuid)
	if key != "" {
		h.Set("Idempotency-Key", key)
	}
	return h
}

func TestGitLabToken(t *testing.T) {
	v := pvBuild(t, verify.TypeGitLab, verify.Core{Secrets: []string{"old-token", "new-token"}}, nil)
	body := []byte(`{"object_kind":"push"}`)

	ev := oneEvent(t, v, verify.Request{Header: gitlabHeaders("new-token", "Push Hook", "u-1", "k-1"), Body: body})
	require.Equal(t, "k-1", ev.ID)
	require.Equal(t, "Push Hook", ev.Type)
	// Rotation: the older token still verifies.
	require.Equal(t, "k-1", oneEvent(t, v, verify.Request{Header: gitlabHeaders("old-token", "Push Hook", "u-1", "k-1"), Body: body}).ID)

	_, err := v.Verify(verify.Request{Header: gitlabHeaders("", "Push Hook", "u-1", "k-1"), Body: body})
	requireCode(t, err, verify.CodeMissingHeader, "X-Gitlab-Token")
	_, err = v.Verify(verify.Request{Header: gitlabHeaders("wrong", "Push Hook", "u-1", "k-1"), Body: body})
	e := requireCode(t, err, verify.CodeBadSignature, "X-Gitlab-Token")
	require.NotContains(t, e.Error(), "wrong")
	_, err = v.Verify(verify.Request{Header: gitlabHeaders("new-token", "", "u-1", "k-1"), Body: body})
	require.True(t, requireCode(t, err, verify.CodeMissingHeader, "X-Gitlab-Event").Authenticated)
}

func TestGitLabKeyWithoutIdempotencyKey(t *testing.T) {
	v := pvBuild(t, verify.TypeGitLab, verify.Core{Secrets: []string{"tok"}}, nil)
	a := []byte(`{"object_kind":"issue","object_attributes":{"action":"open"}}`)
	b := []byte(`{"object_kind":"issue","object_attributes":{"action":"update"}}`)
	ida := oneEvent(t, v, verify.Request{Header: gitlabHeaders("tok", "Issue Hook", "uuid-1", ""), Body: a}).ID
	sum := sha256.Sum256(a)
	require.Equal(t, verify.JoinKey("uuid-1", "sha256:"+hex.EncodeToString(sum[:])), ida)
	// Recursive hooks share the event UUID: a different body is a
	// different event; the same body again is the same one.
	idb := oneEvent(t, v, verify.Request{Header: gitlabHeaders("tok", "Issue Hook", "uuid-1", ""), Body: b}).ID
	require.NotEqual(t, ida, idb)
	require.Equal(t, ida, oneEvent(t, v, verify.Request{Header: gitlabHeaders("tok", "Issue Hook", "uuid-1", ""), Body: a}).ID)

	_, err := v.Verify(verify.Request{Header: gitlabHeaders("tok", "Issue Hook", "", ""), Body: a})
	require.True(t, requireCode(t, err, verify.CodeMissingHeader, "Idempotency-Key").Authenticated)
}

func gitlabSign(key []byte, id string, ts int64, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + strconv.FormatInt(ts, 10) + "."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

func TestGitLabSigningToken(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	other := []byte("fedcba9876543210fedcba9876543210")
	token := "whsec_" + base64.StdEncoding.EncodeToString(key)
	v := pvBuild(t, verify.TypeGitLab, verify.Core{}, map[string]any{
		"signing_tokens": []any{"whsec_" + base64.StdEncoding.EncodeToString(other), token},
	})
	body := []byte(`{"object_kind":"pipeline"}`)
	ts := pvNow.Unix()
	signed := func(sig string, ts int64) http.Header {
		h := gitlabHeaders("", "Pipeline Hook", "u", "idem-1")
		h.Set("webhook-id", "idem-1")
		h.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
		h.Set("webhook-signature", sig)
		return h
	}
	ev := oneEvent(t, v, verify.Request{Header: signed(gitlabSign(key, "idem-1", ts, body), ts), Body: body})
	require.Equal(t, "idem-1", ev.ID)
	require.Equal(t, pvNow, ev.Timestamp)
	// Several entries: one readable match suffices.
	oneEvent(t, v, verify.Request{Header: signed("v1,bm9wZQ== "+gitlabSign(key, "idem-1", ts, body), ts), Body: body})
	// The verifytest helper signs the same way.
	fixtureSig, err := verifytest.StandardWebhooks(token, "idem-1", ts, body)
	require.NoError(t, err)
	require.Equal(t, gitlabSign(key, "idem-1", ts, body), fixtureSig)

	_, err = v.Verify(verify.Request{Header: signed(gitlabSign([]byte("not-the-key-not-the-key-32bytes!"), "idem-1", ts, body), ts), Body: body})
	requireCode(t, err, verify.CodeBadSignature, "webhook-signature")
	_, err = v.Verify(verify.Request{Header: signed(gitlabSign(key, "idem-1", ts, body), ts), Body: []byte(`{"object_kind":"pipeline "}`)})
	requireCode(t, err, verify.CodeBadSignature, "webhook-signature")
	_, err = v.Verify(verify.Request{Header: withHeaders(signed(gitlabSign(key, "idem-1", ts, body), ts), "webhook-signature", ""), Body: body})
	requireCode(t, err, verify.CodeMissingHeader, "webhook-signature")
	_, err = v.Verify(verify.Request{Header: withHeaders(signed(gitlabSign(key, "idem-1", ts, body), ts), "webhook-timestamp", "soon"), Body: body})
	requireCode(t, err, verify.CodeMalformedHeader, "webhook-timestamp")
	_, err = v.Verify(verify.Request{Header: signed("v2,abc", ts), Body: body})
	requireCode(t, err, verify.CodeBadSignature, "webhook-signature")
	old := ts - int64((verify.DefaultTolerance + time.Second).Seconds())
	_, err = v.Verify(verify.Request{Header: signed(gitlabSign(key, "idem-1", old, body), old), Body: body})
	requireCode(t, err, verify.CodeTimestampOutsideTolerance, "webhook-timestamp")
	// A signed id changed in transit fails.
	_, err = v.Verify(verify.Request{Header: withHeaders(signed(gitlabSign(key, "idem-1", ts, body), ts), "webhook-id", "idem-2"), Body: body})
	requireCode(t, err, verify.CodeBadSignature, "webhook-signature")

	// Secret token and signing token together: both are required.
	both := pvBuild(t, verify.TypeGitLab, verify.Core{Secrets: []string{"tok"}}, map[string]any{"signing_tokens": []any{token}})
	_, err = both.Verify(verify.Request{Header: signed(gitlabSign(key, "idem-1", ts, body), ts), Body: body})
	requireCode(t, err, verify.CodeMissingHeader, "X-Gitlab-Token")
	_, err = both.Verify(verify.Request{Header: withHeaders(gitlabHeaders("tok", "Pipeline Hook", "u", "idem-1")), Body: body})
	requireCode(t, err, verify.CodeMissingHeader, "webhook-id")
}

func TestGitLabConfig(t *testing.T) {
	_, err := pvTryBuild(t, verify.TypeGitLab, verify.Core{}, nil)
	requireConfigField(t, err, "Secrets")
	_, err = pvTryBuild(t, verify.TypeGitLab, verify.Core{}, map[string]any{"signing_tokens": []any{"plain"}})
	requireConfigField(t, err, "SigningTokens[0]")
	_, err = pvTryBuild(t, verify.TypeGitLab, verify.Core{}, map[string]any{"signing_tokens": []any{"whsec_c2hvcnQ="}})
	requireConfigField(t, err, "SigningTokens[0]")
	_, err = pvTryBuild(t, verify.TypeGitLab, verify.Core{Secrets: []string{" tok"}}, nil)
	requireConfigField(t, err, "Secrets[0]")
}

func TestGitLabAllowedEventTypes(t *testing.T) {
	v := pvBuild(t, verify.TypeGitLab, verify.Core{Secrets: []string{"tok"}, AllowedEventTypes: []string{"Merge Request Hook"}}, nil)
	_, err := v.Verify(verify.Request{Header: gitlabHeaders("tok", "Push Hook", "u", "k"), Body: []byte(`{}`)})
	require.True(t, requireCode(t, err, verify.CodeEventTypeNotAllowed, "X-Gitlab-Event").Authenticated)
}

func TestGitLabFixture(t *testing.T) { replayFixture(t, "gitlab") }
