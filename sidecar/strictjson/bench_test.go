package strictjson

import (
	"bytes"
	"crypto/sha256"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/gowebpki/jcs"
)

// numberHeavyDoc is a ~1 MB array of objects made mostly of numbers, in the
// spellings encoders and humans use, members deliberately unsorted.
func numberHeavyDoc(size int) []byte {
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

// floatDoc is one flat array of about size bytes of numbers of many digits,
// the shape of the attack report (~4 MB, ~170k floats, ~23 bytes each):
// 17- to 20-digit decimals, 17-digit mantissas with exponents as encoders
// write them (e+299, e-07, E+05), 23-digit integers, and negative zero
// and zero-padded values spelt long.
func floatDoc(size int) []byte {
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

func BenchmarkHash(b *testing.B) {
	doc := numberHeavyDoc(1 << 20)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Hash(doc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCanonical(b *testing.B) {
	doc := numberHeavyDoc(1 << 20)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Canonical(doc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHashFloats4MB: the attack report's document, ~4 MB of ~170k
// floats of many digits.
func BenchmarkHashFloats4MB(b *testing.B) {
	doc := floatDoc(4 << 20)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Hash(doc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseCanonicalValue: the tree path (Parse, then CanonicalValue)
// on the number-heavy document, nothing removed.
func BenchmarkParseCanonicalValue(b *testing.B) {
	doc := numberHeavyDoc(1 << 20)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		tree, err := Parse(doc)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := CanonicalValue(tree); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHashWithout: the payload hash with volatile fields (as
// claim.PayloadHash and ingest compute it) on the number-heavy document:
// a member of the first and of the last record, and an array element.
func BenchmarkHashWithout(b *testing.B) {
	doc := numberHeavyDoc(1 << 20)
	var ptrs []Pointer
	for _, s := range []string{"/0/rate", "/5000/v/1", "/6000/name"} {
		p, err := ParsePointer(s)
		if err != nil {
			b.Fatal(err)
		}
		ptrs = append(ptrs, p)
	}
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := HashWithout(doc, ptrs...); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParse: Parse's tree of the number-heavy document.
func BenchmarkParse(b *testing.B) {
	doc := numberHeavyDoc(1 << 20)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(doc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseDocGet: what a key rule does with a body (ParseDoc, then
// two lookups) on the number-heavy document.
func BenchmarkParseDocGet(b *testing.B) {
	doc := numberHeavyDoc(1 << 20)
	p1, _ := ParsePointer("/0/id")
	p2, _ := ParsePointer("/6000/name")
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		d, err := ParseDoc(doc)
		if err != nil {
			b.Fatal(err)
		}
		if _, ok, err := d.Get(p1); !ok || err != nil {
			b.Fatal(ok, err)
		}
		if _, ok, err := d.Get(p2); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

// BenchmarkJCSReference is github.com/gowebpki/jcs on the same document,
// for scale only (it rounds numbers to doubles).
func BenchmarkJCSReference(b *testing.B) {
	doc := numberHeavyDoc(1 << 20)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := jcs.Transform(doc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCanonicalNumber(b *testing.B) {
	b.ReportAllocs()
	dst := make([]byte, 0, 64)
	lit := []byte("-12345.678900e-3")
	for b.Loop() {
		var err error
		if dst, err = appendCanonicalNumber(dst[:0], lit); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReferenceHash is the reference implementation (reference_test.go)
// on the number-heavy document, for comparison under the same load.
func BenchmarkReferenceHash(b *testing.B) {
	doc := numberHeavyDoc(1 << 20)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		c, err := refCanonical(doc)
		if err != nil {
			b.Fatal(err)
		}
		sha256.Sum256(c)
	}
}

// BenchmarkReferenceHashFloats4MB: the reference on the float document.
func BenchmarkReferenceHashFloats4MB(b *testing.B) {
	doc := floatDoc(4 << 20)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		c, err := refCanonical(doc)
		if err != nil {
			b.Fatal(err)
		}
		sha256.Sum256(c)
	}
}
