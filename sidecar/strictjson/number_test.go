package strictjson

import (
	"bufio"
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"
	"github.com/stretchr/testify/require"
)

// numberCases: a literal and its canonical text. Also seeds FuzzCanonicalNumber.
var numberCases = []struct{ lit, want string }{
	{"0", "0"},
	{"-0", "0"},
	{"0.0", "0"},
	{"-0.0", "0"},
	{"-0e5", "0"},
	{"0e-999", "0"},
	{"0.000", "0"},
	{"1", "1"},
	{"1.0", "1"},
	{"1e0", "1"},
	{"10e-1", "1"},
	{"1e2", "100"},
	{"1E2", "100"},
	{"1e+2", "100"},
	{"100.00", "100"},
	{"-100", "-100"},
	{"4.50", "4.5"},
	{"2e-3", "0.002"},
	{"0.000001", "0.000001"},
	{"0.0000001", "1e-7"},
	{"1.5e-7", "1.5e-7"},
	{"-1.5e-7", "-1.5e-7"},
	{"1E30", "1e+30"},
	{"1e21", "1e+21"},
	{"1e20", "100000000000000000000"},
	{"123456789012345678901", "123456789012345678901"},
	{"1234567890123456789012", "1.234567890123456789012e+21"},
	{"0.000000000000000000000000001", "1e-27"},
	{"333333333.33333329", "333333333.33333329"},
	{"0.1", "0.1"},
	{"00.5e1", ""}, // not JSON: leading zero
	{"12.3456e2", "1234.56"},
	{"12.3456e-2", "0.123456"},
	{"1e999999999", "1e+999999999"},
	{"1e-999999999", "1e-999999999"},
	{"-1e1000000000000000", "-1e+1000000000000000"},
	{"1e0000000000000000000000005", "100000"},
	{"0e99999999999999999999999999", "0"},
	{"1e1000000000000000", "1e+1000000000000000"},
	{"100e999999999999998", "1e+1000000000000000"},
	{"0.1e-999999999999999", "1e-1000000000000000"},
	{"1e-1000000000000000", "1e-1000000000000000"},
	{"0.000001e1000000000000006", "1e+1000000000000000"},
	// Integers around 2^53, 2^63 and 10^30: exact and all distinct.
	{"9007199254740992", "9007199254740992"},
	{"9007199254740993", "9007199254740993"},
	{"-9007199254740993", "-9007199254740993"},
	{"9223372036854775807", "9223372036854775807"},
	{"9223372036854775808", "9223372036854775808"},
	{"9223372036854775809", "9223372036854775809"},
	{"1000000000000000000000000000000", "1e+30"},
	{"1000000000000000000000000000001", "1.000000000000000000000000000001e+30"},
	{"295147905179352825856", "295147905179352825856"},
}

func TestCanonicalNumber(t *testing.T) {
	t.Parallel()
	for _, tc := range numberCases {
		if tc.want == "" {
			continue
		}
		t.Run(tc.lit, func(t *testing.T) {
			t.Parallel()
			got, err := CanonicalNumber(tc.lit)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			again, err := CanonicalNumber(got)
			require.NoError(t, err)
			require.Equal(t, got, again, "idempotent")
			requireSameValue(t, tc.lit, got)
		})
	}
}

func TestCanonicalNumberErrors(t *testing.T) {
	t.Parallel()
	cases := []struct{ lit, reason string }{
		{"", ReasonNotNumber},
		{"-", ReasonNotNumber},
		{"+1", ReasonNotNumber},
		{"01", ReasonNotNumber},
		{"-01", ReasonNotNumber},
		{"1.", ReasonNotNumber},
		{".5", ReasonNotNumber},
		{"1e", ReasonNotNumber},
		{"1e+", ReasonNotNumber},
		{"0x10", ReasonNotNumber},
		{"1_000", ReasonNotNumber},
		{" 1", ReasonNotNumber},
		{"1 ", ReasonNotNumber},
		{"NaN", ReasonNotNumber},
		{"Infinity", ReasonNotNumber},
		{"-Infinity", ReasonNotNumber},
		{"1e1000000000000001", ReasonNumberRange},
		{"1e-1000000000000001", ReasonNumberRange},
		{"1e99999999999999999999999999", ReasonNumberRange},
		{"10e1000000000000000", ReasonNumberRange},   // 1e+1000000000000001
		{"0.01e-999999999999999", ReasonNumberRange}, // 1e-1000000000000001
		{"1e99999999999999999999x", ReasonNotNumber}, // grammar first
	}
	for _, tc := range cases {
		t.Run(tc.lit, func(t *testing.T) {
			t.Parallel()
			_, err := CanonicalNumber(tc.lit)
			var e *Error
			require.True(t, errors.As(err, &e), "%v", err)
			require.Equal(t, tc.reason, e.Reason)
		})
	}
}

