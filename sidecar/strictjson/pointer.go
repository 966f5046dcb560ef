package strictjson

import (
	"strconv"
	"strings"
)

// Pointer is a parsed JSON Pointer (RFC 6901,
// https://www.rfc-editor.org/rfc/rfc6901) into a tree made by [Parse].
type Pointer struct {
	raw    string
	tokens []string
}

// ParsePointer parses an RFC 6901 JSON Pointer: "" (the whole document) or
// "/"-separated reference tokens where "~1" stands for "/" and "~0" for
// "~". Any other "~" sequence is an error (RFC 6901 §3), an *Error.
func ParsePointer(s string) (Pointer, error) {
	if s == "" {
		return Pointer{}, nil
	}
	if s[0] != '/' {
		return Pointer{}, &Error{Reason: "a JSON pointer must be empty or start with '/'", Offset: -1}
	}
	parts := strings.Split(s[1:], "/")
	for i, p := range parts {
		for j := 0; j < len(p); j++ {
			if p[j] == '~' && (j+1 >= len(p) || (p[j+1] != '0' && p[j+1] != '1')) {
				return Pointer{}, &Error{Reason: "'~' must be followed by '0' or '1' in a JSON pointer", Offset: -1}
			}
		}
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(p, "~1", "/"), "~0", "~")
	}
	return Pointer{raw: s, tokens: parts}, nil
}

// Tokens returns the pointer's unescaped reference tokens (none for the
// whole document).
func (p Pointer) Tokens() []string { return append([]string(nil), p.tokens...) }

// String returns the pointer as written.
func (p Pointer) String() string { return p.raw }

// Get walks doc along the pointer and returns the value found and whether
// it exists. Object members match exactly; when the object holding the
// member also has another member whose name differs from it only in letter
// case ("id" and "Id"), the document is ambiguous and Get fails with an
// *[Error] naming the pointer, rather than pick one. Array indexes are
// decimal without leading zeros (RFC 6901 §4); "-" never exists.
func (p Pointer) Get(doc any) (any, bool, error) {
	cur := doc
	for i, t := range p.tokens {
		switch v := cur.(type) {
		case map[string]any:
			next, ok := v[t]
			for name := range v {
				if name != t && strings.EqualFold(name, t) {
					return nil, false, &Error{Pointer: p.prefix(i + 1),
						Reason: "member name differs from another member only in letter case", Offset: -1}
				}
			}
			if !ok {
				return nil, false, nil
			}
			cur = next
		case []any:
			idx, ok := arrayIndex(t, len(v))
			if !ok {
				return nil, false, nil
			}
			cur = v[idx]
		default:
			return nil, false, nil
		}
	}
	return cur, true, nil
}

// Remove deletes the member the pointer names from doc, in place. An array
// element is set to null instead, so the positions of the others keep
// their meaning. A pointer that names nothing, or the whole document,
// changes nothing.
func (p Pointer) Remove(doc any) {
	if len(p.tokens) == 0 {
		return
	}
	cur := doc
	for i, t := range p.tokens {
		last := i == len(p.tokens)-1
		switch v := cur.(type) {
		case map[string]any:
			if last {
				delete(v, t)
				return
			}
			cur = v[t]
		case []any:
			idx, ok := arrayIndex(t, len(v))
			if !ok {
				return
			}
			if last {
				v[idx] = nil
				return
			}
			cur = v[idx]
		default:
			return
		}
	}
}

// prefix is the pointer text of the first n tokens.
func (p Pointer) prefix(n int) string {
	var b strings.Builder
	for _, t := range p.tokens[:n] {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1"))
	}
	return b.String()
}

func arrayIndex(t string, n int) (int, bool) {
	if t == "" || (len(t) > 1 && t[0] == '0') {
		return 0, false
	}
	i, err := strconv.Atoi(t)
	if err != nil || i < 0 || i >= n {
		return 0, false
	}
	return i, true
}
