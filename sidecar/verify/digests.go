package verify

import (
	"encoding/base64"
	"encoding/hex"
)

// decodeHexDigest decodes a MAC sent as exactly 2n hex digits (either
// letter case): false for any other length or a non-hex character.
func decodeHexDigest(s string, n int) ([]byte, bool) {
	if len(s) != hex.EncodedLen(n) {
		return nil, false
	}
	b, err := hex.DecodeString(s)
	return b, err == nil
}

// decodeBase64Digest decodes a MAC of n bytes sent in standard base64 with
// padding (RFC 4648 section 4): false for anything else.
func decodeBase64Digest(s string, n int) ([]byte, bool) {
	if len(s) != base64.StdEncoding.EncodedLen(n) {
		return nil, false
	}
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	return b, err == nil && len(b) == n
}
