package strictjson

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// The eight-bytes-at-a-time helpers find the same first byte as a loop
// over the bytes would, for every byte value in every position.
func TestSWARHelpers(t *testing.T) {
	t.Parallel()
	special := func(c byte) bool { return c < 0x20 || c == '"' || c == '\\' || c >= 0x80 }
	rng := rand.New(rand.NewPCG(11, 12))
	for range 20000 {
		var b [8]byte
		for i := range b {
			const ordinary = "az09 ~/\x7f"
			b[i] = ordinary[rng.IntN(len(ordinary))]
		}
		b[rng.IntN(8)] = byte(rng.IntN(256))
		if rng.IntN(2) == 0 {
			b[rng.IntN(8)] = byte(rng.IntN(256))
		}
		x := binary.LittleEndian.Uint64(b[:])

		want := 8
		for i, c := range b {
			if special(c) {
				want = i
				break
			}
		}
		got := 8
		if m := specialBytes(x); m != 0 {
			got = bitsIndex(m)
		}
		require.Equal(t, want, got, "specialBytes of %q", b)

		digits := append([]byte(nil), b[:]...)
		for i := range digits {
			if rng.IntN(3) > 0 {
				digits[i] = '0' + byte(rng.IntN(10))
			}
		}
		wantEnd := 0
		for wantEnd < len(digits) && isDigit(digits[wantEnd]) {
			wantEnd++
		}
		require.Equal(t, wantEnd, digitsEnd(append(digits, 'x'), 0), "digitsEnd of %q", digits)
	}
}

func bitsIndex(m uint64) int {
	i := 0
	for m&0x80 == 0 {
		m >>= 8
		i++
	}
	return i
}

// Member keys order names exactly as compareUTF16 does.
func TestMemberKeyOrder(t *testing.T) {
	t.Parallel()
	pieces := []string{"", "a", "b", "A", "\x00", "\x7f", "é", "\u20ac", "\U0001F602", "\ufb33", "aaaaaaa", "aaaaaaaa", "aaaaaaaab"}
	rng := rand.New(rand.NewPCG(13, 14))
	name := func() string {
		s := ""
		for range rng.IntN(4) {
			s += pieces[rng.IntN(len(pieces))]
		}
		return s
	}
	for range 20000 {
		a, b := name(), name()
		r := &reader{data: []byte(a + b + "\xff\xff\xff\xff\xff\xff\xff\xff")} // what follows a name must not count
		r.nodes = []cnode{
			{kind: nodeMember, a: 0, b: int32(len(a))},
			{kind: nodeMember, a: int32(len(a)), b: int32(len(a) + len(b))},
		}
		x := memberKey{prefix: r.namePrefix(r.nodes[0]), node: 0}
		y := memberKey{prefix: r.namePrefix(r.nodes[1]), node: 1}
		require.Equal(t, namePrefix([]byte(a)), x.prefix, "%q", a)
		require.Equal(t, namePrefix([]byte(b)), y.prefix, "%q", b)
		require.Equal(t, sign(compareUTF16(a, b)), sign(r.compareKeys(x, y)), "%q vs %q", a, b)
	}
}

func sign(c int) int {
	switch {
	case c < 0:
		return -1
	case c > 0:
		return 1
	}
	return 0
}
