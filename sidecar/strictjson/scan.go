package strictjson

import (
	"bytes"
	"encoding/binary"
	"hash"
	"slices"
)

// The fast path of Canonical, Hash and the functions built on them: one
// hand-written pass over the input that checks everything the strict
// decoder checks and records the flat tree of canonical.go, without a
// token API between the bytes and the tree.
//
// It only ever says yes or no. On any input it does not accept (an error
// of any kind, in any place) the caller runs the jsontext-based pass
// instead, which reports the error with its reason, pointer and offset;
// so errors are exactly what they always were, and the fast path must
// only never accept what the strict decoder refuses, nor write anything
// but what the jsontext pass writes (TestMatchesReference compares the
// two on the fuzz corpus and its mutations).
//
// A scalar already in canonical form is not copied: its node is the
// stretch of the input it was read from (nodeRaw: true, false, null, a
// string without escapes, a number such as 12.5 or 0.12345678901234567,
// by far the common cases). Any other is canonicalised once, into r.text
// (nodeText). Consecutive scalar elements of an array share one node, a
// run: a stretch of the input while they are verbatim and separated by
// bare commas, else their canonical text with its commas in r.text
// (scanElement); so an array of a million numbers costs a node or two,
// not a million. Member names without escapes point into the input too.
// With sourceValues (Parse, ParseDoc) nothing is canonicalised: values
// and runs stay stretches of the input (nodeRun when not verbatim).

// scan reads the whole document into the flat tree and returns its root.
// ok is false when data is anything but exactly one strict JSON value
// within the limits (reader.canonical then finds the error).
func (r *reader) scan(data []byte) (root int32, ok bool) {
	if len(data) > MaxBytes {
		return 0, false
	}
	r.data = data
	r.text, r.nodes, r.kids, r.stack = r.text[:0], r.nodes[:0], r.kids[:0], r.stack[:0]
	// Size the tree from the structure: a member takes two nodes and a
	// kid, a container a node, a kid and at most one run of scalars. The
	// counts are bounds (a ':' or '[' inside a string counts too), capped
	// at the most nodes any document of this length can have, about one
	// per 3 bytes ([[],[],…] or {"a":0,"b":0,…}).
	colons := bytes.Count(data, colon)
	opens := bytes.Count(data, openBracket) + bytes.Count(data, openBrace)
	if n := min(2*colons+2*opens, len(data)/3) + 16; cap(r.nodes) < n {
		r.nodes = make([]cnode, 0, n)
	}
	if n := min(colons+2*opens, len(data)/3) + 16; cap(r.kids) < n {
		r.kids = make([]int32, 0, n)
	}
	i := skipSpace(data, 0)
	root, i, ok = r.scanValue(i, 0)
	if !ok || skipSpace(data, i) != len(data) {
		return 0, false
	}
	return root, true
}

var colon, openBracket, openBrace = []byte{':'}, []byte{'['}, []byte{'{'}

func skipSpace(data []byte, i int) int {
	for i < len(data) && isSpace(data[i]) {
		i++
	}
	return i
}

// scanValue reads the value starting at data[i] (not whitespace), depth
// being the number of enclosing containers, and returns its node and the
// offset after it.
func (r *reader) scanValue(i, depth int) (int32, int, bool) {
	if i < len(r.data) {
		switch r.data[i] {
		case '[':
			return r.scanArray(i, depth)
		case '{':
			return r.scanObject(i, depth)
		}
	}
	// A value of its own (a member's, or the document): unless it is
	// verbatim, its canonical text goes to r.text now, rather than reading
	// it twice. (Array elements are canonicalised while writing instead,
	// see scanElement.)
	if data := r.data; i < len(data) && (data[i] == '-' || isDigit(data[i])) {
		p, end, ok := scanNumber(data, i)
		switch {
		case !ok:
			return 0, i, false
		case p.isCanonical(data):
			return r.node(nodeRaw, i, end), end, true
		case r.sourceValues:
			return r.node(nodeRun, i, end), end, numberInRange(data, p)
		}
		a := len(r.text)
		if r.text, ok = appendNumber(r.text, data, p); !ok {
			return 0, i, false
		}
		return r.node(nodeText, a, len(r.text)), end, true
	}
	verbatim, end, ok := r.checkScalar(i)
	switch {
	case !ok:
		return 0, i, false
	case verbatim:
		return r.node(nodeRaw, i, end), end, true
	case r.sourceValues:
		return r.node(nodeRun, i, end), end, true
	}
	a := len(r.text)
	r.text = r.appendScalar(r.text, r.data[i:end])
	return r.node(nodeText, a, len(r.text)), end, true
}

