package strictjson

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/stretchr/testify/require"
)

// strictCases: documents every entry point must refuse, with the reason,
// pointer and offset. Also seeds FuzzCanonical.
var strictCases = []struct {
	name    string
	in      string
	reason  string
	pointer string
	offset  int64
}{
	{"empty", ``, ReasonEmpty, "", 0},
	{"whitespace only", " \t\r\n", ReasonEmpty, "", 0},
	{"duplicate top level", `{"id":"a","id":"b"}`, ReasonDuplicateName, "/id", 10},
	{"duplicate event_id", `{"source":"x","event_id":"dupA","event_id":"dupC"}`, ReasonDuplicateName, "/event_id", 32},
	{"duplicate nested", `{"a":{"b":1,"b":2}}`, ReasonDuplicateName, "/a/b", 12},
	{"duplicate in array of objects", `[{"a":1},{"b":1,"b":2}]`, ReasonDuplicateName, "/1/b", 16},
	{"duplicate through escape", `{"a":1,"\u0061":2}`, ReasonDuplicateName, "/a", 7},
	{"duplicate same value", `{"a":1,"a":1}`, ReasonDuplicateName, "/a", 7},
	{"invalid UTF-8 ff in value", "{\"event_id\":\"inv\xff\"}", ReasonInvalidUTF8, "/event_id", 16},
	{"invalid UTF-8 fe top", "\"inv\xfe\"", ReasonInvalidUTF8, "", 4},
	{"invalid UTF-8 in name", "{\"a\xff\":1}", ReasonInvalidUTF8, "", 3},
	{"overlong UTF-8", "\"\xc0\xaf\"", ReasonInvalidUTF8, "", 1},
	{"UTF-8 encoded surrogate", "\"\xed\xa0\x80\"", ReasonInvalidUTF8, "", 1},
	{"truncated UTF-8", "\"a\xe2\x82\"", ReasonInvalidUTF8, "", 2},
	{"invalid UTF-8 outside strings", "[\xff]", ReasonInvalidUTF8, "/0", 1},
	{"lone high surrogate", `"\ud800"`, ReasonSurrogate, "", 1},
	{"lone low surrogate", `"\udc00"`, ReasonSurrogate, "", 1},
	{"high surrogate at end", `"\ud83d"`, ReasonSurrogate, "", 1},
	{"high surrogate then char", `"\ud83dx"`, ReasonSurrogate, "", 1},
	{"high then non-low escape", `"\ud83d\u0041"`, ReasonSurrogate, "", 1},
	{"two highs", `"\ud83d\ud83d"`, ReasonSurrogate, "", 1},
	{"low then high", `"\ude00\ud83d"`, ReasonSurrogate, "", 1},
	{"surrogate in name", `{"\ud800":1}`, ReasonSurrogate, "", 2},
	{"surrogate nested", `{"a":["ok","x\udfff"]}`, ReasonSurrogate, "/a/1", 13},
	{"trailing value", `{"a":1} {"a":2}`, ReasonTrailing, "", 8},
	{"trailing garbage", `{"a":1}x`, ReasonTrailing, "", 7},
	{"trailing after number", `12x`, ReasonTrailing, "", 2},
	{"trailing after whitespace", "1 \n 2", ReasonTrailing, "", 4},
	{"leading zero", `01`, ReasonTrailing, "", 1},
	{"trailing close", `{}}`, ReasonTrailing, "", 2},
	{"BOM", "\xef\xbb\xbf{}", ReasonBOM, "", 0},
	{"two BOMs", "\xef\xbb\xbf\xef\xbb\xbf{}", ReasonBOM, "", 0},
	{"truncated object", `{"a":`, ReasonTruncated, "/a", 5},
	{"truncated string", `"abc`, ReasonTruncated, "", 4},
	{"trailing comma", `[1,]`, ReasonSyntax, "", 2},
	{"single quotes", `{'a':1}`, ReasonSyntax, "", 1},
	{"NaN", `NaN`, ReasonSyntax, "", 0},
	{"bad escape", `"\x"`, ReasonSyntax, "", 1},
	{"control char", "\"a\x01\"", ReasonSyntax, "", 2},
	{"number out of range", `{"n":[1e1000000000000001]}`, ReasonNumberRange, "/n/0", 6},
	{"too deep arrays", strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), ReasonTooDeep, strings.Repeat("/0", MaxDepth), MaxDepth},
	{"too deep objects", strings.Repeat(`{"a":`, MaxDepth+1) + "1" + strings.Repeat("}", MaxDepth+1), ReasonTooDeep, strings.Repeat("/a", MaxDepth), 5 * MaxDepth},
}

