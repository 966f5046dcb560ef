package strictjson

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
)

// Strings, for the scanner (scan.go): checking them as the strict decoder
// does, and decoding their escapes.

// scanString reads the JSON string whose opening quote is data[i] and
// returns the offset after its closing quote and whether it holds any
// escape. ok is false for anything the strict decoder refuses: a control
// character, a bad escape, an unpaired surrogate escape, invalid UTF-8 or
// a missing closing quote.
func scanString(data []byte, i int) (end int, esc, ok bool) {
	j := i + 1
	for {
		// Eight bytes at a time through plain ASCII.
		for j+8 <= len(data) {
			m := specialBytes(binary.LittleEndian.Uint64(data[j:]))
			if m != 0 {
				j += bits.TrailingZeros64(m) >> 3
				break
			}
			j += 8
		}
		if j >= len(data) {
			return 0, false, false
		}
		switch c := data[j]; {
		case c == '"':
			return j + 1, esc, true
		case c == '\\':
			esc = true
			n := escapeLen(data, j)
			if n == 0 {
				return 0, false, false
			}
			j += n
		case c < 0x20:
			return 0, false, false
		case c < utf8.RuneSelf:
			j++
		default:
			r, size := utf8.DecodeRune(data[j:])
			if r == utf8.RuneError && size == 1 {
				return 0, false, false
			}
			j += size
		}
	}
}

// specialBytes has the high bit set in each byte of x (eight input bytes,
// little-endian) that a string scan must stop at: below 0x20, '"', '\\',
// or not ASCII. The lowest set bit is exact: a borrow between bytes only
// starts at a byte that is itself special, so bits above the first special
// byte may be spurious, never bits below it.
func specialBytes(x uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	quote := x ^ (ones * '"')
	slash := x ^ (ones * '\\')
	return ((x - ones*0x20) | (quote - ones) | (slash - ones) | x) & highs
}

// escapeLen returns the length of the valid escape at data[j] (a '\\'):
// 2 for \" \\ \/ \b \f \n \r \t, 6 for \uXXXX of a character that is not a
// surrogate, 12 for a high and a low surrogate escape in a row; 0 for
// anything else (an unknown escape, bad hex, an unpaired surrogate).
func escapeLen(data []byte, j int) int {
	if j+1 >= len(data) {
		return 0
	}
	switch data[j+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2
	case 'u':
	default:
		return 0
	}
	v, ok := hex4(data, j+2)
	switch {
	case !ok:
		return 0
	case v < 0xD800 || v >= 0xE000:
		return 6
	case v >= 0xDC00: // a low surrogate first
		return 0
	}
	if j+7 >= len(data) || data[j+6] != '\\' || data[j+7] != 'u' {
		return 0
	}
	if w, ok := hex4(data, j+8); !ok || w < 0xDC00 || w >= 0xE000 {
		return 0
	}
	return 12
}

// hex4 reads four hex digits (either case) at data[i:].
func hex4(data []byte, i int) (rune, bool) {
	if i+4 > len(data) {
		return 0, false
	}
	var v rune
	for _, c := range data[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | rune(c)
	}
	return v, true
}

// appendUnescaped appends the characters of s, the content of a JSON
// string that scanString accepted (between its quotes), with every escape
// decoded.
func appendUnescaped(dst, s []byte) []byte {
	for {
		k := bytes.IndexByte(s, '\\')
		if k < 0 {
			return append(dst, s...)
		}
		dst = append(dst, s[:k]...)
		s = s[k:]
		var c byte
		switch s[1] {
		case 'u':
			v, _ := hex4(s, 2)
			n := 6
			if v >= 0xD800 && v < 0xDC00 { // a pair, as scanString checked
				w, _ := hex4(s, 8)
				v = 0x10000 + (v-0xD800)<<10 + (w - 0xDC00)
				n = 12
			}
			dst = utf8.AppendRune(dst, v)
			s = s[n:]
			continue
		case 'b':
			c = '\b'
		case 'f':
			c = '\f'
		case 'n':
			c = '\n'
		case 'r':
			c = '\r'
		case 't':
			c = '\t'
		default: // '"', '\\', '/'
			c = s[1]
		}
		dst = append(dst, c)
		s = s[2:]
	}
}
