package verify

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

var t0 = time.Unix(1700000000, 0)

func fixed(t time.Time) func() time.Time { return func() time.Time { return t } }

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// config is a verifier configuration as these tests write it: the
// arguments of New.
type config struct {
	typ  Type
	core Core
	opts any
}

func cfg(t Type, core Core, opts any) config { return config{typ: t, core: core, opts: opts} }

func newFrom(c config) (Verifier, error) { return New(c.typ, c.core, c.opts) }

func mustNew(t *testing.T, c config) Verifier {
	t.Helper()
	v, err := newFrom(c)
	require.NoError(t, err)
	require.Equal(t, c.typ, v.Type())
	return v
}

// requireCode asserts err is a *Error with code (and field, when given).
func requireCode(t *testing.T, err error, code Code, field string) *Error {
	t.Helper()
	require.Error(t, err)
	var e *Error
	require.True(t, errors.As(err, &e), "not a *verify.Error: %v", err)
	require.Equal(t, code, e.Code, "%v", err)
	if field != "" {
		require.Equal(t, field, e.Field, "%v", err)
	}
	require.True(t, errors.Is(err, &Error{Code: code}))
	return e
}

// one returns a checker that a verification yielded exactly one event, and
// that event: one(t)(v.Verify(req)).
func one(t *testing.T) func(Result, error) Event {
	t.Helper()
	return func(res Result, err error) Event {
		t.Helper()
		require.NoError(t, err)
		require.Nil(t, res.Handshake)
		require.Len(t, res.Events, 1)
		return res.Events[0]
	}
}

func TestJoinKey(t *testing.T) {
	t.Parallel()
	require.Equal(t, "3:abc|2:de", JoinKey("abc", "de"))
	require.Equal(t, "", JoinKey())
	require.Equal(t, "0:", JoinKey(""))
	require.Equal(t, "0:|0:", JoinKey("", ""))
	require.NotEqual(t, JoinKey("a:b", "c"), JoinKey("a", "b:c"))
	require.NotEqual(t, JoinKey("a|1:b"), JoinKey("a", "b"))
	require.Equal(t, "5:\xc3\xa9t\xc3\xa9|1:x", JoinKey("été", "x"), "lengths are in bytes (3 runes, 5 bytes)")
	parts, ok := splitKey(JoinKey("x|y", "", "1:2"))
	require.True(t, ok)
	require.Equal(t, []string{"x|y", "", "1:2"}, parts)
}

// splitKey is JoinKey's inverse (test only), proving the encoding is
// injective.
func splitKey(s string) ([]string, bool) {
	if s == "" {
		return nil, true
	}
	var parts []string
	for {
		i := strings.IndexByte(s, ':')
		if i <= 0 {
			return nil, false
		}
		n, err := strconv.Atoi(s[:i])
		if err != nil || n < 0 || strconv.Itoa(n) != s[:i] || i+1+n > len(s) {
			return nil, false
		}
		parts = append(parts, s[i+1:i+1+n])
		s = s[i+1+n:]
		if s == "" {
			return parts, true
		}
		if s[0] != '|' {
			return nil, false
		}
		s = s[1:]
	}
}

func TestParseTypeAndNew(t *testing.T) {
	t.Parallel()
	for _, ty := range Types() {
		got, err := ParseType(string(ty))
		require.NoError(t, err)
		require.Equal(t, ty, got)
	}
	_, err := ParseType("Stripe")
	require.ErrorIs(t, err, ErrUnknownType)
	require.Contains(t, err.Error(), "unknown verification type")
	_, err = ParseType("")
	require.ErrorIs(t, err, ErrUnknownType)
	_, err = New("", Core{Secrets: []string{"s"}}, nil)
	require.ErrorIs(t, err, ErrUnknownType)
	_, err = New("nope", Core{Secrets: []string{"s"}}, nil)
	require.ErrorIs(t, err, ErrUnknownType)
	// A config error is not an unknown-type error.
	_, err = newFrom(cfg(TypeStripe, Core{}, nil))
	require.Error(t, err)
	require.False(t, errors.Is(err, ErrUnknownType))
	v, err := newFrom(cfg(TypeGitHub, Core{Secrets: []string{"s"}}, nil))
	require.NoError(t, err)
	require.Equal(t, TypeGitHub, v.Type())
	// Options by value work as well as by pointer; nil is the zero value.
	_, err = New(TypeToken, Core{Secrets: []string{"s"}}, TokenOptions{Key: KeyRule{IDHeader: "X-Id"}})
	require.NoError(t, err)
	_, err = New(TypeToken, Core{Secrets: []string{"s"}}, nil)
	requireConfigField(t, err, "Key.IDHeader")
	// Options of another type, or for a provider without options, are
	// refused naming Options.
	_, err = New(TypeToken, Core{Secrets: []string{"s"}}, &HMACOptions{})
	requireConfigField(t, err, "Options")
	_, err = New(TypeStripe, Core{Secrets: []string{"s"}}, &HMACOptions{})
	requireConfigField(t, err, "Options")
}

// TestNewDefaults: New gives Build a core with the provider's own default
// tolerance (else DefaultTolerance), a source's own tolerance kept, and a
// clock.
func TestNewDefaults(t *testing.T) {
	t.Parallel()
	var got Core
	p := &Provider{Type: "test-defaults", Build: func(c Core, _ any) (Verifier, error) {
		got = c
		return &githubVerifier{}, nil
	}}
	_, err := p.New(Core{Secrets: []string{"s"}}, nil)
	require.NoError(t, err)
	require.Equal(t, DefaultTolerance, got.Tolerance)
	require.NotNil(t, got.Now)
	p.DefaultTolerance = 3 * time.Minute
	_, err = p.New(Core{Secrets: []string{"s"}}, nil)
	require.NoError(t, err)
	require.Equal(t, 3*time.Minute, got.Tolerance)
	_, err = p.New(Core{Secrets: []string{"s"}, Tolerance: time.Hour}, nil)
	require.NoError(t, err)
	require.Equal(t, time.Hour, got.Tolerance)
	// Secrets are checked before Build.
	_, err = p.New(Core{}, nil)
	requireConfigField(t, err, "Secrets")
}

