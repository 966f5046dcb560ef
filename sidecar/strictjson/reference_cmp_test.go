package strictjson

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/benchdoc"
)

// referenceDocs: the fuzz seeds, the stored fuzz corpus, the benchmark
// documents (small) and encoder output of random trees.
func referenceDocs(t testing.TB) [][]byte {
	docs := fuzzSeeds(t)
	corpus, err := filepath.Glob("testdata/fuzz/*/*")
	require.NoError(t, err)
	for _, f := range corpus {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		docs = append(docs, corpusValues(string(b))...)
	}
	docs = append(docs, benchdoc.NumberHeavy(4<<10), benchdoc.Floats(4<<10))
	rng := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		tree := randomDoc(rng, 4)
		enc, err := json.Marshal(tree)
		require.NoError(t, err)
		indented, err := json.MarshalIndent(tree, "", "\t")
		require.NoError(t, err)
		docs = append(docs, enc, indented)
	}
	return docs
}

// corpusValues returns the []byte and string values of a
// "go test fuzz v1" corpus file.
func corpusValues(file string) [][]byte {
	var out [][]byte
	for _, line := range strings.Split(file, "\n") {
		for _, prefix := range []string{"[]byte(", "string("} {
			if lit, ok := strings.CutPrefix(line, prefix); ok {
				if s, err := strconv.Unquote(strings.TrimSuffix(lit, ")")); err == nil {
					out = append(out, []byte(s))
				}
			}
		}
	}
	return out
}

// mutate returns a copy of doc with a few bytes inserted, replaced or
// removed, drawn from the bytes that matter to a JSON parser.
func mutate(rng *rand.Rand, doc []byte) []byte {
	const alphabet = "{}[]:,\"\\ \t\n0123456789-+.eEuUtrfalsn\x00\x1f\x7f\xc3\xa9\xed\xa0\xf0\x9f\x98\x80\xff"
	out := append([]byte(nil), doc...)
	for range 1 + rng.IntN(3) {
		c := alphabet[rng.IntN(len(alphabet))]
		i := 0
		if len(out) > 0 {
			i = rng.IntN(len(out) + 1)
		}
		switch op := rng.IntN(3); {
		case op == 0 || len(out) == 0 || i == len(out):
			out = append(out[:i], append([]byte{c}, out[i:]...)...)
		case op == 1:
			out[i] = c
		default:
			out = append(out[:i], out[i+1:]...)
		}
	}
	return out
}

// TestMatchesReference: on every reference document and thousands of
// mutations of them, Canonical, Hash, HashWithout, CanonicalWithout,
// Parse, CanonicalValue and Unmarshal answer exactly as the reference
// implementation does: the same bytes or values, or the same error
// (reason, pointer and offset).
func TestMatchesReference(t *testing.T) {
	t.Parallel()
	docs := referenceDocs(t)
	rng := rand.New(rand.NewPCG(7, 8))
	for _, d := range docs {
		requireMatchesReference(t, d, true)
		for i := range 20 {
			requireMatchesReference(t, mutate(rng, d), i < 4) // Unmarshal's nine targets on a few
		}
	}
}

// TestCanonicalNumberMatchesReference: CanonicalNumber answers as the
// reference on the number table and mutations of its literals.
func TestCanonicalNumberMatchesReference(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(9, 10))
	for _, tc := range numberCases {
		requireNumberMatchesReference(t, tc.lit)
		for range 200 {
			requireNumberMatchesReference(t, string(mutate(rng, []byte(tc.lit))))
		}
	}
}

// FuzzCanonicalNumberMatchesReference is
// TestCanonicalNumberMatchesReference for any literal.
func FuzzCanonicalNumberMatchesReference(f *testing.F) {
	for _, tc := range numberCases {
		f.Add(tc.lit)
	}
	f.Fuzz(requireNumberMatchesReference)
}

func requireNumberMatchesReference(t *testing.T, lit string) {
	want, wantErr := refCanonicalNumber(lit)
	got, err := CanonicalNumber(lit)
	requireSameResult(t, []byte(lit), "CanonicalNumber", []byte(want), wantErr, []byte(got), err)
}

// FuzzMatchesReference is TestMatchesReference for any input.
func FuzzMatchesReference(f *testing.F) {
	for _, d := range referenceDocs(f) {
		f.Add(d)
	}
	f.Fuzz(func(t *testing.T, doc []byte) { requireMatchesReference(t, doc, true) })
}

