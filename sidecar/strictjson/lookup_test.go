package strictjson

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDocGet(t *testing.T) {
	t.Parallel()
	d, err := ParseDoc([]byte(`{"data":{"id":"evt_1","amount":12.50,"tags":["a", 2 ,{"k":null}]},"Type":"x","type":"y"}`))
	require.NoError(t, err)
	get := func(s string) (any, bool, error) {
		p, err := ParsePointer(s)
		require.NoError(t, err)
		return d.Get(p)
	}
	for ptr, want := range map[string]any{
		"/data/id":       "evt_1",
		"/data/amount":   Number("12.50"), // the literal, as Parse keeps it
		"/data/tags/1":   Number("2"),
		"/data/tags/2":   map[string]any{"k": nil},
		"/data/tags/2/k": nil,
	} {
		v, ok, err := get(ptr)
		require.NoError(t, err, ptr)
		require.True(t, ok, ptr)
		require.Equal(t, want, v, ptr)
	}
	for _, absent := range []string{"/data/nope", "/data/tags/3", "/data/tags/01", "/data/id/0", "/data/tags/0/x"} {
		_, ok, err := get(absent)
		require.NoError(t, err, absent)
		require.False(t, ok, absent)
	}
	_, _, err = get("/type")
	var e *Error
	require.ErrorAs(t, err, &e, "type and Type: ambiguous")
	require.Equal(t, "/type", e.Pointer)

	_, err = ParseDoc([]byte(`{"a":1,"a":2}`))
	require.ErrorAs(t, err, &e)
	require.Equal(t, Error{Reason: ReasonDuplicateName, Pointer: "/a", Offset: 7}, *e)
}

// A reader goes back to the pool as a new one would be: Unmarshal and
// UnmarshalDoc read with sourceValues, which a later Canonical must not
// inherit.
func TestPooledReadersComeBackClean(t *testing.T) {
	var v any
	require.NoError(t, Unmarshal([]byte(`{"a":[1.0,2]}`), &v))
	d, err := UnmarshalDoc([]byte(`{"a":[1.0,2]}`), &v)
	require.NoError(t, err)
	d.Release()
	for range 4 {
		r := getReader()
		require.False(t, r.sourceValues)
		require.Nil(t, r.data)
		defer putReader(r)
	}
}
