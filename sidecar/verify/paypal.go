package verify

import (
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"hash/crc32"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// PayPal webhook headers
// (https://developer.paypal.com/api/rest/webhooks/rest/#link-eventheaders).
const (
	PayPalTransmissionIDHeader   = "Paypal-Transmission-Id"
	PayPalTransmissionTimeHeader = "Paypal-Transmission-Time"
	PayPalTransmissionSigHeader  = "Paypal-Transmission-Sig"
	PayPalCertURLHeader          = "Paypal-Cert-Url"
	PayPalAuthAlgoHeader         = "Paypal-Auth-Algo"
)

// TypePayPal is PayPal's REST webhooks.
const TypePayPal Type = "paypal"

// PayPalCertHosts are the hosts a PAYPAL-CERT-URL may name when no
// certificate is configured: PayPal's live and sandbox API hosts.
var PayPalCertHosts = []string{"api.paypal.com", "api-m.paypal.com", "api.sandbox.paypal.com", "api-m.sandbox.paypal.com"}

// paypalCertPath is the path every PayPal certificate URL starts with.
const paypalCertPath = "/v1/notifications/certs/"

// Bounds of the certificate fetch and cache.
const (
	paypalCertMaxBytes = 64 << 10
	paypalCertCacheMax = 16
	paypalCertCacheTTL = 24 * time.Hour
	paypalCertRetry    = time.Minute
)

// PayPalOptions are the options of a "paypal" source.
type PayPalOptions struct {
	// WebhookID is the id of the webhook as shown in the developer
	// dashboard (or returned when it was created): PayPal signs it. Required.
	WebhookID string `required:"true" doc:"the webhook's id from the Developer Dashboard (PayPal signs it)"`
	// Certificates are PayPal's signing certificates in PEM (the first
	// certificate of each is used; its validity period is not checked: the
	// operator chose it). When set, only they verify (several while PayPal
	// replaces its certificate) and PAYPAL-CERT-URL is neither required nor
	// fetched.
	Certificates []string `doc:"PayPal's signing certificates (PEM); when set, PAYPAL-CERT-URL is not fetched"`
	// CertHosts are the hosts PAYPAL-CERT-URL may name when Certificates is
	// empty (host, or host:port for a port other than 443); default
	// PayPalCertHosts. The URL must be https, on one of them exactly, under
	// /v1/notifications/certs/, without query.
	CertHosts []string `doc:"hosts PAYPAL-CERT-URL may name (default PayPal's)"`
}

// The "paypal" provider verifies PayPal webhooks by the self-verification
// method, per
// https://developer.paypal.com/api/rest/webhooks/rest/#link-selfverificationmethod:
//
//   - the signed text is PAYPAL-TRANSMISSION-ID, "|", PAYPAL-TRANSMISSION-TIME,
//     "|", the webhook id (WebhookID, from configuration), "|", and the
//     CRC32 (IEEE) of the raw body in unsigned decimal;
//   - PAYPAL-TRANSMISSION-SIG is the base64 RSA signature (PKCS #1 v1.5)
//     of its SHA-256 (PAYPAL-AUTH-ALGO SHA256withRSA, the only algorithm
//     accepted), made with the key of the certificate PAYPAL-CERT-URL
//     names;
//   - the certificate comes from configuration (Certificates) when given;
//     otherwise PAYPAL-CERT-URL is fetched, but only an https URL on an
//     allowed PayPal host (CertHosts) under /v1/notifications/certs/,
//     through Core.HTTPClient without following redirects, at most 64 KiB;
//     the certificate must be valid at the clock; it is cached per URL (16
//     URLs, 24 hours or its expiry), a failed fetch is not tried again for
//     a minute, and one fetch runs at a time. No other URL is ever fetched.
//     The certificate's chain is not checked: its authenticity rests on
//     HTTPS to the allowed PayPal host;
//   - the signature covers the body only through its CRC32, which is no
//     cryptographic digest: anyone holding one captured transmission can
//     write another body with the same CRC32 under its signature. So the
//     transmission id is a [Nonce] (the caller records it with the events
//     it carried and refuses it under other events, see [Result.Nonce]),
//     and PAYPAL-TRANSMISSION-TIME (RFC 3339, signed) must lie within
//     the tolerance of the clock: [PayPalTolerance] (73 hours) unless the
//     source sets tolerance_seconds. PayPal documents no window and
//     retries a delivery for up to 3 days without saying whether a retry
//     carries a new transmission time, so the default covers a retry
//     that keeps the first one; the nonce is kept for twice the
//     tolerance. A retry of one transmission with the same body is a
//     duplicate; Event.Timestamp is the transmission time;
//   - a source has no secrets (secrets are refused): the key is PayPal's
//     and the webhook id is not secret. Rotation is PayPal's certificate
//     changing: a new PAYPAL-CERT-URL is fetched, or several Certificates
//     are configured.
//
// Key rule: ID is the event's id ("WH-…"), the same in every transmission
// of one event, retries and resends included (whatever their transmission
// id and time). Type is event_type ("PAYMENT.CAPTURE.COMPLETED"), ObjectID
// resource.id.
//
// Redelivery: a delivery not answered 2xx is retried up to 25 times over 3
// days (https://developer.paypal.com/api/rest/webhooks/rest/); an
// event can also be resent from the dashboard or the API
// (POST /v1/notifications/webhooks-events/{id}/resend), under the same
// event id.
type paypalVerifier struct {
	webhookID string
	types     TypeFilter
	tol       time.Duration
	now       func() time.Time
	// fixed are the configured certificates' keys; when empty, certs
	// fetches them.
	fixed []*rsa.PublicKey
	certs *paypalCerts
}

func init() {
	Register(Provider{
		Type: TypePayPal,
		Name: "PayPal",
		Docs: []string{
			"https://developer.paypal.com/api/rest/webhooks/rest/",
			"https://developer.paypal.com/api/rest/webhooks/",
			"https://developer.paypal.com/docs/api/webhooks/v1/#verify-webhook-signature_post",
		},
		Options:          func() any { return &PayPalOptions{} },
		Build:            buildPayPal,
		SecretsOptional:  true,
		SignsTimestamp:   true,
		DefaultTolerance: PayPalTolerance,
		CredentialHeaders: func(any) []string {
			return []string{PayPalTransmissionSigHeader}
		},
		Setup: Setup{Secrets: "none: PayPal signs with its certificate; set `options.webhook_id` (Developer Dashboard → Apps & Credentials → the app → Webhooks → Webhook ID)"},
		Redelivery: Redelivery{
			Key:     "event `id` (WH-…), kept by every transmission of the event",
			Retries: "not 2xx: each delivery retried up to 25 times over 3 days, same event id; resend from the dashboard or the API, same event id",
			Horizon: "forever (an event id names one event)",
			Batches: "no",
			Resends: "no",
		},
	})
}

func buildPayPal(core Core, opts any) (Verifier, error) {
	if len(core.Secrets) > 0 {
		return nil, &ConfigError{Type: TypePayPal, Field: "Secrets", Reason: "PayPal signs with its certificate: configure options.webhook_id (and optionally options.certificates), no secrets"}
	}
	o, _ := opts.(*PayPalOptions)
	if o == nil {
		o = &PayPalOptions{}
	}
	if o.WebhookID == "" {
		return nil, &ConfigError{Type: TypePayPal, Field: "WebhookID", Reason: "is required: the webhook's id from the PayPal developer dashboard (it is part of what PayPal signs)"}
	}
	if strings.TrimSpace(o.WebhookID) != o.WebhookID || strings.Contains(o.WebhookID, "|") {
		return nil, &ConfigError{Type: TypePayPal, Field: "WebhookID", Reason: "must be the id as shown, without spaces or '|'"}
	}
	v := &paypalVerifier{webhookID: o.WebhookID, types: core.Types(), tol: core.Tolerance, now: core.Now}
	for i, p := range o.Certificates {
		_, key, err := paypalCert([]byte(p))
		if err != nil {
			return nil, &ConfigError{Type: TypePayPal, Field: "Certificates[" + strconv.Itoa(i) + "]", Reason: err.Error()}
		}
		v.fixed = append(v.fixed, key)
	}
	if len(v.fixed) > 0 {
		if len(o.CertHosts) > 0 {
			return nil, &ConfigError{Type: TypePayPal, Field: "CertHosts", Reason: "applies only when certificates are fetched (Certificates empty)"}
		}
		return v, nil
	}
	hosts := o.CertHosts
	if len(hosts) == 0 {
		hosts = PayPalCertHosts
	}
	allowed := map[string]bool{}
	for i, h := range hosts {
		if h == "" || strings.ToLower(h) != h || strings.ContainsAny(h, "/@ ?#") {
			return nil, &ConfigError{Type: TypePayPal, Field: "CertHosts[" + strconv.Itoa(i) + "]", Reason: "must be a lower-case host name (or host:port) without scheme or path"}
		}
		allowed[h] = true
	}
	client := http.Client{Timeout: 10 * time.Second}
	if core.HTTPClient != nil {
		client = *core.HTTPClient
	}
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	v.certs = &paypalCerts{client: &client, hosts: allowed, now: core.Now, entries: map[string]paypalCertEntry{}}
	return v, nil
}

// paypalCert returns the first certificate in p and its RSA key.
func paypalCert(p []byte) (*x509.Certificate, *rsa.PublicKey, error) {
	block, _ := pem.Decode(p)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, nil, errors.New("is not a PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, nil, errors.New("is not a readable X.509 certificate")
	}
	key, ok := cert.PublicKey.(*rsa.PublicKey)
	if !ok {
		return nil, nil, errors.New("does not hold an RSA public key (PayPal signs SHA256withRSA)")
	}
	return cert, key, nil
}

func (*paypalVerifier) Type() Type { return TypePayPal }

func (v *paypalVerifier) Verify(r Request) (Result, error) {
	var vals [5]string
	for i, name := range []string{PayPalTransmissionIDHeader, PayPalTransmissionTimeHeader, PayPalTransmissionSigHeader, PayPalAuthAlgoHeader, PayPalCertURLHeader} {
		if vals[i] = header(r.Header, name); vals[i] == "" && (name != PayPalCertURLHeader || v.certs != nil) {
			return Result{}, missingHeader(name)
		}
	}
	id, rawTime, rawSig, algo, certURL := vals[0], vals[1], vals[2], vals[3], vals[4]
	if strings.Contains(id, "|") {
		return Result{}, headerErr(CodeMalformedHeader, PayPalTransmissionIDHeader, "must not contain '|'")
	}
	ts, err := time.Parse(time.RFC3339Nano, rawTime)
	if err != nil {
		return Result{}, headerErr(CodeMalformedHeader, PayPalTransmissionTimeHeader, "is not an RFC 3339 date and time")
	}
	if !strings.EqualFold(algo, "SHA256withRSA") {
		return Result{}, headerErr(CodeBadSignature, PayPalAuthAlgoHeader, "only SHA256withRSA is accepted")
	}
	sig, err := base64.StdEncoding.Strict().DecodeString(rawSig)
	if err != nil || len(sig) == 0 {
		return Result{}, headerErr(CodeMalformedHeader, PayPalTransmissionSigHeader, "is not base64")
	}
	keys := v.fixed
	if v.certs != nil {
		key, e := v.certs.key(certURL)
		if e != nil {
			return Result{}, e
		}
		keys = []*rsa.PublicKey{key}
	}
	signed := id + "|" + rawTime + "|" + v.webhookID + "|" + strconv.FormatUint(uint64(crc32.ChecksumIEEE(r.Body)), 10)
	digest := sha256.Sum256([]byte(signed))
	ok := false
	for _, k := range keys {
		if rsa.VerifyPKCS1v15(k, crypto.SHA256, digest[:], sig) == nil {
			ok = true
			break
		}
	}
	if !ok {
		return Result{}, headerErr(CodeBadSignature, PayPalTransmissionSigHeader, "signature does not match the transmission, the webhook id and the payload under the certificate")
	}
	if now := v.now(); !within(now, ts, v.tol) {
		return Result{}, windowErr(InHeader, PayPalTransmissionTimeHeader, now, ts, v.tol)
	}
	var ev struct {
		ID        string `json:"id"`
		EventType string `json:"event_type"`
		Resource  struct {
			ID flexString `json:"id"`
		} `json:"resource"`
	}
	if e := unmarshalBody(r.Body, &ev); e != nil {
		return Result{}, authenticated(e)
	}
	if ev.ID == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/id", "the event has no id"))
	}
	if err := v.types.Check(ev.EventType, InBody, "/event_type"); err != nil {
		return Result{}, err
	}
	return Result{
		Nonce:  &Nonce{Value: id, TTL: 2*v.tol + time.Minute, In: InHeader, Field: PayPalTransmissionIDHeader},
		Events: []Event{{ID: ev.ID, Type: ev.EventType, ObjectID: string(ev.Resource.ID), Timestamp: ts}},
	}, nil
}

