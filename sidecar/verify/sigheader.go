package verify

import (
	"encoding/base64"
	"encoding/hex"
	"hash"
	"strings"
)

// How a generic scheme reads its signature header: [SignatureSpec] and its
// layouts.

// SignatureSpec says where a generic HMAC signature is and how it is
// written.
type SignatureSpec struct {
	// Header carries the signature. Required.
	Header string `required:"true" doc:"header carrying the signature"`
	// Algorithm is the HMAC hash: "sha1", "sha256" or "sha512". Default
	// "sha256".
	Algorithm string `doc:"sha1, sha256 (default) or sha512"`
	// Encoding of the signature: "hex" or "base64". Default "hex".
	Encoding string `doc:"hex (default) or base64"`
	// Prefix precedes each signature and is required when set, e.g.
	// "sha256=" (GitHub style) or "v0=". Layout "plain" only.
	Prefix string `doc:"text before each signature, e.g. sha256="`
	// Separator, when set, splits the header into several signatures (for
	// senders that sign with two secrets during rotation); one match
	// suffices. With Layout "elements" it separates the elements instead
	// (default ",").
	Separator string `doc:"splits several signatures (or elements with layout elements, default ,)"`
	// Layout is how the header is written: "plain" (the default): the
	// signature itself, after Prefix (several split by Separator);
	// "elements": key=value elements split by Separator, Stripe-style
	// ("t=1767225600,v1=5257a8…,v1=…"), with the signed timestamp in the
	// TimestampElement and one or more signatures in SignatureElement
	// elements (several for rotation: one match suffices; elements of
	// other keys are ignored). Only the "hmac" provider reads "elements"
	// (see [HMACOptions]).
	Layout string `doc:"plain (default) or elements (Stripe-style t=…,v1=…; hmac only)"`
	// TimestampElement and SignatureElement are the element keys of Layout
	// "elements": default "t" and "v1" (Paddle-style headers, for example,
	// use "ts" and "h1" with Separator ";").
	TimestampElement string `doc:"element key of the timestamp with layout elements (default t)"`
	SignatureElement string `doc:"element key of a signature with layout elements (default v1)"`
}

func (s SignatureSpec) withDefaults() SignatureSpec {
	if s.Algorithm == "" {
		s.Algorithm = algSHA256
	}
	if s.Encoding == "" {
		s.Encoding = EncodingHex
	}
	return s.layoutDefaults()
}

// validate checks s for a provider that reads Layout "plain" only.
func (s SignatureSpec) validate(t Type, field string) error {
	return s.check(t, field, false)
}

// check validates s; elements says whether the provider reads Layout
// "elements".
func (s SignatureSpec) check(t Type, field string, elements bool) error {
	if s.Header == "" {
		return &ConfigError{Type: t, Field: field + ".Header", Reason: "is required"}
	}
	if hashFor(s.Algorithm) == nil {
		return &ConfigError{Type: t, Field: field + ".Algorithm", Reason: "must be sha1, sha256 or sha512"}
	}
	if s.Encoding != EncodingHex && s.Encoding != EncodingBase64 {
		return &ConfigError{Type: t, Field: field + ".Encoding", Reason: "must be hex or base64"}
	}
	return s.checkLayout(t, field, elements)
}

// candidates parses the signature header value into decoded signatures of
// the hash's size; unreadable parts are dropped.
func (s SignatureSpec) candidates(h func() hash.Hash, value string) [][]byte {
	parts := []string{value}
	if s.Separator != "" {
		parts = strings.Split(value, s.Separator)
	}
	size := h().Size()
	var out [][]byte
	for _, p := range parts {
		p = strings.TrimSpace(p)
		p, ok := strings.CutPrefix(p, s.Prefix)
		if !ok {
			continue
		}
		if b, ok := s.decode(p, size); ok {
			out = append(out, b)
		}
	}
	return out
}

// decode decodes one signature as s.Encoding says; ok only when it reads
// and has size bytes.
func (s SignatureSpec) decode(p string, size int) ([]byte, bool) {
	var b []byte
	var err error
	if s.Encoding == EncodingBase64 {
		b, err = base64.StdEncoding.DecodeString(p)
	} else {
		b, err = hex.DecodeString(p)
	}
	return b, err == nil && len(b) == size
}

// Layouts of a generic signature header ([SignatureSpec].Layout).
const (
	// LayoutPlain: the header is the signature (after Prefix; several
	// split by Separator).
	LayoutPlain = "plain"
	// LayoutElements: the header is key=value elements split by Separator
	// (default ","), one of them the signed timestamp, Stripe-style:
	// "t=1767225600,v1=<sig>[,v1=<sig>…]"
	// (https://docs.stripe.com/webhooks#verify-manually describes that
	// header; the same shape with other keys or separators is common).
	LayoutElements = "elements"
)

