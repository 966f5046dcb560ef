package verify

import (
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // HMAC-SHA1 is what Twilio and some generic senders sign with.
	"crypto/sha256"
	"crypto/sha512"
	"encoding/json"
	"hash"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// --- configuration helpers -------------------------------------------------

// validateSecrets checks a list of shared secrets: at least one, none empty,
// none with surrounding whitespace (almost always a copy-paste accident).
func validateSecrets(t Type, field string, secrets []string) error {
	if len(secrets) == 0 {
		return &ConfigError{Type: t, Field: field, Reason: "at least one secret is required (several are allowed for rotation)"}
	}
	for i, s := range secrets {
		f := field + "[" + strconv.Itoa(i) + "]"
		if s == "" {
			return &ConfigError{Type: t, Field: f, Reason: "must not be empty"}
		}
		if strings.TrimSpace(s) != s {
			return &ConfigError{Type: t, Field: f, Reason: "has leading or trailing whitespace"}
		}
	}
	return nil
}

func validateTolerance(t Type, d time.Duration) error {
	if d < 0 {
		return &ConfigError{Type: t, Field: "Tolerance", Reason: "must not be negative (zero means the default of " + DefaultTolerance.String() + ")"}
	}
	return nil
}

func defaultTolerance(d time.Duration) time.Duration {
	if d == 0 {
		return DefaultTolerance
	}
	return d
}

func defaultNow(now func() time.Time) func() time.Time {
	if now == nil {
		return time.Now
	}
	return now
}

// typeFilter implements AllowedEventTypes: an empty list allows every type;
// otherwise an entry matches exactly, "*" matches any type, and an entry
// ending in "*" matches by prefix ("customer.*", "issues*").
type typeFilter struct{ patterns []string }

func validateAllowed(t Type, allowed []string) error {
	for i, p := range allowed {
		f := "AllowedEventTypes[" + strconv.Itoa(i) + "]"
		if p == "" {
			return &ConfigError{Type: t, Field: f, Reason: "must not be empty"}
		}
		if strings.Contains(strings.TrimSuffix(p, "*"), "*") {
			return &ConfigError{Type: t, Field: f, Reason: "'*' is only allowed as the last character"}
		}
	}
	return nil
}

func newTypeFilter(allowed []string) typeFilter {
	return typeFilter{patterns: append([]string(nil), allowed...)}
}

func (f typeFilter) allows(eventType string) bool {
	if len(f.patterns) == 0 {
		return true
	}
	for _, p := range f.patterns {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(eventType, prefix) {
				return true
			}
			continue
		}
		if p == eventType {
			return true
		}
	}
	return false
}

// check returns an authenticated event_type_not_allowed error, or nil.
func (f typeFilter) check(eventType string, in Location, field string) error {
	if f.allows(eventType) {
		return nil
	}
	return authenticated(&Error{Code: CodeEventTypeNotAllowed, In: in, Field: field,
		Reason: "event type " + quoteShort(eventType) + " is not in AllowedEventTypes"})
}

// --- timestamps ------------------------------------------------------------

// parseUnix parses a decimal integer timestamp (digits only, no sign).
func parseUnix(s string) (int64, bool) {
	if s == "" || len(s) > 19 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// within reports whether ts lies within tol of now, in either direction.
// Time.Sub saturates, so absurd timestamps cannot overflow into the window.
func within(now, ts time.Time, tol time.Duration) bool {
	d := now.Sub(ts)
	return d <= tol && d >= -tol
}

func windowErr(in Location, field string, now, ts time.Time, tol time.Duration) *Error {
	dir := "old"
	if ts.After(now) {
		dir = "in the future"
	}
	return &Error{Code: CodeTimestampOutsideTolerance, In: in, Field: field,
		Reason: "signed timestamp is more than " + tol.String() + " " + dir}
}

// --- MACs --------------------------------------------------------------------

// Algorithm names accepted by generic schemes.
const (
	algSHA1   = "sha1"
	algSHA256 = "sha256"
	algSHA512 = "sha512"
)

func hashFor(alg string) func() hash.Hash {
	switch alg {
	case algSHA1:
		return sha1.New
	case algSHA256:
		return sha256.New
	case algSHA512:
		return sha512.New
	}
	return nil
}

// macOf returns HMAC(key, parts...) with the hash h.
func macOf(h func() hash.Hash, key []byte, parts ...[]byte) []byte {
	m := hmac.New(h, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// equalSecret compares two shared tokens in constant time, independent of
// their lengths (both are hashed first, so the comparison leaks neither
// content nor length).
func equalSecret(got, want string) bool {
	a := sha256.Sum256([]byte(got))
	b := sha256.Sum256([]byte(want))
	return hmac.Equal(a[:], b[:])
}

// anyMACMatches reports whether any candidate equals the HMAC of content
// under any key. Every comparison is constant-time.
func anyMACMatches(h func() hash.Hash, keys [][]byte, candidates [][]byte, content ...[]byte) bool {
	if len(candidates) == 0 {
		return false
	}
	for _, k := range keys {
		want := macOf(h, k, content...)
		for _, c := range candidates {
			if hmac.Equal(want, c) {
				return true
			}
		}
	}
	return false
}

func secretKeys(secrets []string) [][]byte {
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		keys[i] = []byte(s)
	}
	return keys
}

// quoteShort quotes s for an error message, cut to 64 bytes.
func quoteShort(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	b, _ := json.Marshal(s)
	return string(b)
}

// formValue returns the value of the form field name ("" when absent). A
// field sent twice with different values, or beside a field whose name
// differs from it only in letter case, names two things at once: an
// authenticated malformed_body error naming it, never whichever came
// first.
func formValue(q url.Values, name string) (string, *Error) {
	vs := q[name]
	for _, v := range vs[min(1, len(vs)):] {
		if v != vs[0] {
			return "", authenticated(bodyErr(CodeMalformedBody, name, "form field appears more than once with different values"))
		}
	}
	for k := range q {
		if k != name && strings.EqualFold(k, name) {
			return "", authenticated(bodyErr(CodeMalformedBody, k, "form field name differs from "+name+" only in letter case"))
		}
	}
	if len(vs) == 0 {
		return "", nil
	}
	return vs[0], nil
}
