package verify

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/strictjson"
)

// Standard Webhooks headers
// (https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md#webhook-headers-sending-metadata-to-consumers),
// and the svix-* spelling Svix uses by default
// (https://docs.svix.com/receiving/verifying-payloads/how-manual).
const (
	StandardWebhookIDHeader        = "webhook-id"
	StandardWebhookTimestampHeader = "webhook-timestamp"
	StandardWebhookSignatureHeader = "webhook-signature"
	SvixIDHeader                   = "svix-id"
	SvixTimestampHeader            = "svix-timestamp"
	SvixSignatureHeader            = "svix-signature"
)

// Secret prefixes and key sizes of the Standard Webhooks spec
// (https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md#signature-scheme).
const (
	StandardWebhooksSecretPrefix     = "whsec_" // base64 HMAC-SHA256 key
	StandardWebhooksPublicKeyPrefix  = "whpk_"  // base64 ed25519 public key
	StandardWebhooksPrivateKeyPrefix = "whsk_"  // base64 ed25519 private key: never configure it on a receiver
	StandardWebhooksMinSecretBytes   = 24       // "at least 24 bytes (192 bits)"
	StandardWebhooksMaxSecretBytes   = 64       // "512 [bits] maximum"
)

// The "standard-webhooks" provider type (also
// Svix and every sender following the spec), per
// https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md:
//
//   - headers webhook-id, webhook-timestamp (unix seconds) and
//     webhook-signature; when none of the webhook-* headers is present the
//     svix-id/-timestamp/-signature spelling is read instead;
//   - the signed content is "<webhook-id>.<webhook-timestamp>.<raw body>";
//   - webhook-signature is a space-separated list of "<version>,<base64>"
//     entries: "v1" is HMAC-SHA256 under a whsec_ secret, "v1a" is ed25519
//     under a whpk_ public key; entries of other versions and unreadable
//     entries are skipped, and one match among them suffices (zero-downtime
//     rotation);
//   - webhook-timestamp must be within Tolerance of the clock, both ways
//     (default 300 s, as the reference libraries).
//
// Secrets are "whsec_" + base64 (the key is the decoded bytes, not the
// string), a bare base64 key (accepted by the reference libraries), or
// "whpk_" + base64 of a 32-byte ed25519 public key. A secret that does not
// decode, or decodes to fewer than 24 or more than 64 bytes, is refused at
// configuration time (an empty key would let anyone sign).
//
// The identity: ID is webhook-id (kept across retries); Type is the body's
// top-level "type" when the body is a JSON object that has one.
func init() {
	Register(Provider{
		Type: TypeStandardWebhooks,
		Name: "Standard Webhooks (Svix…)",
		Docs: []string{
			"https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md",
			"https://docs.svix.com/receiving/verifying-payloads/how-manual",
		},
		Build:             buildStandardWebhooks,
		SignsTimestamp:    true,
		CredentialHeaders: func(any) []string { return []string{StandardWebhookSignatureHeader, SvixSignatureHeader} },
		Setup:             Setup{Secrets: "the endpoint's secrets as the sender shows them (`whsec_` + base64), or its public keys (`whpk_…`)"},
		Redelivery: Redelivery{
			Key:     "`webhook-id` (`svix-id`)",
			Retries: "as the sender schedules them; a retry keeps `webhook-id`, re-signed with a new `webhook-timestamp`",
			Horizon: "forever: \"unique across all messages\"",
			Batches: "no",
			Resends: "no",
		},
	})
}

func buildStandardWebhooks(c Core, _ any) (Verifier, error) {
	hk, pk, err := decodeStandardSecrets(c.Secrets)
	if err != nil {
		return nil, err
	}
	return &standardVerifier{hmacKeys: hk, pubKeys: pk, tol: c.Tolerance, now: c.Now, types: newTypeFilter(c.AllowedEventTypes)}, nil
}

// decodeStandardSecrets splits secrets into HMAC keys and ed25519 public keys.
func decodeStandardSecrets(secrets []string) (hmacKeys [][]byte, pubKeys []ed25519.PublicKey, err error) {
	for i, s := range secrets {
		field := "Secrets[" + strconv.Itoa(i) + "]"
		switch {
		case strings.HasPrefix(s, StandardWebhooksPrivateKeyPrefix):
			return nil, nil, &ConfigError{Type: TypeStandardWebhooks, Field: field, Reason: "is a whsk_ private signing key; configure the sender's whpk_ public key instead"}
		case strings.HasPrefix(s, StandardWebhooksPublicKeyPrefix):
			b, err := base64.StdEncoding.DecodeString(s[len(StandardWebhooksPublicKeyPrefix):])
			if err != nil {
				return nil, nil, &ConfigError{Type: TypeStandardWebhooks, Field: field, Reason: "whpk_ public key is not valid standard base64"}
			}
			if len(b) != ed25519.PublicKeySize {
				return nil, nil, &ConfigError{Type: TypeStandardWebhooks, Field: field, Reason: "whpk_ public key decodes to " + strconv.Itoa(len(b)) + " bytes; an ed25519 public key has 32"}
			}
			pubKeys = append(pubKeys, ed25519.PublicKey(b))
		default:
			b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, StandardWebhooksSecretPrefix))
			if err != nil {
				return nil, nil, &ConfigError{Type: TypeStandardWebhooks, Field: field, Reason: "secret is not valid standard base64 after the whsec_ prefix"}
			}
			if len(b) < StandardWebhooksMinSecretBytes || len(b) > StandardWebhooksMaxSecretBytes {
				return nil, nil, &ConfigError{Type: TypeStandardWebhooks, Field: field, Reason: "secret decodes to " + strconv.Itoa(len(b)) + " bytes; the Standard Webhooks spec requires 24 to 64"}
			}
			hmacKeys = append(hmacKeys, b)
		}
	}
	return hmacKeys, pubKeys, nil
}

