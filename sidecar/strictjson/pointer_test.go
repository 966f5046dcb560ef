package strictjson

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPointerGetAndRemove(t *testing.T) {
	t.Parallel()
	doc, err := Parse([]byte(`{"a":{"b":[1,{"c":"x"}]},"a/b":2,"m~n":3,"id":"1","items":[{"k":1}]}`))
	require.NoError(t, err)
	for ptr, want := range map[string]any{
		"/a/b/0": Number("1"), "/a/b/1/c": "x", "/a~1b": Number("2"), "/m~0n": Number("3"), "/id": "1",
	} {
		p, err := ParsePointer(ptr)
		require.NoError(t, err)
		got, ok, err := p.Get(doc)
		require.NoError(t, err, ptr)
		require.True(t, ok, ptr)
		require.Equal(t, want, got, ptr)
		require.Equal(t, ptr, p.String())
	}
	for _, missing := range []string{"/nope", "/a/b/2", "/a/b/01", "/a/b/-", "/id/x"} {
		p, err := ParsePointer(missing)
		require.NoError(t, err)
		_, ok, err := p.Get(doc)
		require.NoError(t, err)
		require.False(t, ok, missing)
	}
	for _, bad := range []string{"a", "/~", "/~2"} {
		_, err := ParsePointer(bad)
		var se *Error
		require.ErrorAs(t, err, &se, bad)
	}
	p, _ := ParsePointer("/items/0/k")
	p.Remove(doc)
	p, _ = ParsePointer("/a/b/1")
	p.Remove(doc)
	p, _ = ParsePointer("/nope/deeper")
	p.Remove(doc)
	c, err := CanonicalValue(doc)
	require.NoError(t, err)
	require.Equal(t, `{"a":{"b":[1,null]},"a/b":2,"id":"1","items":[{}],"m~n":3}`, string(c), "array elements become null, members go")
}

// A member looked up beside a case variant of its name is ambiguous: Get
// refuses to pick one.
func TestPointerGetRefusesCaseVariants(t *testing.T) {
	t.Parallel()
	doc, err := Parse([]byte(`{"data":{"id":"evt_C","Id":"evt_D"},"ID":"x"}`))
	require.NoError(t, err)
	for _, ptr := range []string{"/data/id", "/data/Id", "/id"} {
		p, err := ParsePointer(ptr)
		require.NoError(t, err)
		_, _, err = p.Get(doc)
		var se *Error
		require.ErrorAs(t, err, &se, ptr)
		require.Contains(t, se.Reason, "letter case")
	}
}