func requireMatchesReference(t *testing.T, doc []byte, unmarshal bool) {
	t.Helper()
	want, wantErr := refCanonical(doc)
	got, err := Canonical(doc)
	requireSameResult(t, doc, "Canonical", want, wantErr, got, err)
	// The scanner alone accepts what the reference accepts: a document it
	// refused would still be right (the jsontext pass takes it), but slow.
	r := getReader()
	_, scanned := r.scan(doc)
	putReader(r)
	require.Equal(t, wantErr == nil, scanned, "the scanner accepts %q", doc)

	h, err := Hash(doc)
	if wantErr == nil {
		sum := sha256.Sum256(want)
		require.NoError(t, err, "Hash of %q", doc)
		require.Equal(t, hex.EncodeToString(sum[:]), h, "Hash of %q", doc)
	} else {
		requireSameError(t, doc, "Hash", wantErr, err)
	}

	if unmarshal {
		requireUnmarshalMatches(t, doc)
	}

	wantTree, wantErr := refParse(doc)
	tree, err := Parse(doc)
	if wantErr != nil {
		requireSameError(t, doc, "Parse", wantErr, err)
		_, err := HashWithout(doc, mustPointer(t, "/a"))
		requireSameError(t, doc, "HashWithout", wantErr, err)
		_, err = ParseDoc(doc)
		requireSameError(t, doc, "ParseDoc", wantErr, err)
		return
	}
	requireRemovalsMatch(t, doc, wantTree)
	requireLookupsMatch(t, doc, wantTree)
	requireHashAtMatches(t, doc, wantTree)
	require.NoError(t, err, "Parse of %q", doc)
	require.Equal(t, wantTree, tree, "Parse of %q", doc)
	wantValue, wantErr := refCanonicalValue(wantTree)
	gotValue, err := CanonicalValue(tree)
	requireSameResult(t, doc, "CanonicalValue", wantValue, wantErr, gotValue, err)
	require.Equal(t, string(want), string(gotValue), "CanonicalValue(Parse) = Canonical for %q", doc)
}

func requireSameResult(t *testing.T, doc []byte, what string, want []byte, wantErr error, got []byte, err error) {
	t.Helper()
	if wantErr != nil {
		requireSameError(t, doc, what, wantErr, err)
		return
	}
	require.NoError(t, err, "%s of %q", what, doc)
	require.Equal(t, string(want), string(got), "%s of %q", what, doc)
}

func requireSameError(t *testing.T, doc []byte, what string, wantErr, err error) {
	t.Helper()
	var want, got *Error
	require.True(t, errors.As(wantErr, &want), "reference error %v", wantErr)
	require.True(t, errors.As(err, &got), "%s of %q: want %v, got %v", what, doc, wantErr, err)
	require.Equal(t, *want, *got, "%s of %q", what, doc)
}

// requireRemovalsMatch: HashWithout and CanonicalWithout agree with
// Pointer.Remove on the reference's tree, then the reference's
// CanonicalValue, for pointers to values of doc (one to three at a time,
// members, elements, nested, in runs of scalars) and pointers that name
// nothing.
func requireRemovalsMatch(t *testing.T, doc []byte, tree any) {
	t.Helper()
	paths := treePointers(tree, "")
	rng := rand.New(rand.NewPCG(uint64(len(doc)), uint64(len(paths))))
	odd := []string{"", "/", "/-", "/+1", "/01", "/-0", "/999999", "/a/b/c", "/0/0/0", "/\u0000"}
	for try := range min(len(paths)+len(odd), 12) {
		var ptrs []Pointer
		var texts []string
		for range 1 + try%3 {
			var s string
			if try%4 == 3 || len(paths) == 0 {
				s = odd[rng.IntN(len(odd))]
			} else {
				s = paths[rng.IntN(len(paths))]
			}
			ptrs = append(ptrs, mustPointer(t, s))
			texts = append(texts, s)
		}
		again, err := refParse(doc) // Remove changes the tree in place
		require.NoError(t, err)
		for _, p := range ptrs {
			p.Remove(again)
		}
		want, err := refCanonicalValue(again)
		require.NoError(t, err)
		got, err := CanonicalWithout(doc, ptrs...)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "CanonicalWithout(%q, %q)", doc, texts)
		h, err := HashWithout(doc, ptrs...)
		require.NoError(t, err)
		sum := sha256.Sum256(want)
		require.Equal(t, hex.EncodeToString(sum[:]), h, "HashWithout(%q, %q)", doc, texts)
	}
}

// treePointers lists the pointer of every value in tree, below at.
func treePointers(tree any, at string) []string {
	var out []string
	switch v := tree.(type) {
	case map[string]any:
		for k, x := range v {
			p := at + "/" + strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
			out = append(out, p)
			out = append(out, treePointers(x, p)...)
		}
	case []any:
		for i, x := range v {
			p := at + "/" + strconv.Itoa(i)
			out = append(out, p)
			out = append(out, treePointers(x, p)...)
		}
	}
	slices.Sort(out) // map order would make the test differ run to run
	return out
}

func mustPointer(t *testing.T, s string) Pointer {
	p, err := ParsePointer(s)
	if err != nil {
		p, err = ParsePointer("/x")
	}
	require.NoError(t, err)
	return p
}