// Element keys and separator of LayoutElements by default.
const (
	defaultTimestampElement = "t"
	defaultSignatureElement = "v1"
	defaultElementSeparator = ","
)

// layoutDefaults fills Layout and, for LayoutElements, the element keys
// and the separator.
func (s SignatureSpec) layoutDefaults() SignatureSpec {
	if s.Layout == "" {
		s.Layout = LayoutPlain
	}
	if s.Layout == LayoutElements {
		if s.TimestampElement == "" {
			s.TimestampElement = defaultTimestampElement
		}
		if s.SignatureElement == "" {
			s.SignatureElement = defaultSignatureElement
		}
		if s.Separator == "" {
			s.Separator = defaultElementSeparator
		}
	}
	return s
}

// checkLayout validates Layout and the fields that depend on it (s has its
// defaults); elements says whether the provider reads LayoutElements.
func (s SignatureSpec) checkLayout(t Type, field string, elements bool) error {
	switch s.Layout {
	case LayoutPlain:
		for _, f := range [...]struct{ name, value string }{{"TimestampElement", s.TimestampElement}, {"SignatureElement", s.SignatureElement}} {
			if f.value != "" {
				return &ConfigError{Type: t, Field: field + "." + f.name, Reason: "applies to layout elements only"}
			}
		}
		return nil
	case LayoutElements:
		if !elements {
			return &ConfigError{Type: t, Field: field + ".Layout", Reason: "must be plain for this provider"}
		}
	default:
		reason := "must be plain or elements"
		if !elements {
			reason = "must be plain for this provider"
		}
		return &ConfigError{Type: t, Field: field + ".Layout", Reason: reason}
	}
	if s.Prefix != "" {
		return &ConfigError{Type: t, Field: field + ".Prefix", Reason: "does not apply to layout elements: each signature is the value of a signature element (SignatureElement)"}
	}
	if strings.TrimSpace(s.Separator) == "" || strings.Contains(s.Separator, "=") {
		return &ConfigError{Type: t, Field: field + ".Separator", Reason: "must be visible text without '=' (the elements are key=value)"}
	}
	for _, f := range [...]struct{ name, value string }{{"TimestampElement", s.TimestampElement}, {"SignatureElement", s.SignatureElement}} {
		if strings.TrimSpace(f.value) != f.value || strings.Contains(f.value, "=") || strings.Contains(f.value, s.Separator) {
			return &ConfigError{Type: t, Field: field + "." + f.name, Reason: "must be an element key: no '=', no separator, no surrounding spaces"}
		}
	}
	if s.TimestampElement == s.SignatureElement {
		return &ConfigError{Type: t, Field: field + ".SignatureElement", Reason: "must differ from TimestampElement"}
	}
	return nil
}

// elements parses a LayoutElements header value: it returns the timestamp
// element's value as sent (digits, checked; unit names its unit for the
// error) and the signature elements' values decoded (those that do not
// read as s.Encoding or are not h's size are dropped; elements of other
// keys are ignored). Failures are malformed_header errors naming s.Header:
// an element that is not key=value, no or several timestamp elements, a
// timestamp that is not digits, no readable signature.
func (s SignatureSpec) elements(h func() hash.Hash, value, unit string) (string, [][]byte, *Error) {
	bad := func(reason string) (string, [][]byte, *Error) {
		return "", nil, headerErr(CodeMalformedHeader, s.Header, reason)
	}
	size := h().Size()
	var ts string
	seenTS := false
	var sigs [][]byte
	for _, item := range strings.Split(value, s.Separator) {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		if !ok {
			return bad("every element must be key=value")
		}
		switch k {
		case s.TimestampElement:
			if seenTS {
				return bad("more than one " + s.TimestampElement + " element")
			}
			if _, ok := parseUnix(v); !ok {
				return bad("the " + s.TimestampElement + " element must be a unix timestamp in " + unit)
			}
			ts, seenTS = v, true
		case s.SignatureElement:
			if b, ok := s.decode(v, size); ok {
				sigs = append(sigs, b)
			}
		}
	}
	if !seenTS {
		return bad("no " + s.TimestampElement + " element")
	}
	if len(sigs) == 0 {
		return bad("no " + s.SignatureElement + " element holds a readable " + s.Encoding + " signature of the configured size")
	}
	return ts, sigs, nil
}
