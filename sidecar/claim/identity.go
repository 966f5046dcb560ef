package claim

import (
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"strconv"
	"strings"

	"github.com/idempotent-claim/idempotent-claim/sidecar/strictjson"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// Canonical returns the canonical form of the JSON document raw that every
// key and payload hash is computed over: RFC 8785 (JSON Canonicalization
// Scheme) — members sorted by UTF-16 code units, no insignificant
// whitespace, no Unicode normalisation — except that numbers keep their
// exact value instead of being rounded to IEEE-754 doubles (see package
// strictjson: 9007199254740993 and 9007199254740992 stay different; 1.0,
// 1e0 and 1 are one value). raw is decoded strictly: duplicate member
// names, invalid UTF-8 and unpaired surrogates are errors
// (*strictjson.Error), never a last-wins or U+FFFD substitution.
func Canonical(raw []byte) ([]byte, error) {
	return strictjson.Canonical(raw)
}

// PayloadHash returns the lowercase hex SHA-256 of the canonical form
// (Canonical) of the JSON document raw, with the members named by volatile
// (a source's volatile_fields) left out, so that key order, whitespace and
// fields a provider changes on every retry do not change the hash. It is
// strictjson.HashWithout: linear in len(raw), no tree built. Errors:
// *strictjson.Error for input that is not strict JSON.
func PayloadHash(raw []byte, volatile ...strictjson.Pointer) (string, error) {
	return strictjson.HashWithout(raw, volatile...)
}

// PayloadHashAt is PayloadHash of the JSON value at the pointer at in doc,
// a document already read strictly (strictjson.UnmarshalDoc of a request
// holding the payload): the same hash PayloadHash gives that value's
// bytes, without reading them again. ok is false when at names nothing.
func PayloadHashAt(doc *strictjson.Doc, at strictjson.Pointer, volatile ...strictjson.Pointer) (hash string, ok bool) {
	return doc.HashAt(at, volatile...)
}

// HashedEventID derives an event id from selected fields, the last resort of
// the key rules in DESIGN.md: "sha256:" followed by the lowercase hex SHA-256
// of the canonical form (Canonical) of fields. Use it when a key would
// otherwise carry personal data. fields must be a JSON object with at least
// one member, and no value anywhere in it may be null, an empty string, an
// empty object or an empty array: an empty identity part would make
// different events share one key. Errors: *strictjson.Error naming the
// offending member by its JSON pointer.
func HashedEventID(fields []byte) (string, error) {
	doc, err := strictjson.Parse(fields)
	if err != nil {
		return "", err
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return "", &strictjson.Error{Reason: "must be a JSON object of the fields that identify the event"}
	}
	if len(obj) == 0 {
		return "", &strictjson.Error{Reason: "must name at least one field"}
	}
	if err := noEmptyParts(doc, ""); err != nil {
		return "", err
	}
	c, err := strictjson.CanonicalValue(doc)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// noEmptyParts fails on the first null, "", {} or [] in v, naming it.
func noEmptyParts(v any, at string) error {
	switch x := v.(type) {
	case nil:
		return &strictjson.Error{Pointer: at, Reason: "is null: a key part must have a value"}
	case string:
		if x == "" {
			return &strictjson.Error{Pointer: at, Reason: "is an empty string: a key part must have a value"}
		}
	case map[string]any:
		if len(x) == 0 {
			return &strictjson.Error{Pointer: at, Reason: "is an empty object: a key part must have a value"}
		}
		for _, k := range sortedKeys(x) {
			if err := noEmptyParts(x[k], at+"/"+escapeToken(k)); err != nil {
				return err
			}
		}
	case []any:
		if len(x) == 0 {
			return &strictjson.Error{Pointer: at, Reason: "is an empty array: a key part must have a value"}
		}
		for i, e := range x {
			if err := noEmptyParts(e, at+"/"+strconv.Itoa(i)); err != nil {
				return err
			}
		}
	}
	return nil
}

func sortedKeys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func escapeToken(t string) string {
	return strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1")
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