func TestStrictErrors(t *testing.T) {
	t.Parallel()
	entries := map[string]func([]byte) error{
		"Parse":     func(b []byte) error { _, err := Parse(b); return err },
		"Canonical": func(b []byte) error { _, err := Canonical(b); return err },
		"Hash":      func(b []byte) error { _, err := Hash(b); return err },
		"Unmarshal any": func(b []byte) error {
			var v any
			return Unmarshal(b, &v)
		},
		"Unmarshal jsontext.Value": func(b []byte) error {
			var v jsontext.Value
			return Unmarshal(b, &v, RejectUnknown())
		},
	}
	for _, tc := range strictCases {
		for entry, fn := range entries {
			t.Run(tc.name+"/"+entry, func(t *testing.T) {
				t.Parallel()
				err := fn([]byte(tc.in))
				var e *Error
				require.True(t, errors.As(err, &e), "want *Error, got %v", err)
				require.Equal(t, tc.reason, e.Reason)
				require.Equal(t, capPointer(tc.pointer), e.Pointer)
				require.Equal(t, tc.offset, e.Offset)
			})
		}
	}
}

func TestDepthLimitExact(t *testing.T) {
	t.Parallel()
	ok := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	_, err := Canonical([]byte(ok))
	require.NoError(t, err)
	_, err = Parse([]byte(ok))
	require.NoError(t, err)
	var v any
	require.NoError(t, Unmarshal([]byte(ok), &v))
}

func TestTooLarge(t *testing.T) {
	t.Parallel()
	big := make([]byte, MaxBytes+1)
	for i := range big {
		big[i] = ' '
	}
	_, err := Canonical(big)
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, ReasonTooLarge, e.Reason)
}

// TestSurrogatesRejectedByJsontext pins that jsontext itself refuses escaped
// unpaired surrogates (we only classify its error): if an upgrade of
// go-json-experiment stopped doing so, this fails.
func TestSurrogatesRejectedByJsontext(t *testing.T) {
	t.Parallel()
	for _, in := range []string{`"\ud800"`, `"\udc00"`, `"\ud83d"`, `"\ud83dx"`, `"\ud83d\u0041"`, `"\udfff\udfff"`} {
		require.False(t, jsontext.Value(in).IsValid(), in)
		_, err := jsontext.NewDecoder(strings.NewReader(in)).ReadValue()
		require.Error(t, err, in)
	}
	require.True(t, jsontext.Value(`"\ud83d\ude00"`).IsValid())
}

func TestValidSurrogatePair(t *testing.T) {
	t.Parallel()
	v, err := Parse([]byte(`"\ud83d\ude00"`))
	require.NoError(t, err)
	require.Equal(t, "😀", v)
	c, err := Canonical([]byte(`"\ud83d\ude00"`))
	require.NoError(t, err)
	require.Equal(t, `"😀"`, string(c))
	c2, err := Canonical([]byte(`"😀"`))
	require.NoError(t, err)
	require.Equal(t, c, c2)
}

// TestReplacementCharacterIsOrdinary: U+FFFD, raw or escaped, is a normal
// character, distinct from an invalid byte (refused) and from anything else.
func TestReplacementCharacterIsOrdinary(t *testing.T) {
	t.Parallel()
	raw, err := Canonical([]byte("{\"event_id\":\"inv\xef\xbf\xbd\"}"))
	require.NoError(t, err)
	esc, err := Canonical([]byte(`{"event_id":"inv\ufffd"}`))
	require.NoError(t, err)
	require.Equal(t, raw, esc)
	require.Equal(t, "{\"event_id\":\"inv\xef\xbf\xbd\"}", string(raw))

	others := []string{`{"event_id":"inv"}`, `{"event_id":"inv?"}`, `{"event_id":"inv\ufffe"}`, `{"event_id":"inv\ud83d\ude00"}`}
	for _, o := range others {
		c, err := Canonical([]byte(o))
		require.NoError(t, err)
		require.NotEqual(t, raw, c, o)
	}
	for _, bad := range []string{"{\"event_id\":\"inv\xff\"}", "{\"event_id\":\"inv\xfe\"}", `{"event_id":"inv\ud800"}`} {
		_, err := Canonical([]byte(bad))
		require.Error(t, err, bad)
	}
}

