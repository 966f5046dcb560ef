package strictjson

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"
	"github.com/stretchr/testify/require"
)

// canonicalCases: a document and its canonical form. Also seeds FuzzCanonical.
var canonicalCases = []struct{ name, in, want string }{
	{"literals", ` [ true , false , null ] `, `[true,false,null]`},
	{"sorted members", `{"b":1,"a":2,"c":{"z":1,"y":2}}`, `{"a":2,"b":1,"c":{"y":2,"z":1}}`},
	{"empty containers", `{"o":{},"a":[]}`, `{"a":[],"o":{}}`},
	{"numbers", `[1.0,1e2,100.00,-0,1E30,2e-3,4.50,0.000000000000000000000000001]`, `[1,100,100,0,1e+30,0.002,4.5,1e-27]`},
	{"big integers exact", `[9007199254740992,9007199254740993,9223372036854775807,9223372036854775808,9223372036854775809,-9007199254740993]`,
		`[9007199254740992,9007199254740993,9223372036854775807,9223372036854775808,9223372036854775809,-9007199254740993]`},
	{"ten to the thirty", `[1000000000000000000000000000000,1e30]`, `[1e+30,1e+30]`},
	{"string escapes", `"\u0000\u001f\b\t\n\f\r\"\\\/\u007f\u00e9\u2028"`, "\"\\u0000\\u001f\\b\\t\\n\\f\\r\\\"\\\\/\x7fé\u2028\""},
	{"uppercase hex escapes", `"\u00E9\u001F"`, "\"é\\u001f\""},
	{"no normalisation", `["\u00c5","A\u030a"]`, "[\"Å\",\"A\u030a\"]"},
	{"escaped names sorted unescaped", `{"\u0062":1,"a\n":2,"a":3}`, `{"a":3,"a\n":2,"b":1}`},
	{"utf16 order", "{\"\ufb33\":1,\"\U0001F602\":2,\"\u20ac\":3}", "{\"\u20ac\":3,\"\U0001F602\":2,\"\ufb33\":1}"},
	{"fffd", `"\ufffd"`, "\"\ufffd\""},
	{"surrogate pair", `"\ud83d\ude00"`, "\"\U0001F600\""},
	{"whitespace", " \r\n\t{ \"a\" : [ 1 , 2 ] } \r\n\t", `{"a":[1,2]}`},
	{"scalar top", `"x"`, `"x"`},
	{"nested unsorted big subtree", `{"b":{"d":[{"f":1,"e":2}],"c":0},"a":null}`, `{"a":null,"b":{"c":0,"d":[{"e":2,"f":1}]}}`},
}

func TestCanonical(t *testing.T) {
	t.Parallel()
	for _, tc := range canonicalCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Canonical([]byte(tc.in))
			require.NoError(t, err)
			require.Equal(t, tc.want, string(got))

			again, err := Canonical(got)
			require.NoError(t, err)
			require.Equal(t, string(got), string(again), "idempotent")

			tree, err := Parse([]byte(tc.in))
			require.NoError(t, err)
			viaTree, err := CanonicalValue(tree)
			require.NoError(t, err)
			require.Equal(t, string(got), string(viaTree))

			h, err := Hash([]byte(tc.in))
			require.NoError(t, err)
			sum := sha256.Sum256(got)
			require.Equal(t, hex.EncodeToString(sum[:]), h)
		})
	}
}

// TestRFC8785Vectors: the published JCS vectors; only values.json differs,
// where the input has more digits than a double.
func TestRFC8785Vectors(t *testing.T) {
	t.Parallel()
	inputs, err := filepath.Glob("testdata/rfc8785/input/*.json")
	require.NoError(t, err)
	require.Len(t, inputs, 6)
	for _, in := range inputs {
		name := filepath.Base(in)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(in)
			require.NoError(t, err)
			want, err := os.ReadFile(filepath.Join("testdata/rfc8785/output", name))
			require.NoError(t, err)

			ref, err := jcs.Transform(data)
			require.NoError(t, err)
			require.Equal(t, string(want), string(ref), "the vector agrees with the JCS reference")

			if name == "values.json" {
				require.Contains(t, string(data), "333333333.33333329")
				want = []byte(strings.Replace(string(want), "333333333.3333333,", "333333333.33333329,", 1))
			}
			got, err := Canonical(data)
			require.NoError(t, err)
			require.Equal(t, string(want), string(got))
		})
	}
}

// TestMatchesJCSForEncoderOutput: documents as encoders write them
// (shortest round-trip numbers) canonicalise exactly as JCS does.
func TestMatchesJCSForEncoderOutput(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 300 {
		doc := randomDoc(rng, 4)
		enc, err := json.Marshal(doc) // encoding/json: shortest floats, sorted keys, escapes <>&
		require.NoError(t, err)
		want, err := jcs.Transform(enc)
		require.NoError(t, err)
		got, err := Canonical(enc)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "doc %d: %s", i, enc)
	}
}

