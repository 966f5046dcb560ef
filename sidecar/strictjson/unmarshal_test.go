package strictjson

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/stretchr/testify/require"
)

type idOnly struct {
	ID string `json:"id"`
}

type base struct {
	Source string `json:"source"`
}

type event struct {
	base
	EventID string         `json:"event_id"`
	Payload jsontext.Value `json:"payload"`
	Items   []item         `json:"items"`
	ByKey   map[string]item
	Next    *event `json:"next"`
	Hidden  string `json:"-"`
}

type item struct {
	ID     string `json:"id"`
	Amount Number `json:"amount"`
}

func TestUnmarshalCaseAndUnknown(t *testing.T) {
	t.Parallel()
	caseReason := func(field string) string {
		return `member name differs from the known field "` + field + `" only in letter case`
	}
	cases := []struct {
		name    string
		in      string
		into    func() any
		opts    []Option
		reason  string // "" = success
		pointer string
	}{
		{"exact", `{"id":"x"}`, func() any { return new(idOnly) }, nil, "", ""},
		{"upper", `{"ID":"x"}`, func() any { return new(idOnly) }, nil, caseReason("id"), "/ID"},
		{"mixed after exact", `{"id":"a","Id":"b"}`, func() any { return new(idOnly) }, nil, caseReason("id"), "/Id"},
		{"mixed before exact", `{"iD":"b","id":"a"}`, func() any { return new(idOnly) }, nil, caseReason("id"), "/iD"},
		{"case variant with RejectUnknown", `{"ID":"x"}`, func() any { return new(idOnly) }, []Option{RejectUnknown()}, caseReason("id"), "/ID"},
		{"unknown ignored", `{"id":"x","extra":1}`, func() any { return new(idOnly) }, nil, "", ""},
		{"unknown rejected", `{"id":"x","extra":1}`, func() any { return new(idOnly) }, []Option{RejectUnknown()}, ReasonUnknownMember, "/extra"},
		{"unknown nested rejected", `{"items":[{"id":"a","note":"n"}]}`, func() any { return new(event) }, []Option{RejectUnknown()}, ReasonUnknownMember, "/items/0/note"},
		{"embedded field", `{"source":"s","event_id":"e"}`, func() any { return new(event) }, []Option{RejectUnknown()}, "", ""},
		{"embedded field case", `{"Source":"s"}`, func() any { return new(event) }, nil, caseReason("source"), "/Source"},
		{"untagged field", `{"ByKey":{}}`, func() any { return new(event) }, []Option{RejectUnknown()}, "", ""},
		{"untagged field case", `{"bykey":{}}`, func() any { return new(event) }, nil, caseReason("ByKey"), "/bykey"},
		{"in slice", `{"items":[{"id":"a"},{"Id":"b"}]}`, func() any { return new(event) }, nil, caseReason("id"), "/items/1/Id"},
		{"in map", `{"ByKey":{"k":{"ID":"b"}}}`, func() any { return new(event) }, nil, caseReason("id"), "/ByKey/k/ID"},
		{"through pointer recursion", `{"next":{"next":{"Event_ID":"x"}}}`, func() any { return new(event) }, nil, caseReason("event_id"), "/next/next/Event_ID"},
		{"top-level slice", `[{"id":"a"},{"ID":"b"}]`, func() any { return new([]idOnly) }, nil, caseReason("id"), "/1/ID"},
		{"top-level map", `{"k":{"ID":"b"}}`, func() any { return new(map[string]idOnly) }, nil, caseReason("id"), "/k/ID"},
		{"ignored field is unknown", `{"Hidden":"x"}`, func() any { return new(event) }, []Option{RejectUnknown()}, ReasonUnknownMember, "/Hidden"},
		{"payload not checked for names", `{"payload":{"ID":1,"extra":2}}`, func() any { return new(event) }, []Option{RejectUnknown()}, "", ""},
		{"payload still strict", `{"payload":{"a":1,"a":2}}`, func() any { return new(event) }, nil, ReasonDuplicateName, "/payload/a"},
		{"payload invalid UTF-8", "{\"payload\":{\"a\":\"\xff\"}}", func() any { return new(event) }, nil, ReasonInvalidUTF8, "/payload/a"},
		{"payload surrogate", `{"payload":["\udc00"]}`, func() any { return new(event) }, nil, ReasonSurrogate, "/payload/0"},
		{"duplicate event_id", `{"source":"x","event_id":"dupA","event_id":"dupC"}`, func() any { return new(event) }, nil, ReasonDuplicateName, "/event_id"},
		{"Kelvin sign folds to k", `{"\u212a":1}`, func() any { return new(struct{ K int }) }, nil, caseReason("K"), "/\u212a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := Unmarshal([]byte(tc.in), tc.into(), tc.opts...)
			if tc.reason == "" {
				require.NoError(t, err)
				return
			}
			var e *Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, tc.reason, e.Reason)
			require.Equal(t, tc.pointer, e.Pointer)
		})
	}
}

