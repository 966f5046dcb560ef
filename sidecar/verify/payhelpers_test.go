package verify_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// The helpers of the razorpay, paystack, lemonsqueezy, square, paypal,
// woocommerce and mollie tests: they build a provider's verifier through
// its registration (Lookup, Options, Provider.New), as a source does.

// payNow is the clock of these tests.
var payNow = time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)

// payOptions decodes the sources-file options m (snake_case keys) into the
// options struct of provider typ, as a source does (Provider.DecodeOptions).
func payOptions(t testing.TB, typ verify.Type, m map[string]any) any {
	t.Helper()
	p, ok := verify.Lookup(typ)
	if !ok {
		t.Fatalf("provider %s is not registered", typ)
	}
	opts, err := p.DecodeOptions(m)
	if err != nil {
		t.Fatalf("options of %s: %v", typ, err)
	}
	return opts
}

// payBuild returns the error of building a source of typ from core and
// opts (an options struct pointer or nil), and the verifier.
func payBuild(typ verify.Type, core verify.Core, opts any) (verify.Verifier, error) {
	p, ok := verify.Lookup(typ)
	if !ok {
		return nil, errors.New("not registered")
	}
	if opts == nil && p.Options != nil {
		opts = p.Options()
	}
	if core.Now == nil {
		core.Now = func() time.Time { return payNow }
	}
	return p.New(core, opts)
}

// payMust is payBuild failing the test on an error.
func payMust(t testing.TB, typ verify.Type, core verify.Core, opts any) verify.Verifier {
	t.Helper()
	v, err := payBuild(typ, core, opts)
	if err != nil {
		t.Fatalf("build %s: %v", typ, err)
	}
	return v
}

// payRequest turns a fixture delivery into a request.
func payRequest(d verifytest.Delivery) verify.Request {
	return verify.Request{Method: d.Method, Header: d.Header, RawQuery: d.RawQuery, Body: d.Body}
}

// payCode asserts that err is an *verify.Error with code and, when field is
// not empty, that field.
func payCode(t *testing.T, err error, code verify.Code, field string) *verify.Error {
	t.Helper()
	var ve *verify.Error
	if !errors.As(err, &ve) {
		t.Fatalf("got %v, want a *verify.Error %s", err, code)
	}
	if ve.Code != code || (field != "" && ve.Field != field) {
		t.Fatalf("got %s on %q (%v), want %s on %q", ve.Code, ve.Field, err, code, field)
	}
	return ve
}

// payConfigField asserts that err is a *verify.ConfigError naming field.
func payConfigField(t *testing.T, err error, field string) {
	t.Helper()
	var ce *verify.ConfigError
	if !errors.As(err, &ce) || ce.Field != field {
		t.Fatalf("got %v, want a ConfigError on %s", err, field)
	}
}

// payEvent verifies d and returns its only event.
func payEvent(t *testing.T, v verify.Verifier, d verifytest.Delivery) verify.Event {
	t.Helper()
	res, err := v.Verify(payRequest(d))
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if res.IsHandshake() || len(res.Events) != 1 {
		t.Fatalf("got %+v, want one event", res)
	}
	if res.Events[0].ID == "" {
		t.Fatal("event without ID")
	}
	return res.Events[0]
}

// payReplayFixture replays the registered fixture of typ: distinct events
// get distinct ids, redeliveries the first one's, the tampered body is
// refused, the handshakes are answered as the fixture says.
func payReplayFixture(t *testing.T, typ verify.Type) {
	t.Helper()
	var f *verifytest.Fixture
	for _, x := range verifytest.Fixtures() {
		if x.Type == string(typ) {
			f = &x
			break
		}
	}
	if f == nil {
		t.Fatalf("no fixture for %s", typ)
	}
	opts := f.Options
	if f.Setup != nil {
		opts = f.Setup(t)
	}
	v := payMust(t, typ, verify.Core{Secrets: f.Secrets}, payOptions(t, typ, opts))
	c := f.Cases(payNow)
	if len(c.Distinct) < 2 || len(c.Redelivery) < 2 {
		t.Fatalf("fixture %s: %d distinct, %d redeliveries", typ, len(c.Distinct), len(c.Redelivery))
	}
	seen := map[string]bool{}
	for i, d := range c.Distinct {
		id := payEvent(t, v, d).ID
		if seen[id] {
			t.Fatalf("distinct delivery %d has the id of an earlier one: %q", i, id)
		}
		seen[id] = true
	}
	first := payEvent(t, v, c.Redelivery[0]).ID
	for i, d := range c.Redelivery[1:] {
		if id := payEvent(t, v, d).ID; id != first {
			t.Fatalf("redelivery %d: id %q, want %q", i+1, id, first)
		}
	}
	if seen[first] {
		t.Fatalf("the redelivered event has the id of a distinct one: %q", first)
	}
	_, err := v.Verify(payRequest(c.Tampered))
	payCode(t, err, verify.CodeBadSignature, "")
	for i, h := range c.Handshakes {
		res, err := v.Verify(payRequest(h.Delivery))
		if err != nil || res.Handshake == nil || len(res.Events) != 0 {
			t.Fatalf("handshake %d: %+v, %v", i, res, err)
		}
		if res.Handshake.Status != h.Status || (h.Body != nil && !bytes.Equal(res.Handshake.Body, h.Body)) {
			t.Fatalf("handshake %d: answered %d %q, want %d %q", i, res.Handshake.Status, res.Handshake.Body, h.Status, h.Body)
		}
	}
}