// checkScalar checks the string, number or literal starting at data[i]
// and returns the offset after it, and whether it is its own canonical
// text.
func (r *reader) checkScalar(i int) (verbatim bool, end int, ok bool) {
	data := r.data
	if i >= len(data) {
		return false, i, false
	}
	switch c := data[i]; c {
	case '"':
		end, esc, ok := scanString(data, i)
		return !esc, end, ok
	case 't':
		return true, i + 4, len(data) >= i+4 && string(data[i:i+4]) == "true"
	case 'f':
		return true, i + 5, len(data) >= i+5 && string(data[i:i+5]) == "false"
	case 'n':
		return true, i + 4, len(data) >= i+4 && string(data[i:i+4]) == "null"
	default:
		if c != '-' && !isDigit(c) {
			return false, i, false
		}
		p, end, ok := scanNumber(data, i)
		if !ok {
			return false, i, false
		}
		if p.isCanonical(data) {
			return true, end, true
		}
		return false, end, numberInRange(data, p)
	}
}

// separator reads what follows an element of a container at data[i]
// (optional space, then a comma or the container's close byte): after a
// comma, more is true and next is the first byte of the next element
// (space skipped); after close, next is the byte past it. ok is false for
// anything else, with next where reading stopped.
func separator(data []byte, i int, close byte) (next int, more, ok bool) {
	if i < len(data) && isSpace(data[i]) {
		i = skipSpace(data, i)
	}
	if i >= len(data) {
		return i, false, false
	}
	switch data[i] {
	case ',':
		return skipSpace(data, i+1), true, true
	case close:
		return i + 1, false, true
	}
	return i, false, false
}

func (r *reader) node(kind uint8, a, b int) int32 {
	r.nodes = append(r.nodes, cnode{kind: kind, a: int32(a), b: int32(b)})
	return int32(len(r.nodes) - 1)
}

func (r *reader) scanArray(i, depth int) (int32, int, bool) {
	data := r.data
	if depth == MaxDepth {
		return 0, i, false
	}
	i = skipSpace(data, i+1)
	mark := len(r.stack)
	if i < len(data) && data[i] == ']' {
		i++
	} else {
		for {
			var next int
			var ok bool
			if i < len(data) && (data[i] == '[' || data[i] == '{') {
				var v int32
				if v, next, ok = r.scanValue(i, depth+1); !ok {
					return 0, i, false
				}
				r.stack = append(r.stack, v)
			} else if next, ok = r.scanElement(i, mark); !ok {
				return 0, i, false
			}
			var more bool
			if i, more, ok = separator(data, next, ']'); !ok {
				return 0, i, false
			}
			if !more {
				break
			}
		}
	}
	k0 := len(r.kids)
	r.kids = append(r.kids, r.stack[mark:]...)
	r.stack = r.stack[:mark]
	return r.node(nodeArray, k0, len(r.kids)), i, true
}

