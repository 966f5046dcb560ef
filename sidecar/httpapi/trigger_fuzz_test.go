package httpapi

import (
	"encoding/base64"
	"strings"
	"testing"
)

// FuzzTriggerRequest feeds the trigger call's header list and body through
// the checks that run before anything is verified: they never panic, a
// header list they accept holds only what an HTTP request can carry, a
// body they accept decodes to bytes whose standard base64 is exactly what
// was sent (byte for byte, so the signature is checked over the provider's
// bytes) and within the limit, and no error quotes what the caller sent.
func FuzzTriggerRequest(f *testing.F) {
	seeds := []struct {
		name, value, body string
		limit             int
	}{
		{"Stripe-Signature", "t=1,v1=abc", base64.StdEncoding.EncodeToString([]byte(`{"id":"evt_1"}`)), 1 << 20},
		{"Content-Type", "application/json", "", 10},
		{"X-Bad Name", "v", "QUJD", 3},
		{"X-Value", "a\r\nInjected: 1", "QUJD\nQUJD", 100},
		{"X-Value", strings.Repeat("v", MaxTriggerHeaderValue+1), "QUJ", 100},
		{"", "empty name", "QUJDRA==", 3},
		{"X-Bom", "\ufeffvalue", base64.StdEncoding.EncodeToString([]byte{0xef, 0xbb, 0xbf, 0xff, 0x00}), 5},
		{"X-Url", "-_", "-_-_", 100},
	}
	for _, s := range seeds {
		f.Add(s.name, s.value, s.body, s.limit)
	}
	f.Fuzz(func(t *testing.T, name, value, body string, limit int) {
		if limit < 0 {
			limit = -limit
		}
		limit %= 1 << 20
		b := triggerBody{Method: "POST", Headers: [][]string{{name, value}, {"Content-Type", "application/json"}}, Body: body}
		if err := b.checkHeaders(); err != nil {
			noEcho(t, err, name, value)
		} else {
			if name == "" || strings.ContainsAny(value, "\r\n\x00") || len(value) > MaxTriggerHeaderValue {
				t.Fatalf("checkHeaders accepted a header no HTTP request can carry")
			}
			for i := 0; i < len(name); i++ {
				if !isTokenChar(name[i]) {
					t.Fatalf("checkHeaders accepted a name with byte %#x", name[i])
				}
			}
		}
		raw, err := b.rawBody(limit)
		if err != nil {
			noEcho(t, err, body)
			return
		}
		if len(raw) > limit {
			t.Fatalf("rawBody accepted %d bytes over a limit of %d", len(raw), limit)
		}
		if got := base64.StdEncoding.EncodeToString(raw); got != body {
			t.Fatalf("rawBody accepted a body that is not the standard base64 of its bytes")
		}
	})
}

// noEcho fails when err's text holds one of the caller's inputs (those long
// and unusual enough that a match is not chance).
func noEcho(t *testing.T, err error, inputs ...string) {
	t.Helper()
	msg := err.Error()
	for _, in := range inputs {
		if len(in) >= 12 && strings.Contains(msg, in) {
			t.Fatalf("the error quotes the caller's input: %q", msg)
		}
	}
}