// unmarshalTargets are the Go types requireUnmarshalMatches decodes into.
var unmarshalTargets = []func() any{
	func() any { return new(any) },
	func() any { return new(map[string]any) },
	func() any { return new([]any) },
	func() any { return new(idOnly) },
	func() any { return new(event) },
	func() any { return new([]item) },
	func() any { return new(map[string]item) },
	func() any { return new(Number) },
	func() any { return new(string) },
}

// requireUnmarshalMatches: Unmarshal answers as the reference does, with
// and without RejectUnknown, into every target: the same value, or the
// same error.
func requireUnmarshalMatches(t *testing.T, doc []byte) {
	t.Helper()
	for _, opts := range [][]Option{nil, {RejectUnknown()}} {
		for _, target := range unmarshalTargets {
			want, got := target(), target()
			wantErr := refUnmarshal(doc, want, opts...)
			err := Unmarshal(doc, got, opts...)
			if wantErr != nil {
				requireSameError(t, doc, fmt.Sprintf("Unmarshal into %T", got), wantErr, err)
				continue
			}
			require.NoError(t, err, "Unmarshal of %q into %T", doc, got)
			require.Equal(t, want, got, "Unmarshal of %q into %T", doc, got)
		}
	}
}

// requireLookupsMatch: Doc.Get answers as Pointer.Get on the reference's
// tree, for the pointer of every value, the same in upper case (letter-case
// variants), and pointers that name nothing.
func requireLookupsMatch(t *testing.T, doc []byte, tree any) {
	t.Helper()
	d, err := ParseDoc(doc)
	require.NoError(t, err, "ParseDoc of %q", doc)
	paths := treePointers(tree, "")
	if len(paths) > 50 {
		paths = paths[:50]
	}
	for _, p := range paths[:len(paths):len(paths)] {
		paths = append(paths, strings.ToUpper(p), p+"/0", p+"/x")
	}
	paths = append(paths, "", "/", "/-", "/+0", "/01", "/999999", "/a/b")
	for _, s := range paths {
		p := mustPointer(t, s)
		want, wantOK, wantErr := p.Get(tree)
		got, ok, err := d.Get(p)
		if wantErr != nil {
			requireSameError(t, doc, "Doc.Get("+s+")", wantErr, err)
			continue
		}
		require.NoError(t, err, "Doc.Get(%q) of %q", s, doc)
		require.Equal(t, wantOK, ok, "Doc.Get(%q) of %q", s, doc)
		require.Equal(t, want, got, "Doc.Get(%q) of %q", s, doc)
	}
}

// requireHashAtMatches: Doc.HashAt of a Doc from UnmarshalDoc, and of one
// holding a Parse tree (the fallback), answer as Pointer.Remove and
// CanonicalValue on the reference's tree, for values of doc (whole
// documents, members, elements, scalars inside runs) with and without
// removals, and for pointers that name nothing.
func requireHashAtMatches(t *testing.T, doc []byte, tree any) {
	t.Helper()
	var v any
	d, err := UnmarshalDoc(doc, &v)
	require.NoError(t, err, "UnmarshalDoc of %q", doc)
	defer d.Release()
	fallback := &Doc{data: doc, tree: tree}
	paths := treePointers(tree, "")
	if len(paths) > 30 {
		paths = paths[:30]
	}
	paths = append(paths, "", "/-", "/+0", "/01", "/999999", "/a/b")
	rng := rand.New(rand.NewPCG(uint64(len(doc)), 3))
	for _, s := range paths {
		at := mustPointer(t, s)
		var remove []Pointer
		var texts []string
		want := func() (string, bool) {
			again, err := refParse(doc)
			require.NoError(t, err)
			v := again
			for _, tok := range at.Tokens() {
				var ok bool
				switch x := v.(type) {
				case map[string]any:
					v, ok = x[tok]
				case []any:
					var i int
					if i, ok = arrayIndex(tok, len(x)); ok {
						v = x[i]
					}
				default:
					ok = false
				}
				if !ok {
					return "", false
				}
			}
			for _, p := range remove {
				p.Remove(v)
			}
			c, err := refCanonicalValue(v)
			require.NoError(t, err)
			sum := sha256.Sum256(c)
			return hex.EncodeToString(sum[:]), true
		}
		for _, n := range []int{0, 1 + rng.IntN(2)} {
			remove, texts = nil, nil
			sub := tree
			if got, ok, _ := at.Get(tree); ok {
				sub = got
			}
			below := treePointers(sub, "")
			for range n {
				r := "/x"
				if len(below) > 0 {
					r = below[rng.IntN(len(below))]
				}
				remove = append(remove, mustPointer(t, r))
				texts = append(texts, r)
			}
			wantHash, wantOK := want()
			for _, dd := range []*Doc{d, fallback} {
				h, ok := dd.HashAt(at, remove...)
				require.Equal(t, wantOK, ok, "HashAt(%q, %q) of %q", s, texts, doc)
				require.Equal(t, wantHash, h, "HashAt(%q, %q) of %q", s, texts, doc)
			}
		}
	}
}