type standardVerifier struct {
	hmacKeys [][]byte
	pubKeys  []ed25519.PublicKey
	tol      time.Duration
	now      func() time.Time
	types    typeFilter
}

func (*standardVerifier) Type() Type { return TypeStandardWebhooks }

// standardSignatures holds the decodable entries of a webhook-signature
// header, by version.
type standardSignatures struct {
	v1  [][]byte
	v1a [][]byte
}

// parseStandardSignatures splits a webhook-signature value on spaces into
// "<version>,<base64>" entries. Entries of unknown versions, without a comma,
// or whose signature is not valid base64 of the right size are skipped.
func parseStandardSignatures(h string) standardSignatures {
	var s standardSignatures
	for _, entry := range strings.Fields(h) {
		ver, sig, ok := strings.Cut(entry, ",")
		if !ok {
			continue
		}
		switch ver {
		case "v1":
			if b, err := base64.StdEncoding.DecodeString(sig); err == nil && len(b) == sha256.Size {
				s.v1 = append(s.v1, b)
			}
		case "v1a":
			if b, err := base64.StdEncoding.DecodeString(sig); err == nil && len(b) == ed25519.SignatureSize {
				s.v1a = append(s.v1a, b)
			}
		}
	}
	return s
}

func (v *standardVerifier) Verify(r Request) (Result, error) {
	idH, tsH, sigH := StandardWebhookIDHeader, StandardWebhookTimestampHeader, StandardWebhookSignatureHeader
	if header(r.Header, idH) == "" && header(r.Header, tsH) == "" && header(r.Header, sigH) == "" &&
		(header(r.Header, SvixIDHeader) != "" || header(r.Header, SvixTimestampHeader) != "" || header(r.Header, SvixSignatureHeader) != "") {
		idH, tsH, sigH = SvixIDHeader, SvixTimestampHeader, SvixSignatureHeader
	}
	id := header(r.Header, idH)
	if id == "" {
		return Result{}, missingHeader(idH)
	}
	tsRaw := header(r.Header, tsH)
	if tsRaw == "" {
		return Result{}, missingHeader(tsH)
	}
	sigRaw := header(r.Header, sigH)
	if sigRaw == "" {
		return Result{}, missingHeader(sigH)
	}
	n, ok := parseUnix(tsRaw)
	if !ok {
		return Result{}, headerErr(CodeMalformedHeader, tsH, "must be a unix timestamp in seconds")
	}
	sigs := parseStandardSignatures(sigRaw)
	if len(sigs.v1) == 0 && len(sigs.v1a) == 0 {
		return Result{}, headerErr(CodeBadSignature, sigH, "no readable v1 or v1a signature")
	}
	content := make([]byte, 0, len(id)+len(tsRaw)+2+len(r.Body))
	content = append(content, id...)
	content = append(content, '.')
	content = append(content, tsRaw...)
	content = append(content, '.')
	content = append(content, r.Body...)
	if !v.matches(sigs, content) {
		return Result{}, headerErr(CodeBadSignature, sigH, "no signature matches the payload under any configured key")
	}
	ts := time.Unix(n, 0)
	if now := v.now(); !within(now, ts, v.tol) {
		return Result{}, windowErr(InHeader, tsH, now, ts, v.tol)
	}
	var body struct {
		Type string `json:"type"`
	}
	if firstNonSpace(r.Body) == '{' {
		// A body that is not the usual {"type":…} object is still a valid
		// delivery: the spec does not constrain the payload. But an object
		// is read strictly: an ambiguous one must not pass as having no
		// type (and be filtered, or keyed, on a guess).
		if e := unmarshalBody(r.Body, &body); e != nil {
			return Result{}, authenticated(e)
		}
	}
	if err := v.types.check(body.Type, InBody, "/type"); err != nil {
		return Result{}, err
	}
	return Result{Events: []Event{{ID: id, Type: body.Type, Timestamp: ts}}}, nil
}

func (v *standardVerifier) matches(sigs standardSignatures, content []byte) bool {
	if anyMACMatches(sha256.New, v.hmacKeys, sigs.v1, content) {
		return true
	}
	for _, pk := range v.pubKeys {
		for _, s := range sigs.v1a {
			if ed25519.Verify(pk, content, s) {
				return true
			}
		}
	}
	return false
}

// firstNonSpace returns the first byte of b that is not JSON whitespace,
// after a leading UTF-8 BOM, or 0.
func firstNonSpace(b []byte) byte {
	for _, c := range strictjson.TrimBOM(b) {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c
	}
	return 0
}