// scanElement reads the scalar array element at data[i] and adds it to
// the array's children (r.stack[mark:]): to the previous child when that
// is a run of scalars too, which then ends at this element. A run stays
// nodeRaw, a stretch of the input, while its every element is verbatim
// and only the input's commas separate them; otherwise its canonical text
// is written to r.text (nodeText, elements and commas), where the rest of
// the run follows. With sourceValues a run is never written: it becomes a
// nodeRun instead.
func (r *reader) scanElement(i, mark int) (int, bool) {
	var run *cnode
	if len(r.stack) > mark {
		if p := &r.nodes[r.stack[len(r.stack)-1]]; p.kind == nodeRaw || p.kind == nodeRun ||
			p.kind == nodeText && int(p.b) == len(r.text) {
			run = p
		}
	}
	data := r.data
	var p numParts
	number := i < len(data) && (data[i] == '-' || isDigit(data[i]))
	var verbatim, ok bool
	var end int
	if number {
		if p, end, ok = scanNumber(data, i); !ok {
			return i, false
		}
		verbatim = p.isCanonical(data)
	} else if verbatim, end, ok = r.checkScalar(i); !ok {
		return i, false
	}
	switch {
	case run != nil && run.kind == nodeRaw && verbatim && int(run.b)+1 == i:
		run.b = int32(end) // only the input's comma between them
		return end, true
	case r.sourceValues:
		if number && !verbatim && !numberInRange(data, p) {
			return i, false
		}
		if run != nil && run.kind != nodeText {
			run.kind, run.b = nodeRun, int32(end)
			return end, true
		}
		r.stack = append(r.stack, r.node(nodeRun, i, end))
		return end, true
	case run == nil && verbatim:
		r.stack = append(r.stack, r.node(nodeRaw, i, end))
		return end, true
	}
	// To r.text: after the run (moved there if it was input), or as a new
	// run.
	need := end - i + 32 // a canonical number can be longer than its literal (1e20)
	if run != nil && run.kind == nodeRaw {
		need += int(run.b - run.a)
	}
	if cap(r.text)-len(r.text) < need {
		r.growText(need)
	}
	a := len(r.text)
	if run != nil {
		if run.kind == nodeRaw {
			r.text = append(r.text, data[run.a:run.b]...)
			run.kind, run.a = nodeText, int32(a)
		}
		r.text = append(r.text, ',')
	}
	switch {
	case verbatim:
		r.text = append(r.text, data[i:end]...)
	case number:
		if r.text, ok = appendNumber(r.text, data, p); !ok {
			return i, false
		}
	default:
		r.text = r.appendScalar(r.text, data[i:end])
	}
	if run != nil {
		run.b = int32(len(r.text))
	} else {
		r.stack = append(r.stack, r.node(nodeText, a, len(r.text)))
	}
	return end, true
}

// growText makes room for at least n more bytes in r.text, doubling it
// (append grows a large slice by a quarter at a time, copying it each
// time).
func (r *reader) growText(n int) {
	t := make([]byte, len(r.text), max(2*cap(r.text), len(r.text)+n, 4096))
	copy(t, r.text)
	r.text = t
}

func (r *reader) scanObject(i, depth int) (int32, int, bool) {
	data := r.data
	if depth == MaxDepth {
		return 0, i, false
	}
	i = skipSpace(data, i+1)
	mark := len(r.stack)
	if i < len(data) && data[i] == '}' {
		i++
	} else {
		for {
			if i >= len(data) || data[i] != '"' {
				return 0, i, false
			}
			end, esc, ok := scanString(data, i)
			if !ok {
				return 0, i, false
			}
			m := cnode{kind: nodeMember, a: int32(i + 1), b: int32(end - 1)}
			if esc {
				a := len(r.text)
				r.text = appendUnescaped(r.text, data[i+1:end-1])
				m = cnode{kind: nodeMemberText, a: int32(a), b: int32(len(r.text))}
			}
			i = skipSpace(data, end)
			if i >= len(data) || data[i] != ':' {
				return 0, i, false
			}
			i = skipSpace(data, i+1)
			v, next, ok := r.scanValue(i, depth+1)
			if !ok {
				return 0, i, false
			}
			m.val = v
			r.nodes = append(r.nodes, m)
			r.stack = append(r.stack, int32(len(r.nodes)-1))
			var more bool
			if i, more, ok = separator(data, next, '}'); !ok {
				return 0, i, false
			}
			if !more {
				break
			}
		}
	}
	k0 := len(r.kids)
	r.kids = append(r.kids, r.stack[mark:]...)
	r.stack = r.stack[:mark]
	if !r.sortMembers(r.kids[k0:]) {
		return 0, i, false // a duplicate name
	}
	return r.node(nodeObject, k0, len(r.kids)), i, true
}

// sortMembers sorts an object's members by name (RFC 8785 §3.2.3) and
// reports false when two share a name.
func (r *reader) sortMembers(ms []int32) bool {
	if len(ms) < 2 {
		return true
	}
	keys := r.keys[:0]
	for _, m := range ms {
		keys = append(keys, memberKey{prefix: r.namePrefix(r.nodes[m]), node: m})
	}
	r.keys = keys
	if len(keys) > 12 {
		slices.SortFunc(keys, r.compareKeys)
		for j := 1; j < len(keys); j++ {
			if r.compareKeys(keys[j-1], keys[j]) == 0 {
				return false
			}
		}
	} else {
		// Insertion sort: n-1 comparisons for members already in order, as
		// canonical input has them. A name equal to the one inserted would
		// be the last one not greater: where the insertion stops.
		for j := 1; j < len(keys); j++ {
			k, i := keys[j], j
			for ; i > 0; i-- {
				var c int
				if px, py := keys[i-1].prefix, k.prefix; px != py && (px|py)&0x8080808080808080 == 0 {
					c = 1
					if px < py {
						c = -1
					}
				} else {
					c = r.compareKeys(keys[i-1], k)
				}
				if c == 0 {
					return false
				}
				if c < 0 {
					break
				}
				keys[i] = keys[i-1]
			}
			keys[i] = k
		}
	}
	for j, k := range keys {
		ms[j] = k.node
	}
	return true
}

