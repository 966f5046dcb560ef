package strictjson

import (
	"bytes"
	"math"
)

// Doc is a JSON document read strictly (as Parse reads it) and kept as
// read, to look values up by pointer without building its Parse tree.
// Doc.Get(p) answers what p.Get(tree) answers for the tree Parse returns.
// A Doc holds the input (which must not change while it is used) and
// about 20 bytes per object member and container; it is safe for
// concurrent use.
type Doc struct {
	r    *reader
	root int32
	tree any // when only the jsontext pass read it (never expected): its Parse tree
}

// ParseDoc reads data strictly into a Doc. Cost: linear in len(data),
// no allocation per value. Errors: exactly as Parse.
func ParseDoc(data []byte) (*Doc, error) {
	r := &reader{sourceValues: true} // not pooled: the Doc keeps its tree
	if root, ok := r.scan(data); ok {
		r.stack, r.keys = nil, nil
		return &Doc{r: r, root: root}, nil
	}
	strict := getReader()
	defer putReader(strict)
	tree, err := strict.parseStrict(data)
	if err != nil {
		return nil, err
	}
	return &Doc{tree: tree}, nil
}

// Get walks the document along p and returns the value found and whether
// it exists, exactly as p.Get does on the document's Parse tree: a string,
// Number, bool or nil, or for an object or array its Parse tree (built
// for the call). Object members match exactly, and a member name that
// differs from the one looked up only in letter case fails with p.Get's
// *Error; array indexes are read as p.Get reads them.
func (d *Doc) Get(p Pointer) (any, bool, error) {
	if d.r == nil {
		return p.Get(d.tree)
	}
	r := &reader{data: d.r.data, nodes: d.r.nodes, kids: d.r.kids, text: d.r.text, sourceValues: true}
	cur := d.root
	for i, t := range p.tokens {
		switch n := r.nodes[cur]; n.kind {
		case nodeObject:
			found := int32(-1)
			for _, k := range r.kids[n.a:n.b] {
				name := r.name(r.nodes[k])
				if string(name) == t {
					found = k
				} else if bytes.EqualFold(name, stringBytes(t)) {
					return nil, false, &Error{Pointer: p.prefix(i + 1),
						Reason: "member name differs from another member only in letter case", Offset: -1}
				}
			}
			if found < 0 {
				return nil, false, nil
			}
			cur = r.nodes[found].val
		case nodeArray:
			idx, ok := arrayIndex(t, math.MaxInt) // as Pointer.Get reads it; the length is checked below
			if !ok {
				return nil, false, nil
			}
			next, scalar, ok := r.elementAt(cur, idx)
			switch {
			case !ok:
				return nil, false, nil
			case scalar != nil:
				if i < len(p.tokens)-1 {
					return nil, false, nil // nothing below a scalar
				}
				return r.scalar(scalar), true, nil
			}
			cur = next
		default:
			return nil, false, nil // nothing below a scalar
		}
	}
	return r.build(cur), true, nil
}

// elementAt finds element idx of the array node arr: a container's node,
// or a scalar's source text; ok is false when there is no such element.
func (r *reader) elementAt(arr int32, idx int) (node int32, scalar []byte, ok bool) {
	n := r.nodes[arr]
	for _, k := range r.kids[n.a:n.b] {
		switch c := r.nodes[k]; c.kind {
		case nodeArray, nodeObject:
			if idx == 0 {
				return k, nil, true
			}
			idx--
		default: // a run of scalars
			run := r.runText(c)
			s, e, rest := runElement(run, idx)
			if s >= 0 {
				return 0, run[s:e], true
			}
			idx = rest
		}
	}
	return 0, nil, false
}
