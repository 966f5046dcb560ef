package strictjson

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"slices"
)

// Doc is a JSON document read strictly (as Parse reads it) and kept as
// read, to look values up by pointer without building its Parse tree.
// Doc.Get(p) answers what p.Get(tree) answers for the tree Parse returns.
// A Doc holds the input (which must not change while it is used) and
// about 20 bytes per object member and container; it is safe for
// concurrent use.
type Doc struct {
	r      *reader
	root   int32
	pooled bool // r came from the reader pool (UnmarshalDoc): Release gives it back
	// When only the jsontext pass could read the document (never
	// expected): the input and its Parse tree.
	data []byte
	tree any
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
	return &Doc{data: data, tree: tree}, nil
}

// Release ends the use of d: memory that UnmarshalDoc took from the pool
// for it is given back for reuse. d must not be used afterwards (it then
// holds no document). Releasing is optional; an unreleased Doc is
// collected as usual.
func (d *Doc) Release() {
	if d.pooled && d.r != nil {
		putReader(d.r)
	}
	d.r, d.pooled, d.data, d.tree = nil, false, nil, nil
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

// HashAt returns the lowercase hex SHA-256 (64 characters) of the
// canonical form of the value at, with the values the pointers in remove
// name (relative to that value) left out, and true: exactly what
// HashWithout returns for that value's own text, without reading it
// again. at is walked as Pointer.Remove walks a Parse tree: members match
// exactly, array indexes as Pointer.Remove reads them. It returns "" and
// false when at names nothing. Safe for concurrent use: the Doc does not
// change.
func (d *Doc) HashAt(at Pointer, remove ...Pointer) (string, bool) {
	if d.r == nil {
		return d.treeHashAt(at, remove)
	}
	r := getReader()
	own := *r // its buffers, given back below: a pooled reader must never keep the Doc's
	defer func() {
		r.data, r.nodes, r.kids, r.text, r.sourceValues = nil, own.nodes, own.kids, own.text, false
		putReader(r)
	}()
	r.data, r.sourceValues = d.r.data, true
	if len(remove) > 0 { // removal changes the tree: on a copy
		r.nodes = append(own.nodes[:0], d.r.nodes...)
		r.kids = append(own.kids[:0], d.r.kids...)
		r.text = append(own.text[:0], d.r.text...)
		own.nodes, own.kids, own.text = r.nodes, r.kids, r.text
	} else {
		r.nodes, r.kids, r.text = d.r.nodes, d.r.kids, d.r.text
	}
	node, scalar, ok := r.walk(d.root, at)
	switch {
	case !ok:
		return "", false
	case scalar != nil: // an element in a run of scalars
		sum := sha256.Sum256(r.appendScalar(nil, scalar))
		return hex.EncodeToString(sum[:]), true
	}
	for _, p := range remove {
		r.remove(node, p)
	}
	return r.hash(node), true
}

// walk follows p from node as Pointer.Remove walks: it returns the node
// found, or the text of a scalar inside a run, or ok false.
func (r *reader) walk(node int32, p Pointer) (found int32, scalar []byte, ok bool) {
	for i, t := range p.tokens {
		switch n := r.nodes[node]; n.kind {
		case nodeObject:
			kids := r.kids[n.a:n.b]
			j, ok := slices.BinarySearchFunc(kids, t, func(m int32, t string) int {
				return compareUTF16(r.name(r.nodes[m]), stringBytes(t))
			})
			if !ok {
				return 0, nil, false
			}
			node = r.nodes[kids[j]].val
		case nodeArray:
			idx, ok := arrayIndex(t, math.MaxInt)
			if !ok {
				return 0, nil, false
			}
			next, s, ok := r.elementAt(node, idx)
			switch {
			case !ok:
				return 0, nil, false
			case s != nil:
				if i < len(p.tokens)-1 {
					return 0, nil, false
				}
				return 0, s, true
			}
			node = next
		default:
			return 0, nil, false
		}
	}
	return node, nil, true
}

// treeHashAt is HashAt for a Doc that holds a Parse tree: on a tree
// parsed again, so that the Doc's does not change.
func (d *Doc) treeHashAt(at Pointer, remove []Pointer) (string, bool) {
	tree, err := Parse(d.data)
	if err != nil {
		return "", false
	}
	v := tree
	for _, t := range at.tokens {
		var ok bool
		switch x := v.(type) {
		case map[string]any:
			v, ok = x[t]
		case []any:
			var i int
			if i, ok = arrayIndex(t, len(x)); ok {
				v = x[i]
			}
		default:
			ok = false
		}
		if !ok {
			return "", false
		}
	}
	for _, p := range remove {
		if len(p.tokens) > 0 {
			Pointer{tokens: append(slices.Clip(at.tokens), p.tokens...)}.Remove(tree)
		}
	}
	c, err := CanonicalValue(v) // maps and slices: v saw the removals
	if err != nil {
		return "", false
	}
	sum := sha256.Sum256(c)
	return hex.EncodeToString(sum[:]), true
}
