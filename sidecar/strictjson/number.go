package strictjson

import (
	"strconv"
	"strings"
)

// MaxExponent bounds the magnitude of a JSON number: written in scientific
// notation, d.ddd × 10^e, its exponent e must satisfy |e| ≤ MaxExponent
// (zero is always accepted). A larger one is refused with
// ReasonNumberRange. The bound is on the value, not on the spelling, so it
// applies alike to a literal and to its canonical form (which shows e), and
// keeps exponent arithmetic far inside int64. No real event carries a
// number like 1e1000000000000000.
const MaxExponent = 1_000_000_000_000_000 // 1e15

// Number is a JSON number kept as its exact source text, for example
// "12.50" or "1E400". Parse produces it for every number; a struct field of
// type Number decoded by Unmarshal keeps the literal instead of rounding it
// to a float64. Its canonical text is CanonicalNumber(string(n)).
type Number string

// MarshalJSON returns the literal unchanged, so that encoding a Parse tree
// with encoding/json writes a JSON number, not a string. It fails if n is
// not a JSON number literal.
func (n Number) MarshalJSON() ([]byte, error) {
	if _, err := appendCanonicalNumber(nil, string(n)); err != nil {
		return nil, err
	}
	return []byte(n), nil
}

// UnmarshalJSON stores the literal of a JSON number. It fails with
// "must be a JSON number" for any other JSON value, null included (a
// *Number field takes null as nil), and with ReasonNumberRange beyond
// MaxExponent.
func (n *Number) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || !(b[0] == '-' || ('0' <= b[0] && b[0] <= '9')) {
		return &Error{Reason: "must be a JSON number", Offset: -1}
	}
	if _, err := appendCanonicalNumber(nil, string(b)); err != nil {
		return err
	}
	*n = Number(b)
	return nil
}

// CanonicalNumber returns the canonical text of one JSON number literal
// (RFC 8259 §6 grammar, no surrounding whitespace): the exact decimal value
// of the literal, written in the layout of ECMAScript Number::toString as
// RFC 8785 uses it. See the package documentation for the rules and why they
// depart from RFC 8785. Examples: "1.0" → "1", "-0" → "0", "4.50" → "4.5",
// "1E30" → "1e+30", "2e-3" → "0.002", "9007199254740993" →
// "9007199254740993".
//
// Errors (*Error, Offset 0, Pointer ""): ReasonNotNumber if lit is not a
// JSON number literal, ReasonNumberRange if its value's scientific exponent
// exceeds MaxExponent.
func CanonicalNumber(lit string) (string, error) {
	b, err := appendCanonicalNumber(nil, lit)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// appendCanonicalNumber appends the canonical text of the JSON number
// literal lit to dst. It never converts to floating point: the literal is
// read as sign, significand digits and decimal exponent, and rewritten.
// On failure it returns an *Error with Offset 0.
func appendCanonicalNumber[S ~string | ~[]byte](dst []byte, lit S) ([]byte, error) {
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
		dst = appendInt(dst, e)
	}
	return dst, nil
}

// expSaturate caps the parsed exponent of a literal (see MaxExponent).
const expSaturate = 100 * MaxExponent

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// appendInt appends the decimal form of v ≥ 0.
func appendInt(dst []byte, v int64) []byte {
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

func notNumber() error { return &Error{Reason: ReasonNotNumber} }

// MaxKeyDigits bounds the integers KeyText writes out in plain digits.
const MaxKeyDigits = 100

// KeyText returns the text of a JSON number literal as a part of an
// idempotency key: an integer of at most MaxKeyDigits digits in plain
// decimal digits ("12345678901234567890123", "100" for 1e2, "0" for -0), any
// other number in its canonical form (CanonicalNumber). Like the canonical
// form it is exact and one-to-one: equal values give one text, different
// values different texts (a plain integer never contains '.' or 'e', and
// the canonical form of a non-integer always does). Errors as
// CanonicalNumber.
func KeyText(lit string) (string, error) {
	c, err := CanonicalNumber(lit)
	if err != nil {
		return "", err
	}
	mant, exp, ok := strings.Cut(c, "e+")
	if !ok {
		return c, nil // no positive exponent: already plain, or not an integer
	}
	e, err := strconv.Atoi(exp)
	neg := strings.HasPrefix(mant, "-")
	digits := strings.Replace(strings.TrimPrefix(mant, "-"), ".", "", 1)
	if err != nil || e+1 > MaxKeyDigits || len(digits) > e+1 {
		return c, nil // too long to write out, or (never) not an integer
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	b.WriteString(digits)
	b.WriteString(strings.Repeat("0", e+1-len(digits)))
	return b.String(), nil
}