func TestUnmarshalValues(t *testing.T) {
	t.Parallel()
	in := []byte(`{"source":"s","event_id":"e","payload":{"b":[1.0,2], "a":"x"},"items":[{"id":"i","amount":9007199254740993.10}]}`)
	var ev event
	require.NoError(t, Unmarshal(in, &ev, RejectUnknown()))
	require.Equal(t, "s", ev.Source)
	require.Equal(t, "e", ev.EventID)
	require.Equal(t, `{"b":[1.0,2], "a":"x"}`, string(ev.Payload), "raw sub-document, as sent")
	require.Equal(t, []item{{ID: "i", Amount: "9007199254740993.10"}}, ev.Items)

	// The raw payload does not alias the input.
	for i := range in {
		in[i] = ' '
	}
	require.Equal(t, `{"b":[1.0,2], "a":"x"}`, string(ev.Payload))
	h, err := Hash(ev.Payload)
	require.NoError(t, err)
	h2, err := Hash([]byte(`{"a":"x","b":[1,2]}`))
	require.NoError(t, err)
	require.Equal(t, h2, h)
}

func TestUnmarshalAnyKeepsNumbers(t *testing.T) {
	t.Parallel()
	var v any
	require.NoError(t, Unmarshal([]byte(`{"n":9007199254740993,"a":[1.50,{"x":-0}]}`), &v))
	require.Equal(t, map[string]any{
		"n": Number("9007199254740993"),
		"a": []any{Number("1.50"), map[string]any{"x": Number("-0")}},
	}, v)

	var m map[string]any
	require.NoError(t, Unmarshal([]byte(`{"n":1e400}`), &m))
	require.Equal(t, map[string]any{"n": Number("1e400")}, m)

	var s struct {
		Data any `json:"data"`
	}
	require.NoError(t, Unmarshal([]byte(`{"data":[12345678901234567890]}`), &s))
	require.Equal(t, []any{Number("12345678901234567890")}, s.Data)
}

// legacy implements only encoding/json's Unmarshaler.
type legacy struct{ raw string }

var errLegacy = errors.New("legacy: not accepted")

func (l *legacy) UnmarshalJSON(b []byte) error {
	if string(b) == `"bad"` {
		return errLegacy
	}
	l.raw = string(b)
	return nil
}

func TestUnmarshalLegacyUnmarshaler(t *testing.T) {
	t.Parallel()
	var v struct {
		L legacy  `json:"l"`
		P *legacy `json:"p"`
	}
	require.NoError(t, Unmarshal([]byte(`{"l":{"Any":"Case","ANY":1},"p":[1, 2]}`), &v, RejectUnknown()))
	require.Equal(t, `{"Any":"Case","ANY":1}`, v.L.raw)
	require.Equal(t, `[1, 2]`, v.P.raw)

	err := Unmarshal([]byte(`{"l":"bad"}`), &v)
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, ReasonRejectedByType, e.Reason)
	require.Equal(t, "/l", e.Pointer)
	require.ErrorIs(t, err, errLegacy)
	require.NotContains(t, err.Error(), "not accepted")

	// The legacy type still only sees strictly checked bytes.
	err = Unmarshal([]byte(`{"l":{"a":1,"a":2}}`), &v)
	require.ErrorAs(t, err, &e)
	require.Equal(t, ReasonDuplicateName, e.Reason)
}