func requireConfigField(t *testing.T, err error, field string) {
	t.Helper()
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, field, ce.Field)
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	good := []string{"s3cret"}
	sw := "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 24))
	tests := []struct {
		name   string
		cfg    config
		field  string
		reason string
	}{
		{"stripe no secrets", cfg(TypeStripe, Core{}, nil), "Secrets", "at least one secret"},
		{"stripe empty secret", cfg(TypeStripe, Core{Secrets: []string{"a", ""}}, nil), "Secrets[1]", "must not be empty"},
		{"stripe whitespace", cfg(TypeStripe, Core{Secrets: []string{"whsec_x\n"}}, nil), "Secrets[0]", "whitespace"},
		{"stripe negative tolerance", cfg(TypeStripe, Core{Secrets: good, Tolerance: -time.Second}, nil), "Tolerance", "must not be negative"},
		{"stripe bad pattern", cfg(TypeStripe, Core{Secrets: good, AllowedEventTypes: []string{"a*b"}}, nil), "AllowedEventTypes[0]", "'*'"},
		{"stripe empty pattern", cfg(TypeStripe, Core{Secrets: good, AllowedEventTypes: []string{""}}, nil), "AllowedEventTypes[0]", "must not be empty"},
		{"github no secrets", cfg(TypeGitHub, Core{}, nil), "Secrets", "at least one"},
		{"shopify no secrets", cfg(TypeShopify, Core{}, nil), "Secrets", "at least one"},
		{"slack negative tolerance", cfg(TypeSlack, Core{Secrets: good, Tolerance: -1}, nil), "Tolerance", "negative"},
		{"paddle no secrets", cfg(TypePaddle, Core{}, nil), "Secrets", "at least one"},
		{"zoom no secrets", cfg(TypeZoom, Core{}, nil), "Secrets", "at least one"},
		{"graph long clientState", cfg(TypeMSGraph, Core{Secrets: []string{strings.Repeat("x", 256)}}, nil), "Secrets[0]", "255"},
		{"sw empty", cfg(TypeStandardWebhooks, Core{Secrets: []string{"whsec_"}}, nil), "Secrets[0]", "decodes to 0 bytes"},
		{"sw not base64", cfg(TypeStandardWebhooks, Core{Secrets: []string{"whsec_!!!!"}}, nil), "Secrets[0]", "not valid standard base64"},
		{"sw short", cfg(TypeStandardWebhooks, Core{Secrets: []string{sw, "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 23))}}, nil), "Secrets[1]", "23 bytes"},
		{"sw long", cfg(TypeStandardWebhooks, Core{Secrets: []string{"whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 65))}}, nil), "Secrets[0]", "65 bytes"},
		{"sw private key", cfg(TypeStandardWebhooks, Core{Secrets: []string{"whsk_AAAA"}}, nil), "Secrets[0]", "private"},
		{"sw public key size", cfg(TypeStandardWebhooks, Core{Secrets: []string{"whpk_" + base64.StdEncoding.EncodeToString(make([]byte, 31))}}, nil), "Secrets[0]", "32"},
		{"hmac no header", cfg(TypeHMAC, Core{Secrets: good}, nil), "Signature.Header", "required"},
		{"hmac bad alg", cfg(TypeHMAC, Core{Secrets: good}, &HMACOptions{Signature: SignatureSpec{Header: "X-Sig", Algorithm: "md5"}}), "Signature.Algorithm", "sha1, sha256 or sha512"},
		{"hmac bad enc", cfg(TypeHMAC, Core{Secrets: good}, &HMACOptions{Signature: SignatureSpec{Header: "X-Sig", Encoding: "base32"}}), "Signature.Encoding", "hex or base64"},
		{"hmac no body", cfg(TypeHMAC, Core{Secrets: good}, &HMACOptions{Signature: SignatureSpec{Header: "X-Sig"}, SignedContent: "{timestamp}", TimestampHeader: "X-Ts", Key: KeyRule{IDHeader: "X-Id"}}), "SignedContent", "must contain {body}"},
		{"hmac unknown placeholder", cfg(TypeHMAC, Core{Secrets: good}, &HMACOptions{Signature: SignatureSpec{Header: "X-Sig"}, SignedContent: "{nonce}.{body}", Key: KeyRule{IDHeader: "X-Id"}}), "SignedContent", "has an unknown placeholder (known: {body}"},
		{"hmac unclosed", cfg(TypeHMAC, Core{Secrets: good}, &HMACOptions{Signature: SignatureSpec{Header: "X-Sig"}, SignedContent: "{body", Key: KeyRule{IDHeader: "X-Id"}}), "SignedContent", "unclosed"},
		{"hmac unsigned timestamp", cfg(TypeHMAC, Core{Secrets: good}, &HMACOptions{Signature: SignatureSpec{Header: "X-Sig"}, TimestampHeader: "X-Ts", Key: KeyRule{IDHeader: "X-Id"}}), "SignedContent", "unsigned timestamp"},
		{"hmac timestamp placeholder without header", cfg(TypeHMAC, Core{Secrets: good}, &HMACOptions{Signature: SignatureSpec{Header: "X-Sig"}, SignedContent: "{timestamp}.{body}", Key: KeyRule{IDHeader: "X-Id"}}), "TimestampHeader", "required"},
		{"hmac id placeholder without header", cfg(TypeHMAC, Core{Secrets: good}, &HMACOptions{Signature: SignatureSpec{Header: "X-Sig"}, SignedContent: "{id}.{body}", Key: KeyRule{IDPointers: []string{"/id"}}}), "Key.IDHeader", "{id}"},
		{"hmac both timestamps", cfg(TypeHMAC, Core{Secrets: good}, &HMACOptions{Signature: SignatureSpec{Header: "X-Sig"}, SignedContent: "{timestamp}.{body}", TimestampHeader: "X-Ts", TimestampPointer: "/ts", Key: KeyRule{IDHeader: "X-Id"}}), "TimestampPointer", "at most one"},
		{"hmac unit", cfg(TypeHMAC, Core{Secrets: good}, &HMACOptions{Signature: SignatureSpec{Header: "X-Sig"}, TimestampUnit: "us", Key: KeyRule{IDHeader: "X-Id"}}), "TimestampUnit", "s or ms"},
		{"hmac secret encoding", cfg(TypeHMAC, Core{Secrets: good}, &HMACOptions{SecretEncoding: "b64", Signature: SignatureSpec{Header: "X-Sig"}, Key: KeyRule{IDHeader: "X-Id"}}), "SecretEncoding", "raw, base64 or hex"},
		{"hmac secret not hex", cfg(TypeHMAC, Core{Secrets: []string{"zz"}}, &HMACOptions{SecretEncoding: "hex", Signature: SignatureSpec{Header: "X-Sig"}, Key: KeyRule{IDHeader: "X-Id"}}), "Secrets[0]", "not valid hex"},
		{"hmac no key rule", cfg(TypeHMAC, Core{Secrets: good}, &HMACOptions{Signature: SignatureSpec{Header: "X-Sig"}}), "Key.IDHeader", "exactly one"},
		{"hmac both key rules", cfg(TypeHMAC, Core{Secrets: good}, &HMACOptions{Signature: SignatureSpec{Header: "X-Sig"}, Key: KeyRule{IDHeader: "X-Id", IDPointers: []string{"/id"}}}), "Key.IDHeader", "exactly one"},
		{"hmac bad pointer", cfg(TypeHMAC, Core{Secrets: good}, &HMACOptions{Signature: SignatureSpec{Header: "X-Sig"}, Key: KeyRule{IDPointers: []string{"id"}}}), "Key.IDPointers[0]", "start with '/'"},
		{"hmac bad escape", cfg(TypeHMAC, Core{Secrets: good}, &HMACOptions{Signature: SignatureSpec{Header: "X-Sig"}, Key: KeyRule{IDPointers: []string{"/a~2"}}}), "Key.IDPointers[0]", "'~'"},
		{"hmac empty pointer", cfg(TypeHMAC, Core{Secrets: good}, &HMACOptions{Signature: SignatureSpec{Header: "X-Sig"}, Key: KeyRule{IDPointers: []string{""}}}), "Key.IDPointers[0]", "non-empty"},
		{"hmac both type", cfg(TypeHMAC, Core{Secrets: good}, &HMACOptions{Signature: SignatureSpec{Header: "X-Sig"}, Key: KeyRule{IDHeader: "X-Id", TypeHeader: "X-T", TypePointer: "/t"}}), "Key.TypePointer", "at most one"},
		{"token no key", cfg(TypeToken, Core{Secrets: good}, nil), "Key.IDHeader", "exactly one"},
		{"token scheme", cfg(TypeToken, Core{Secrets: good}, &TokenOptions{Scheme: "Bearer x", Key: KeyRule{IDHeader: "X-Id"}}), "Scheme", "single token"},
		{"ce auth none", cfg(TypeCloudEvents, Core{Secrets: good}, &CloudEventsOptions{Auth: "none"}), "Auth", "unauthenticated"},
		{"ce hmac header", cfg(TypeCloudEvents, Core{Secrets: good}, &CloudEventsOptions{Auth: CloudEventsAuthHMAC}), "Signature.Header", "required"},
		{"twilio url", cfg(TypeTwilio, Core{Secrets: good}, &TwilioOptions{URL: "mycompany.com/x"}), "URL", "absolute"},
		{"twilio query", cfg(TypeTwilio, Core{Secrets: good}, &TwilioOptions{URL: "https://mycompany.com/x?a=1"}), "URL", "query"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := newFrom(tt.cfg)
			require.Error(t, err)
			var ce *ConfigError
			require.True(t, errors.As(err, &ce), "%T %v", err, err)
			require.Equal(t, tt.field, ce.Field, "%v", err)
			require.Contains(t, ce.Reason, tt.reason)
			require.Equal(t, tt.cfg.typ, ce.Type)
			require.Contains(t, err.Error(), string(tt.cfg.typ)+" config: "+tt.field)
		})
	}
}

func TestWithDefaults(t *testing.T) {
	t.Parallel()
	c := Core{}.WithDefaults(0)
	require.Equal(t, DefaultTolerance, c.Tolerance)
	require.NotNil(t, c.Now)
	require.NotNil(t, c.HTTPClient)
	require.Equal(t, time.Hour, Core{}.WithDefaults(time.Hour).Tolerance)
	h := HMACOptions{}.WithDefaults()
	require.Equal(t, "sha256", h.Signature.Algorithm)
	require.Equal(t, EncodingHex, h.Signature.Encoding)
	require.Equal(t, "{body}", h.SignedContent)
	require.Equal(t, UnitSeconds, h.TimestampUnit)
	require.Equal(t, EncodingRaw, h.SecretEncoding)
	tk := TokenOptions{}.WithDefaults()
	require.Equal(t, "Authorization", tk.Header)
	require.Equal(t, "Bearer", tk.Scheme)
	tk = TokenOptions{Header: "X-Token"}.WithDefaults()
	require.Equal(t, "", tk.Scheme, "an explicit header carries the bare token")
	require.Equal(t, CloudEventsAuthBearer, CloudEventsOptions{}.WithDefaults().Auth)
	// New applies the defaults first.
	_, err := newFrom(cfg(TypeHMAC, Core{Secrets: []string{"s"}}, &HMACOptions{Signature: SignatureSpec{Header: "X-Sig"}, Key: KeyRule{IDHeader: "X-Id"}}))
	require.NoError(t, err)
	_, err = newFrom(cfg(TypeToken, Core{Secrets: []string{"s"}}, &TokenOptions{Key: KeyRule{IDHeader: "X-Id"}}))
	require.NoError(t, err)
	_, err = newFrom(cfg(TypeCloudEvents, Core{Secrets: []string{"s"}}, nil))
	require.NoError(t, err)
	// Explicit values survive.
	require.Equal(t, time.Minute, Core{Tolerance: time.Minute}.WithDefaults(0).Tolerance)
}

func TestTypeFilter(t *testing.T) {
	t.Parallel()
	f := newTypeFilter([]string{"customer.*", "invoice.paid", "x*"})
	for typ, ok := range map[string]bool{
		"customer.created": true, "customer.": true, "customer": false, "invoice.paid": true,
		"invoice.paid.extra": false, "x": true, "xy": true, "": false,
	} {
		require.Equal(t, ok, f.allows(typ), typ)
	}
	require.True(t, newTypeFilter(nil).allows(""))
	require.True(t, newTypeFilter([]string{"*"}).allows("anything"))
}

func TestHeaderLookup(t *testing.T) {
	t.Parallel()
	require.Equal(t, "", header(nil, "X"))
	require.Equal(t, "v", header(http.Header{"x-odd-case": {" v "}}, "X-Odd-Case"))
	require.Equal(t, "v", header(HeaderFunc(func(n string) string {
		if strings.EqualFold(n, "x-a") {
			return "v"
		}
		return ""
	}), "X-A"))
}

func TestErrorFormatting(t *testing.T) {
	t.Parallel()
	e := headerErr(CodeBadSignature, "Stripe-Signature", "no match")
	require.Equal(t, `verify: bad_signature: header "Stripe-Signature": no match`, e.Error())
	require.ErrorIs(t, e, ErrBadSignature)
	require.ErrorIs(t, e, &Error{Code: CodeBadSignature, In: InHeader, Field: "Stripe-Signature"})
	require.False(t, errors.Is(e, ErrMissingHeader))
	require.False(t, errors.Is(e, &Error{Code: CodeBadSignature, Field: "Other"}))
	q := &Error{Code: CodeMalformedHeader, In: InQuery, Reason: "bad"}
	require.Equal(t, "verify: malformed_header: query: bad", q.Error())
}

func TestStripe(t *testing.T) {
	t.Parallel()
	const secret, rolled = "whsec_test_secret", "whsec_test_secret_rolled_key"
	body := []byte(`{"id":"evt_1","object":"event","type":"customer.created","data":{"object":{"id":"cus_1"}}}`)
	connect := []byte(`{"id":"evt_2","object":"event","type":"account.updated","account":"acct_9","data":{"object":{"id":"acct_9"}}}`)
	thin := []byte(`{"id":"evt_3","object":"v2.core.event","type":"v1.billing.meter.error_report_triggered","context":"acct_7","related_object":{"id":"mtr_1"}}`)
	v := mustNew(t, cfg(TypeStripe, Core{Secrets: []string{rolled, secret}, Now: fixed(t0)}, nil))
	req := func(sigHeader string, b []byte) (Result, error) {
		return v.Verify(Request{Header: hdr("Stripe-Signature", sigHeader), Body: b})
	}

	ev := one(t)(req(verifytest.StripeHeader(t0.Unix(), body, secret), body))
	require.Equal(t, Event{ID: "evt_1", Type: "customer.created", ObjectID: "cus_1", Timestamp: t0}, ev)

	// Connect events are scoped by account; thin events by context.
	ev = one(t)(req(verifytest.StripeHeader(t0.Unix(), connect, secret), connect))
	require.Equal(t, JoinKey("acct_9", "evt_2"), ev.ID)
	require.Equal(t, "acct_9", ev.Scope)
	ev = one(t)(req(verifytest.StripeHeader(t0.Unix(), thin, secret), thin))
	require.Equal(t, JoinKey("acct_7", "evt_3"), ev.ID)
	require.Equal(t, "mtr_1", ev.ObjectID)

	// Either configured secret verifies; an unknown one does not.
	one(t)(req(verifytest.StripeHeader(t0.Unix(), body, rolled), body))
	_, err := req(verifytest.StripeHeader(t0.Unix(), body, "whsec_other"), body)
	requireCode(t, err, CodeBadSignature, StripeSignatureHeader)

	// The window holds both ways, inclusive at the edge.
	one(t)(req(verifytest.StripeHeader(t0.Unix()-300, body, secret), body))
	one(t)(req(verifytest.StripeHeader(t0.Unix()+300, body, secret), body))
	_, err = req(verifytest.StripeHeader(t0.Unix()+301, body, secret), body)
	e := requireCode(t, err, CodeTimestampOutsideTolerance, StripeSignatureHeader)
	require.Contains(t, e.Reason, "future")
	require.False(t, e.Authenticated)

	// Malformed headers.
	for _, h := range []string{"t=abc,v1=00", "v1=00", "t=1,t=2,v1=00", "t=-5,v1=00", "t=1,,v1=00", "garbage"} {
		_, err = req(h, body)
		requireCode(t, err, CodeMalformedHeader, StripeSignatureHeader)
	}
	_, err = req("", body)
	requireCode(t, err, CodeMissingHeader, StripeSignatureHeader)

	// Authentic but unusable bodies are flagged as authenticated.
	noID := []byte(`{"object":"event","type":"x"}`)
	_, err = req(verifytest.StripeHeader(t0.Unix(), noID, secret), noID)
	e = requireCode(t, err, CodeMissingField, "/id")
	require.True(t, e.Authenticated)
	notJSON := []byte(`not json`)
	_, err = req(verifytest.StripeHeader(t0.Unix(), notJSON, secret), notJSON)
	require.True(t, requireCode(t, err, CodeMalformedBody, "").Authenticated)

	// Allowed event types.
	f := mustNew(t, cfg(TypeStripe, Core{Secrets: []string{secret}, AllowedEventTypes: []string{"invoice.*"}, Now: fixed(t0)}, nil))
	_, err = f.Verify(Request{Header: hdr("Stripe-Signature", verifytest.StripeHeader(t0.Unix(), body, secret)), Body: body})
	e = requireCode(t, err, CodeEventTypeNotAllowed, "/type")
	require.True(t, e.Authenticated)
	require.Contains(t, e.Reason, `"customer.created"`)
}

func TestGitHub(t *testing.T) {
	t.Parallel()
	const secret = "It's a Secret to Everybody"
	body := []byte(`{"action":"opened"}`)
	v := mustNew(t, cfg(TypeGitHub, Core{Secrets: []string{"old", secret}, AllowedEventTypes: []string{"pull_request", "ping"}}, nil))
	h := hdr(GitHubSignatureHeader, verifytest.GitHub(secret, body), GitHubDeliveryHeader, "d-1", GitHubEventHeader, "pull_request")
	ev := one(t)(v.Verify(Request{Header: h, Body: body}))
	require.Equal(t, "d-1", ev.ID)
	require.Equal(t, "pull_request", ev.Type)

	upper := h.Clone()
	upper.Set(GitHubSignatureHeader, "sha256="+strings.ToUpper(strings.TrimPrefix(verifytest.GitHub(secret, body), "sha256=")))
	one(t)(v.Verify(Request{Header: upper, Body: body}))

	for _, bad := range []string{"sha1=abc", "sha256=xyz", "sha256=" + strings.Repeat("0", 63)} {
		b := h.Clone()
		b.Set(GitHubSignatureHeader, bad)
		_, err := v.Verify(Request{Header: b, Body: body})
		requireCode(t, err, CodeMalformedHeader, GitHubSignatureHeader)
	}
	noDelivery := h.Clone()
	noDelivery.Del(GitHubDeliveryHeader)
	_, err := v.Verify(Request{Header: noDelivery, Body: body})
	require.True(t, requireCode(t, err, CodeMissingHeader, GitHubDeliveryHeader).Authenticated)
	noEvent := h.Clone()
	noEvent.Del(GitHubEventHeader)
	_, err = v.Verify(Request{Header: noEvent, Body: body})
	requireCode(t, err, CodeMissingHeader, GitHubEventHeader)
	other := h.Clone()
	other.Set(GitHubEventHeader, "push")
	_, err = v.Verify(Request{Header: other, Body: body})
	requireCode(t, err, CodeEventTypeNotAllowed, GitHubEventHeader)
}

func TestStandardWebhooks(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	pub, priv, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	_, otherPriv, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	body := []byte(`{"type":"invoice.paid","data":{"id":"inv_1"}}`)
	ts := t0.Unix()
	v := mustNew(t, cfg(TypeStandardWebhooks, Core{Secrets: []string{secret, verifytest.StandardWebhooksPublicKey(pub)}, Now: fixed(t0)}, nil))
	do := func(sig string, b []byte) (Result, error) {
		return v.Verify(Request{Header: hdr("webhook-id", "msg_1", "webhook-timestamp", strconv.FormatInt(ts, 10), "webhook-signature", sig), Body: b})
	}
	hm, err := verifytest.StandardWebhooks(secret, "msg_1", ts, body)
	require.NoError(t, err)
	ev := one(t)(do(hm, body))
	require.Equal(t, Event{ID: "msg_1", Type: "invoice.paid", Timestamp: t0}, ev)

	// v1a ed25519 under a whpk_ key; a signature by another key fails.
	one(t)(do(verifytest.StandardWebhooksEd25519(priv, "msg_1", ts, body), body))
	_, err = do(verifytest.StandardWebhooksEd25519(otherPriv, "msg_1", ts, body), body)
	requireCode(t, err, CodeBadSignature, "webhook-signature")
	// Mixed list: unknown versions and junk skipped, one good entry enough.
	one(t)(do("v2,AAAA junk v1a,!!! "+verifytest.StandardWebhooksEd25519(priv, "msg_1", ts, body)+"  v1,"+strings.Repeat("A", 44), body))
	// Only unknown versions: nothing readable.
	_, err = do("v2,"+strings.TrimPrefix(hm, "v1,"), body)
	requireCode(t, err, CodeBadSignature, "webhook-signature")
	// The id is signed: another id fails.
	_, err = v.Verify(Request{Header: hdr("webhook-id", "msg_2", "webhook-timestamp", strconv.FormatInt(ts, 10), "webhook-signature", hm), Body: body})
	requireCode(t, err, CodeBadSignature, "")
	// Missing timestamp / signature.
	_, err = v.Verify(Request{Header: hdr("webhook-id", "msg_1", "webhook-signature", hm), Body: body})
	requireCode(t, err, CodeMissingHeader, "webhook-timestamp")
	_, err = v.Verify(Request{Header: hdr("webhook-id", "msg_1", "webhook-timestamp", "1"), Body: body})
	requireCode(t, err, CodeMissingHeader, "webhook-signature")
	// No headers at all names webhook-id.
	_, err = v.Verify(Request{Body: body})
	requireCode(t, err, CodeMissingHeader, "webhook-id")
	// Non-JSON bodies verify; the type is then empty.
	plain := []byte("hello")
	hp, _ := verifytest.StandardWebhooks(secret, "msg_1", ts, plain)
	require.Equal(t, "", one(t)(do(hp, plain)).Type)
	// Allowed types apply to the body type.
	f := mustNew(t, cfg(TypeStandardWebhooks, Core{Secrets: []string{secret}, AllowedEventTypes: []string{"user.*"}, Now: fixed(t0)}, nil))
	_, err = f.Verify(Request{Header: hdr("webhook-id", "msg_1", "webhook-timestamp", strconv.FormatInt(ts, 10), "webhook-signature", hm), Body: body})
	requireCode(t, err, CodeEventTypeNotAllowed, "/type")
	// Bare base64 secrets (no prefix) are accepted, as by the libraries.
	bare := mustNew(t, cfg(TypeStandardWebhooks, Core{Secrets: []string{strings.TrimPrefix(secret, "whsec_")}, Now: fixed(t0)}, nil))
	one(t)(bare.Verify(Request{Header: hdr("webhook-id", "msg_1", "webhook-timestamp", strconv.FormatInt(ts, 10), "webhook-signature", hm), Body: body}))
}

func TestShopifyFallbackToWebhookID(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":820982911946154508}`)
	v := mustNew(t, cfg(TypeShopify, Core{Secrets: []string{"shpss_FAKE"}}, nil))
	h := hdr(ShopifyHMACHeader, verifytest.Shopify("shpss_FAKE", body), ShopifyWebhookIDHeader, "wh-1", ShopifyTopicHeader, "orders/create")
	ev := one(t)(v.Verify(Request{Header: h, Body: body}))
	require.Equal(t, "wh-1", ev.ID)
	require.Equal(t, "820982911946154508", ev.ObjectID, "large ids keep every digit")
	h.Del(ShopifyWebhookIDHeader)
	_, err := v.Verify(Request{Header: h, Body: body})
	requireCode(t, err, CodeMissingHeader, ShopifyEventIDHeader)
	h.Set(ShopifyHMACHeader, "not base64")
	_, err = v.Verify(Request{Header: h, Body: body})
	requireCode(t, err, CodeMalformedHeader, ShopifyHMACHeader)
}

func TestSlack(t *testing.T) {
	t.Parallel()
	const secret = "8f742231b10e8888abcd99yyyzzz85a5"
	v := mustNew(t, cfg(TypeSlack, Core{Secrets: []string{secret}, Now: fixed(t0)}, nil))
	do := func(ts int64, body []byte) (Result, error) {
		return v.Verify(Request{Header: hdr(SlackTimestampHeader, strconv.FormatInt(ts, 10), SlackSignatureHeader, verifytest.Slack(secret, ts, body)), Body: body})
	}
	payload := url.Values{"payload": {`{"type":"block_actions","trigger_id":"13345224609.738474920.8088930838d88f008e0","team":{"id":"T9TK3CUKW"}}`}}
	ev := one(t)(do(t0.Unix(), []byte(payload.Encode())))
	require.Equal(t, Event{ID: "13345224609.738474920.8088930838d88f008e0", Type: "block_actions", Scope: "T9TK3CUKW", Timestamp: t0}, ev)

	res, err := do(t0.Unix(), []byte(`{"token":"x","type":"app_rate_limited","team_id":"T1","minute_rate_limited":1518467820}`))
	require.NoError(t, err)
	require.True(t, res.IsHandshake())
	require.Equal(t, http.StatusOK, res.Handshake.Status)

	_, err = do(t0.Unix()+301, []byte(`{"type":"event_callback","event_id":"Ev1","event":{"type":"message"}}`))
	requireCode(t, err, CodeTimestampOutsideTolerance, SlackTimestampHeader)
	_, err = do(t0.Unix(), []byte(`{"type":"event_callback","event":{"type":"message"}}`))
	requireCode(t, err, CodeMissingField, "/event_id")
	_, err = do(t0.Unix(), []byte(`text=hi`))
	requireCode(t, err, CodeMissingField, "command")
	_, err = do(t0.Unix(), []byte(`command=%2Fdeploy`))
	requireCode(t, err, CodeMissingField, "trigger_id")
	_, err = v.Verify(Request{Header: hdr(SlackTimestampHeader, "1700000000", SlackSignatureHeader, "v1=abc")})
	requireCode(t, err, CodeMalformedHeader, SlackSignatureHeader)
	_, err = v.Verify(Request{Header: hdr(SlackSignatureHeader, "v0=00")})
	requireCode(t, err, CodeMissingHeader, SlackTimestampHeader)

	f := mustNew(t, cfg(TypeSlack, Core{Secrets: []string{secret}, AllowedEventTypes: []string{"/deploy"}, Now: fixed(t0)}, nil))
	body := []byte("command=%2Fother&trigger_id=1.2.3&team_id=T1")
	_, err = f.Verify(Request{Header: hdr(SlackTimestampHeader, "1700000000", SlackSignatureHeader, verifytest.Slack(secret, t0.Unix(), body)), Body: body})
	requireCode(t, err, CodeEventTypeNotAllowed, "command")
}

func TestMSGraph(t *testing.T) {
	t.Parallel()
	v := mustNew(t, cfg(TypeMSGraph, Core{Secrets: []string{"old-state", "SecretClientState"}, AllowedEventTypes: []string{"created", "updated", "reauthorizationRequired"}}, nil))
	body := []byte(`{"value":[
		{"subscriptionId":"s1","clientState":"old-state","changeType":"updated","resource":"users/1/messages/2","resourceData":{"@odata.etag":"W/\"1\""}},
		{"subscriptionId":"s1","clientState":"SecretClientState","lifecycleEvent":"reauthorizationRequired","subscriptionExpirationDateTime":"2026-01-01T00:00:00Z","tenantId":"t1"},
		{"subscriptionId":"s1","clientState":"SecretClientState","changeType":"updated","resource":"users/1/messages/3"},
		{"id":"n4","subscriptionId":"s1","changeType":"created"},
		{"id":"n5","subscriptionId":"s1","clientState":"SecretClientState","changeType":"deleted"},
		{"id":"n6","clientState":"SecretClientState","changeType":"created"},
		"not an object"
	]}`)
	res, err := v.Verify(Request{Body: body})
	require.NoError(t, err)
	require.Len(t, res.Events, 2)
	require.Equal(t, JoinKey("s1", "updated", "users/1/messages/2", `W/"1"`), res.Events[0].ID)
	require.Equal(t, "users/1/messages/2", res.Events[0].ObjectID)
	// Repeated on purpose: a key of its own per notification (keys_test.go).
	require.True(t, strings.HasPrefix(res.Events[1].ID, JoinKey("s1", "reauthorizationRequired", "2026-01-01T00:00:00Z", "delivery")+"|"), res.Events[1].ID)
	require.Equal(t, "reauthorizationRequired", res.Events[1].Type)
	require.Equal(t, "t1", res.Events[1].Scope)
	// The payload keeps the notification but never the clientState secret.
	require.JSONEq(t, `{"subscriptionId":"s1","lifecycleEvent":"reauthorizationRequired","subscriptionExpirationDateTime":"2026-01-01T00:00:00Z","tenantId":"t1"}`, string(res.Events[1].Payload))
	require.NotContains(t, string(res.Events[0].Payload), "SecretClientState")

	want := []struct {
		index int
		code  Code
		field string
	}{
		{2, CodeMissingField, "/value/2/id"},
		{3, CodeMissingField, "/value/3/clientState"},
		{4, CodeEventTypeNotAllowed, "/value/4/changeType"},
		{5, CodeMissingField, "/value/5/subscriptionId"},
		{6, CodeMalformedBody, "/value/6"},
	}
	require.Len(t, res.Rejected, len(want))
	for i, w := range want {
		require.Equal(t, w.index, res.Rejected[i].Index)
		requireCode(t, res.Rejected[i].Err, w.code, w.field)
	}

	// All items rejected: the request fails with the first item's error.
	_, err = v.Verify(Request{Body: []byte(`{"value":[{"id":"1","subscriptionId":"s","clientState":"nope","changeType":"created"}]}`)})
	e := requireCode(t, err, CodeBadSignature, "/value/0/clientState")
	require.False(t, e.Authenticated)
	_, err = v.Verify(Request{Body: []byte(`{"value":[]}`)})
	requireCode(t, err, CodeMalformedBody, "/value")
	_, err = v.Verify(Request{Body: []byte(`[]`)})
	requireCode(t, err, CodeMalformedBody, "")
	_, err = v.Verify(Request{RawQuery: "validationToken=%zz"})
	requireCode(t, err, CodeMalformedHeader, "")
	// An empty token is echoed as empty.
	res, err = v.Verify(Request{RawQuery: "validationToken="})
	require.NoError(t, err)
	require.Empty(t, res.Handshake.Body)
}

func TestCloudEvents(t *testing.T) {
	t.Parallel()
	bearerV := mustNew(t, cfg(TypeCloudEvents, Core{Secrets: []string{"tok-a", "tok-b"}, AllowedEventTypes: []string{"com.example.*"}}, nil))
	ceH := func(extra ...string) http.Header {
		return hdr(append([]string{"Authorization", "bearer tok-b", "ce-specversion", "1.0", "ce-id", "A%2FB", "ce-source", "%2Fsrc", "ce-type", "com.example.x", "ce-subject", "order%201"}, extra...)...)
	}
	ev := one(t)(bearerV.Verify(Request{Header: ceH(), Body: []byte("{}")}))
	require.Equal(t, Event{ID: JoinKey("/src", "A/B"), Type: "com.example.x", ObjectID: "order 1"}, ev)

	// '+' is not a space in header percent-encoding.
	plus := ceH()
	plus.Set("ce-source", "/a+b")
	require.Equal(t, JoinKey("/a+b", "A/B"), one(t)(bearerV.Verify(Request{Header: plus})).ID)

	for name, mut := range map[string]func(h http.Header){
		"wrong token":   func(h http.Header) { h.Set("Authorization", "Bearer tok-c") },
		"basic scheme":  func(h http.Header) { h.Set("Authorization", "Basic tok-b") },
		"no auth":       func(h http.Header) { h.Del("Authorization") },
		"missing id":    func(h http.Header) { h.Del("ce-id") },
		"bad escape":    func(h http.Header) { h.Set("ce-source", "%zz") },
		"old spec":      func(h http.Header) { h.Set("ce-specversion", "0.3") },
		"type filtered": func(h http.Header) { h.Set("ce-type", "org.other") },
	} {
		h := ceH()
		mut(h)
		_, err := bearerV.Verify(Request{Header: h})
		want := map[string]Code{
			"wrong token": CodeBadSignature, "basic scheme": CodeMalformedHeader, "no auth": CodeMissingHeader,
			"missing id": CodeMissingHeader, "bad escape": CodeMalformedHeader, "old spec": CodeMalformedHeader,
			"type filtered": CodeEventTypeNotAllowed,
		}[name]
		requireCode(t, err, want, "")
	}

	// Batch mode: one bad item is rejected, the rest accepted.
	batch := []byte(`[{"specversion":"1.0","id":"1","source":"/s","type":"com.example.a"},{"specversion":"1.0","id":"2","source":"/s"},{"specversion":"1.0","id":"3","source":"/s","type":"com.example.b","subject":"x"}]`)
	res, err := bearerV.Verify(Request{Header: hdr("Authorization", "Bearer tok-a", "Content-Type", "application/cloudevents-batch+json"), Body: batch})
	require.NoError(t, err)
	require.Len(t, res.Events, 2)
	require.Equal(t, JoinKey("/s", "3"), res.Events[1].ID)
	require.JSONEq(t, `{"specversion":"1.0","id":"3","source":"/s","type":"com.example.b","subject":"x"}`, string(res.Events[1].Payload))
	require.Len(t, res.Rejected, 1)
	require.Equal(t, 1, res.Rejected[0].Index)
	requireCode(t, res.Rejected[0].Err, CodeMissingField, "/1/type")
	_, err = bearerV.Verify(Request{Header: hdr("Authorization", "Bearer tok-a", "Content-Type", "application/cloudevents-batch+json"), Body: []byte(`[]`)})
	requireCode(t, err, CodeMalformedBody, "")
	_, err = bearerV.Verify(Request{Header: hdr("Authorization", "Bearer tok-a", "Content-Type", "application/cloudevents+avro"), Body: []byte(`x`)})
	requireCode(t, err, CodeMalformedHeader, "Content-Type")

	// HMAC auth over the raw body.
	hv := mustNew(t, cfg(TypeCloudEvents, Core{Secrets: []string{"k"}}, &CloudEventsOptions{Auth: CloudEventsAuthHMAC, Signature: SignatureSpec{Header: "X-Signature", Prefix: "sha256="}}))
	body := []byte(`{"specversion":"1.0","id":"9","source":"/h","type":"t"}`)
	sig := "sha256=" + verifytest.HexHMACSHA256("k", body)
	h := hdr("X-Signature", sig, "Content-Type", "application/cloudevents+json; charset=utf-8")
	require.Equal(t, JoinKey("/h", "9"), one(t)(hv.Verify(Request{Header: h, Body: body})).ID)
	_, err = hv.Verify(Request{Header: h, Body: append(body, ' ')})
	requireCode(t, err, CodeBadSignature, "X-Signature")
	h.Set("X-Signature", "md5=00")
	_, err = hv.Verify(Request{Header: h, Body: body})
	requireCode(t, err, CodeMalformedHeader, "X-Signature")
}

func TestGenericHMAC(t *testing.T) {
	t.Parallel()
	const secret = "generic-FAKE"
	body := []byte(`{"event":{"id":"e-1","type":"order.paid","version":7,"object":42},"ts":1700000000123}`)

	t.Run("timestamp header template", func(t *testing.T) {
		t.Parallel()
		v := mustNew(t, cfg(TypeHMAC, Core{Secrets: []string{secret}, Now: fixed(t0)}, &HMACOptions{Signature: SignatureSpec{Header: "X-Sig", Prefix: "v1="}, SignedContent: "{timestamp}.{body}", TimestampHeader: "X-Ts", Key: KeyRule{IDPointers: []string{"/event/id"}, TypePointer: "/event/type", ObjectIDPointer: "/event/object", ObjectVersionPointer: "/event/version"}}))
		sign := func(ts string, b []byte) http.Header {
			return hdr("X-Sig", "v1="+verifytest.HexHMACSHA256(secret, []byte(ts+"."), b), "X-Ts", ts)
		}
		ev := one(t)(v.Verify(Request{Header: sign("1700000000", body), Body: body}))
		seven := int64(7)
		require.Equal(t, Event{ID: "e-1", Type: "order.paid", ObjectID: "42", ObjectVersion: &seven, Timestamp: t0}, ev)
		_, err := v.Verify(Request{Header: sign("1699999000", body), Body: body})
		requireCode(t, err, CodeTimestampOutsideTolerance, "X-Ts")
		_, err = v.Verify(Request{Header: sign("soon", body), Body: body})
		requireCode(t, err, CodeMalformedHeader, "X-Ts")
		h := sign("1700000000", body)
		h.Set("X-Ts", "1700000001") // the timestamp is signed
		_, err = v.Verify(Request{Header: h, Body: body})
		requireCode(t, err, CodeBadSignature, "X-Sig")
		h.Del("X-Ts")
		_, err = v.Verify(Request{Header: h, Body: body})
		requireCode(t, err, CodeMissingHeader, "X-Ts")
		h = sign("1700000000", body)
		h.Set("X-Sig", strings.TrimPrefix(h.Get("X-Sig"), "v1="))
		_, err = v.Verify(Request{Header: h, Body: body})
		requireCode(t, err, CodeMalformedHeader, "X-Sig")
		badVer := []byte(`{"event":{"id":"e-1","type":"t","version":"seven"}}`)
		_, err = v.Verify(Request{Header: sign("1700000000", badVer), Body: badVer})
		requireCode(t, err, CodeMalformedBody, "/event/version")
		noID := []byte(`{"event":{"id":null}}`)
		_, err = v.Verify(Request{Header: sign("1700000000", noID), Body: noID})
		require.True(t, requireCode(t, err, CodeMissingField, "/event/id").Authenticated)
	})

	t.Run("sha512 base64 with id and rotation separator", func(t *testing.T) {
		t.Parallel()
		keyA, keyB := []byte("key-a-FAKE"), []byte("key-b-FAKE")
		v := mustNew(t, cfg(TypeHMAC, Core{Secrets: []string{base64.StdEncoding.EncodeToString(keyB)}}, &HMACOptions{SecretEncoding: EncodingBase64, Signature: SignatureSpec{Header: "X-Sig", Algorithm: "sha512", Encoding: EncodingBase64, Separator: ","}, SignedContent: "{id}:{body}", Key: KeyRule{IDHeader: "X-Delivery", TypeHeader: "X-Event"}}))
		sig := func(k []byte) string {
			return base64.StdEncoding.EncodeToString(macOf(sha512.New, k, []byte("dlv-1:"), body))
		}
		h := hdr("X-Sig", sig(keyA)+", "+sig(keyB), "X-Delivery", "dlv-1", "X-Event", "order.paid")
		ev := one(t)(v.Verify(Request{Header: h, Body: body}))
		require.Equal(t, "dlv-1", ev.ID)
		require.Equal(t, "order.paid", ev.Type)
		require.True(t, ev.Timestamp.IsZero())
		h.Set("X-Delivery", "dlv-2") // the id is signed
		_, err := v.Verify(Request{Header: h, Body: body})
		requireCode(t, err, CodeBadSignature, "X-Sig")
	})

	t.Run("milliseconds in a timestamp header", func(t *testing.T) {
		t.Parallel()
		v := mustNew(t, cfg(TypeHMAC, Core{Secrets: []string{secret}, Now: fixed(t0)}, &HMACOptions{Signature: SignatureSpec{Header: "X-Sig"}, SignedContent: "{timestamp}{body}", TimestampHeader: "X-Ts", TimestampUnit: UnitMilliseconds, Key: KeyRule{IDPointers: []string{"/event/type", "/event/id"}}}))
		h := hdr("X-Sig", verifytest.HexHMACSHA256(secret, []byte("1700000000500"), body), "X-Ts", "1700000000500")
		ev := one(t)(v.Verify(Request{Header: h, Body: body}))
		require.Equal(t, JoinKey("order.paid", "e-1"), ev.ID)
		require.Equal(t, time.UnixMilli(1700000000500), ev.Timestamp)
	})

	t.Run("seconds read as milliseconds are stale", func(t *testing.T) {
		t.Parallel()
		v := mustNew(t, cfg(TypeHMAC, Core{Secrets: []string{secret}, Now: fixed(t0)}, &HMACOptions{Signature: SignatureSpec{Header: "X-Sig"}, TimestampPointer: "/ts", Key: KeyRule{IDHeader: "X-Id"}}))
		h := hdr("X-Sig", verifytest.HexHMACSHA256(secret, body), "X-Id", "1")
		_, err := v.Verify(Request{Header: h, Body: body})
		requireCode(t, err, CodeTimestampOutsideTolerance, "/ts")
		notJSON := []byte("x")
		_, err = v.Verify(Request{Header: hdr("X-Sig", verifytest.HexHMACSHA256(secret, notJSON), "X-Id", "1"), Body: notJSON})
		requireCode(t, err, CodeMalformedBody, "")
	})
}

func TestToken(t *testing.T) {
	t.Parallel()
	v := mustNew(t, cfg(TypeToken, Core{Secrets: []string{"t-1"}}, &TokenOptions{Key: KeyRule{IDHeader: "X-Id"}}))
	ev := one(t)(v.Verify(Request{Header: hdr("Authorization", "Bearer t-1", "X-Id", "a")}))
	require.Equal(t, "a", ev.ID)
	_, err := v.Verify(Request{Header: hdr("Authorization", "Bearer t-11", "X-Id", "a")})
	requireCode(t, err, CodeBadSignature, "Authorization")
	_, err = v.Verify(Request{Header: hdr("Authorization", "t-1", "X-Id", "a")})
	requireCode(t, err, CodeMalformedHeader, "Authorization")
	_, err = v.Verify(Request{Header: hdr("Authorization", "Bearer t-1")})
	requireCode(t, err, CodeMissingHeader, "X-Id")
	raw := mustNew(t, cfg(TypeToken, Core{Secrets: []string{"t-1"}}, &TokenOptions{Header: "X-Secret", Key: KeyRule{IDPointers: []string{"/id"}}}))
	require.Equal(t, "5", one(t)(raw.Verify(Request{Header: hdr("X-Secret", "t-1"), Body: []byte(`{"id":5}`)})).ID)
	_, err = raw.Verify(Request{Header: hdr("X-Secret", "Bearer t-1"), Body: []byte(`{"id":5}`)})
	requireCode(t, err, CodeBadSignature, "X-Secret")
	_, err = raw.Verify(Request{Header: hdr("X-Secret", "t-1"), Body: []byte(`{"id":true}`)})
	requireCode(t, err, CodeMalformedBody, "/id")
}

func TestPaddle(t *testing.T) {
	t.Parallel()
	body := []byte(`{"event_id":"evt_1","event_type":"transaction.completed","data":{"id":"txn_1"}}`)
	v := mustNew(t, cfg(TypePaddle, Core{Secrets: []string{"pdl_new"}, Now: fixed(t0)}, nil))
	ev := one(t)(v.Verify(Request{Header: hdr(PaddleSignatureHeader, verifytest.Paddle(t0.Unix(), body, "pdl_old", "pdl_new")), Body: body}))
	require.Equal(t, Event{ID: "evt_1", Type: "transaction.completed", ObjectID: "txn_1", Timestamp: t0}, ev)
	// Stripe habit: ',' instead of ';' is malformed.
	comma := strings.ReplaceAll(verifytest.Paddle(t0.Unix(), body, "pdl_new"), ";", ",")
	_, err := v.Verify(Request{Header: hdr(PaddleSignatureHeader, comma), Body: body})
	requireCode(t, err, CodeMalformedHeader, PaddleSignatureHeader)
	_, err = v.Verify(Request{Header: hdr(PaddleSignatureHeader, "ts=1700000000"), Body: body})
	requireCode(t, err, CodeBadSignature, PaddleSignatureHeader)
	_, err = v.Verify(Request{Header: hdr(PaddleSignatureHeader, verifytest.Paddle(t0.Unix()-301, body, "pdl_new")), Body: body})
	requireCode(t, err, CodeTimestampOutsideTolerance, PaddleSignatureHeader)
	noID := []byte(`{"event_type":"x"}`)
	_, err = v.Verify(Request{Header: hdr(PaddleSignatureHeader, verifytest.Paddle(t0.Unix(), noID, "pdl_new")), Body: noID})
	requireCode(t, err, CodeMissingField, "/event_id")
}

func TestZoomHandshakeUsesTheVerifyingSecret(t *testing.T) {
	t.Parallel()
	body := []byte(`{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1654503849680,"event":"endpoint.url_validation"}`)
	v := mustNew(t, cfg(TypeZoom, Core{Secrets: []string{"other-FAKE", "secretValueTest"}, Now: fixed(time.Unix(1654503849, 0))}, nil))
	res, err := v.Verify(Request{Header: hdr(ZoomTimestampHeader, "1654503849", ZoomSignatureHeader, verifytest.Zoom("secretValueTest", 1654503849, body)), Body: body})
	require.NoError(t, err)
	require.JSONEq(t, `{"plainToken":"qgg8vlvZRS6UYooatFL8Aw","encryptedToken":"70c1f2e2e6ca2d39297490d1f9142c7d701415ea8e6151f6562a08fa657a40ff"}`, string(res.Handshake.Body))
	noObj := []byte(`{"event":"app.deauthorized","event_ts":1654503849000,"payload":{"account_id":"A"}}`)
	ev := one(t)(v.Verify(Request{Header: hdr(ZoomTimestampHeader, "1654503849", ZoomSignatureHeader, verifytest.Zoom("other-FAKE", 1654503849, noObj)), Body: noObj}))
	sum := sha256.Sum256([]byte(`{"account_id":"A"}`))
	require.Equal(t, JoinKey("app.deauthorized", "1654503849000", "sha256:"+hex.EncodeToString(sum[:])), ev.ID)
}

func TestTwilio(t *testing.T) {
	t.Parallel()
	params := url.Values{"CallSid": {"CA1"}, "CallStatus": {"completed"}, "From": {"+14158675309"}}
	v := mustNew(t, cfg(TypeTwilio, Core{Secrets: []string{"12345"}, AllowedEventTypes: []string{"completed"}}, &TwilioOptions{URL: "http://example.com/hook"}))
	for _, signed := range []string{"http://example.com/hook?x=1", "http://example.com:80/hook?x=1"} {
		h := hdr(TwilioSignatureHeader, verifytest.Twilio("12345", signed, params))
		ev := one(t)(v.Verify(Request{Header: h, RawQuery: "x=1", Body: []byte(params.Encode())}))
		sum := sha256.Sum256([]byte(JoinKey("x=1", "CallSid", "CA1", "CallStatus", "completed", "From", "+14158675309")))
		require.Equal(t, JoinKey("CA1", "completed", "sha256:"+hex.EncodeToString(sum[:])), ev.ID)
		require.Equal(t, "completed", ev.Type)
		require.Equal(t, "CA1", ev.ObjectID)
	}
	h := hdr(TwilioSignatureHeader, verifytest.Twilio("12345", "http://example.com/hook", params), TwilioIdempotencyHeader, "idem-1")
	require.Equal(t, "idem-1", one(t)(v.Verify(Request{Header: h, Body: []byte(params.Encode())})).ID)
	// The query is signed.
	_, err := v.Verify(Request{Header: h, RawQuery: "x=2", Body: []byte(params.Encode())})
	requireCode(t, err, CodeBadSignature, TwilioSignatureHeader)
	_, err = v.Verify(Request{Header: hdr(TwilioSignatureHeader, "AAAA"), Body: []byte(params.Encode())})
	requireCode(t, err, CodeMalformedHeader, TwilioSignatureHeader)
	ringing := url.Values{"CallSid": {"CA1"}, "CallStatus": {"ringing"}}
	_, err = v.Verify(Request{Header: hdr(TwilioSignatureHeader, verifytest.Twilio("12345", "http://example.com/hook", ringing)), Body: []byte(ringing.Encode())})
	requireCode(t, err, CodeEventTypeNotAllowed, "status")
}

func TestJSONPointerRFC6901Examples(t *testing.T) {
	t.Parallel()
	// RFC 6901 §5.
	doc, derr := decodeJSON([]byte(`{"foo":["bar","baz"],"":0,"a/b":1,"c%d":2,"e^f":3,"g|h":4,"i\\j":5,"k\"l":6," ":7,"m~n":8}`))
	require.Nil(t, derr)
	for ptr, want := range map[string]string{
		"/foo/0": "bar", "/": "0", "/a~1b": "1", "/c%d": "2", "/e^f": "3", "/g|h": "4",
		`/i\j`: "5", `/k"l`: "6", "/ ": "7", "/m~0n": "8",
	} {
		p, err := parsePointer(ptr)
		require.NoError(t, err, ptr)
		got, e := p.scalar(doc)
		require.Nil(t, e, ptr)
		require.Equal(t, want, got, ptr)
	}
	p, _ := parsePointer("")
	v, ok, _ := p.get(doc)
	require.True(t, ok)
	require.IsType(t, map[string]any{}, v)
	for _, missing := range []string{"/foo/2", "/foo/01", "/foo/-", "/nope", "/foo/0/x"} {
		p, err := parsePointer(missing)
		require.NoError(t, err)
		_, ok, _ := p.get(doc)
		require.False(t, ok, missing)
	}
	_, derr = decodeJSON([]byte(`{} {}`))
	require.NotNil(t, derr)
}

func TestFlexString(t *testing.T) {
	t.Parallel()
	var v struct {
		A, B, C, D flexString
	}
	require.NoError(t, unmarshalJSONForTest(`{"A":"x","B":12345678901234567890,"C":null,"D":{"k":1}}`, &v))
	require.Equal(t, flexString("x"), v.A)
	require.Equal(t, flexString("12345678901234567890"), v.B)
	require.Equal(t, flexString(""), v.C)
	require.Equal(t, flexString(""), v.D)
}

func unmarshalJSONForTest(s string, v any) error {
	if e := unmarshalBody([]byte(s), v); e != nil {
		return e
	}
	return nil
}

func TestEqualSecret(t *testing.T) {
	t.Parallel()
	require.True(t, equalSecret("abc", "abc"))
	require.False(t, equalSecret("abc", "abd"))
	require.False(t, equalSecret("abc", "abcd"))
	require.False(t, equalSecret("", "a"))
	sum := sha256.Sum256([]byte("x"))
	require.Len(t, hex.EncodeToString(sum[:]), 64)
}
