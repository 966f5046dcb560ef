package sources

import (
	"crypto/sha256"
	"encoding/hex"
	"mime"
	"strings"
	"unicode/utf8"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// How an event is named in its claim request (Prepare): the provider's id
// made header-safe or stood in for by its SHA-256 (eventID, fitID), its
// type cut to what the ledger keeps (Truncate).

// itemContentType is the content type of one item of a batch body: a
// CloudEvents batch (application/cloudevents-batch+json) holds structured
// events (application/cloudevents+json, same parameters); the items of
// other batches (Microsoft Graph's value array) keep the body's type.
func itemContentType(contentType string) string {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != verify.CloudEventsBatchMediaType {
		return contentType
	}
	return mime.FormatMediaType(verify.CloudEventsJSONMediaType, params)
}

// eventID is the event id an ingested event is stored under: the
// provider's id made header-safe (headerSafe: percent-encoding of every
// byte outside printable ASCII, of '%' and of a leading or trailing space),
// so that the dispatcher can hand it to n8n in X-Idempotency-Event-Id byte
// for byte and the workflow claims exactly this record (HTTP stacks such
// as Node.js read header bytes as Latin-1, and cannot send control
// characters at all). Where the ledger cannot keep the id — longer than it
// accepts once encoded, not UTF-8, or holding NUL bytes — "sha256:" and the
// hex SHA-256 of its bytes stands in for it (an authentic event is stored,
// never refused for its id). So that a stand-in can never equal a literal
// id, a provider id that itself starts with "sha256:" is hashed too (unless
// the verifier derived it as a digest): the mapping is one-to-one.
func eventID(ev verify.Event) string {
	if strings.HasPrefix(ev.ID, hashedIDPrefix) && !ev.Digest {
		return hashID(ev.ID)
	}
	if !utf8.ValidString(ev.ID) || strings.ContainsRune(ev.ID, 0) {
		return hashID(ev.ID)
	}
	return fitID(headerSafe(ev.ID), claim.MaxEventIDLen, ev.ID)
}

// headerSafe percent-encodes (RFC 3986 §2.1, upper-case hex) every byte of
// s that is not printable ASCII (below 0x21 or above 0x7E, space aside),
// every '%', and a leading or trailing space (HTTP drops those around a
// field value); the rest stays as it is. It is one-to-one: '%' is always
// encoded, so an encoded sequence never appears literally. Ids made of
// printable ASCII without '%' — every provider id we know — are unchanged.
func headerSafe(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if escapeByte(s, i) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const hexDigits = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if escapeByte(s, i) {
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
			continue
		}
		b = append(b, c)
	}
	return string(b)
}

// HeaderValue is s as an HTTP header value: s itself when every byte is
// printable ASCII (an id eventID made: already encoded, so never encoded
// twice), else headerSafe(s) (a record stored before ids were made
// header-safe, or an informational text such as an event type). The
// dispatcher sends stored event ids and types to n8n through it.
func HeaderValue(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || (c == ' ' && (i == 0 || i == len(s)-1)) {
			return headerSafe(s)
		}
	}
	return s
}

func escapeByte(s string, i int) bool {
	c := s[i]
	switch {
	case c == '%', c < 0x20, c > 0x7e:
		return true
	case c == ' ':
		return i == 0 || i == len(s)-1
	}
	return false
}

// hashedIDPrefix starts every id that stands in for another.
const hashedIDPrefix = "sha256:"

// fitID keeps a provider identifier that the ledger can store, or stands
// the SHA-256 of raw (the identifier as the provider sent it, id itself
// when omitted) in for it: too long, not UTF-8, or holding NUL bytes.
func fitID(id string, max int, raw ...string) string {
	if len(id) <= max && utf8.ValidString(id) && !strings.ContainsRune(id, 0) {
		return id
	}
	if len(raw) > 0 {
		return hashID(raw[0])
	}
	return hashID(id)
}

func hashID(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hashedIDPrefix + hex.EncodeToString(sum[:])
}

// Truncate cuts an informational text (an event type, a redirect target
// quoted in a dispatch error) to n bytes of valid UTF-8 without NUL bytes.
func Truncate(s string, n int) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "")
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
