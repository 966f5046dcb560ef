package strictjson

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCanonicalWithout(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, in string
		remove   []string
		want     string
	}{
		{"member", `{"b":1,"a":2,"c":3}`, []string{"/a"}, `{"b":1,"c":3}`},
		{"first and last member", `{"b":1,"a":2,"c":3}`, []string{"/a", "/c"}, `{"b":1}`},
		{"every member", `{"a":1}`, []string{"/a"}, `{}`},
		{"nested member", `{"meta":{"attempt":2,"k":1},"n":1.50}`, []string{"/meta/attempt"}, `{"meta":{"k":1},"n":1.5}`},
		{"escaped name", `{"a\u002fb":1,"c":2}`, []string{"/a~1b"}, `{"c":2}`},
		{"element becomes null", `[1,2,3]`, []string{"/1"}, `[1,null,3]`},
		{"first element of a run", `[1,2,3]`, []string{"/0"}, `[null,2,3]`},
		{"last element of a run", `[1,2,3]`, []string{"/2"}, `[1,2,null]`},
		{"run with whitespace and rewrites", "[ 1.0 ,\n 2e0 , \"a,b\" , 4 ]", []string{"/2"}, `[1,2,null,4]`},
		{"element after a container", `[{"a":1},5,6]`, []string{"/2"}, `[{"a":1},5,null]`},
		{"container element", `[{"a":1},5]`, []string{"/0"}, `[null,5]`},
		{"inside a container element", `[5,{"a":1,"b":2}]`, []string{"/1/a"}, `[5,{"b":2}]`},
		{"two in one run", `[1,2,3,4]`, []string{"/1", "/2"}, `[1,null,null,4]`},
		{"absent", `{"a":1}`, []string{"/b", "/a/b", "/a/0"}, `{"a":1}`},
		{"past the end", `[1,2]`, []string{"/2", "/-"}, `[1,2]`},
		{"index spellings Pointer.Remove accepts", `[1,2,3]`, []string{"/+1"}, `[1,null,3]`},
		{"leading zero", `[1,2]`, []string{"/01"}, `[1,2]`},
		{"whole document", `{"a":1}`, []string{""}, `{"a":1}`},
		{"through a removed member", `{"a":{"b":1},"c":2}`, []string{"/a", "/a/b"}, `{"c":2}`},
		{"scalar document", `12.50`, []string{"/a"}, `12.5`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var ptrs []Pointer
			for _, s := range tc.remove {
				p, err := ParsePointer(s)
				require.NoError(t, err)
				ptrs = append(ptrs, p)
			}
			got, err := CanonicalWithout([]byte(tc.in), ptrs...)
			require.NoError(t, err)
			require.Equal(t, tc.want, string(got))

			tree, err := Parse([]byte(tc.in))
			require.NoError(t, err)
			for _, p := range ptrs {
				p.Remove(tree)
			}
			viaTree, err := CanonicalValue(tree)
			require.NoError(t, err)
			require.Equal(t, tc.want, string(viaTree), "as Parse, Pointer.Remove and CanonicalValue")

			h, err := HashWithout([]byte(tc.in), ptrs...)
			require.NoError(t, err)
			sum := sha256.Sum256(got)
			require.Equal(t, hex.EncodeToString(sum[:]), h)
		})
	}
}

func TestHashWithoutErrorsAsParse(t *testing.T) {
	t.Parallel()
	p, err := ParsePointer("/id")
	require.NoError(t, err)
	for _, tc := range strictCases {
		_, err := HashWithout([]byte(tc.in), p)
		var e *Error
		require.ErrorAs(t, err, &e, tc.name)
		require.Equal(t, Error{Reason: tc.reason, Pointer: capPointer(tc.pointer), Offset: tc.offset}, *e, tc.name)
	}
}
