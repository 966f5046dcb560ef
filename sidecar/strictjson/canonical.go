package strictjson

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Canonical returns the canonical form of the JSON document data, decoded
// strictly (see the package documentation): RFC 8785 (JCS) except that
// numbers are written exactly. Two documents get the same canonical form if
// and only if they denote the same JSON value.
//
// Errors: *Error, as Parse; numbers beyond MaxExponent fail
// with ReasonNumberRange.
func Canonical(data []byte) ([]byte, error) {
	r := getReader()
	defer putReader(r)
	if err := r.canonical(data); err != nil {
		return nil, err
	}
	return bytes.Clone(r.out), nil
}

// Hash returns the lowercase hex SHA-256 (64 characters) of
// Canonical(data). Errors: as Canonical.
func Hash(data []byte) (string, error) {
	r := getReader()
	defer putReader(r)
	if err := r.canonical(data); err != nil {
		return "", err
	}
	sum := sha256.Sum256(r.out)
	return hex.EncodeToString(sum[:]), nil
}

// CanonicalValue returns the canonical form of a tree as Parse produces it,
// typically after the caller removed or replaced members: map[string]any,
// []any, string, Number, bool and nil, nested at most MaxDepth deep. It
// equals Canonical of the document the tree was parsed from.
//
// Errors (*Error, Offset -1, Pointer locating the value): ReasonInvalidUTF8
// for a string or name that is not valid UTF-8, ReasonNotNumber or
// ReasonNumberRange for a Number CanonicalNumber refuses, ReasonTooDeep
// (also for a tree that contains itself), and "unsupported Go type T in
// tree" for any other Go type (float64 and int included: a number must be
// given as its exact text, Number).
func CanonicalValue(v any) ([]byte, error) {
	out, err := appendTree(nil, v, 0)
	if err != nil {
		err.Pointer = capPointer(err.Pointer)
		return nil, err
	}
	return out, nil
}

// Canonical form, in two passes. Pass 1 reads the document once with the
// strict decoder and records a flat tree: every scalar's canonical text and
// every member name goes to r.text, every value to r.nodes, and every
// container's children to one contiguous run of r.kids (collected on
// r.stack while the container is open). An object's run is then sorted by
// member name. Pass 2 writes the nodes in that order. Each byte is copied a
// bounded number of times whatever the nesting, so sorting costs no more
// than O(members × log members) name comparisons.

// cnode is one value (or object member) of pass 1.
type cnode struct {
	kind uint8
	a, b int32 // scalar: its text r.text[a:b]; container: its children r.kids[a:b]; member: its unquoted name r.text[a:b]
	val  int32 // member: the index of its value node
}

const (
	nodeScalar uint8 = iota
	nodeArray
	nodeObject
	nodeMember
)

// MaxBytes keeps every offset of pass 1 inside int32.
var _ = [1]struct{}{}[MaxBytes>>31]

func (r *reader) canonical(data []byte) *Error {
	r.text, r.nodes, r.kids, r.stack, r.out = r.text[:0], r.nodes[:0], r.kids[:0], r.stack[:0], r.out[:0]
	// Size the buffers once from the input, rather than growing them by
	// copying: the text is at most the input's length plus a few bytes per
	// escape; nodes and children are estimated from typical documents (a
	// value per 6 to 8 input bytes) and grow past that if needed.
	if cap(r.text) < len(data) {
		r.text = make([]byte, 0, len(data)+len(data)/8)
	}
	if n := len(data)/6 + 8; cap(r.nodes) < n {
		r.nodes = make([]cnode, 0, n)
	}
	if n := len(data)/8 + 8; cap(r.kids) < n {
		r.kids = make([]int32, 0, n)
	}
	if err := r.start(data); err != nil {
		return err
	}
	root, err := r.canonValue(0)
	if err != nil {
		return err
	}
	if err := r.finish(); err != nil {
		return err
	}
	if cap(r.out) < len(r.text)+len(r.nodes)*2 {
		r.out = make([]byte, 0, len(r.text)+len(r.nodes)*2)
	}
	r.out = r.emit(r.out, root)
	return nil
}

func (r *reader) canonValue(depth int) (int32, *Error) {
	switch kind := r.dec.PeekKind(); kind {
	case '{', '[':
		if _, err := r.dec.ReadToken(); err != nil {
			return 0, r.fail(err)
		}
		if depth == MaxDepth {
			return 0, r.tooDeep()
		}
		closing, nk := byte(']'), nodeArray
		if kind == '{' {
			closing, nk = '}', nodeObject
		}
		mark := len(r.stack)
		for byte(r.dec.PeekKind()) != closing {
			if nk == nodeArray {
				v, e := r.canonValue(depth + 1)
				if e != nil {
					return 0, e
				}
				r.stack = append(r.stack, v)
				continue
			}
			raw, err := r.dec.ReadValue()
			if err != nil {
				return 0, r.fail(err)
			}
			name, e := r.unquote(raw)
			if e != nil {
				return 0, e
			}
			a := int32(len(r.text))
			r.text = append(r.text, name...)
			b := int32(len(r.text))
			v, e := r.canonValue(depth + 1)
			if e != nil {
				return 0, e
			}
			r.nodes = append(r.nodes, cnode{kind: nodeMember, a: a, b: b, val: v})
			r.stack = append(r.stack, int32(len(r.nodes)-1))
		}
		if _, err := r.dec.ReadToken(); err != nil {
			return 0, r.fail(err)
		}
		k0 := int32(len(r.kids))
		r.kids = append(r.kids, r.stack[mark:]...)
		r.stack = r.stack[:mark]
		if nk == nodeObject && len(r.kids)-int(k0) > 1 {
			slices.SortFunc(r.kids[k0:], r.compareMembers)
		}
		r.nodes = append(r.nodes, cnode{kind: nk, a: k0, b: int32(len(r.kids))})
		return int32(len(r.nodes) - 1), nil
	}
	raw, err := r.dec.ReadValue()
	if err != nil {
		return 0, r.fail(err)
	}
	a := int32(len(r.text))
	switch raw[0] {
	case 'n', 't', 'f':
		r.text = append(r.text, raw...)
	case '"':
		if bytes.IndexByte(raw, '\\') < 0 {
			// No escapes: the decoder admitted only valid UTF-8 and no
			// control characters, so raw already is the canonical form.
			r.text = append(r.text, raw...)
		} else {
			s, e := r.unquote(raw)
			if e != nil {
				return 0, e
			}
			r.text = appendString(r.text, s)
		}
	default:
		var err error
		if r.text, err = appendCanonicalNumber(r.text, raw); err != nil {
			return 0, r.at(err.(*Error), raw)
		}
	}
	r.nodes = append(r.nodes, cnode{kind: nodeScalar, a: a, b: int32(len(r.text))})
	return int32(len(r.nodes) - 1), nil
}