// TestCanonicalNumberDistinct: values JCS would merge through float64 keep
// distinct canonical texts, and equal values share one.
func TestCanonicalNumberDistinct(t *testing.T) {
	t.Parallel()
	distinct := []string{
		"9007199254740992",                // 2^53
		"9007199254740993",                // 2^53+1
		"-9007199254740993",               // -2^53-1
		"9223372036854775807",             // 2^63-1
		"9223372036854775808",             // 2^63
		"9223372036854775809",             // 2^63+1
		"1000000000000000000000000000000", // 10^30
		"0.1",
		"0.10000000000000001",
		"333333333.3333333",
		"333333333.33333329",
	}
	seen := map[string]string{}
	for _, lit := range distinct {
		c, err := CanonicalNumber(lit)
		require.NoError(t, err)
		prev, dup := seen[c]
		require.False(t, dup, "%s and %s share %s", lit, prev, c)
		seen[c] = lit
	}
	same := [][]string{
		{"1000000000000000000000000000000", "1e30", "1E+30", "10e29", "0.1e31", "1000000000000000000000000000000.000"},
		{"9007199254740993", "9.007199254740993e15", "90071992547409930e-1"},
		{"1", "1.0", "1e0", "100e-2", "0.01e2"},
		{"0", "-0", "0.0", "-0e5", "0e-5"},
	}
	for _, group := range same {
		want, err := CanonicalNumber(group[0])
		require.NoError(t, err)
		for _, lit := range group[1:] {
			got, err := CanonicalNumber(lit)
			require.NoError(t, err)
			require.Equal(t, want, got, lit)
		}
	}
	// JCS itself merges 2^53 and 2^53+1: the reason for the departure.
	a, err := jcs.Transform([]byte("9007199254740992"))
	require.NoError(t, err)
	b, err := jcs.Transform([]byte("9007199254740993"))
	require.NoError(t, err)
	require.Equal(t, a, b)
}

