package claim

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/gowebpki/jcs"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// Canonical returns the RFC 8785 (JSON Canonicalization Scheme) form of the
// JSON document raw: object members sorted by UTF-16 code units, no
// insignificant whitespace, ES6 number formatting, no Unicode normalisation.
// It fails on input that is not a single valid JSON value.
func Canonical(raw []byte) ([]byte, error) {
	return jcs.Transform(raw)
}

// PayloadHash returns the lowercase hex SHA-256 of the RFC 8785 canonical
// form of the JSON document raw, so that key order and whitespace do not
// change the hash. It fails on invalid JSON.
func PayloadHash(raw []byte) (string, error) {
	c, err := Canonical(raw)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return hex.EncodeToString(sum[:]), nil
}

// HashedEventID derives an event id from selected fields, the last resort of
// the key rules in DESIGN.md: "sha256:" followed by the lowercase hex SHA-256
// of the RFC 8785 canonical JSON of fields. Use it when a key would otherwise
// carry personal data.
func HashedEventID(fields []byte) (string, error) {
	h, err := PayloadHash(fields)
	if err != nil {
		return "", err
	}
	return "sha256:" + h, nil
}

// CompositeEventID joins immutable fields (event type, object id, object
// version…) into one event id, unambiguously: every part is written as its
// byte length, ':' and the part, and parts are separated by '|'. So
// ("a:b", "c") and ("a", "b:c") give "3:a:b|1:c" and "1:a|3:b:c", which can
// never collide, whatever the parts contain.
func CompositeEventID(parts ...string) string {
	return verify.JoinKey(parts...) // one encoding for ingest and claims
}

// IdempotencyKey returns the stable string form of a record's identity, to
// forward to destinations that accept an idempotency key (for example an
// Idempotency-Key header): "ik_" followed by the hex SHA-256 of the
// composite of tenant, source, event id and action. It carries no readable
// key material, so personal data in event ids does not leak downstream.
func IdempotencyKey(tenant string, k Key) string {
	sum := sha256.Sum256([]byte(CompositeEventID(tenant, k.Source, k.EventID, k.Action)))
	return "ik_" + hex.EncodeToString(sum[:])
}
