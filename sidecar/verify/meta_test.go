package verify_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Meta publishes the verification request's example (hub.challenge
// 1158201444, hub.verify_token "meatyhamhock",
// https://developers.facebook.com/docs/graph-api/webhooks/getting-started/#verification-requests),
// used below, but no example app secret and signature: the signature
// vectors are computed here from the documented construction ("sha256="
// and the hex HMAC-SHA256 of the payload under the app secret).

func metaHeaders(sig string) http.Header {
	h := http.Header{}
	if sig != "" {
		h.Set("X-Hub-Signature-256", sig)
	}
	return h
}

func metaVerifier(t *testing.T, opts map[string]any) verify.Verifier {
	return pvBuild(t, verify.TypeMeta, verify.Core{Secrets: []string{"old-secret", "app-secret"}}, opts)
}

func TestMetaVerificationRequest(t *testing.T) {
	v := metaVerifier(t, map[string]any{"verify_token": "meatyhamhock"})
	get := func(q string) (verify.Result, error) {
		return v.Verify(verify.Request{Method: http.MethodGet, RawQuery: q})
	}
	res, err := get("hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=meatyhamhock")
	require.NoError(t, err)
	require.Empty(t, res.Events)
	require.Equal(t, http.StatusOK, res.Handshake.Status)
	require.Equal(t, "1158201444", string(res.Handshake.Body))
	require.Equal(t, "text/plain; charset=utf-8", res.Handshake.Header.Get("Content-Type"))
	require.Equal(t, "nosniff", res.Handshake.Header.Get("X-Content-Type-Options"))

	// A wrong token is refused, and the challenge is not echoed.
	_, err = get("hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=meatyhamhocks")
	e := requireCode(t, err, verify.CodeBadSignature, "hub.verify_token")
	require.Equal(t, verify.InQuery, e.In)
	require.NotContains(t, e.Error(), "1158201444")
	require.NotContains(t, e.Error(), "meatyhamhock")
	_, err = get("hub.mode=subscribe&hub.challenge=1158201444")
	requireCode(t, err, verify.CodeMissingHeader, "hub.verify_token")
	_, err = get("hub.mode=unsubscribe&hub.challenge=1&hub.verify_token=meatyhamhock")
	requireCode(t, err, verify.CodeMalformedHeader, "hub.mode")
	_, err = get("")
	requireCode(t, err, verify.CodeMalformedHeader, "hub.mode")
	_, err = get("hub.mode=subscribe&hub.challenge=%3Cscript%3E&hub.verify_token=meatyhamhock")
	requireCode(t, err, verify.CodeMalformedHeader, "hub.challenge")
	_, err = get("hub.mode=subscribe&hub.challenge=" + strings.Repeat("1", 65) + "&hub.verify_token=meatyhamhock")
	requireCode(t, err, verify.CodeMalformedHeader, "hub.challenge")
	_, err = get("hub.mode=subscribe&hub.challenge=1&hub.verify_token=meatyhamhock&hub.verify_token=x")
	requireCode(t, err, verify.CodeMalformedHeader, "hub.verify_token")

	// Without a configured verify_token the GET is refused.
	none := metaVerifier(t, nil)
	_, err = none.Verify(verify.Request{Method: http.MethodGet, RawQuery: "hub.mode=subscribe&hub.challenge=1&hub.verify_token=x"})
	requireCode(t, err, verify.CodeBadSignature, "hub.verify_token")

	p, _ := verify.Lookup(verify.TypeMeta)
	require.Equal(t, []string{http.MethodGet}, p.Methods)
	_, err = pvTryBuild(t, verify.TypeMeta, verify.Core{Secrets: []string{"s"}}, map[string]any{"verify_token": " x"})
	requireConfigField(t, err, "VerifyToken")
}

func TestMetaSignature(t *testing.T) {
	v := metaVerifier(t, nil)
	body := verifytest.WhatsAppNotification(verifytest.WhatsAppStatus("wamid.A", "read", 1))
	oneEvent(t, v, verify.Request{Header: metaHeaders("sha256=" + hmacHex("app-secret", body)), Body: body})
	oneEvent(t, v, verify.Request{Header: metaHeaders("sha256=" + hmacHex("old-secret", body)), Body: body})

	_, err := v.Verify(verify.Request{Header: metaHeaders(""), Body: body})
	requireCode(t, err, verify.CodeMissingHeader, "X-Hub-Signature-256")
	legacy := http.Header{"X-Hub-Signature": {"sha1=0000000000000000000000000000000000000000"}}
	_, err = v.Verify(verify.Request{Header: legacy, Body: body})
	require.Contains(t, requireCode(t, err, verify.CodeMissingHeader, "X-Hub-Signature-256").Reason, "legacy")
	_, err = v.Verify(verify.Request{Header: metaHeaders(hmacHex("app-secret", body)), Body: body})
	requireCode(t, err, verify.CodeMalformedHeader, "X-Hub-Signature-256")
	_, err = v.Verify(verify.Request{Header: metaHeaders("sha256=" + hmacHex("wrong", body)), Body: body})
	requireCode(t, err, verify.CodeBadSignature, "X-Hub-Signature-256")
}