// TestCanonicalNumberMatchesJCS: for the shortest round-trip spelling of a
// double, in any of the spellings encoders use, the output is JCS's.
func TestCanonicalNumberMatchesJCS(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	floats := []float64{0, 1, -1, 0.5, 1e21, 1e-7, 1e-6, 123456789, 5e-324, math.MaxFloat64,
		math.SmallestNonzeroFloat64, 1 << 53, 1 << 63, 0.1, 1.0 / 3}
	for range 20000 {
		var f float64
		switch rng.IntN(3) {
		case 0: // any bit pattern
			f = math.Float64frombits(rng.Uint64())
		case 1: // integers
			f = float64(rng.Int64N(1<<62)) * float64(rng.IntN(3)-1)
		default: // everyday magnitudes
			f = rng.NormFloat64() * math.Pow(10, float64(rng.IntN(40)-20))
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		floats = append(floats, f)
	}
	for _, f := range floats {
		want, err := jcs.NumberToJSON(f)
		require.NoError(t, err)
		for _, lit := range []string{
			strconv.FormatFloat(f, 'g', -1, 64),
			strconv.FormatFloat(f, 'e', -1, 64),
			strconv.FormatFloat(f, 'E', -1, 64),
			want,
		} {
			got, err := CanonicalNumber(lit)
			require.NoError(t, err, lit)
			require.Equal(t, want, got, "literal %s (bits %016x)", lit, math.Float64bits(f))
		}
		if f <= -1e21 || f >= 1e21 || (f > -1e-6 && f < 1e-6) {
			continue
		}
		lit := strconv.FormatFloat(f, 'f', -1, 64)
		got, err := CanonicalNumber(lit)
		require.NoError(t, err)
		require.Equal(t, want, got, "literal %s", lit)
	}
}

// TestAppendixB: RFC 8785 Appendix B number samples.
func TestAppendixB(t *testing.T) {
	t.Parallel()
	f, err := os.Open("testdata/rfc8785/appendix-b.csv")
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	rows := 0
	for sc.Scan() {
		hexBits, want, ok := strings.Cut(sc.Text(), ",")
		require.True(t, ok)
		bits, err := strconv.ParseUint(hexBits, 16, 64)
		require.NoError(t, err)
		fl := math.Float64frombits(bits)

		ref, err := jcs.NumberToJSON(fl)
		require.NoError(t, err)
		require.Equal(t, want, ref, "vector %s disagrees with the JCS reference", hexBits)

		for _, lit := range []string{strconv.FormatFloat(fl, 'g', -1, 64), want} {
			got, err := CanonicalNumber(lit) // FormatFloat writes "-0" for 8000…: also "0"
			require.NoError(t, err)
			require.Equal(t, want, got, "%s from %s", hexBits, lit)
		}
		doc, err := Canonical([]byte(`{"n":[` + want + `]}`))
		require.NoError(t, err)
		require.Equal(t, `{"n":[`+want+`]}`, string(doc))
		rows++
	}
	require.NoError(t, sc.Err())
	require.Equal(t, 24, rows)
}

func TestCanonicalNumberCostIndependentOfExponent(t *testing.T) {
	t.Parallel()
	res := testing.Benchmark(func(b *testing.B) {
		for b.Loop() {
			_, _ = CanonicalNumber("1.5e999999999999999")
		}
	})
	require.Less(t, res.NsPerOp(), int64(100_000), "a huge exponent must cost nothing")
}

func TestNumberJSONMethods(t *testing.T) {
	t.Parallel()
	b, err := Number("1.50").MarshalJSON()
	require.NoError(t, err)
	require.Equal(t, "1.50", string(b))
	_, err = Number("abc").MarshalJSON()
	require.Error(t, err)

	var n Number
	require.NoError(t, n.UnmarshalJSON([]byte("-12.5e3")))
	require.Equal(t, Number("-12.5e3"), n)
	require.Error(t, n.UnmarshalJSON([]byte(`"12"`)))
	require.Error(t, n.UnmarshalJSON([]byte(`1e9999999999999999`)))
}

// requireSameValue checks that two number literals denote the same value,
// with math/big (tests only; exponents must be small).
func requireSameValue(t *testing.T, a, b string) {
	t.Helper()
	eq, ok := sameValue(a, b)
	if ok {
		require.True(t, eq, "%s and %s differ in value", a, b)
	}
}

// sameValue compares two JSON number literals exactly. ok is false when an
// exponent is too large to build the rational cheaply.
func sameValue(a, b string) (eq, ok bool) {
	ra, oka := ratOf(a)
	rb, okb := ratOf(b)
	if !oka || !okb {
		return false, false
	}
	return ra.Cmp(rb) == 0, true
}

func ratOf(lit string) (*big.Rat, bool) {
	if i := strings.IndexAny(lit, "eE"); i >= 0 {
		e, err := strconv.ParseInt(lit[i+1:], 10, 64)
		if err != nil || e > 2000 || e < -2000 {
			return nil, false
		}
	}
	if len(lit) > 2000 {
		return nil, false
	}
	r, ok := new(big.Rat).SetString(lit)
	return r, ok
}

func TestKeyText(t *testing.T) {
	t.Parallel()
	for lit, want := range map[string]string{
		"1000000000000000000000000000001": "1000000000000000000000000000001",
		"1e30":                            "1000000000000000000000000000000",
		"1E2":                             "100",
		"100.000":                         "100",
		"-0":                              "0",
		"-12e21":                          "-12000000000000000000000",
		"9007199254740993":                "9007199254740993",
		"1.5":                             "1.5",
		"1e-7":                            "1e-7",
		"1.5e30":                          "1500000000000000000000000000000",
		"1e100":                           "1e+100",
		"1e99":                            "1" + strings.Repeat("0", 99),
	} {
		got, err := KeyText(lit)
		require.NoError(t, err, lit)
		require.Equal(t, want, got, lit)
	}
	_, err := KeyText("1e99999999999999999")
	require.Error(t, err)
}

// FuzzKeyText: two literals get one key text exactly when their values are
// equal.
func FuzzKeyText(f *testing.F) {
	for _, s := range [][2]string{{"1e30", "1000000000000000000000000000000"}, {"1e100", "1e99"}, {"1.5", "15e-1"}, {"-0", "0"}, {"9007199254740993", "9007199254740992"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ka, err := KeyText(a)
		if err != nil {
			return
		}
		kb, err := KeyText(b)
		if err != nil {
			return
		}
		ca, _ := CanonicalNumber(a)
		cb, _ := CanonicalNumber(b)
		if (ka == kb) != (ca == cb) {
			t.Fatalf("%q → %q and %q → %q disagree with canonical %q, %q", a, ka, b, kb, ca, cb)
		}
	})
}
