package verify_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// The helpers the providers' tests share. A source is built as claimd
// builds it from the sources file: options decoded by
// Provider.DecodeOptions, the verifier made by Provider.New, which
// defaults and validates the shared Core before Build.

// --- clocks ------------------------------------------------------------------

// pvNow is the clock reading of the gitlab, bitbucket, linear, sentry,
// pagerduty, jira, meta and trello tests (pvBuild).
var pvNow = time.Unix(1_780_000_000, 0)

func pvClock() time.Time { return pvNow }

// payNow is the clock of the razorpay, paystack, lemonsqueezy, square,
// paypal, woocommerce and mollie tests (payBuild).
var payNow = time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)

// fixedClock returns a clock that always reads now.
func fixedClock(now time.Time) func() time.Time { return func() time.Time { return now } }

// --- building sources --------------------------------------------------------

// mustProvider returns the registered provider typ.
func mustProvider(t testing.TB, typ verify.Type) *verify.Provider {
	t.Helper()
	p, ok := verify.Lookup(typ)
	if !ok {
		t.Fatalf("provider %q is not registered", typ)
	}
	return p
}

// decodeOptions decodes the options m of a source of typ as the sources
// file writes them (snake_case keys) into typ's options struct
// (Provider.DecodeOptions), failing the test on an error. Nil m gives the
// struct's zero value (nil for a provider without options).
func decodeOptions(t testing.TB, typ verify.Type, m map[string]any) any {
	t.Helper()
	opts, err := mustProvider(t, typ).DecodeOptions(m)
	if err != nil {
		t.Fatalf("options of %s: %v", typ, err)
	}
	return opts
}

// tryBuild builds a source of typ from core and the options m as written
// in a sources file, and returns the verifier or the configuration error.
func tryBuild(t testing.TB, typ verify.Type, core verify.Core, m map[string]any) (verify.Verifier, error) {
	t.Helper()
	return mustProvider(t, typ).New(core, decodeOptions(t, typ, m))
}

// mustBuild is tryBuild failing the test on an error.
func mustBuild(t testing.TB, typ verify.Type, core verify.Core, m map[string]any) verify.Verifier {
	t.Helper()
	v, err := tryBuild(t, typ, core, m)
	if err != nil {
		t.Fatalf("build %s: %v", typ, err)
	}
	return v
}

// pvTryBuild is tryBuild with the clock at pvNow unless core sets one.
func pvTryBuild(t testing.TB, typ verify.Type, core verify.Core, m map[string]any) (verify.Verifier, error) {
	t.Helper()
	if core.Now == nil {
		core.Now = pvClock
	}
	return tryBuild(t, typ, core, m)
}

// pvBuild is pvTryBuild failing the test on an error.
func pvBuild(t testing.TB, typ verify.Type, core verify.Core, m map[string]any) verify.Verifier {
	t.Helper()
	v, err := pvTryBuild(t, typ, core, m)
	require.NoError(t, err)
	require.Equal(t, typ, v.Type())
	return v
}

// payBuild builds a source of typ from core and opts (an options struct
// pointer, from decodeOptions or written out, or nil for the defaults)
// with the clock at payNow unless core sets one, and returns the verifier
// or the configuration error.
func payBuild(typ verify.Type, core verify.Core, opts any) (verify.Verifier, error) {
	p, ok := verify.Lookup(typ)
	if !ok {
		return nil, errors.New("not registered")
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

// --- requests and results ----------------------------------------------------

// deliveryRequest turns a fixture delivery into a request (an absent
// header set is an empty one).
func deliveryRequest(d verifytest.Delivery) verify.Request {
	h := d.Header
	if h == nil {
		h = http.Header{}
	}
	return verify.Request{Method: d.Method, Header: h, RawQuery: d.RawQuery, Body: d.Body}
}

// withHeaders clones h and sets each name of the name, value pairs kv, or
// deletes it when the value is empty.
func withHeaders(h http.Header, kv ...string) http.Header {
	c := h.Clone()
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			c.Del(kv[i])
		} else {
			c.Set(kv[i], kv[i+1])
		}
	}
	return c
}

// verifyEvents verifies d and returns its events, failing on an error or a
// handshake.
func verifyEvents(t testing.TB, v verify.Verifier, d verifytest.Delivery) []verify.Event {
	t.Helper()
	res, err := v.Verify(deliveryRequest(d))
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if res.IsHandshake() {
		t.Fatal("got a handshake, want events")
	}
	return res.Events
}

// oneEvent verifies r and returns its only event, which has an ID.
func oneEvent(t testing.TB, v verify.Verifier, r verify.Request) verify.Event {
	t.Helper()
	res, err := v.Verify(r)
	require.NoError(t, err)
	require.Nil(t, res.Handshake)
	require.Len(t, res.Events, 1)
	require.NotEmpty(t, res.Events[0].ID)
	return res.Events[0]
}

// oneDeliveryEvent is oneEvent for a fixture delivery.
func oneDeliveryEvent(t testing.TB, v verify.Verifier, d verifytest.Delivery) verify.Event {
	t.Helper()
	return oneEvent(t, v, deliveryRequest(d))
}

// --- errors --------------------------------------------------------------------

// requireCode asserts that err is a *verify.Error with code and, when field
// is not empty, that field.
func requireCode(t testing.TB, err error, code verify.Code, field string) *verify.Error {
	t.Helper()
	var e *verify.Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v, want a *verify.Error %s", err, code)
	}
	if e.Code != code || (field != "" && e.Field != field) {
		t.Fatalf("got %s on %q (%v), want %s on %q", e.Code, e.Field, err, code, field)
	}
	return e
}

// requireRefused verifies d and asserts that it fails with code, in and
// field (an empty in or field is not checked).
func requireRefused(t testing.TB, v verify.Verifier, d verifytest.Delivery, code verify.Code, in verify.Location, field string) *verify.Error {
	t.Helper()
	_, err := v.Verify(deliveryRequest(d))
	var e *verify.Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v, want a *verify.Error %s", err, code)
	}
	if e.Code != code || (in != "" && e.In != in) || (field != "" && e.Field != field) {
		t.Fatalf("got %s %s %q (%s), want %s %s %q", e.Code, e.In, e.Field, e.Reason, code, in, field)
	}
	return e
}

// requireConfigField asserts that err is a *verify.ConfigError naming
// field.
func requireConfigField(t testing.TB, err error, field string) {
	t.Helper()
	var ce *verify.ConfigError
	if !errors.As(err, &ce) || ce.Field != field {
		t.Fatalf("got %v, want a config error naming %s", err, field)
	}
}

// --- fixtures ----------------------------------------------------------------

// fixtureOf returns the registered fixture of provider type typ.
func fixtureOf(t testing.TB, typ string) verifytest.Fixture {
	t.Helper()
	for _, f := range verifytest.Fixtures() {
		if f.Type == typ {
			return f
		}
	}
	t.Fatalf("no fixture for %s", typ)
	return verifytest.Fixture{}
}

// replayFixture replays the registered fixture of typ as TestFixtures
// does for every type (checkFixture).
func replayFixture(t *testing.T, typ string) {
	t.Helper()
	checkFixture(t, fixtureOf(t, typ), time.Now())
}

// --- MACs ----------------------------------------------------------------------

// hmacHex is the hex HMAC-SHA256 of body under secret, computed here
// independently of package verifytest.
func hmacHex(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