// memberKey is a member's node and the first bytes of its name, while its
// object is sorted.
type memberKey struct {
	prefix uint64 // namePrefix
	node   int32
}

// namePrefix is the first 8 bytes of name, big-endian, zero-padded. When
// two prefixes differ and are ASCII, they order their names as
// compareUTF16 does: UTF-16 order is byte order for ASCII, and a name that
// ends inside the prefix is padded with zeros, below any byte that could
// follow in the other (a 0 byte there would not differ).
func namePrefix(name []byte) uint64 {
	if len(name) >= 8 {
		return binary.BigEndian.Uint64(name)
	}
	var b [8]byte
	copy(b[:], name)
	return binary.BigEndian.Uint64(b[:])
}

// namePrefix is namePrefix of the member m's name, read straight from the
// input when eight bytes follow the name's start there (and masked to the
// name's length).
func (r *reader) namePrefix(m cnode) uint64 {
	if m.kind == nodeMember && int(m.a)+8 <= len(r.data) {
		v := binary.BigEndian.Uint64(r.data[m.a:])
		if n := m.b - m.a; n < 8 {
			v &^= ^uint64(0) >> (8 * n) // keep the name's n bytes
		}
		return v
	}
	return namePrefix(r.name(m))
}

// compareKeys orders two members by name (compareUTF16), from their
// prefixes when those decide it.
func (r *reader) compareKeys(x, y memberKey) int {
	if px, py := x.prefix, y.prefix; px != py && (px|py)&0x8080808080808080 == 0 {
		if px < py {
			return -1
		}
		return 1
	}
	return compareUTF16(r.name(r.nodes[x.node]), r.name(r.nodes[y.node]))
}

// emitRun appends the canonical form of run, scalars that scan accepted
// separated by commas and whitespace (a nodeRun, made only with
// sourceValues), to dst, handing it to h as emit does.
func (r *reader) emitRun(dst, run []byte, h hash.Hash) []byte {
	for i := 0; i < len(run); {
		c := run[i]
		if c == ',' {
			dst = append(dst, ',')
			i++
			continue
		}
		if isSpace(c) {
			i++
			continue
		}
		var end int
		switch c {
		case '"':
			end, _, _ = scanString(run, i)
			if end-i >= hashChunk {
				dst = put(dst, run[i:end], h)
			} else {
				dst = r.appendScalar(dst, run[i:end])
			}
		case 't', 'n':
			end = i + 4
			dst = append(dst, run[i:end]...)
		case 'f':
			end = i + 5
			dst = append(dst, "false"...)
		default:
			var p numParts
			p, end, _ = scanNumber(run, i)
			if p.isCanonical(run) {
				dst = append(dst, run[i:end]...)
			} else {
				dst, _ = appendNumber(dst, run, p)
			}
		}
		i = end
		if h != nil && len(dst) >= hashChunk {
			h.Write(dst)
			dst = dst[:0]
		}
	}
	return dst
}

// appendScalar appends the canonical text of lit, one scalar that scan
// accepted, to dst.
func (r *reader) appendScalar(dst, lit []byte) []byte {
	switch lit[0] {
	case '"':
		if bytes.IndexByte(lit, '\\') < 0 {
			return append(dst, lit...)
		}
		r.unq = appendUnescaped(r.unq[:0], lit[1:len(lit)-1])
		return appendString(dst, r.unq)
	case 't', 'f', 'n':
		return append(dst, lit...)
	}
	p, _, _ := scanNumber(lit, 0)
	if p.isCanonical(lit) {
		return append(dst, lit...)
	}
	dst, _ = appendNumber(dst, lit, p)
	return dst
}