func randomDoc(rng *rand.Rand, depth int) any {
	k := rng.IntN(7)
	if depth == 0 {
		k = rng.IntN(4)
	}
	switch k {
	case 0:
		f := math.Float64frombits(rng.Uint64())
		if math.IsNaN(f) || math.IsInf(f, 0) {
			f = rng.NormFloat64() * 1e6
		}
		return f
	case 1:
		return float64(rng.Int64N(1 << 53))
	case 2:
		return randomString(rng)
	case 3:
		return []any{nil, true, false}[rng.IntN(3)]
	case 4, 5:
		m := map[string]any{}
		for range rng.IntN(5) {
			m[randomString(rng)] = randomDoc(rng, depth-1)
		}
		return m
	default:
		a := []any{}
		for range rng.IntN(5) {
			a = append(a, randomDoc(rng, depth-1))
		}
		return a
	}
}

func randomString(rng *rand.Rand) string {
	runes := []rune{'a', 'b', 'Z', '\n', 0x1, '"', '\\', '<', 'é', '€', 0xFB33, 0x1F602, 0xE000, 0xFFFD, 0x7F, 0x2028}
	var b strings.Builder
	for range rng.IntN(6) {
		b.WriteRune(runes[rng.IntN(len(runes))])
	}
	return b.String()
}

func TestCanonicalValue(t *testing.T) {
	t.Parallel()
	tree, err := Parse([]byte(`{"keep":[1.50,"x"],"drop":{"big":9007199254740993}}`))
	require.NoError(t, err)
	delete(tree.(map[string]any), "drop")
	got, err := CanonicalValue(tree)
	require.NoError(t, err)
	require.Equal(t, `{"keep":[1.5,"x"]}`, string(got))

	self := map[string]any{}
	self["me"] = self
	cases := []struct {
		name    string
		v       any
		reason  string
		pointer string
	}{
		{"float64", map[string]any{"a": []any{1.5}}, "unsupported Go type float64 in tree", "/a/0"},
		{"int", []any{1}, "unsupported Go type int in tree", "/0"},
		{"bad number", map[string]any{"n": Number("01")}, ReasonNotNumber, "/n"},
		{"huge exponent", map[string]any{"n": Number("1e9999999999999999")}, ReasonNumberRange, "/n"},
		{"invalid UTF-8 value", map[string]any{"a/b": "\xff"}, ReasonInvalidUTF8, "/a~1b"},
		{"invalid UTF-8 name", map[string]any{"\xff": 1}, ReasonInvalidUTF8, "/\ufffd"},
		{"cycle", self, ReasonTooDeep, strings.Repeat("/me", MaxDepth)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := CanonicalValue(tc.v)
			var e *Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, tc.reason, e.Reason)
			require.Equal(t, capPointer(tc.pointer), e.Pointer)
			require.Equal(t, int64(-1), e.Offset)
		})
	}
}

func TestCompareUTF16(t *testing.T) {
	t.Parallel()
	// Sorted by UTF-16 code units.
	sorted := []string{"", "\x00", "\n", "1", "A", "a", "aa", "\u007f", "\u0080", "é", "\u20ac", "\ud7ff", "\U00010000", "\U0001F602", "\U0010FFFF", "\ue000", "\ufb33", "\ufffd", "\uffff"}
	for i := range sorted {
		for j := range sorted {
			got := compareUTF16(sorted[i], sorted[j])
			switch {
			case i < j:
				require.Negative(t, got, "%q < %q", sorted[i], sorted[j])
			case i > j:
				require.Positive(t, got, "%q > %q", sorted[i], sorted[j])
			default:
				require.Zero(t, got)
			}
		}
	}
}

func TestHashDistinguishes(t *testing.T) {
	t.Parallel()
	docs := []string{
		`{"id":9007199254740992}`,
		`{"id":9007199254740993}`,
		`{"id":"9007199254740993"}`,
		`{"id":1e30}`,
		`{"id":1e+31}`,
		`{"id":"\ufffd"}`,
		`{"id":"?"}`,
		`{"id":""}`,
		`{"id":null}`,
		`{"Id":null}`,
		`[{"id":null}]`,
	}
	seen := map[string]string{}
	for _, d := range docs {
		h, err := Hash([]byte(d))
		require.NoError(t, err)
		require.Len(t, h, 64)
		prev, dup := seen[h]
		require.False(t, dup, "%s and %s share a hash", d, prev)
		seen[h] = d
	}
	a, err := Hash([]byte(`{"b":[1.0,2e0],"a":"x"}`))
	require.NoError(t, err)
	b, err := Hash([]byte("{\n  \"a\": \"x\",\n  \"b\": [1, 2]\n}\n"))
	require.NoError(t, err)
	require.Equal(t, a, b)
}

func TestCanonicalConcurrent(t *testing.T) {
	t.Parallel()
	for i := range 8 {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			t.Parallel()
			for _, tc := range canonicalCases {
				got, err := Canonical([]byte(tc.in))
				require.NoError(t, err)
				require.Equal(t, tc.want, string(got))
			}
		})
	}
}
