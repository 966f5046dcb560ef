package strictjson

// The canonicaliser, Parse and CanonicalValue as they were before the
// single-pass scanner (jsontext token by token, a flat tree, numbers
// rewritten digit by digit), kept unchanged as the reference the fast code
// is compared with (TestMatchesReference, FuzzMatchesReference). Only the
// names differ: ref… for every function and type of its own. The error
// mapping (decodeError, capPointer) is shared: it is not what changed.

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// refCanonical is the reference Canonical.
func refCanonical(data []byte) ([]byte, error) {
	r := getRefReader()
	defer refReaderPool.Put(r)
	if err := r.canonical(data); err != nil {
		return nil, err
	}
	return bytes.Clone(r.out), nil
}

// refParse is the reference Parse.
func refParse(data []byte) (any, error) {
	r := getRefReader()
	defer refReaderPool.Put(r)
	if err := r.start(data); err != nil {
		return nil, err
	}
	v, err := r.parseValue(0)
	if err != nil {
		return nil, err
	}
	if err := r.finish(); err != nil {
		return nil, err
	}
	return v, nil
}

// refCanonicalValue is the reference CanonicalValue.
func refCanonicalValue(v any) ([]byte, error) {
	out, err := refAppendTree(nil, v, 0)
	if err != nil {
		err.Pointer = capPointer(err.Pointer)
		return nil, err
	}
	return out, nil
}

// refUnmarshal is the reference Unmarshal: the jsontext pass (check,
// which is unchanged) and json.Unmarshal with every strict flag.
func refUnmarshal(data []byte, v any, opts ...Option) error {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return &Error{Reason: ReasonNotPointer, Offset: -1}
	}
	r := getReader()
	err := r.start(data)
	if err == nil {
		err = r.check(shapeOf(rv.Type().Elem()), o.rejectUnknown, 0)
	}
	if err == nil {
		err = r.finish()
	}
	putReader(r)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v,
		jsontext.AllowDuplicateNames(false),
		jsontext.AllowInvalidUTF8(false),
		json.MatchCaseInsensitiveNames(false),
		json.RejectUnknownMembers(o.rejectUnknown),
		json.WithUnmarshalers(refAnyAsTree),
	); err != nil {
		return unmarshalError(data, err)
	}
	return nil
}

var refAnyAsTree = json.UnmarshalFunc(func(b []byte, v *any) error {
	tree, err := refParse(b)
	if err != nil {
		return err
	}
	*v = tree
	return nil
})