func TestTrimBOM(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want string }{
		{"\xef\xbb\xbf{}", "{}"},
		{"\xef\xbb\xbf\xef\xbb\xbf{}", "\xef\xbb\xbf{}"}, // exactly one
		{"{}", "{}"},
		{"", ""},
		{"\xef\xbb", "\xef\xbb"},
		{" \xef\xbb\xbf{}", " \xef\xbb\xbf{}"}, // only leading
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, string(TrimBOM([]byte(tc.in))))
	}
	in := []byte("\xef\xbb\xbf{\"b\":1,\"a\":2}")
	_, err := Canonical(in)
	require.Error(t, err)
	c, err := Canonical(TrimBOM(in))
	require.NoError(t, err)
	require.Equal(t, `{"a":2,"b":1}`, string(c))
	_, err = Parse(in)
	require.Error(t, err)
	var v map[string]any
	require.Error(t, Unmarshal(in, &v))
	require.NoError(t, Unmarshal(TrimBOM(in), &v))
}

func TestParse(t *testing.T) {
	t.Parallel()
	v, err := Parse([]byte(` {"s":"a\nb\u00e9","n":[1.50,-0,9007199254740993,1E400],"t":true,"f":false,"z":null,"o":{},"a":[]} `))
	require.NoError(t, err)
	require.Equal(t, map[string]any{
		"s": "a\nbé",
		"n": []any{Number("1.50"), Number("-0"), Number("9007199254740993"), Number("1E400")},
		"t": true, "f": false, "z": nil,
		"o": map[string]any{},
		"a": []any{},
	}, v)
}

func TestErrorText(t *testing.T) {
	t.Parallel()
	secret := "s3cr3t-value"
	docs := []string{
		`{"card":"` + secret + `","card":"` + secret + `"}`,
		"{\"card\":\"" + secret + "\xff\"}",
		`{"card":"` + secret + `\ud800"}`,
		`{"card":"` + secret + `"} ` + secret,
		`{"card":1e99999999999999999999,"x":"` + secret + `"}`,
	}
	for _, d := range docs {
		_, err := Canonical([]byte(d))
		require.Error(t, err)
		require.NotContains(t, err.Error(), secret)
		require.True(t, strings.HasPrefix(err.Error(), "strictjson: "), err.Error())
	}
	var into struct {
		Card int `json:"card"`
	}
	err := Unmarshal([]byte(`{"card":"`+secret+`"}`), &into)
	require.EqualError(t, err, `strictjson: must be a JSON number at "/card" (offset 8)`)

	e := &Error{Reason: ReasonDuplicateName, Pointer: "/a\nb", Offset: 3}
	require.Equal(t, `strictjson: duplicate member name at "/a\nb" (offset 3)`, e.Error())
	e = &Error{Reason: "unsupported Go type int in tree", Offset: -1}
	require.Equal(t, "strictjson: unsupported Go type int in tree", e.Error())
}

func TestPointerCap(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 300)
	doc := `{"` + long + `":{"x":1,"x":2}}`
	_, err := Canonical([]byte(doc))
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, ReasonDuplicateName, e.Reason)
	require.LessOrEqual(t, len(e.Pointer), MaxPointerLen+len("…"))
	require.True(t, strings.HasSuffix(e.Pointer, "/x"), e.Pointer)
	require.Contains(t, e.Pointer, "…")
	require.True(t, strings.HasPrefix(e.Pointer, "/é"))
	require.NotContains(t, e.Pointer, "\ufffd", "cut on rune boundaries")
}