// PayPalTolerance is a paypal source's default replay window for the
// signed transmission time: PayPal retries a delivery for up to 3 days
// (https://developer.paypal.com/api/rest/webhooks/rest/), plus an hour.
const PayPalTolerance = 73 * time.Hour

// paypalCerts fetches and caches the certificates PAYPAL-CERT-URL names.
type paypalCerts struct {
	client *http.Client
	hosts  map[string]bool
	now    func() time.Time

	mu      sync.Mutex // held across a fetch: one at a time
	entries map[string]paypalCertEntry
	seq     uint64 // entries added so far
}

type paypalCertEntry struct {
	key     *rsa.PublicKey // nil: the fetch failed
	expires time.Time
	seq     uint64 // order of addition
}

// key returns the key of the certificate at raw, fetching it when it is
// not cached.
func (c *paypalCerts) key(raw string) (*rsa.PublicKey, *Error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.User != nil || !c.hosts[strings.ToLower(strings.TrimSuffix(u.Host, ":443"))] ||
		!strings.HasPrefix(u.EscapedPath(), paypalCertPath) || strings.Contains(u.EscapedPath(), "/../") ||
		len(u.EscapedPath()) == len(paypalCertPath) || u.RawQuery != "" || u.Fragment != "" {
		return nil, headerErr(CodeBadSignature, PayPalCertURLHeader, "is not a PayPal certificate URL (https, an allowed PayPal host, "+paypalCertPath+"…)")
	}
	canon := "https://" + strings.ToLower(strings.TrimSuffix(u.Host, ":443")) + u.EscapedPath()
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if e, ok := c.entries[canon]; ok && now.Before(e.expires) {
		if e.key == nil {
			return nil, headerErr(CodeBadSignature, PayPalCertURLHeader, "the certificate could not be fetched (not tried again for a minute)")
		}
		return e.key, nil
	}
	key, expires, ferr := c.fetch(canon, now)
	delete(c.entries, canon)
	if len(c.entries) >= paypalCertCacheMax {
		c.evict()
	}
	c.seq++
	if ferr != nil {
		c.entries[canon] = paypalCertEntry{expires: now.Add(paypalCertRetry), seq: c.seq}
		return nil, headerErr(CodeBadSignature, PayPalCertURLHeader, "the certificate could not be used: "+ferr.Error())
	}
	c.entries[canon] = paypalCertEntry{key: key, expires: expires, seq: c.seq}
	return key, nil
}

