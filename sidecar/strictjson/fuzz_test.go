package strictjson

import (
	"bytes"
	stdjson "encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/gowebpki/jcs"
	"github.com/stretchr/testify/require"
)

// fuzzSeeds: every document of the table tests and the RFC 8785 vectors.
func fuzzSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	for _, tc := range strictCases {
		if len(tc.in) < 4096 {
			seeds = append(seeds, []byte(tc.in))
		}
	}
	for _, tc := range canonicalCases {
		seeds = append(seeds, []byte(tc.in), []byte(tc.want))
	}
	for _, tc := range numberCases {
		seeds = append(seeds, []byte(tc.lit), []byte(`{"n":`+tc.lit+`}`))
	}
	inputs, err := filepath.Glob("testdata/rfc8785/*/*.json")
	require.NoError(t, err)
	for _, in := range inputs {
		b, err := os.ReadFile(in)
		require.NoError(t, err)
		seeds = append(seeds, b)
	}
	return seeds
}

// FuzzCanonical: for any two documents that both canonicalise, the
// canonical forms are equal if and only if the documents denote the same
// value (compared on Parse trees, numbers exactly with math/big).
// Canonical is idempotent, its output is valid JSON, CanonicalValue(Parse)
// agrees with it, and it accepts exactly what the strict decoder accepts.
func FuzzCanonical(f *testing.F) {
	seeds := fuzzSeeds(f)
	for i, s := range seeds {
		f.Add(s, seeds[(i+1)%len(seeds)])
		if c, err := Canonical(s); err == nil {
			f.Add(s, c)
		}
	}
	f.Add([]byte(`{"a":1.0,"b":[1e2]}`), []byte(`{"b":[100],"a":1}`))
	f.Add([]byte(`[9007199254740992]`), []byte(`[9007199254740993]`))
	f.Add([]byte(`"\u00e9"`), []byte("\"\u00e9\""))
	f.Add([]byte(`"\ufffd"`), []byte("\"\xff\""))

	f.Fuzz(func(t *testing.T, a, b []byte) {
		ca, okA := checkOne(t, a)
		cb, okB := checkOne(t, b)
		if !okA || !okB {
			return
		}
		ta, err := Parse(a)
		require.NoError(t, err)
		tb, err := Parse(b)
		require.NoError(t, err)
		same, comparable := treeEqual(ta, tb)
		if !comparable {
			return // an exponent too large for math/big in a test
		}
		require.Equal(t, same, bytes.Equal(ca, cb),
			"same value: %v, canonical %q vs %q (from %q and %q)", same, ca, cb, a, b)
	})
}

// checkOne checks the single-document properties and returns the canonical
// form, if any.
func checkOne(t *testing.T, x []byte) ([]byte, bool) {
	c, err := Canonical(x)
	_, perr := Parse(x)
	var v any
	uerr := Unmarshal(x, &v)
	if err != nil {
		var e *Error
		require.True(t, errors.As(err, &e), "not an *Error: %v", err)
		require.Error(t, perr)
		require.Equal(t, e.Reason, reasonOf(t, perr), "Parse and Canonical agree")
		require.Error(t, uerr)
		require.Equal(t, e.Reason, reasonOf(t, uerr), "Unmarshal and Canonical agree")
		switch e.Reason {
		case ReasonDuplicateName, ReasonInvalidUTF8, ReasonSurrogate, ReasonSyntax, ReasonTruncated, ReasonTrailing, ReasonEmpty, ReasonBOM:
			require.False(t, jsontext.Value(x).IsValid(), "refused (%s) what jsontext accepts: %q", e.Reason, x)
		}
		return nil, false
	}
	require.NoError(t, perr)
	require.NoError(t, uerr)
	require.True(t, jsontext.Value(x).IsValid(), "accepted what jsontext refuses: %q", x)
	require.True(t, stdjson.Valid(x), "accepted what encoding/json refuses: %q", x)
	require.True(t, stdjson.Valid(c), "canonical form is not JSON: %q", c)
	again, err := Canonical(c)
	require.NoError(t, err)
	require.Equal(t, string(c), string(again), "not idempotent")
	tree, err := Parse(x)
	require.NoError(t, err)
	viaTree, err := CanonicalValue(tree)
	require.NoError(t, err)
	require.Equal(t, string(c), string(viaTree))
	return c, true
}

