package strictjson

import (
	"crypto/sha256"
	"testing"

	"github.com/gowebpki/jcs"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/benchdoc"
)

func BenchmarkHash(b *testing.B) {
	doc := benchdoc.NumberHeavy(1 << 20)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Hash(doc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCanonical(b *testing.B) {
	doc := benchdoc.NumberHeavy(1 << 20)
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
	doc := benchdoc.Floats(4 << 20)
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
	doc := benchdoc.NumberHeavy(1 << 20)
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
	doc := benchdoc.NumberHeavy(1 << 20)
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
	doc := benchdoc.NumberHeavy(1 << 20)
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
	doc := benchdoc.NumberHeavy(1 << 20)
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
	doc := benchdoc.NumberHeavy(1 << 20)
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
	doc := benchdoc.NumberHeavy(1 << 20)
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
	doc := benchdoc.Floats(4 << 20)
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
