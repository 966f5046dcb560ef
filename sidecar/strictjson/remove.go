package strictjson

import (
	"math"
	"slices"
)

// HashWithout returns the lowercase hex SHA-256 (64 characters) of the
// canonical form of the JSON document data with the values the pointers
// name left out: exactly the hash of CanonicalValue of the Parse tree
// after Pointer.Remove of each pointer in turn (an object member is
// removed, an array element becomes null, a pointer that names nothing or
// the whole document changes nothing), computed without building that
// tree. With no pointer it equals Hash. Cost and errors: as Hash (the
// pointers cannot fail).
func HashWithout(data []byte, remove ...Pointer) (string, error) {
	r := getReader()
	defer putReader(r)
	root, err := r.canonical(data)
	if err != nil {
		return "", err
	}
	for _, p := range remove {
		r.remove(root, p)
	}
	return r.hash(root), nil
}

// CanonicalWithout is HashWithout's canonical form itself: CanonicalValue
// of the Parse tree of data after Pointer.Remove of each pointer. Cost and
// errors: as Canonical.
func CanonicalWithout(data []byte, remove ...Pointer) ([]byte, error) {
	r := getReader()
	defer putReader(r)
	root, err := r.canonical(data)
	if err != nil {
		return nil, err
	}
	for _, p := range remove {
		r.remove(root, p)
	}
	return r.emit(make([]byte, 0, len(data)+16), root, nil), nil
}

// remove does to the flat tree at root what p.Remove does to a Parse
// tree: a member is taken out of its object's children, an array element
// is replaced by a null node (a run of scalars is split around it).
func (r *reader) remove(root int32, p Pointer) {
	cur := root
	for i, t := range p.tokens {
		last := i == len(p.tokens)-1
		switch r.nodes[cur].kind {
		case nodeObject:
			n := &r.nodes[cur]
			kids := r.kids[n.a:n.b]
			j, found := slices.BinarySearchFunc(kids, t, func(m int32, t string) int {
				return compareUTF16(r.name(r.nodes[m]), stringBytes(t))
			})
			if !found {
				return
			}
			if last {
				copy(kids[j:], kids[j+1:])
				n.b--
				return
			}
			cur = r.nodes[kids[j]].val
		case nodeArray:
			// As Pointer.Remove reads an index; the length is checked by
			// element.
			idx, ok := arrayIndex(t, math.MaxInt)
			if !ok {
				return
			}
			if cur, ok = r.element(cur, idx, last); !ok {
				return
			}
		default:
			return // a scalar: nothing below it
		}
	}
}

// element finds element idx of the array node arr. A container is
// returned (ok) unless replace is set, in which case it, or a scalar, is
// replaced by null; a scalar, or no such element, is not ok.
func (r *reader) element(arr int32, idx int, replace bool) (int32, bool) {
	n := r.nodes[arr]
	for j := n.a; j < n.b; j++ {
		k := r.kids[j]
		switch c := r.nodes[k]; c.kind {
		case nodeArray, nodeObject:
			if idx > 0 {
				idx--
				continue
			}
			if replace {
				r.kids[j] = r.nullNode()
				return 0, false
			}
			return k, true
		default: // one scalar or a run of them
			s, e, rest := runElement(r.runText(c), idx)
			if s < 0 {
				idx = rest
				continue
			}
			if replace {
				r.splitRun(arr, int(j), s, e)
			}
			return 0, false
		}
	}
	return 0, false
}

// runText is the text of a scalar node or run: its source, or (nodeText)
// its canonical text.
func (r *reader) runText(c cnode) []byte {
	if c.kind == nodeText {
		return r.text[c.a:c.b]
	}
	return r.data[c.a:c.b]
}

// runElement returns the offsets in run (scalars separated by commas and
// whitespace) of its element idx, or s = -1 and what is left of idx after
// the run's elements.
func runElement(run []byte, idx int) (s, e, rest int) {
	for i := 0; i < len(run); {
		end := scalarEnd(run, i)
		if idx == 0 {
			return i, end, 0
		}
		idx--
		i = skipSpace(run, end)
		if i < len(run) && run[i] == ',' {
			i = skipSpace(run, i+1)
		}
	}
	return -1, -1, idx
}

// splitRun replaces the element run[s:e] of the run that is kid j of the
// array node arr with null: the array's children are copied to the end of
// r.kids with the run split in two around a null node.
func (r *reader) splitRun(arr int32, j, s, e int) {
	n, c := r.nodes[arr], r.nodes[r.kids[j]]
	run := r.runText(c)
	before := s // back over whitespace, the comma and whitespace
	for before > 0 && isSpace(run[before-1]) {
		before--
	}
	if before > 0 && run[before-1] == ',' {
		before--
	}
	for before > 0 && isSpace(run[before-1]) {
		before--
	}
	after := skipSpace(run, e)
	if after < len(run) && run[after] == ',' {
		after = skipSpace(run, after+1)
	}
	k0 := len(r.kids)
	r.kids = append(r.kids, r.kids[n.a:j]...)
	if before > 0 {
		r.kids = append(r.kids, r.node(c.kind, int(c.a), int(c.a)+before))
	}
	r.kids = append(r.kids, r.nullNode())
	if after < len(run) {
		r.kids = append(r.kids, r.node(c.kind, int(c.a)+after, int(c.b)))
	}
	r.kids = append(r.kids, r.kids[j+1:n.b]...)
	r.nodes[arr].a, r.nodes[arr].b = int32(k0), int32(len(r.kids))
}

// nullNode returns a new node of the text null.
func (r *reader) nullNode() int32 {
	a := len(r.text)
	r.text = append(r.text, "null"...)
	return r.node(nodeText, a, len(r.text))
}

// scalarEnd returns the end of the scalar that scan accepted at run[i].
func scalarEnd(run []byte, i int) int {
	switch run[i] {
	case '"':
		end, _, _ := scanString(run, i)
		return end
	case 't', 'n':
		return i + 4
	case 'f':
		return i + 5
	}
	_, end, _ := scanNumber(run, i)
	return end
}