// treeEqual compares two Parse trees exactly; comparable is false when a
// number's exponent is too large to compare with math/big here.
func treeEqual(x, y any) (equal, comparable bool) {
	switch x := x.(type) {
	case map[string]any:
		y, ok := y.(map[string]any)
		if !ok || len(x) != len(y) {
			return false, true
		}
		equal, comparable = true, true
		for k, xv := range x {
			yv, ok := y[k]
			if !ok {
				return false, true
			}
			e, c := treeEqual(xv, yv)
			equal, comparable = equal && e, comparable && c
		}
		return equal, comparable
	case []any:
		y, ok := y.([]any)
		if !ok || len(x) != len(y) {
			return false, true
		}
		equal, comparable = true, true
		for i := range x {
			e, c := treeEqual(x[i], y[i])
			equal, comparable = equal && e, comparable && c
		}
		return equal, comparable
	case Number:
		y, ok := y.(Number)
		if !ok {
			return false, true
		}
		return sameValue(string(x), string(y))
	default: // string, bool, nil
		return x == y, true
	}
}

// FuzzCanonicalNumber: two literals get the same canonical text if and only
// if their exact values are equal; the text denotes exactly the literal's
// value; it is idempotent; literals jsontext accepts as numbers are refused
// only for their exponent; shortest double spellings give JCS's text.
func FuzzCanonicalNumber(f *testing.F) {
	for i, tc := range numberCases {
		f.Add(tc.lit, numberCases[(i+1)%len(numberCases)].lit)
		if tc.want != "" {
			f.Add(tc.lit, tc.want)
		}
	}
	f.Add("1e30", "1000000000000000000000000000000")
	f.Add("9007199254740992", "9007199254740993")
	f.Add("0.1", "0.10000000000000001")
	f.Add("-0", "0e-7")

	f.Fuzz(func(t *testing.T, a, b string) {
		ca, okA := checkNumber(t, a)
		cb, okB := checkNumber(t, b)
		if !okA || !okB {
			return
		}
		same, comparable := sameValue(a, b)
		if !comparable {
			return
		}
		require.Equal(t, same, ca == cb, "%q → %q, %q → %q", a, ca, b, cb)
	})
}

// reasonOf is the Reason of err, which must be an *Error.
func reasonOf(t *testing.T, err error) string {
	t.Helper()
	var e *Error
	require.True(t, errors.As(err, &e), "not an *Error: %v", err)
	return e.Reason
}

func checkNumber(t *testing.T, lit string) (string, bool) {
	c, err := CanonicalNumber(lit)
	// jsontext admits surrounding whitespace; a literal has none.
	isJSONNumber := jsontext.Value(lit).IsValid() && jsontext.Value(lit).Kind() == '0' &&
		!isSpace(lit[0]) && !isSpace(lit[len(lit)-1])
	if err != nil {
		if reasonOf(t, err) == ReasonNotNumber {
			require.False(t, isJSONNumber, "refused the JSON number %q", lit)
		}
		return "", false
	}
	require.True(t, isJSONNumber, "accepted %q, not a JSON number", lit)
	again, err := CanonicalNumber(c)
	require.NoError(t, err)
	require.Equal(t, c, again, "not idempotent")
	if same, ok := sameValue(lit, c); ok {
		require.True(t, same, "%q → %q changes the value", lit, c)
	}
	if fl, err := strconv.ParseFloat(lit, 64); err == nil && !math.IsInf(fl, 0) &&
		(strconv.FormatFloat(fl, 'g', -1, 64) == lit || strconv.FormatFloat(fl, 'e', -1, 64) == lit) {
		want, err := jcs.NumberToJSON(fl)
		require.NoError(t, err)
		require.Equal(t, want, c, "shortest spelling %q differs from JCS", lit)
	}
	return c, true
}
