// Package benchdoc generates the JSON documents the payload-hash
// benchmarks read (package strictjson's benchmarks and claimbench's hash
// section), so that both measure the same bytes. The documents are
// deterministic: the same size gives the same bytes.
package benchdoc

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strconv"
)

// NumberHeavy is a JSON array of about size bytes of objects made mostly
// of numbers, in the spellings encoders and humans use (integers above
// 2^53, two-decimal amounts, shortest doubles such as 1.37e-07, 1.50E+12,
// -0.0, 1e2), with the members deliberately unsorted: about 130 bytes, 9
// numbers and a string per object (8,100 objects in 1 MiB).
func NumberHeavy(size int) []byte {
	var b bytes.Buffer
	b.WriteByte('[')
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"seq":`)
		b.WriteString(strconv.Itoa(i))
		b.WriteString(`,"amount":`)
		b.WriteString(strconv.FormatFloat(float64(i)*1.37+0.01, 'f', 2, 64))
		b.WriteString(`,"rate":`)
		b.WriteString(strconv.FormatFloat(float64(i)*1e-9, 'g', -1, 64))
		b.WriteString(`,"id":`)
		b.WriteString(strconv.FormatUint(9007199254740993+uint64(i), 10))
		b.WriteString(`,"exp":1.50E+`)
		b.WriteString(strconv.Itoa(i % 40))
		b.WriteString(`,"v":[0,-0.0,1e2,`)
		b.WriteString(strconv.Itoa(-i))
		b.WriteString(`],"name":"item`)
		b.WriteString(strconv.Itoa(i))
		b.WriteString(`"}`)
	}
	b.WriteByte(']')
	return b.Bytes()
}

// Floats is one flat JSON array of about size bytes of numbers of many
// digits, the shape of the attack report (~4 MB, ~170k floats; here about
// 23 bytes each, 183k in 4 MiB): 17- to 20-digit decimals, 17-digit
// mantissas with exponents as encoders write them (e+299, e-07, E+05),
// 23-digit integers, and negative zero and zero-padded values spelt long.
func Floats(size int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	var b bytes.Buffer
	b.Grow(size + 64)
	b.WriteByte('[')
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		f := rng.Float64()
		switch i % 8 {
		case 0:
			b.WriteString(strconv.FormatFloat(f, 'f', 20, 64)) // 0.12345678901234567737
		case 1:
			b.WriteString(strconv.FormatFloat(f*1e3, 'f', 17, 64)) // 123.45678901234567737
		case 2:
			b.WriteString(strconv.FormatFloat(-f*math.Pow10(rng.IntN(300)), 'e', 16, 64)) // -1.2345678901234567e+123
		case 3:
			b.WriteString(strconv.FormatFloat(f*math.Pow10(-rng.IntN(300)), 'g', -1, 64)) // shortest: 1.2345678901234567e-07
		case 4:
			b.WriteString(strconv.FormatFloat(f*1e6, 'E', 17, 64)) // 1.23456789012345678E+05
		case 5:
			b.WriteString(strconv.FormatUint(rng.Uint64(), 10)) // above 2^64
			b.WriteString(strconv.Itoa(rng.IntN(9000) + 1000))
		case 6:
			b.WriteString(strconv.FormatFloat(-f*1000, 'f', 18, 64)) // -123.456789012345678901
		default:
			b.WriteString([]string{"-0.00000000000000000000", "-0", "0.000000000000000000e-7", "1.50000000000000000E+2"}[rng.IntN(4)])
		}
	}
	b.WriteByte(']')
	return b.Bytes()
}
