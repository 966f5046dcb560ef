package strictjson

import (
	"reflect"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Option adjusts Unmarshal.
type Option func(*options)

type options struct {
	rejectUnknown bool
}

// RejectUnknown makes Unmarshal fail with ReasonUnknownMember, at the
// member's pointer, for any object member that matches no field of the
// target struct, at any nesting level. A struct with an embedded fallback
// (an embedded map[string]T or jsontext.Value) keeps accepting unknown
// members into it.
func RejectUnknown() Option { return func(o *options) { o.rejectUnknown = true } }

// Unmarshal decodes exactly one JSON value from data into v, a non-nil
// pointer (to a struct, map, slice, …), strictly: data first passes every
// check of Parse (no duplicate names, valid UTF-8 with paired surrogates,
// one value, no BOM, MaxBytes, MaxDepth, numbers within MaxExponent),
// then go-json-experiment/json decodes it.
//
// Member names match struct fields exactly (case-sensitive), and a member
// whose name equals a field's name only when letter case is ignored ("ID"
// or "Id" for a field tagged `json:"id"`) is an error, at any nesting level
// of structs (also through maps, slices, arrays and pointers): such a
// document means different things to case-sensitive and case-insensitive
// decoders, so it identifies nothing. Members matching no field are ignored
// unless RejectUnknown is given.
//
// Field types:
//   - jsontext.Value receives the raw bytes of the sub-document (for a
//     payload to hash later); they have passed the same strict checks.
//   - Number receives the exact literal of a JSON number.
//   - any (also as a map or slice element) receives a Parse tree, so numbers
//     arrive as Number, never as a rounded float64.
//   - Types with UnmarshalJSON (encoding/json's Unmarshaler),
//     UnmarshalJSONFrom or UnmarshalText decode themselves; their member
//     names are not checked for letter case.
//
// Errors: *Error, as Parse, plus ReasonUnknownMember, the letter-case
// reason, the "must be a JSON …" family for a JSON kind that does not fit
// the Go type, ReasonNumberRange for a number that does not fit a Go
// numeric type, ReasonRejectedByType (see Error.Unwrap) and
// ReasonNotPointer. v may be partly filled when an error is returned from
// the decoding step.
func Unmarshal(data []byte, v any, opts ...Option) error {
	_, err := unmarshal(data, v, false, opts)
	return err
}

// UnmarshalDoc is Unmarshal that also returns the document it read, as
// ParseDoc would return it, so that values can be looked up in it
// (Doc.Get) or parts of it hashed (Doc.HashAt) without reading the input
// again: a request whose payload is hashed reads it once. data must not
// change while the Doc is used; Doc.Release, when the caller is done with
// it, lets the next call reuse its memory. Errors: as Unmarshal (the Doc
// is nil).
func UnmarshalDoc(data []byte, v any, opts ...Option) (*Doc, error) {
	return unmarshal(data, v, true, opts)
}

func unmarshal(data []byte, v any, keep bool, opts []Option) (*Doc, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return nil, &Error{Reason: ReasonNotPointer, Offset: -1}
	}

	// The strict pass: the scanner and a walk of its tree for the member
	// names; when either refuses, the jsontext pass (check) reads the
	// document again to report the first problem in document order.
	r := getReader() // a kept one goes back to the pool with Doc.Release, or to the collector
	if !keep {
		defer putReader(r)
	}
	s := shapeOf(rv.Type().Elem())
	var err *Error
	r.sourceValues = true // nothing to canonicalise here, and a Doc keeps values as read
	root, scanned := r.scan(data)
	if !scanned || !r.fits(root, s, o.rejectUnknown) {
		strict := getReader()
		if err = strict.start(data); err == nil {
			err = strict.check(s, o.rejectUnknown, 0)
		}
		if err == nil {
			err = strict.finish()
		}
		putReader(strict)
	}
	if err != nil {
		if keep {
			putReader(r)
		}
		return nil, err
	}

	// The document passed every strict check, duplicate names and UTF-8
	// included, so the decoder need not track names or validate UTF-8
	// again: for such a document the flags change nothing but its speed.
	if err := json.Unmarshal(data, v,
		jsontext.AllowDuplicateNames(true),
		jsontext.AllowInvalidUTF8(true),
		json.MatchCaseInsensitiveNames(false),
		json.RejectUnknownMembers(o.rejectUnknown),
		json.WithUnmarshalers(anyAsTree),
	); err != nil {
		if keep {
			putReader(r)
		}
		return nil, unmarshalError(data, err)
	}
	if !keep {
		return nil, nil
	}
	if !scanned { // only the jsontext pass read it (never expected)
		putReader(r)
		return ParseDoc(data)
	}
	return &Doc{r: r, root: root, pooled: true}, nil
}

