package strictjson

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
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
// Cost: linear in len(data), no allocation per value; besides the result
// it holds about 36 bytes per object member and 20 per array while it runs
// (see the package documentation).
//
// Errors: *Error, as Parse; numbers beyond MaxExponent fail
// with ReasonNumberRange.
func Canonical(data []byte) ([]byte, error) {
	r := getReader()
	defer putReader(r)
	root, err := r.canonical(data)
	if err != nil {
		return nil, err
	}
	// The canonical form is rarely longer than the input (numbers such as
	// 1e20 are), so one buffer of the input's size usually holds it.
	return r.emit(make([]byte, 0, len(data)+16), root, nil), nil
}

// Hash returns the lowercase hex SHA-256 (64 characters) of
// Canonical(data), without holding the canonical form in memory. Cost and
// errors: as Canonical.
func Hash(data []byte) (string, error) {
	r := getReader()
	defer putReader(r)
	root, err := r.canonical(data)
	if err != nil {
		return "", err
	}
	return r.hash(root), nil
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

// Canonical form, in two passes. Pass 1 reads the document once and
// records a flat tree: a node per value (its canonical text, in the input
// or in r.text), a node per object member (its unescaped name, in the
// input or in r.text), and every container's children as one contiguous
// run of r.kids (collected on r.stack while the container is open). An
// object's run is then sorted by member name. Pass 2 writes the nodes in
// that order. Each byte is copied a bounded number of times whatever the
// nesting, so sorting costs no more than O(members × log members) name
// comparisons.
//
// Pass 1 is the scanner of scan.go; when it refuses the document, the
// jsontext pass below (canonValue) reads it again and reports the error.

// cnode is one value (or object member) of pass 1.
type cnode struct {
	kind uint8
	a, b int32 // raw or run: r.data[a:b]; text scalar: r.text[a:b]; container: its children r.kids[a:b]; member: its unquoted name r.data[a:b] or r.text[a:b]
	val  int32 // member: the index of its value node
}

const (
	nodeRaw        uint8 = iota // scalars whose canonical text is their source text, r.data[a:b]
	nodeRun                     // scalars (array elements with their commas, or one value) to canonicalise, r.data[a:b]
	nodeText                    // a scalar whose canonical text is r.text[a:b] (the jsontext pass)
	nodeArray                   // children r.kids[a:b]
	nodeObject                  // members r.kids[a:b], sorted by name
	nodeMember                  // a member named r.data[a:b] (no escapes in the source)
	nodeMemberText              // a member named r.text[a:b] (unescaped)
)

// MaxBytes keeps every offset of pass 1 inside int32.
var _ = [1]struct{}{}[MaxBytes>>31]

// canonical runs pass 1 over data and returns the root node.
func (r *reader) canonical(data []byte) (int32, *Error) {
	if root, ok := r.scan(data); ok {
		return root, nil
	}
	// The jsontext pass, for its error. (Should it accept what the scanner
	// refused, its tree is as good: only slower.)
	r.text, r.nodes, r.kids, r.stack = r.text[:0], r.nodes[:0], r.kids[:0], r.stack[:0]
	if err := r.start(data); err != nil {
		return 0, err
	}
	root, err := r.canonValue(0)
	if err != nil {
		return 0, err
	}
	if err := r.finish(); err != nil {
		return 0, err
	}
	return root, nil
}

// hash returns the hex SHA-256 of the canonical form of the tree at root,
// writing it through r.out in pieces of about hashChunk bytes.
func (r *reader) hash(root int32) string {
	if r.sha == nil {
		r.sha = sha256.New()
	}
	r.sha.Reset()
	if cap(r.out) < 2*hashChunk {
		r.out = make([]byte, 0, 2*hashChunk)
	}
	out := r.emit(r.out[:0], root, r.sha)
	r.sha.Write(out)
	var sum [sha256.Size]byte
	return hex.EncodeToString(r.sha.Sum(sum[:0]))
}

// hashChunk is the size of the pieces Hash feeds SHA-256.
const hashChunk = 32 << 10

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
			r.nodes = append(r.nodes, cnode{kind: nodeMemberText, a: a, b: b, val: v})
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
			return 0, r.at(err.(*Error), raw) //nolint:errorlint // appendCanonicalNumber returns only *Error, never wrapped
		}
	}
	r.nodes = append(r.nodes, cnode{kind: nodeText, a: a, b: int32(len(r.text))})
	return int32(len(r.nodes) - 1), nil
}

// name returns the unescaped name of the member node m.
func (r *reader) name(m cnode) []byte {
	if m.kind == nodeMember {
		return r.data[m.a:m.b]
	}
	return r.text[m.a:m.b]
}

// compareMembers orders two member nodes by name, RFC 8785 §3.2.3.
func (r *reader) compareMembers(x, y int32) int {
	return compareUTF16(r.name(r.nodes[x]), r.name(r.nodes[y]))
}

// emit appends the canonical form of node i to dst. With h set, it hands
// dst to h whenever it passes hashChunk bytes and starts over (a long
// stretch of text goes to h directly), so the caller gets the unwritten
// rest.
func (r *reader) emit(dst []byte, i int32, h hash.Hash) []byte {
	n := r.nodes[i]
	switch n.kind {
	case nodeRaw:
		return put(dst, r.data[n.a:n.b], h)
	case nodeRun:
		return r.emitRun(dst, r.data[n.a:n.b], h)
	case nodeText:
		return put(dst, r.text[n.a:n.b], h)
	case nodeArray:
		dst = append(dst, '[')
		for j, k := range r.kids[n.a:n.b] {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = r.emit(dst, k, h)
		}
		return append(dst, ']')
	default: // nodeObject
		dst = append(dst, '{')
		for j, k := range r.kids[n.a:n.b] {
			if j > 0 {
				dst = append(dst, ',')
			}
			m := r.nodes[k]
			if m.kind == nodeMember { // no escapes in the source: none needed, quotes included
				dst = append(dst, r.data[m.a-1:m.b+1]...)
				dst = append(dst, ':')
			} else {
				dst = appendString(dst, r.text[m.a:m.b])
				dst = append(dst, ':')
			}
			switch c := r.nodes[m.val]; c.kind {
			case nodeRaw:
				dst = put(dst, r.data[c.a:c.b], h)
			case nodeRun:
				dst = r.emitRun(dst, r.data[c.a:c.b], h)
			case nodeText:
				dst = put(dst, r.text[c.a:c.b], h)
			default:
				dst = r.emit(dst, m.val, h)
			}
		}
		return append(dst, '}')
	}
}

// put appends text to dst, or, with h set and dst past hashChunk bytes
// after it, writes both to h and returns dst emptied.
func put(dst, text []byte, h hash.Hash) []byte {
	if h == nil || len(dst)+len(text) < hashChunk {
		return append(dst, text...)
	}
	h.Write(dst)
	h.Write(text)
	return dst[:0]
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
		out, err := appendCanonicalNumber(dst, stringBytes(string(v)))
		if err != nil {
			e := err.(*Error) //nolint:errorlint // appendCanonicalNumber returns only *Error, never wrapped
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