// compareMembers orders two member nodes by name, RFC 8785 §3.2.3.
func (r *reader) compareMembers(x, y int32) int {
	nx, ny := r.nodes[x], r.nodes[y]
	return compareUTF16(r.text[nx.a:nx.b], r.text[ny.a:ny.b])
}

func (r *reader) emit(dst []byte, i int32) []byte {
	n := r.nodes[i]
	switch n.kind {
	case nodeScalar:
		return append(dst, r.text[n.a:n.b]...)
	case nodeArray:
		dst = append(dst, '[')
		for j, k := range r.kids[n.a:n.b] {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = r.emit(dst, k)
		}
		return append(dst, ']')
	default: // nodeObject
		dst = append(dst, '{')
		for j, k := range r.kids[n.a:n.b] {
			if j > 0 {
				dst = append(dst, ',')
			}
			m := r.nodes[k]
			dst = appendString(dst, r.text[m.a:m.b])
			dst = append(dst, ':')
			dst = r.emit(dst, m.val)
		}
		return append(dst, '}')
	}
}

// appendString appends s (valid UTF-8) as a JSON string per RFC 8785
// §3.2.2.2: only '"', '\\' and U+0000–U+001F are escaped, as \b \t \n \f \r
// or \u00xx with lowercase hex; everything else is written as raw UTF-8,
// without Unicode normalisation.
func appendString[S ~string | ~[]byte](dst []byte, s S) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\r':
			dst = append(dst, '\\', 'r')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// compareUTF16 compares two valid UTF-8 strings by their UTF-16 code units
// (RFC 8785 §3.2.3). UTF-8 byte order is code point order, which agrees
// with UTF-16 order except between a supplementary character (4-byte UTF-8,
// a surrogate pair in UTF-16, D800–DFFF) and a character of U+E000–U+FFFF
// (3-byte UTF-8 led by EE or EF): there UTF-16 puts the supplementary one
// first.
func compareUTF16[S ~string | ~[]byte](a, b S) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		return len(a) - len(b) // one is a prefix of the other (or equal)
	}
	// a[:i] == b[:i], so both differing runes start at the same offset.
	s := i
	for s > 0 && !utf8.RuneStart(a[s]) {
		s--
	}
	la, lb := a[s], b[s]
	switch {
	case la >= 0xF0 && (lb == 0xEE || lb == 0xEF):
		return -1
	case lb >= 0xF0 && (la == 0xEE || la == 0xEF):
		return +1
	}
	return int(a[i]) - int(b[i])
}

// appendTree writes the canonical form of a Parse tree. Errors carry the
// pointer of the failing value, built while unwinding.
func appendTree(dst []byte, v any, depth int) ([]byte, *Error) {
	switch v := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case bool:
		return strconv.AppendBool(dst, v), nil
	case string:
		if !utf8.ValidString(v) {
			return nil, &Error{Reason: ReasonInvalidUTF8, Offset: -1}
		}
		return appendString(dst, v), nil
	case Number:
		out, err := appendCanonicalNumber(dst, v)
		if err != nil {
			e := err.(*Error)
			e.Offset = -1
			return nil, e
		}
		return out, nil
	case []any:
		if depth == MaxDepth {
			return nil, &Error{Reason: ReasonTooDeep, Offset: -1}
		}
		dst = append(dst, '[')
		for i, x := range v {
			if i > 0 {
				dst = append(dst, ',')
			}
			var e *Error
			if dst, e = appendTree(dst, x, depth+1); e != nil {
				e.Pointer = "/" + strconv.Itoa(i) + e.Pointer
				return nil, e
			}
		}
		return append(dst, ']'), nil
	case map[string]any:
		if depth == MaxDepth {
			return nil, &Error{Reason: ReasonTooDeep, Offset: -1}
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			if !utf8.ValidString(k) {
				return nil, &Error{Reason: ReasonInvalidUTF8, Offset: -1, Pointer: "/" + escapePointerToken(k)}
			}
			keys = append(keys, k)
		}
		slices.SortFunc(keys, compareUTF16[string])
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, k)
			dst = append(dst, ':')
			var e *Error
			if dst, e = appendTree(dst, v[k], depth+1); e != nil {
				e.Pointer = "/" + escapePointerToken(k) + e.Pointer
				return nil, e
			}
		}
		return append(dst, '}'), nil
	}
	return nil, &Error{Reason: fmt.Sprintf("unsupported Go type %T in tree", v), Offset: -1}
}

// escapePointerToken escapes a member name for a JSON pointer (RFC 6901:
// "~" → "~0", "/" → "~1"), replacing invalid UTF-8 so the pointer stays
// printable.
func escapePointerToken(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}
