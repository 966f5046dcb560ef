package verify

import (
	"encoding/base64"
	"encoding/hex"
	"hash"
	"strings"
)

// macFromHex decodes a MAC of n bytes sent as exactly 2n hex digits
// (either letter case) after prefix ("" for none): false for anything
// else.
func macFromHex(s, prefix string, n int) ([]byte, bool) {
	s, ok := strings.CutPrefix(s, prefix)
	if !ok || len(s) != hex.EncodedLen(n) {
		return nil, false
	}
	b, err := hex.DecodeString(s)
	return b, err == nil
}

// macFromBase64 decodes a MAC of n bytes sent in standard padded base64
// (RFC 4648 section 4) after prefix ("" for none): false for anything
// else.
func macFromBase64(s, prefix string, n int) ([]byte, bool) {
	s, ok := strings.CutPrefix(s, prefix)
	if !ok || len(s) != base64.StdEncoding.EncodedLen(n) {
		return nil, false
	}
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	return b, err == nil && len(b) == n
}

// macHeader is the scheme "one HMAC of the signed content in one header":
// header Name holds Prefix and then the MAC under Hash, as hex digits
// (either letter case) or, with Base64, in standard padded base64 (RFC
// 4648 section 4). Several secrets may be configured (rotation): any one
// of them may have made the MAC. Each provider that uses it states its own
// scheme in its file.
type macHeader struct {
	// Name is the header.
	Name string
	// Prefix comes before the MAC ("sha256=", "" for none), in exactly
	// this letter case unless FoldPrefix is set: then the name before the
	// first '=' may be in either case (the X-Hub-Signature "sha256=" of
	// Bitbucket, Jira and Meta).
	Prefix     string
	FoldPrefix bool
	// Hash is the MAC's hash (sha256.New); its size is the MAC's length.
	Hash func() hash.Hash
	// Base64 selects standard padded base64 rather than hex.
	Base64 bool
	// Malformed is the reason of the malformed_header error for a value of
	// any other form ("must be 64 hex digits"), Mismatch the reason of the
	// bad_signature error when no configured secret gives the MAC.
	Malformed, Mismatch string
}

// check returns nil when the header holds the MAC, under one of keys, of
// content (its parts concatenated); otherwise a missing_header,
// malformed_header or bad_signature *[Error] naming the header. Every
// comparison is constant-time.
func (m macHeader) check(h Header, keys [][]byte, content ...[]byte) *Error {
	raw := header(h, m.Name)
	if raw == "" {
		return missingHeader(m.Name)
	}
	prefix := m.Prefix
	if m.FoldPrefix {
		if alg, rest, found := strings.Cut(raw, "="); found && strings.EqualFold(alg+"=", prefix) {
			raw, prefix = rest, ""
		}
	}
	decode := macFromHex
	if m.Base64 {
		decode = macFromBase64
	}
	sig, ok := decode(raw, prefix, m.Hash().Size())
	if !ok {
		return headerErr(CodeMalformedHeader, m.Name, m.Malformed)
	}
	if !anyMACMatches(m.Hash, keys, [][]byte{sig}, content...) {
		return headerErr(CodeBadSignature, m.Name, m.Mismatch)
	}
	return nil
}