func TestMetaBatchAndKeys(t *testing.T) {
	v := metaVerifier(t, nil)
	sign := func(b []byte) verify.Request {
		return verify.Request{Header: metaHeaders("sha256=" + hmacHex("app-secret", b)), Body: b}
	}
	// One WhatsApp notification with two changes and a second entry.
	body := []byte(`{"object":"whatsapp_business_account","entry":[` +
		`{"id":"WABA1","changes":[` + verifytest.WhatsAppStatus("wamid.A", "delivered", 10) + `,` + verifytest.WhatsAppMessage("wamid.B", "hi", 11) + `]},` +
		`{"id":"WABA1","changes":[` + verifytest.WhatsAppStatus("wamid.A", "read", 12) + `]}]}`)
	res, err := v.Verify(sign(body))
	require.NoError(t, err)
	require.Len(t, res.Events, 3)
	require.Equal(t, verify.JoinKey("whatsapp", "status", "wamid.A", "delivered"), res.Events[0].ID)
	require.Equal(t, verify.JoinKey("whatsapp", "message", "wamid.B"), res.Events[1].ID)
	require.Equal(t, verify.JoinKey("whatsapp", "status", "wamid.A", "read"), res.Events[2].ID)
	for _, ev := range res.Events {
		require.Equal(t, "messages", ev.Type)
		require.Equal(t, "WABA1", ev.Scope)
	}
	// Each event's payload is Meta's shape reduced to its own item.
	var p struct {
		Object string `json:"object"`
		Entry  []struct {
			ID      string            `json:"id"`
			Changes []json.RawMessage `json:"changes"`
		} `json:"entry"`
	}
	require.NoError(t, json.Unmarshal(res.Events[1].Payload, &p))
	require.Equal(t, "whatsapp_business_account", p.Object)
	require.Len(t, p.Entry, 1)
	require.Equal(t, "WABA1", p.Entry[0].ID)
	require.Len(t, p.Entry[0].Changes, 1)
	require.JSONEq(t, verifytest.WhatsAppMessage("wamid.B", "hi", 11), string(p.Entry[0].Changes[0]))

	// The same status regrouped into another request keeps its key.
	alone := verifytest.WhatsAppNotification(verifytest.WhatsAppStatus("wamid.A", "read", 12))
	require.Equal(t, res.Events[2].ID, oneEvent(t, v, sign(alone)).ID)

	// Messenger: messages by mid; other items by digest, entry.time left out.
	msgr := func(time string, items ...string) []byte {
		return []byte(`{"object":"page","entry":[{"id":"PAGE1","time":` + time + `,"messaging":[` + strings.Join(items, ",") + `]}]}`)
	}
	msg := `{"sender":{"id":"U1"},"recipient":{"id":"PAGE1"},"timestamp":1700000000000,"message":{"mid":"m_1","text":"hello"}}`
	react := `{"sender":{"id":"U1"},"recipient":{"id":"PAGE1"},"timestamp":1700000001000,"reaction":{"mid":"m_1","action":"react","reaction":"love"}}`
	unreact := `{"sender":{"id":"U1"},"recipient":{"id":"PAGE1"},"timestamp":1700000002000,"reaction":{"mid":"m_1","action":"unreact","reaction":"love"}}`
	res, err = v.Verify(sign(msgr("1700000003000", msg, react, unreact)))
	require.NoError(t, err)
	require.Len(t, res.Events, 3)
	require.Equal(t, verify.JoinKey("messaging", "mid", "m_1"), res.Events[0].ID)
	require.Equal(t, "message", res.Events[0].Type)
	require.Equal(t, "reaction", res.Events[1].Type)
	require.True(t, res.Events[1].Digest)
	require.True(t, strings.HasPrefix(res.Events[1].ID, "sha256:"))
	require.NotEqual(t, res.Events[1].ID, res.Events[2].ID)
	again, err := v.Verify(sign(msgr("1700000009000", unreact, react)))
	require.NoError(t, err)
	require.Equal(t, res.Events[2].ID, again.Events[0].ID)
	require.Equal(t, res.Events[1].ID, again.Events[1].ID)

	// Allowed types apply per item: others are rejected, by index.
	only := pvBuild(t, verify.TypeMeta, verify.Core{Secrets: []string{"app-secret"}, AllowedEventTypes: []string{"message"}}, nil)
	res, err = only.Verify(sign(msgr("1", msg, react)))
	require.NoError(t, err)
	require.Len(t, res.Events, 1)
	require.Len(t, res.Rejected, 1)
	require.Equal(t, 1, res.Rejected[0].Index)
	requireCode(t, res.Rejected[0].Err, verify.CodeEventTypeNotAllowed, "/entry/0/messaging/1")

	empty := []byte(`{"object":"page","entry":[{"id":"PAGE1","time":1,"messaging":[]}]}`)
	_, err = v.Verify(sign(empty))
	require.True(t, requireCode(t, err, verify.CodeMissingField, "/entry").Authenticated)
	noField := []byte(`{"object":"page","entry":[{"id":"PAGE1","changes":[{"value":{}}]}]}`)
	_, err = v.Verify(sign(noField))
	requireCode(t, err, verify.CodeMissingField, "/entry/0/changes/0/field")
}

func TestMetaFixture(t *testing.T) { replayFixture(t, "meta") }
