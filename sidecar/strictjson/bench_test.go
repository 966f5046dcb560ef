package strictjson

import (
	"bytes"
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
	for b.Loop() {
		var err error
		if dst, err = appendCanonicalNumber(dst[:0], "-12345.678900e-3"); err != nil {
			b.Fatal(err)
		}
	}
}