// anyAsTree decodes into values of type any as Parse does (numbers as
// Number). The bytes it gets are a sub-value the pre-pass already checked.
var anyAsTree = json.UnmarshalFunc(func(b []byte, v *any) error {
	tree, err := Parse(b)
	if err != nil {
		return err
	}
	*v = tree
	return nil
})

// check is the strict pass of Unmarshal: it reads one value like Parse,
// building nothing, and checks member names against the target's shape.
func (r *reader) check(s *shape, rejectUnknown bool, depth int) *Error {
	switch r.dec.PeekKind() {
	case '{':
		if _, err := r.dec.ReadToken(); err != nil {
			return r.fail(err)
		}
		if depth == MaxDepth {
			return r.tooDeep()
		}
		for r.dec.PeekKind() != '}' {
			raw, err := r.dec.ReadValue()
			if err != nil {
				return r.fail(err)
			}
			var child *shape
			switch {
			case s == nil:
			case s.kind == shapeMap:
				child = s.elem
			case s.kind == shapeStruct:
				name, e := r.unquote(raw)
				if e != nil {
					return e
				}
				if f, ok := s.fields[string(name)]; ok {
					child = f
				} else if exact, ok := s.folded[foldName(name)]; ok {
					return r.at(&Error{Reason: `member name differs from the known field "` + exact + `" only in letter case`}, raw)
				} else if s.fallback {
					child = s.fallbackElem
				} else if rejectUnknown {
					return r.at(&Error{Reason: ReasonUnknownMember}, raw)
				}
			}
			if e := r.check(child, rejectUnknown, depth+1); e != nil {
				return e
			}
		}
		if _, err := r.dec.ReadToken(); err != nil {
			return r.fail(err)
		}
		return nil
	case '[':
		if _, err := r.dec.ReadToken(); err != nil {
			return r.fail(err)
		}
		if depth == MaxDepth {
			return r.tooDeep()
		}
		var elem *shape
		if s != nil && s.kind == shapeSeq {
			elem = s.elem
		}
		for r.dec.PeekKind() != ']' {
			if e := r.check(elem, rejectUnknown, depth+1); e != nil {
				return e
			}
		}
		if _, err := r.dec.ReadToken(); err != nil {
			return r.fail(err)
		}
		return nil
	}
	raw, err := r.dec.ReadValue()
	if err != nil {
		return r.fail(err)
	}
	if raw[0] == '-' || isDigit(raw[0]) {
		return r.checkNumber(raw)
	}
	return nil
}

// fits reports whether the member names of the tree at node (read by
// scan, so already strict) pass check's rules for shape s: false wherever
// check would fail. Below an opaque (nil) shape there is nothing more to
// see: scan already checked the numbers.
func (r *reader) fits(node int32, s *shape, rejectUnknown bool) bool {
	if s == nil {
		return true
	}
	n := r.nodes[node]
	switch n.kind {
	case nodeObject:
		for _, k := range r.kids[n.a:n.b] {
			m := r.nodes[k]
			var child *shape
			switch s.kind {
			case shapeMap:
				child = s.elem
			case shapeStruct:
				name := r.name(m)
				if f, ok := s.fields[string(name)]; ok {
					child = f
				} else if _, ok := s.folded[foldName(name)]; ok {
					return false
				} else if s.fallback {
					child = s.fallbackElem
				} else if rejectUnknown {
					return false
				}
			}
			if !r.fits(m.val, child, rejectUnknown) {
				return false
			}
		}
	case nodeArray:
		if s.kind != shapeSeq {
			return true
		}
		for _, k := range r.kids[n.a:n.b] {
			if !r.fits(k, s.elem, rejectUnknown) {
				return false
			}
		}
	}
	return true
}

