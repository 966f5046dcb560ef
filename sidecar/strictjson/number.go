package strictjson

import (
	"encoding/binary"
	"math/bits"
	"strconv"
	"strings"
	"unsafe"
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
	if err := checkNumberLiteral(stringBytes(string(n))); err != nil {
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
	if err := checkNumberLiteral(b); err != nil {
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
	b, err := appendCanonicalNumber(nil, stringBytes(lit))
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// appendCanonicalNumber appends the canonical text of the JSON number
// literal lit to dst. It never converts to floating point: the literal is
// read as sign, significand digits and decimal exponent, and rewritten.
// On failure it returns dst unchanged and an *Error with Offset 0.
func appendCanonicalNumber(dst, lit []byte) ([]byte, error) {
	p, end, ok := scanNumber(lit, 0)
	if !ok || end != len(lit) {
		return dst, notNumber()
	}
	out, ok := appendNumber(dst, lit, p)
	if !ok {
		return dst, &Error{Reason: ReasonNumberRange}
	}
	return out, nil
}

// checkNumberLiteral returns the error appendCanonicalNumber would return for
// lit, without writing anything.
func checkNumberLiteral(lit []byte) error {
	p, end, ok := scanNumber(lit, 0)
	switch {
	case !ok || end != len(lit):
		return notNumber()
	case !numberInRange(lit, p):
		return &Error{Reason: ReasonNumberRange}
	}
	return nil
}

// numParts locates the parts of a number literal: its integer digits are
// lit[intStart:intEnd], its fraction digits lit[fracStart:fracEnd] (empty
// without a fraction), and its value is ±(integer.fraction) × 10^exp.
// exp saturates at ±expSaturate (see MaxExponent).
type numParts struct {
	neg, hasExp                          bool
	intStart, intEnd, fracStart, fracEnd int
	exp                                  int64
}

// scanNumber reads the longest prefix of lit[i:] that the JSON number
// grammar (RFC 8259 §6) allows,
//
//	-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
//
// and returns its parts and the offset after it; ok is false when lit[i:]
// does not start with a number.
func scanNumber(lit []byte, i int) (p numParts, end int, ok bool) {
	n := len(lit)
	if i < n && lit[i] == '-' {
		p.neg = true
		i++
	}
	p.intStart = i
	switch {
	case i < n && lit[i] == '0':
		i++
	case i < n && '1' <= lit[i] && lit[i] <= '9':
		i = digitsEnd(lit, i+1)
	default:
		return p, i, false
	}
	p.intEnd = i
	p.fracStart, p.fracEnd = i, i
	if i < n && lit[i] == '.' {
		i++
		p.fracStart = i
		i = digitsEnd(lit, i)
		p.fracEnd = i
		if p.fracEnd == p.fracStart {
			return p, i, false
		}
	}
	if i < n && (lit[i] == 'e' || lit[i] == 'E') {
		p.hasExp = true
		i++
		expNeg := false
		if i < n && (lit[i] == '+' || lit[i] == '-') {
			expNeg = lit[i] == '-'
			i++
		}
		if i == n || !isDigit(lit[i]) {
			return p, i, false
		}
		for i < n && lit[i] == '0' {
			i++
		}
		for ; i < n && isDigit(lit[i]); i++ {
			// Saturate far above MaxExponent: no literal has enough digits
			// to bring such an exponent back into range, and the arithmetic
			// of appendNumber stays inside int64.
			if p.exp < expSaturate {
				p.exp = p.exp*10 + int64(lit[i]-'0')
			}
		}
		if expNeg {
			p.exp = -p.exp
		}
	}
	return p, i, true
}

// isCanonical reports whether the literal lit (its parts p) already is its
// own canonical text, as most numbers that encoders write are: no
// exponent, no "-0", no trailing zero in a fraction, at most 21 integer
// digits, and under 6 zeros after "0.". appendNumber would write it
// unchanged.
func (p numParts) isCanonical(lit []byte) bool {
	if p.hasExp {
		return false
	}
	intZero := lit[p.intStart] == '0' // the integer part is "0"
	if p.fracEnd == p.fracStart {
		return !(intZero && p.neg) && p.intEnd-p.intStart <= 21
	}
	if lit[p.fracEnd-1] == '0' {
		return false
	}
	if intZero {
		z := 0
		for lit[p.fracStart+z] == '0' { // ends: the last digit is not 0
			z++
		}
		return z <= 5
	}
	return p.intEnd-p.intStart <= 21
}

// significand locates the significant digits of the number lit (its parts
// p): s = D[first..last], where D is the integer digits followed by the
// fraction digits, and point is ECMAScript's n, the position of the
// decimal point relative to the start of s: value = ±0.s × 10^point. zero
// reports a zero value (any spelling, -0 included), for which nothing else
// is set.
func significand(lit []byte, p numParts) (first, last int, point int64, zero bool) {
	ip, fp := lit[p.intStart:p.intEnd], lit[p.fracStart:p.fracEnd]
	intLen := len(ip)
	total := intLen + len(fp)
	if ip[0] == '0' { // the integer part is "0" (the grammar allows no other leading 0)
		for first = 1; first < total && fp[first-intLen] == '0'; first++ {
		}
		if first == total {
			return 0, 0, 0, true
		}
	}
	last = total - 1
	for last >= intLen && fp[last-intLen] == '0' {
		last--
	}
	if last < intLen {
		for ip[last] == '0' {
			last--
		}
	}
	// value = s × 10^(exp − len(fp) + trailing zeros of D) = 0.s × 10^point.
	k := last - first + 1
	point = p.exp - int64(len(fp)) + int64(total-1-last) + int64(k)
	return first, last, point, false
}

// numberInRange reports whether the number lit (its parts p) is within
// MaxExponent, as appendNumber requires.
func numberInRange(lit []byte, p numParts) bool {
	// The scientific exponent differs from the literal's by less than the
	// literal's length: only a huge exponent needs a closer look.
	if e := p.exp; e < MaxExponent-MaxBytes && e > -(MaxExponent-MaxBytes) {
		return true
	}
	_, _, point, zero := significand(lit, p)
	return zero || (point-1 <= MaxExponent && point-1 >= -MaxExponent)
}

// appendNumber appends the canonical text of the number lit (its parts p)
// to dst, or returns ok false, dst unchanged, when its value's scientific
// exponent exceeds MaxExponent.
func appendNumber(dst []byte, lit []byte, p numParts) ([]byte, bool) {
	first, last, point, zero := significand(lit, p)
	if zero {
		return append(dst, '0'), true
	}
	if e := point - 1; e > MaxExponent || e < -MaxExponent {
		return dst, false
	}
	ip, fp := lit[p.intStart:p.intEnd], lit[p.fracStart:p.fracEnd]
	k := last - first + 1
	if p.neg {
		dst = append(dst, '-')
	}
	const zeros = "000000000000000000000" // 21
	switch {
	case int64(k) <= point && point <= 21:
		dst = appendDigits(dst, ip, fp, first, last+1)
		dst = append(dst, zeros[:point-int64(k)]...)
	case 0 < point && point <= 21:
		dst = appendDigits(dst, ip, fp, first, first+int(point))
		dst = append(dst, '.')
		dst = appendDigits(dst, ip, fp, first+int(point), last+1)
	case -6 < point && point <= 0:
		dst = append(dst, '0', '.')
		dst = append(dst, zeros[:-point]...)
		dst = appendDigits(dst, ip, fp, first, last+1)
	default:
		dst = appendDigits(dst, ip, fp, first, first+1)
		if k > 1 {
			dst = append(dst, '.')
			dst = appendDigits(dst, ip, fp, first+1, last+1)
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
	return dst, true
}

// appendDigits appends D[from:to], where D is ip followed by fp.
func appendDigits(dst, ip, fp []byte, from, to int) []byte {
	n := len(ip)
	if from < n {
		dst = append(dst, ip[from:min(to, n)]...)
	}
	if to > n {
		dst = append(dst, fp[max(from, n)-n:to-n]...)
	}
	return dst
}

// digitsEnd returns the end of the run of ASCII digits at lit[i:], eight
// bytes at a time.
func digitsEnd(lit []byte, i int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for i+8 <= len(lit) {
		x := binary.LittleEndian.Uint64(lit[i:])
		// The high bit of each byte below '0' or above '9'; as in
		// specialBytes, the lowest one is exact.
		m := ((x-ones*'0')&^x | (x + ones*(127-'9')) | x) & highs
		if m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
		i += 8
	}
	for i < len(lit) && isDigit(lit[i]) {
		i++
	}
	return i
}

// stringBytes returns the bytes of s without copying them (numbers in a
// tree are strings); the caller must not change them.
func stringBytes(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
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
		return c, nil //nolint:nilerr // too long to write out, or (never) not an integer: c as it is
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	b.WriteString(digits)
	b.WriteString(strings.Repeat("0", e+1-len(digits)))
	return b.String(), nil
}
