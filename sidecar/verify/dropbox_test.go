package verify_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Dropbox publishes no example signature, so this vector was computed
// independently (Python's hmac module) from
// https://www.dropbox.com/developers/reference/webhooks#notifications: the
// hex HMAC-SHA256 of the body (the shape of Dropbox's example
// notification) under the app secret.
func TestDropboxVector(t *testing.T) {
	t.Parallel()
	body := []byte(`{"list_folder": {"accounts": ["dbid:AAH4f99T0taONIb-OurWxbNQ6ywGRopQngc"]}, "delta": {"users": [4245623]}}`)
	v := mustBuild(t, verify.TypeDropbox, verify.Core{Secrets: []string{verifytest.DropboxAppSecret}}, nil)
	h := http.Header{}
	h.Set(verify.DropboxSignatureHeader, "ef0d9cafe3f32d67982157d2fba3dd4b17437823edef81fe891eb5e6f9103c89")
	evs := verifyEvents(t, v, verifytest.Delivery{Header: h, Body: body})
	if len(evs) != 1 || !strings.HasPrefix(evs[0].ID, "71:sha256:") || evs[0].Type != "notification" || evs[0].ObjectID != "dbid:AAH4f99T0taONIb-OurWxbNQ6ywGRopQngc" {
		t.Fatalf("got %+v", evs)
	}
}

func TestDropbox(t *testing.T) {
	t.Parallel()
	v := mustBuild(t, verify.TypeDropbox, verify.Core{Secrets: []string{verifytest.DropboxAppSecret}}, nil)
	good := func() verifytest.Delivery {
		return verifytest.DropboxNotification(verifytest.DropboxAppSecret, "dbid:A", 1)
	}

	t.Run("fixture", func(t *testing.T) { replayFixture(t, "dropbox") })

	t.Run("verification request", func(t *testing.T) {
		res, err := v.Verify(deliveryRequest(verifytest.DropboxChallenge("abc123")))
		if err != nil || !res.IsHandshake() || string(res.Handshake.Body) != "abc123" ||
			res.Handshake.Header.Get("Content-Type") != "text/plain; charset=utf-8" || res.Handshake.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Fatalf("got %+v, %v", res, err)
		}
		for q, code := range map[string]verify.Code{
			"":                                       verify.CodeMissingHeader,
			"challenge=":                             verify.CodeMissingHeader,
			"challenge=a%20b":                        verify.CodeMalformedHeader,
			"challenge=%3Cscript%3E%0A":              verify.CodeMalformedHeader,
			"challenge=a&challenge=b":                verify.CodeMalformedHeader,
			"challenge=%zz":                          verify.CodeMalformedHeader,
			"challenge=" + strings.Repeat("a", 1025): verify.CodeMalformedHeader,
		} {
			requireRefused(t, v, verifytest.Delivery{Method: http.MethodGet, RawQuery: q}, code, verify.InQuery, "")
		}
	})

	t.Run("signature", func(t *testing.T) {
		d := good()
		d.Header.Del(verify.DropboxSignatureHeader)
		requireRefused(t, v, d, verify.CodeMissingHeader, verify.InHeader, verify.DropboxSignatureHeader)
		d = good()
		d.Header.Set(verify.DropboxSignatureHeader, "sha256="+d.Header.Get(verify.DropboxSignatureHeader))
		requireRefused(t, v, d, verify.CodeMalformedHeader, verify.InHeader, verify.DropboxSignatureHeader)
		other := verifytest.DropboxNotification("rotated-app-secret", "dbid:A", 1)
		requireRefused(t, v, other, verify.CodeBadSignature, verify.InHeader, verify.DropboxSignatureHeader)
		rot := mustBuild(t, verify.TypeDropbox, verify.Core{Secrets: []string{"rotated-app-secret", verifytest.DropboxAppSecret}}, nil)
		verifyEvents(t, rot, other)
		verifyEvents(t, rot, good())
	})

	t.Run("every nudge is its own event", func(t *testing.T) {
		a := verifyEvents(t, v, good())[0]
		b := verifyEvents(t, v, good())[0]
		if a.ID == b.ID || a.ID[:strings.LastIndex(a.ID, "|8:delivery|")] != b.ID[:strings.LastIndex(b.ID, "|8:delivery|")] {
			t.Fatalf("a %q b %q", a.ID, b.ID)
		}
		two := []byte(`{"list_folder":{"accounts":["dbid:A","dbid:B"]},"delta":{"users":[1,2]}}`)
		h := http.Header{}
		h.Set(verify.DropboxSignatureHeader, verifytest.Dropbox(verifytest.DropboxAppSecret, two))
		if ev := verifyEvents(t, v, verifytest.Delivery{Header: h, Body: two})[0]; ev.ObjectID != "" {
			t.Fatalf("got %+v", ev)
		}
		h.Set(verify.DropboxSignatureHeader, verifytest.Dropbox(verifytest.DropboxAppSecret, []byte(`[]`)))
		requireRefused(t, v, verifytest.Delivery{Header: h, Body: []byte(`[]`)}, verify.CodeMalformedBody, verify.InBody, "")
	})
}
