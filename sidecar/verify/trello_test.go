package verify_test

import (
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // Trello signs with HMAC-SHA1.
	"encoding/base64"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Trello publishes the construction but no example secret and signature:
// the vectors are computed here (base64 HMAC-SHA1 of body + callbackURL,
// https://developer.atlassian.com/cloud/trello/guides/rest-api/webhooks/#webhook-signatures).

const trelloCallback = "https://hooks.example.com/trello"

func trelloSig(secret, callback string, body []byte) string {
	m := hmac.New(sha1.New, []byte(secret))
	m.Write(append(append([]byte{}, body...), callback...))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

func trelloHeaders(sig string) http.Header {
	h := http.Header{}
	if sig != "" {
		h.Set("X-Trello-Webhook", sig)
	}
	return h
}

func TestTrello(t *testing.T) {
	opts := map[string]any{"callback_url": trelloCallback}
	v := pvBuild(t, verify.TypeTrello, verify.Core{Secrets: []string{"old", "new"}}, opts)
	body := []byte(`{"model":{"id":"m1"},"action":{"id":"a1","type":"commentCard"},"webhook":{"id":"w1"}}`)

	ev := oneEvent(t, v, verify.Request{Header: trelloHeaders(trelloSig("new", trelloCallback, body)), Body: body})
	require.Equal(t, verify.Event{ID: "a1", Type: "commentCard", Scope: "w1", ObjectID: "m1"}, ev)
	oneEvent(t, v, verify.Request{Header: trelloHeaders(trelloSig("old", trelloCallback, body)), Body: body})
	require.Equal(t, trelloSig("new", trelloCallback, body), verifytest.Trello("new", trelloCallback, body))

	// The callback URL is signed: one signed for another URL fails.
	_, err := v.Verify(verify.Request{Header: trelloHeaders(trelloSig("new", trelloCallback+"/", body)), Body: body})
	requireCode(t, err, verify.CodeBadSignature, "X-Trello-Webhook")
	_, err = v.Verify(verify.Request{Header: trelloHeaders(""), Body: body})
	requireCode(t, err, verify.CodeMissingHeader, "X-Trello-Webhook")
	_, err = v.Verify(verify.Request{Header: trelloHeaders("not base64!"), Body: body})
	requireCode(t, err, verify.CodeMalformedHeader, "X-Trello-Webhook")
	_, err = v.Verify(verify.Request{Header: trelloHeaders(base64.StdEncoding.EncodeToString(make([]byte, 32))), Body: body})
	requireCode(t, err, verify.CodeMalformedHeader, "X-Trello-Webhook")
	noID := []byte(`{"action":{"type":"x"}}`)
	_, err = v.Verify(verify.Request{Header: trelloHeaders(trelloSig("new", trelloCallback, noID)), Body: noID})
	require.True(t, requireCode(t, err, verify.CodeMissingField, "/action/id").Authenticated)

	// HEAD: answered 200, no event, no signature needed.
	res, err := v.Verify(verify.Request{Method: http.MethodHead, Header: http.Header{}})
	require.NoError(t, err)
	require.NotNil(t, res.Handshake)
	require.Equal(t, http.StatusOK, res.Handshake.Status)
	require.Empty(t, res.Handshake.Body)
	require.Empty(t, res.Events)

	p, _ := verify.Lookup(verify.TypeTrello)
	require.Equal(t, []string{http.MethodHead}, p.Methods)

	_, err = pvTryBuild(t, verify.TypeTrello, verify.Core{Secrets: []string{"s"}}, nil)
	requireConfigField(t, err, "CallbackURL")
	_, err = pvTryBuild(t, verify.TypeTrello, verify.Core{Secrets: []string{"s"}}, map[string]any{"callback_url": "/relative"})
	requireConfigField(t, err, "CallbackURL")
	_, err = pvTryBuild(t, verify.TypeTrello, verify.Core{}, opts)
	requireConfigField(t, err, "Secrets")
}

func TestTrelloFixture(t *testing.T) { replayFixture(t, "trello") }