// evict drops the entry added first.
func (c *paypalCerts) evict() {
	oldest, first := "", uint64(0)
	for k, e := range c.entries {
		if oldest == "" || e.seq < first {
			oldest, first = k, e.seq
		}
	}
	delete(c.entries, oldest)
}

func (c *paypalCerts) fetch(u string, now time.Time) (*rsa.PublicKey, time.Time, error) {
	resp, err := c.client.Get(u)
	if err != nil {
		return nil, time.Time{}, errors.New("fetch failed")
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, time.Time{}, errors.New("fetch answered " + strconv.Itoa(resp.StatusCode))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, paypalCertMaxBytes+1))
	if err != nil {
		return nil, time.Time{}, errors.New("fetch failed")
	}
	if len(body) > paypalCertMaxBytes {
		return nil, time.Time{}, errors.New("the certificate is larger than 64 KiB")
	}
	cert, key, err := paypalCert(body)
	if err != nil {
		return nil, time.Time{}, errors.New("the body " + err.Error())
	}
	if now.Before(cert.NotBefore) || now.After(cert.NotAfter) {
		return nil, time.Time{}, errors.New("the certificate is outside its validity period")
	}
	expires := now.Add(paypalCertCacheTTL)
	if cert.NotAfter.Before(expires) {
		expires = cert.NotAfter
	}
	return key, expires, nil
}
