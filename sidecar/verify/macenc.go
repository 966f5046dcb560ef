package verify

import (
	"encoding/base64"
	"encoding/hex"
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