// refCanonicalNumber is the reference CanonicalNumber.
func refCanonicalNumber(lit string) (string, error) {
	b, err := refAppendCanonicalNumber(nil, lit)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

type refReader struct {
	data    []byte
	dec     *jsontext.Decoder
	unq     []byte
	scratch []byte
	text    []byte
	nodes   []refNode
	kids    []int32
	stack   []int32
	out     []byte
}

var refReaderPool = sync.Pool{New: func() any {
	return &refReader{dec: jsontext.NewDecoder(bytes.NewBuffer(nil))}
}}

func getRefReader() *refReader { return refReaderPool.Get().(*refReader) }

type refNode struct {
	kind uint8
	a, b int32
	val  int32
}

const (
	refNodeScalar uint8 = iota
	refNodeArray
	refNodeObject
	refNodeMember
)

func (r *refReader) canonical(data []byte) *Error {
	r.text, r.nodes, r.kids, r.stack, r.out = r.text[:0], r.nodes[:0], r.kids[:0], r.stack[:0], r.out[:0]
	// Size the buffers once from the input, rather than growing them by
	// copying: the text is at most the input's length plus a few bytes per
	// escape; nodes and children are estimated from typical documents (a
	// value per 6 to 8 input bytes) and grow past that if needed.
	if cap(r.text) < len(data) {
		r.text = make([]byte, 0, len(data)+len(data)/8)
	}
	if n := len(data)/6 + 8; cap(r.nodes) < n {
		r.nodes = make([]refNode, 0, n)
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

func (r *refReader) canonValue(depth int) (int32, *Error) {
	switch kind := r.dec.PeekKind(); kind {
	case '{', '[':
		if _, err := r.dec.ReadToken(); err != nil {
			return 0, r.fail(err)
		}
		if depth == MaxDepth {
			return 0, r.tooDeep()
		}
		closing, nk := byte(']'), refNodeArray
		if kind == '{' {
			closing, nk = '}', refNodeObject
		}
		mark := len(r.stack)
		for byte(r.dec.PeekKind()) != closing {
			if nk == refNodeArray {
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
			r.nodes = append(r.nodes, refNode{kind: refNodeMember, a: a, b: b, val: v})
			r.stack = append(r.stack, int32(len(r.nodes)-1))
		}
		if _, err := r.dec.ReadToken(); err != nil {
			return 0, r.fail(err)
		}
		k0 := int32(len(r.kids))
		r.kids = append(r.kids, r.stack[mark:]...)
		r.stack = r.stack[:mark]
		if nk == refNodeObject && len(r.kids)-int(k0) > 1 {
			slices.SortFunc(r.kids[k0:], r.compareMembers)
		}
		r.nodes = append(r.nodes, refNode{kind: nk, a: k0, b: int32(len(r.kids))})
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
			r.text = refAppendString(r.text, s)
		}
	default:
		var err error
		if r.text, err = refAppendCanonicalNumber(r.text, raw); err != nil {
			return 0, r.at(err.(*Error), raw) //nolint:errorlint // refAppendCanonicalNumber returns only *Error, never wrapped
		}
	}
	r.nodes = append(r.nodes, refNode{kind: refNodeScalar, a: a, b: int32(len(r.text))})
	return int32(len(r.nodes) - 1), nil
}

func (r *refReader) compareMembers(x, y int32) int {
	nx, ny := r.nodes[x], r.nodes[y]
	return refCompareUTF16(r.text[nx.a:nx.b], r.text[ny.a:ny.b])
}

func (r *refReader) emit(dst []byte, i int32) []byte {
	n := r.nodes[i]
	switch n.kind {
	case refNodeScalar:
		return append(dst, r.text[n.a:n.b]...)
	case refNodeArray:
		dst = append(dst, '[')
		for j, k := range r.kids[n.a:n.b] {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = r.emit(dst, k)
		}
		return append(dst, ']')
	default: // refNodeObject
		dst = append(dst, '{')
		for j, k := range r.kids[n.a:n.b] {
			if j > 0 {
				dst = append(dst, ',')
			}
			m := r.nodes[k]
			dst = refAppendString(dst, r.text[m.a:m.b])
			dst = append(dst, ':')
			dst = r.emit(dst, m.val)
		}
		return append(dst, '}')
	}
}

func refAppendTree(dst []byte, v any, depth int) ([]byte, *Error) {
	switch v := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case bool:
		return strconv.AppendBool(dst, v), nil
	case string:
		if !utf8.ValidString(v) {
			return nil, &Error{Reason: ReasonInvalidUTF8, Offset: -1}
		}
		return refAppendString(dst, v), nil
	case Number:
		out, err := refAppendCanonicalNumber(dst, v)
		if err != nil {
			e := err.(*Error) //nolint:errorlint // refAppendCanonicalNumber returns only *Error, never wrapped
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
			if dst, e = refAppendTree(dst, x, depth+1); e != nil {
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
		slices.SortFunc(keys, refCompareUTF16[string])
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = refAppendString(dst, k)
			dst = append(dst, ':')
			var e *Error
			if dst, e = refAppendTree(dst, v[k], depth+1); e != nil {
				e.Pointer = "/" + escapePointerToken(k) + e.Pointer
				return nil, e
			}
		}
		return append(dst, '}'), nil
	}
	return nil, &Error{Reason: fmt.Sprintf("unsupported Go type %T in tree", v), Offset: -1}
}

func (r *refReader) start(data []byte) *Error {
	switch {
	case len(data) > MaxBytes:
		return &Error{Reason: ReasonTooLarge, Offset: MaxBytes}
	case bytes.HasPrefix(data, bom):
		return &Error{Reason: ReasonBOM, Offset: 0}
	}
	r.data = data
	r.dec.Reset(bytes.NewBuffer(data),
		jsontext.AllowDuplicateNames(false),
		jsontext.AllowInvalidUTF8(false))
	if r.dec.PeekKind() == 0 {
		if len(bytes.Trim(data, " \t\r\n")) == 0 {
			return &Error{Reason: ReasonEmpty, Offset: 0}
		}
		_, err := r.dec.ReadValue()
		return r.fail(err)
	}
	return nil
}

func (r *refReader) finish() *Error {
	off := int(r.dec.InputOffset())
	for off < len(r.data) && isSpace(r.data[off]) {
		off++
	}
	if off < len(r.data) {
		return &Error{Reason: ReasonTrailing, Offset: int64(off)}
	}
	return nil
}

func (r *refReader) fail(err error) *Error {
	if err == nil {
		return &Error{Reason: ReasonSyntax, Offset: r.dec.InputOffset()}
	}
	return decodeError(r.data, err)
}

func (r *refReader) tooDeep() *Error {
	return &Error{
		Reason:  ReasonTooDeep,
		Pointer: capPointer(string(r.dec.StackPointer())),
		Offset:  r.dec.InputOffset() - 1,
	}
}

func (r *refReader) at(e *Error, raw []byte) *Error {
	e.Pointer = capPointer(string(r.dec.StackPointer()))
	e.Offset = r.dec.InputOffset() - int64(len(raw))
	return e
}

func (r *refReader) unquote(raw []byte) ([]byte, *Error) {
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return inner, nil
	}
	var err error
	r.unq, err = jsontext.AppendUnquote(r.unq[:0], raw)
	if err != nil { // unreachable: the decoder validated raw
		return nil, r.at(&Error{Reason: ReasonSurrogate}, raw)
	}
	return r.unq, nil
}

func (r *refReader) checkNumber(raw []byte) *Error {
	var err error
	r.scratch, err = refAppendCanonicalNumber(r.scratch[:0], raw)
	if err != nil {
		return r.at(err.(*Error), raw) //nolint:errorlint // refAppendCanonicalNumber returns only *Error, never wrapped
	}
	return nil
}

func (r *refReader) parseValue(depth int) (any, *Error) {
	switch r.dec.PeekKind() {
	case '{':
		if _, err := r.dec.ReadToken(); err != nil {
			return nil, r.fail(err)
		}
		if depth == MaxDepth {
			return nil, r.tooDeep()
		}
		m := map[string]any{}
		for r.dec.PeekKind() != '}' {
			raw, err := r.dec.ReadValue()
			if err != nil {
				return nil, r.fail(err)
			}
			name, e := r.unquote(raw)
			if e != nil {
				return nil, e
			}
			key := string(name)
			v, e := r.parseValue(depth + 1)
			if e != nil {
				return nil, e
			}
			m[key] = v
		}
		if _, err := r.dec.ReadToken(); err != nil {
			return nil, r.fail(err)
		}
		return m, nil
	case '[':
		if _, err := r.dec.ReadToken(); err != nil {
			return nil, r.fail(err)
		}
		if depth == MaxDepth {
			return nil, r.tooDeep()
		}
		a := []any{}
		for r.dec.PeekKind() != ']' {
			v, e := r.parseValue(depth + 1)
			if e != nil {
				return nil, e
			}
			a = append(a, v)
		}
		if _, err := r.dec.ReadToken(); err != nil {
			return nil, r.fail(err)
		}
		return a, nil
	}
	raw, err := r.dec.ReadValue()
	if err != nil {
		return nil, r.fail(err)
	}
	switch raw[0] {
	case 'n':
		return nil, nil
	case 't':
		return true, nil
	case 'f':
		return false, nil
	case '"':
		s, e := r.unquote(raw)
		if e != nil {
			return nil, e
		}
		return string(s), nil
	default:
		if e := r.checkNumber(raw); e != nil {
			return nil, e
		}
		return Number(raw), nil
	}
}

func refAppendCanonicalNumber[S ~string | ~[]byte](dst []byte, lit S) ([]byte, error) {
	// Grammar: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
	i, n := 0, len(lit)
	neg := false
	if i < n && lit[i] == '-' {
		neg = true
		i++
	}
	intStart := i
	switch {
	case i < n && lit[i] == '0':
		i++
	case i < n && '1' <= lit[i] && lit[i] <= '9':
		for i < n && isDigit(lit[i]) {
			i++
		}
	default:
		return dst, notNumber()
	}
	intEnd := i
	fracStart, fracEnd := i, i
	if i < n && lit[i] == '.' {
		i++
		fracStart = i
		for i < n && isDigit(lit[i]) {
			i++
		}
		fracEnd = i
		if fracEnd == fracStart {
			return dst, notNumber()
		}
	}
	var exp int64
	if i < n && (lit[i] == 'e' || lit[i] == 'E') {
		i++
		expNeg := false
		if i < n && (lit[i] == '+' || lit[i] == '-') {
			expNeg = lit[i] == '-'
			i++
		}
		if i == n || !isDigit(lit[i]) {
			return dst, notNumber()
		}
		for i < n && lit[i] == '0' {
			i++
		}
		for ; i < n && isDigit(lit[i]); i++ {
			// Saturate far above MaxExponent: no literal has enough digits
			// to bring such an exponent back into range, and the arithmetic
			// below stays inside int64.
			if exp < expSaturate {
				exp = exp*10 + int64(lit[i]-'0')
			}
		}
		if expNeg {
			exp = -exp
		}
	}
	if i != n {
		return dst, notNumber()
	}

	// The significand digits D are lit[intStart:intEnd] followed by
	// lit[fracStart:fracEnd]; the value is D × 10^(exp − fracLen). digit(k)
	// reads the k-th digit of D without building it.
	intLen, fracLen := intEnd-intStart, fracEnd-fracStart
	total := intLen + fracLen
	digit := func(k int) byte {
		if k < intLen {
			return lit[intStart+k]
		}
		return lit[fracStart+k-intLen]
	}
	first := 0
	for first < total && digit(first) == '0' {
		first++
	}
	if first == total {
		return append(dst, '0'), nil // every spelling of zero, -0 included
	}
	last := total - 1
	for digit(last) == '0' {
		last--
	}
	// s = D[first..last], k digits; value = s × 10^(point − k), where point
	// is ECMAScript's n: the position of the decimal point relative to the
	// start of s.
	k := last - first + 1
	point := exp - int64(fracLen) + int64(total-1-last) + int64(k)
	if e := point - 1; e > MaxExponent || e < -MaxExponent {
		return dst, &Error{Reason: ReasonNumberRange}
	}

	if neg {
		dst = append(dst, '-')
	}
	appendDigits := func(dst []byte, from, to int) []byte { // D[from:to]
		for j := from; j < to; j++ {
			dst = append(dst, digit(j))
		}
		return dst
	}
	switch {
	case int64(k) <= point && point <= 21:
		dst = appendDigits(dst, first, last+1)
		for z := point - int64(k); z > 0; z-- {
			dst = append(dst, '0')
		}
	case 0 < point && point <= 21:
		dst = appendDigits(dst, first, first+int(point))
		dst = append(dst, '.')
		dst = appendDigits(dst, first+int(point), last+1)
	case -6 < point && point <= 0:
		dst = append(dst, '0', '.')
		for z := -point; z > 0; z-- {
			dst = append(dst, '0')
		}
		dst = appendDigits(dst, first, last+1)
	default:
		dst = append(dst, digit(first))
		if k > 1 {
			dst = append(dst, '.')
			dst = appendDigits(dst, first+1, last+1)
		}
		e := point - 1
		dst = append(dst, 'e')
		if e > 0 {
			dst = append(dst, '+')
		} else {
			dst = append(dst, '-')
			e = -e
		}
		dst = refAppendInt(dst, e)
	}
	return dst, nil
}

func refAppendString[S ~string | ~[]byte](dst []byte, s S) []byte {
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

func refCompareUTF16[S ~string | ~[]byte](a, b S) int {
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

func refAppendInt(dst []byte, v int64) []byte {
	var buf [20]byte
	i := len(buf)
	for {
		i--
		buf[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	return append(dst, buf[i:]...)
}