// shape is what the strict pass needs to know of a Go type: the JSON member
// names of a struct, and where nested values go. A nil *shape is opaque:
// nothing below it is checked beyond the syntax (interfaces, scalars, types
// that decode themselves, jsontext.Value).
type shape struct {
	kind         uint8
	fields       map[string]*shape // struct: exact JSON name → the field's shape
	folded       map[string]string // struct: foldName(name) → an exact name
	fallback     bool              // struct: has an embedded map or jsontext.Value for unknown members
	fallbackElem *shape            // struct: shape of the fallback map's values
	elem         *shape            // map values, slice and array elements
}

const (
	shapeStruct uint8 = iota + 1
	shapeMap
	shapeSeq
)

var shapeCache sync.Map // reflect.Type → *shape

func shapeOf(t reflect.Type) *shape {
	if s, ok := shapeCache.Load(t); ok {
		return s.(*shape)
	}
	s := buildShape(t, map[reflect.Type]*shape{})
	shapeCache.Store(t, s)
	return s
}

// buildShape mirrors go-json-experiment's field rules closely enough for
// name checks: `json:"-"` and unexported fields are skipped, the tag name
// (text before the first comma) or else the Go field name is the JSON name,
// and embedded structs without a tag name (or with the `embed` option) are
// flattened into the parent, shallower names winning.
func buildShape(t reflect.Type, building map[reflect.Type]*shape) *shape {
	for t.Kind() == reflect.Pointer && !hasUnmarshalMethod(t) {
		t = t.Elem()
	}
	if t == jsontextValueType || hasUnmarshalMethod(t) {
		return nil
	}
	if s, ok := building[t]; ok {
		return s // recursive type
	}
	switch t.Kind() {
	case reflect.Map:
		s := &shape{kind: shapeMap}
		building[t] = s
		s.elem = buildShape(t.Elem(), building)
		return s
	case reflect.Slice, reflect.Array:
		s := &shape{kind: shapeSeq}
		building[t] = s
		s.elem = buildShape(t.Elem(), building)
		return s
	case reflect.Struct:
		s := &shape{kind: shapeStruct, fields: map[string]*shape{}, folded: map[string]string{}}
		building[t] = s
		s.addFields(t, building)
		return s
	}
	return nil
}

func (s *shape) addFields(root reflect.Type, building map[reflect.Type]*shape) {
	queue := []reflect.Type{root}
	seen := map[reflect.Type]bool{root: true}
	for len(queue) > 0 {
		// One breadth-first level: names found here beat deeper ones.
		level := queue
		queue = nil
		type found struct {
			name string
			typ  reflect.Type
		}
		var names []found
		for _, t := range level {
			for i := range t.NumField() {
				sf := t.Field(i)
				tag := sf.Tag.Get("json")
				if tag == "-" || (!sf.IsExported() && !sf.Anonymous) {
					continue
				}
				name, optText, _ := strings.Cut(tag, ",")
				embed := (sf.Anonymous && name == "") || hasTagOption(optText, "embed") || hasTagOption(optText, "inline")
				if embed {
					ft := sf.Type
					for ft.Kind() == reflect.Pointer {
						ft = ft.Elem()
					}
					switch {
					case ft.Kind() == reflect.Struct && !hasUnmarshalMethod(ft):
						if !seen[ft] {
							seen[ft] = true
							queue = append(queue, ft)
						}
						continue
					case ft == jsontextValueType:
						s.fallback = true
						continue
					case ft.Kind() == reflect.Map && ft.Key().Kind() == reflect.String:
						s.fallback = true
						s.fallbackElem = buildShape(ft.Elem(), building)
						continue
					}
				}
				if !sf.IsExported() {
					continue
				}
				if name == "" {
					name = sf.Name
				}
				names = append(names, found{name, sf.Type})
			}
		}
		for _, f := range names {
			if _, ok := s.fields[f.name]; ok {
				continue
			}
			s.fields[f.name] = buildShape(f.typ, building)
			if k := foldName([]byte(f.name)); s.folded[k] == "" {
				s.folded[k] = f.name
			}
		}
	}
}

func hasTagOption(opts, want string) bool {
	for opts != "" {
		var o string
		o, opts, _ = strings.Cut(opts, ",")
		if o == want {
			return true
		}
	}
	return false
}

// foldName maps every rune of name to the smallest rune of its Unicode
// simple case-folding orbit, so two names are equal under strings.EqualFold
// exactly when their foldName is equal.
func foldName(name []byte) string {
	var b strings.Builder
	b.Grow(len(name))
	for len(name) > 0 {
		r, n := utf8.DecodeRune(name)
		name = name[n:]
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}
