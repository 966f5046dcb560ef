package verify_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// payFuzzTypes are the providers FuzzPaymentProviders drives.
var payFuzzTypes = []verify.Type{verify.TypeRazorpay, verify.TypePaystack, verify.TypeLemonSqueezy, verify.TypeSquare,
	verify.TypePayPal, verify.TypeWooCommerce, verify.TypeMollie}

// FuzzPaymentProviders feeds arbitrary headers, query strings and bodies
// (seeded with every fixture delivery of these providers, and Mollie's
// classic nudge) to their verifiers, configured as their fixtures are
// (Mollie also as a classic source): every answer is a *verify.Error or a
// result with exactly one of a handshake or events, every event with an
// ID; nothing panics.
func FuzzPaymentProviders(f *testing.F) {
	var vs []verify.Verifier
	for _, fx := range verifytest.Fixtures() {
		for _, typ := range payFuzzTypes {
			if fx.Type != string(typ) {
				continue
			}
			opts := fx.Options
			if fx.Setup != nil {
				opts = fx.Setup(f)
			}
			vs = append(vs, payMust(f, typ, verify.Core{Secrets: fx.Secrets}, decodeOptions(f, typ, opts)))
			for _, d := range allDeliveries(fx.Cases(payNow)) {
				f.Add(headerText(d.Header), d.RawQuery, d.Body)
			}
		}
	}
	vs = append(vs, payMust(f, verify.TypeMollie, verify.Core{Secrets: []string{verifytest.MollieToken}}, decodeOptions(f, verify.TypeMollie, nil)))
	n := verifytest.MollieNudge(verifytest.MollieToken, "tr_d0b0E3EA3v")
	f.Add(headerText(n.Header), n.RawQuery, n.Body)
	f.Add("", "token="+verifytest.MollieToken, []byte("id=tr_1&id=tr_1"))
	f.Add("", "", []byte("webhook_id=7"))

	f.Fuzz(func(t *testing.T, headers, query string, body []byte) {
		h := http.Header{}
		for _, line := range strings.Split(headers, "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
			}
		}
		req := verify.Request{Header: h, RawQuery: query, Body: body}
		for _, v := range vs {
			res, err := v.Verify(req)
			if err != nil {
				var e *verify.Error
				if !errors.As(err, &e) {
					t.Fatalf("%s: error %T %v is not a *verify.Error", v.Type(), err, err)
				}
				continue
			}
			if (res.Handshake == nil) == (len(res.Events) == 0) {
				t.Fatalf("%s: result has neither or both of handshake and events", v.Type())
			}
			for _, ev := range res.Events {
				if ev.ID == "" {
					t.Fatalf("%s: event without an ID", v.Type())
				}
			}
		}
	})
}

func allDeliveries(c verifytest.Cases) []verifytest.Delivery {
	out := append(append([]verifytest.Delivery(nil), c.Distinct...), c.Redelivery...)
	out = append(out, c.Tampered)
	for _, h := range c.Handshakes {
		out = append(out, h.Delivery)
	}
	return out
}

func headerText(h http.Header) string {
	var b strings.Builder
	for k, vs := range h {
		for _, v := range vs {
			b.WriteString(k + ": " + v + "\n")
		}
	}
	return b.String()
}
