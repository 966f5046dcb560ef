package verify_test

import (
	"crypto/rand"
	"crypto/rsa"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// The PayPal vector is computed from the documented algorithm
// (https://developer.paypal.com/api/rest/webhooks/rest/#link-selfverificationmethod:
// SHA256withRSA over "<transmission id>|<transmission time>|<webhook
// id>|<crc32 of the body>") by an independent computation: a key and
// certificate made with `openssl req -x509 -newkey rsa:2048`, the CRC32 of
// the body with Python's zlib.crc32 (3421084797), the signature with
// `openssl dgst -sha256 -sign`. PayPal's published sample (its REST SDK's
// ValidateWebhookEvent) cannot serve: it shows the body re-serialised, not
// the bytes whose CRC was signed, and needs a certificate fetched from
// PayPal.
const paypalVectorCert = `-----BEGIN CERTIFICATE-----
MIIDPzCCAiegAwIBAgIUaV0D7s2zibyWNcJUxR4P4RTTPzEwDQYJKoZIhvcNAQEL
BQAwLjEsMCoGA1UEAwwjbWVzc2FnZXZlcmlmaWNhdGlvbmNlcnRzLnBheXBhbC5j
b20wIBcNMjYxMjA1MDQxOTM0WhgPMjEyNjExMTEwNDE5MzRaMC4xLDAqBgNVBAMM
I21lc3NhZ2V2ZXJpZmljYXRpb25jZXJ0cy5wYXlwYWwuY29tMIIBIjANBgkqhkiG
9w0BAQEFAAOCAQ8AMIIBCgKCAQEAqnDw6fWHhgBQd1OAcDZnxtGv3Iv/R25D/FKb
6KLmEf2+nJz0Jg+nRhoJPKHgfj0sPKPxkuSuch0xbQzuCpl20PL4NKGi9dKmLTFL
7FrO30dOQ7g6nEA8S9paFl0Ty8rdJ0kInqeIZu2IctHarF6idN19pP3AaLLOheUP
YVmKvO4v9n41+rrRuOfERVpDVr/bMuW0OXVj8p5UDnfEWx6xkDvuJnVn+vdsZ/+p
L9a5WE5hBNZgMRtpuKIDhVFtgzH9kmXCXtjSYnoKsSdkxZNdJX8x4Um+oXBURgPS
J4ARaDwHt0VLSlDNiA1GDGzB3sHJ01HPh/Hfsz7Ly/vT7lhVgwIDAQABo1MwUTAd
BgNVHQ4EFgQUCcneU/NGd5utngNngra9hcpNl0kwHwYDVR0jBBgwFoAUCcneU/NG
d5utngNngra9hcpNl0kwDwYDVR0TAQH/BAUwAwEB/zANBgkqhkiG9w0BAQsFAAOC
AQEAo1sp02918Ykv9PpFiE0mp7apLK9v6eHCu6xo2raK8Yb1e9eHuNRFzsIGZxhF
x8fsggYyO8x2kCI7OKwhO+2ffA4Xyw/+1Voyc0bG2j05xlxLbkFYdgXROQsbOICP
w/rkywlr6BVPohkETLRbmBduHncD7p/0HXMe3eLA682VVj5Uv/xn1sFtwlFIEUF5
u2Tl/q1j1RqIM2ajdsyoMLFApolGdJeu9Gu/KLcTHU6CXrUlYgaSUIMxGcJZgHvM
CAYEvBdnnKbusCpj+kiJivkitfCr6rUUE7NfAhB9Cz5HmaEYQA4NCbWVftMm8aTk
R/H+plv7xySZqYEQwUsxvaPcwA==
-----END CERTIFICATE-----
`

const paypalVectorSig = "Knmy/bT3MfVzBd2Aju+dvlXSQBHsDtnEjUThAeCtUjRDyn41nKrYl2xbTzVjE3FjXsHRFSLMm0sY+P4PoHRb1TgymuWhoGgE6r8O5/KgvOMkPFrgKgGoYV7TUcQK+ExpdjMMGaNw3FVHxkpUSCt9N1YF862j2q6no9OceM3W5Ifrxe2CeeB1PV5l7Z9fZ6BrBgMlDyiZ/SD5g6sgRxOD+49SuKwmcRmm3ohP6dH07fD4G9/IEmgeLZDsju4sJ0PvPCkfAGCvcKd5K9cXJldUk/ah/sKmwVYOovby/ROY1jljzoO3hHRnmAogo1lJnkvHruGw5fAuvg4zbs5BRjob8g=="

const paypalVectorBody = `{"id":"WH-2WR32451HC0233532-67976317FL4543714","event_version":"1.0","create_time":"2026-03-14T15:09:20.000Z","resource_type":"capture","event_type":"PAYMENT.CAPTURE.COMPLETED","summary":"Payment completed for $ 7.47 USD","resource":{"id":"42311647XV020574X","status":"COMPLETED","amount":{"currency_code":"USD","value":"7.47"}}}`

const (
	paypalVectorTID     = "b9d3f2a0-1f4e-11f1-9e4e-7b5a0e1c2d3f"
	paypalVectorTime    = "2026-03-14T15:09:26Z"
	paypalVectorWebhook = "8PT597110X687430LN"
)

func paypalVectorDelivery() verifytest.Delivery {
	h := http.Header{}
	h.Set("PAYPAL-TRANSMISSION-ID", paypalVectorTID)
	h.Set("PAYPAL-TRANSMISSION-TIME", paypalVectorTime)
	h.Set("PAYPAL-TRANSMISSION-SIG", paypalVectorSig)
	h.Set("PAYPAL-CERT-URL", "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-a5cafa77")
	h.Set("PAYPAL-AUTH-ALGO", "SHA256withRSA")
	return verifytest.Delivery{Header: h, Body: []byte(paypalVectorBody)}
}

func paypalOpts(t *testing.T, m map[string]any) any {
	t.Helper()
	return decodeOptions(t, verify.TypePayPal, m)
}

func paypalFixed(t *testing.T, certs ...string) verify.Verifier {
	t.Helper()
	cs := make([]any, len(certs))
	for i, c := range certs {
		cs[i] = c
	}
	return payMust(t, verify.TypePayPal, verify.Core{}, paypalOpts(t, map[string]any{"webhook_id": paypalVectorWebhook, "certificates": cs}))
}

func TestPayPalVector(t *testing.T) {
	v := paypalFixed(t, paypalVectorCert)
	ev := oneDeliveryEvent(t, v, paypalVectorDelivery())
	if ev.ID != "WH-2WR32451HC0233532-67976317FL4543714" || ev.Type != "PAYMENT.CAPTURE.COMPLETED" || ev.ObjectID != "42311647XV020574X" || !ev.Timestamp.Equal(payNow) {
		t.Fatalf("event %+v", ev)
	}
	// Another webhook id is another signed text.
	other := payMust(t, verify.TypePayPal, verify.Core{}, paypalOpts(t, map[string]any{"webhook_id": "1JE4291016473214C", "certificates": []any{paypalVectorCert}}))
	_, err := other.Verify(deliveryRequest(paypalVectorDelivery()))
	requireCode(t, err, verify.CodeBadSignature, verify.PayPalTransmissionSigHeader)
	// verifytest.PayPal signs the same text: the fixture key verifies.
	priv, cert := verifytest.PayPalKey()
	d := verifytest.PayPalDelivery(priv, paypalVectorWebhook, verifytest.PayPalCertURL, paypalVectorTID, payNow, []byte(paypalVectorBody))
	oneDeliveryEvent(t, paypalFixed(t, cert), d)
}

func TestPayPalRefusals(t *testing.T) {
	v := paypalFixed(t, paypalVectorCert)
	for _, h := range []string{verify.PayPalTransmissionIDHeader, verify.PayPalTransmissionTimeHeader, verify.PayPalTransmissionSigHeader, verify.PayPalAuthAlgoHeader} {
		d := paypalVectorDelivery()
		d.Header.Del(h)
		_, err := v.Verify(deliveryRequest(d))
		requireCode(t, err, verify.CodeMissingHeader, h)
	}
	// With configured certificates, PAYPAL-CERT-URL is not needed.
	d := paypalVectorDelivery()
	d.Header.Del(verify.PayPalCertURLHeader)
	oneDeliveryEvent(t, v, d)

	for h, val := range map[string]string{
		verify.PayPalTransmissionTimeHeader: "Sat, 14 Mar 2026 15:09:26 GMT",
		verify.PayPalTransmissionSigHeader:  "not*base64",
		verify.PayPalTransmissionIDHeader:   "a|b",
	} {
		d := paypalVectorDelivery()
		d.Header.Set(h, val)
		_, err := v.Verify(deliveryRequest(d))
		requireCode(t, err, verify.CodeMalformedHeader, h)
	}
	d = paypalVectorDelivery()
	d.Header.Set(verify.PayPalAuthAlgoHeader, "SHA1withRSA")
	_, err := v.Verify(deliveryRequest(d))
	requireCode(t, err, verify.CodeBadSignature, verify.PayPalAuthAlgoHeader)

	d = paypalVectorDelivery()
	d.Body = []byte(strings.Replace(paypalVectorBody, "7.47", "7.48", 1))
	_, err = v.Verify(deliveryRequest(d))
	requireCode(t, err, verify.CodeBadSignature, verify.PayPalTransmissionSigHeader)

	// The transmission time is signed and held to PayPal's default window
	// of 73 hours (PayPal retries for 3 days): a transmission verified two
	// days later still verifies, and is the same event; four days later it
	// is refused; a source's own tolerance_seconds wins.
	at := func(after, tol time.Duration) (verify.Result, error) {
		v := payMust(t, verify.TypePayPal, verify.Core{Tolerance: tol, Now: func() time.Time { return payNow.Add(after) }},
			paypalOpts(t, map[string]any{"webhook_id": paypalVectorWebhook, "certificates": []any{paypalVectorCert}}))
		return v.Verify(deliveryRequest(paypalVectorDelivery()))
	}
	res, err := at(48*time.Hour, 0)
	if err != nil || len(res.Events) != 1 || res.Events[0].ID != "WH-2WR32451HC0233532-67976317FL4543714" {
		t.Fatalf("two days later: %+v, %v", res, err)
	}
	// The transmission id is the nonce claimd records with the events:
	// the signature covers the body only through its CRC32.
	if res.Nonce == nil || res.Nonce.Value != paypalVectorDelivery().Header.Get(verify.PayPalTransmissionIDHeader) ||
		res.Nonce.TTL != 2*verify.PayPalTolerance+time.Minute || res.Nonce.Field != verify.PayPalTransmissionIDHeader {
		t.Fatalf("nonce %+v", res.Nonce)
	}
	_, err = at(96*time.Hour, 0)
	requireCode(t, err, verify.CodeTimestampOutsideTolerance, verify.PayPalTransmissionTimeHeader)
	_, err = at(48*time.Hour, time.Hour)
	requireCode(t, err, verify.CodeTimestampOutsideTolerance, verify.PayPalTransmissionTimeHeader)
	p, _ := verify.Lookup(verify.TypePayPal)
	if !p.SignsTimestamp || p.DefaultTolerance != verify.PayPalTolerance {
		t.Fatal("paypal takes tolerance_seconds, default 73 hours")
	}

	priv, cert := verifytest.PayPalKey()
	body := []byte(`{"event_type":"PAYMENT.CAPTURE.COMPLETED","resource":{"id":"X"}}`)
	_, err = paypalFixed(t, cert).Verify(deliveryRequest(verifytest.PayPalDelivery(priv, paypalVectorWebhook, verifytest.PayPalCertURL, "t1", payNow, body)))
	if ve := requireCode(t, err, verify.CodeMissingField, "/id"); !ve.Authenticated {
		t.Fatal("want authenticated")
	}
	only := payMust(t, verify.TypePayPal, verify.Core{AllowedEventTypes: []string{"CHECKOUT.*"}}, paypalOpts(t, map[string]any{"webhook_id": paypalVectorWebhook, "certificates": []any{paypalVectorCert}}))
	_, err = only.Verify(deliveryRequest(paypalVectorDelivery()))
	requireCode(t, err, verify.CodeEventTypeNotAllowed, "/event_type")
}

func TestPayPalConfig(t *testing.T) {
	for _, c := range []struct {
		core  verify.Core
		opts  map[string]any
		field string
	}{
		{verify.Core{}, nil, "WebhookID"},
		{verify.Core{}, map[string]any{"webhook_id": " 8PT5"}, "WebhookID"},
		{verify.Core{Secrets: []string{"s"}}, map[string]any{"webhook_id": "8PT5"}, "Secrets"},
		{verify.Core{}, map[string]any{"webhook_id": "8PT5", "certificates": []any{"not a pem"}}, "Certificates[0]"},
		{verify.Core{}, map[string]any{"webhook_id": "8PT5", "certificates": []any{paypalVectorCert}, "cert_hosts": []any{"api.paypal.com"}}, "CertHosts"},
		{verify.Core{}, map[string]any{"webhook_id": "8PT5", "cert_hosts": []any{"https://api.paypal.com"}}, "CertHosts[0]"},
		{verify.Core{}, map[string]any{"webhook_id": "8PT5", "cert_hosts": []any{"API.PAYPAL.COM"}}, "CertHosts[0]"},
	} {
		_, err := payBuild(verify.TypePayPal, c.core, paypalOpts(t, c.opts))
		requireConfigField(t, err, c.field)
	}
}

// TestPayPalRotation: while PayPal replaces its certificate both
// configured certificates verify.
func TestPayPalRotation(t *testing.T) {
	priv, cert := verifytest.PayPalKey()
	v := paypalFixed(t, paypalVectorCert, cert)
	oneDeliveryEvent(t, v, paypalVectorDelivery())
	oneDeliveryEvent(t, v, verifytest.PayPalDelivery(priv, paypalVectorWebhook, verifytest.PayPalCertURL, "t2", payNow, []byte(paypalVectorBody)))
}

// paypalCertServer is a local HTTPS server of certificates by path,
// counting the requests for each.
type paypalCertServer struct {
	*httptest.Server
	mu   sync.Mutex
	hits map[string]int
	body map[string]string
}

func newPayPalCertServer(t *testing.T) *paypalCertServer {
	s := &paypalCertServer{hits: map[string]int{}, body: map[string]string{}}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.hits[r.URL.Path]++
		b, ok := s.body[r.URL.Path]
		s.mu.Unlock()
		switch {
		case strings.HasSuffix(r.URL.Path, "/REDIRECT"):
			http.Redirect(w, r, "/v1/notifications/certs/CERT-1", http.StatusFound)
		case !ok:
			http.NotFound(w, r)
		default:
			_, _ = w.Write([]byte(b))
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *paypalCertServer) count(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits[path]
}

func (s *paypalCertServer) host() string { return strings.TrimPrefix(s.URL, "https://") }

// TestPayPalCertificateFetch: without configured certificates the one
// PAYPAL-CERT-URL names is fetched (from a real local HTTPS server) only
// from an allowed host and path, once while cached, not again for a minute
// after a failure, never through a redirect; expired, oversized and
// non-PEM certificates are refused; the cache holds 16 URLs.
func TestPayPalCertificateFetch(t *testing.T) {
	priv, cert := verifytest.PayPalKey()
	srv := newPayPalCertServer(t)
	srv.body["/v1/notifications/certs/CERT-1"] = cert
	srv.body["/v1/notifications/certs/BIG"] = strings.Repeat("A", 70<<10)
	srv.body["/v1/notifications/certs/JUNK"] = "hello"
	old, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	srv.body["/v1/notifications/certs/OLD"] = verifytest.PayPalCertificate(old, payNow.AddDate(-2, 0, 0), payNow.AddDate(-1, 0, 0))
	for i := range 17 {
		srv.body["/v1/notifications/certs/N"+string(rune('a'+i))] = cert
	}

	clock := payNow
	var mu sync.Mutex
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	v := payMust(t, verify.TypePayPal, verify.Core{Now: now, HTTPClient: srv.Client()},
		paypalOpts(t, map[string]any{"webhook_id": verifytest.PayPalWebhookID, "cert_hosts": []any{srv.host()}}))
	body := verifytest.PayPalCapture("WH-1", "PAYMENT.CAPTURE.COMPLETED", "C1", "completed", payNow)
	deliver := func(certURL string) error {
		_, err := v.Verify(deliveryRequest(verifytest.PayPalDelivery(priv, verifytest.PayPalWebhookID, certURL, "t", now(), body)))
		return err
	}
	base := srv.URL + "/v1/notifications/certs/"

	if err := deliver(base + "CERT-1"); err != nil {
		t.Fatal(err)
	}
	if err := deliver(base + "CERT-1"); err != nil {
		t.Fatal(err)
	}
	if n := srv.count("/v1/notifications/certs/CERT-1"); n != 1 {
		t.Fatalf("fetched %d times, want once (cached)", n)
	}

	// Not fetched at all: another scheme, host, path, a query, no URL.
	for _, u := range []string{
		strings.Replace(base, "https://", "http://", 1) + "CERT-1",
		strings.Replace(base, "127.0.0.1", "localhost", 1) + "CERT-2",
		srv.URL + "/v1/other/CERT-2",
		srv.URL + "/v1/notifications/certs/../x/CERT-2",
		base + "CERT-2?x=1",
		base,
		"https://api.paypal.com/v1/notifications/certs/CERT-2",
	} {
		requireCode(t, deliver(u), verify.CodeBadSignature, verify.PayPalCertURLHeader)
	}
	if n := srv.count("/v1/notifications/certs/CERT-2"); n != 0 {
		t.Fatalf("a refused URL was fetched %d times", n)
	}
	d := verifytest.PayPalDelivery(priv, verifytest.PayPalWebhookID, base+"CERT-1", "t", payNow, body)
	d.Header.Del(verify.PayPalCertURLHeader)
	_, err = v.Verify(deliveryRequest(d))
	requireCode(t, err, verify.CodeMissingHeader, verify.PayPalCertURLHeader)

	// A redirect is not followed.
	requireCode(t, deliver(base+"REDIRECT"), verify.CodeBadSignature, verify.PayPalCertURLHeader)
	if n := srv.count("/v1/notifications/certs/CERT-1"); n != 1 {
		t.Fatalf("the redirect was followed")
	}
	// Expired, oversized, not PEM.
	for _, p := range []string{"OLD", "BIG", "JUNK"} {
		requireCode(t, deliver(base+p), verify.CodeBadSignature, verify.PayPalCertURLHeader)
	}

	// A failure is not fetched again for a minute, then it is.
	requireCode(t, deliver(base+"LATER"), verify.CodeBadSignature, verify.PayPalCertURLHeader)
	srv.mu.Lock()
	srv.body["/v1/notifications/certs/LATER"] = cert
	srv.mu.Unlock()
	requireCode(t, deliver(base+"LATER"), verify.CodeBadSignature, verify.PayPalCertURLHeader)
	if n := srv.count("/v1/notifications/certs/LATER"); n != 1 {
		t.Fatalf("fetched %d times within the minute", n)
	}
	mu.Lock()
	clock = clock.Add(2 * time.Minute)
	mu.Unlock()
	if err := deliver(base + "LATER"); err != nil {
		t.Fatal(err)
	}

	// The cache is bounded: after 17 more URLs, the first is fetched again.
	for i := range 17 {
		if err := deliver(base + "N" + string(rune('a'+i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := deliver(base + "Na"); err != nil {
		t.Fatal(err)
	}
	if n := srv.count("/v1/notifications/certs/Na"); n != 2 {
		t.Fatalf("Na fetched %d times, want 2 (evicted, fetched again)", n)
	}

	// A certificate of another key does not verify.
	srv.mu.Lock()
	srv.body["/v1/notifications/certs/OTHER"] = verifytest.PayPalCertificate(old, payNow.AddDate(-1, 0, 0), payNow.AddDate(1, 0, 0))
	srv.mu.Unlock()
	requireCode(t, deliver(base+"OTHER"), verify.CodeBadSignature, verify.PayPalTransmissionSigHeader)
}

// TestPayPalKey: a completed and a refunded capture are two events; an
// event's retries, each a new transmission, are one.
func TestPayPalKey(t *testing.T) {
	replayFixture(t, string(verify.TypePayPal))
}