func TestUnmarshalTypeMismatch(t *testing.T) {
	t.Parallel()
	type target struct {
		S  string    `json:"s"`
		I  int       `json:"i"`
		I8 int8      `json:"i8"`
		F  float64   `json:"f"`
		B  bool      `json:"b"`
		O  idOnly    `json:"o"`
		A  []int     `json:"a"`
		Y  []byte    `json:"y"`
		T  time.Time `json:"t"`
		N  Number    `json:"n"`
	}
	cases := []struct{ in, reason, pointer string }{
		{`{"s":1}`, "must be a JSON string", "/s"},
		{`{"i":"1"}`, "must be a JSON number", "/i"},
		{`{"i":1.5}`, "must be an integer", "/i"},
		{`{"i8":300}`, ReasonNumberRange, "/i8"},
		{`{"i":99999999999999999999}`, ReasonNumberRange, "/i"},
		{`{"f":1e999}`, ReasonNumberRange, "/f"},
		{`{"b":"true"}`, "must be a JSON boolean", "/b"},
		{`{"o":[]}`, "must be a JSON object", "/o"},
		{`{"a":{}}`, "must be a JSON array", "/a"},
		{`{"y":5}`, "must be a base64 JSON string", "/y"},
		{`{"t":5}`, "must be a JSON string", "/t"},
		{`{"n":"5"}`, "must be a JSON number", "/n"},
		{`{"n":null}`, "must be a JSON number", "/n"},
		{`{"n":1e9999999999999999}`, ReasonNumberRange, "/n"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			var v target
			err := Unmarshal([]byte(tc.in), &v)
			var e *Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, tc.reason, e.Reason)
			require.Equal(t, tc.pointer, e.Pointer)
			require.False(t, strings.Contains(err.Error(), "true") || strings.Contains(err.Error(), "300"), err.Error())
		})
	}
	var ok target
	require.NoError(t, Unmarshal([]byte(`{"s":"x","i":-3,"i8":127,"f":1.5,"b":true,"o":{"id":"q"},"a":[1],"y":"AQI=","t":"2024-01-02T03:04:05Z","n":0.10}`), &ok, RejectUnknown()))
	require.Equal(t, []byte{1, 2}, ok.Y)
	require.Equal(t, Number("0.10"), ok.N)

	var opt struct {
		P *Number `json:"p"`
	}
	require.NoError(t, Unmarshal([]byte(`{"p":null}`), &opt))
	require.Nil(t, opt.P)
	require.NoError(t, Unmarshal([]byte(`{"p":1.0}`), &opt))
	require.Equal(t, Number("1.0"), *opt.P)
}

func TestUnmarshalFallback(t *testing.T) {
	t.Parallel()
	var w struct {
		ID   string         `json:"id"`
		Rest map[string]any `json:",embed"`
	}
	require.NoError(t, Unmarshal([]byte(`{"id":"a","x":1}`), &w, RejectUnknown()))
	require.Equal(t, map[string]any{"x": Number("1")}, w.Rest)
	err := Unmarshal([]byte(`{"ID":"a"}`), &w, RejectUnknown())
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, `member name differs from the known field "id" only in letter case`, e.Reason)

	var raw struct {
		ID   string         `json:"id"`
		Rest jsontext.Value `json:",embed"`
	}
	require.NoError(t, Unmarshal([]byte(`{"id":"a","x":1,"y":[2]}`), &raw, RejectUnknown()))
	require.Equal(t, `{"x":1,"y":[2]}`, string(raw.Rest))
}

func TestUnmarshalTarget(t *testing.T) {
	t.Parallel()
	var e *Error
	err := Unmarshal([]byte(`{}`), idOnly{})
	require.ErrorAs(t, err, &e)
	require.Equal(t, ReasonNotPointer, e.Reason)
	err = Unmarshal([]byte(`{}`), (*idOnly)(nil))
	require.ErrorAs(t, err, &e)
	require.Equal(t, ReasonNotPointer, e.Reason)
	err = Unmarshal([]byte(`{}`), nil)
	require.ErrorAs(t, err, &e)
	require.Equal(t, ReasonNotPointer, e.Reason)

	err = Unmarshal([]byte(`{"c":1}`), new(struct {
		C chan int `json:"c"`
	}))
	require.ErrorAs(t, err, &e)
	require.Equal(t, "cannot decode into Go type chan int", e.Reason)
}
