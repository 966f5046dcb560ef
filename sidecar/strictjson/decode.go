package strictjson

import (
	"bytes"
	"hash"
	"sync"
	"unsafe"

	"github.com/go-json-experiment/json/jsontext"
)

// Limits applied to every input of this package.
const (
	// MaxBytes is the largest input accepted, in bytes: 32 MiB, the largest
	// per-source body limit ingest allows. Longer input fails with
	// ReasonTooLarge before any parsing.
	MaxBytes = 32 << 20
	// MaxDepth is the deepest nesting of objects and arrays accepted: a
	// top-level object counts 1. Deeper input fails with ReasonTooDeep.
	// (jsontext's own hard limit is 10000 and is not configurable in the
	// version used; this package counts depth itself.)
	MaxDepth = 1000
)

var bom = []byte{0xEF, 0xBB, 0xBF}

// TrimBOM returns b without one leading UTF-8 byte order mark (EF BB BF),
// or b itself when it has none. RFC 8259 §8.1 lets a parser ignore a BOM;
// the functions of this package refuse it (ReasonBOM), so a caller that
// decides to tolerate one calls TrimBOM first. Only one BOM is removed.
func TrimBOM(b []byte) []byte {
	return bytes.TrimPrefix(b, bom)
}

// Parse decodes exactly one JSON value from data, strictly (see the package
// documentation), into a tree of map[string]any (objects), []any (arrays),
// string, Number, bool and nil. Strings are unescaped; numbers keep their
// exact source text. Every number is checked as Canonical checks it (within
// MaxExponent), so CanonicalValue accepts any tree Parse
// returns, and CanonicalValue(Parse(data)) equals Canonical(data).
//
// Errors: *Error with the reason, the JSON pointer and the byte offset.
func Parse(data []byte) (any, error) {
	r := getReader()
	defer putReader(r)
	r.sourceValues = true
	root, ok := r.scan(data)
	r.sourceValues = false
	if ok {
		return r.build(root), nil
	}
	return r.parseStrict(data)
}

// parseStrict is Parse by the jsontext pass: for the error of a document
// the scanner refused.
func (r *reader) parseStrict(data []byte) (any, error) {
	if err := r.start(data); err != nil {
		return nil, err
	}
	v, err := r.parseValue(0)
	if err != nil {
		return nil, err
	}
	if err := r.finish(); err != nil {
		return nil, err
	}
	return v, nil
}

// build returns the Parse tree of the node (scan's tree, read with
// sourceValues): maps, slices, strings, Numbers, booleans and nil.
func (r *reader) build(node int32) any {
	n := r.nodes[node]
	switch n.kind {
	case nodeObject:
		m := make(map[string]any, n.b-n.a)
		for _, k := range r.kids[n.a:n.b] {
			c := r.nodes[k]
			m[string(r.name(c))] = r.build(c.val)
		}
		return m
	case nodeArray:
		a := make([]any, 0, n.b-n.a)
		for _, k := range r.kids[n.a:n.b] {
			switch c := r.nodes[k]; c.kind {
			case nodeArray, nodeObject:
				a = append(a, r.build(k))
			default: // a run of scalars
				run := r.data[c.a:c.b]
				for i := 0; i < len(run); {
					end := scalarEnd(run, i)
					a = append(a, r.scalar(run[i:end]))
					i = skipSpace(run, end)
					if i < len(run) && run[i] == ',' {
						i = skipSpace(run, i+1)
					}
				}
			}
		}
		return a
	}
	return r.scalar(r.data[n.a:n.b])
}

// scalar returns the Parse value of lit, one scalar that scan accepted.
func (r *reader) scalar(lit []byte) any {
	switch lit[0] {
	case '"':
		s := lit[1 : len(lit)-1]
		if bytes.IndexByte(s, '\\') >= 0 {
			r.unq = appendUnescaped(r.unq[:0], s)
			s = r.unq
		}
		return string(s)
	case 't':
		return true
	case 'f':
		return false
	case 'n':
		return nil
	}
	return Number(lit)
}

// reader is one strict pass over a document. It is pooled with its scratch
// buffers; the canonical form's buffers live here too (canonical.go).
type reader struct {
	data []byte
	dec  *jsontext.Decoder
	unq  []byte // unquoted string scratch

	// sourceValues makes scan keep every scalar as its source (nodeRaw or
	// nodeRun), never as canonical text: Parse builds values from it.
	sourceValues bool

	// Canonical's state, see canonical.go.
	text  []byte
	nodes []cnode
	kids  []int32
	stack []int32
	keys  []memberKey // the members of the object being sorted
	out   []byte      // Hash's output buffer
	sha   hash.Hash   // Hash's digest, reset on use
}

var readerPool = sync.Pool{New: func() any {
	return &reader{dec: jsontext.NewDecoder(bytes.NewBuffer(nil))}
}}

func getReader() *reader { return readerPool.Get().(*reader) }

// maxPooledBuffer: a reader whose buffers grew past this many bytes is
// dropped rather than pooled, so one huge document does not pin its memory.
const maxPooledBuffer = 4 << 20

func putReader(r *reader) {
	r.data, r.sourceValues = nil, false
	r.dec.Reset(bytes.NewBuffer(nil))
	if cap(r.text) > maxPooledBuffer || cap(r.out) > maxPooledBuffer ||
		cap(r.nodes)*int(unsafe.Sizeof(cnode{})) > maxPooledBuffer || cap(r.kids)*4 > maxPooledBuffer {
		return
	}
	readerPool.Put(r)
}

// start checks the whole-input limits and positions the decoder on data.
// The decoder reads data in place (bytes.Buffer is special-cased by
// jsontext), with duplicate names and invalid UTF-8 rejected.
func (r *reader) start(data []byte) *Error {
	switch {
	case len(data) > MaxBytes:
		return &Error{Reason: ReasonTooLarge, Offset: MaxBytes}
	case bytes.HasPrefix(data, bom):
		return &Error{Reason: ReasonBOM, Offset: 0}
	}
	r.data = data
	r.dec.Reset(bytes.NewBuffer(data),
		jsontext.AllowDuplicateNames(false),
		jsontext.AllowInvalidUTF8(false))
	if r.dec.PeekKind() == 0 {
		if len(bytes.Trim(data, " \t\r\n")) == 0 {
			return &Error{Reason: ReasonEmpty, Offset: 0}
		}
		_, err := r.dec.ReadValue()
		return r.fail(err)
	}
	return nil
}

// finish refuses anything but whitespace after the top-level value.
func (r *reader) finish() *Error {
	off := int(r.dec.InputOffset())
	for off < len(r.data) && isSpace(r.data[off]) {
		off++
	}
	if off < len(r.data) {
		return &Error{Reason: ReasonTrailing, Offset: int64(off)}
	}
	return nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// fail maps a decoder error; a nil err (which the decoder never returns
// where fail is used) is reported as a syntax error rather than ignored.
func (r *reader) fail(err error) *Error {
	if err == nil {
		return &Error{Reason: ReasonSyntax, Offset: r.dec.InputOffset()}
	}
	return decodeError(r.data, err)
}

// tooDeep reports ReasonTooDeep at the container just opened.
func (r *reader) tooDeep() *Error {
	return &Error{
		Reason:  ReasonTooDeep,
		Pointer: capPointer(string(r.dec.StackPointer())),
		Offset:  r.dec.InputOffset() - 1,
	}
}

// at returns e located at the value the decoder just read (raw).
func (r *reader) at(e *Error, raw []byte) *Error {
	e.Pointer = capPointer(string(r.dec.StackPointer()))
	e.Offset = r.dec.InputOffset() - int64(len(raw))
	return e
}

// unquote returns the content of the JSON string raw (already validated by
// the decoder). It aliases raw when there is no escape, else r.unq.
func (r *reader) unquote(raw []byte) ([]byte, *Error) {
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return inner, nil
	}
	var err error
	r.unq, err = jsontext.AppendUnquote(r.unq[:0], raw)
	if err != nil { // unreachable: the decoder validated raw
		return nil, r.at(&Error{Reason: ReasonSurrogate}, raw)
	}
	return r.unq, nil
}

// checkNumber applies Canonical's number rule to the literal raw.
func (r *reader) checkNumber(raw []byte) *Error {
	if err := checkNumberLiteral(raw); err != nil {
		return r.at(err.(*Error), raw) //nolint:errorlint // checkNumberLiteral returns only *Error, never wrapped
	}
	return nil
}

// parseValue reads one value into Parse's tree. depth is the number of
// enclosing objects and arrays.
func (r *reader) parseValue(depth int) (any, *Error) {
	switch r.dec.PeekKind() {
	case '{':
		if _, err := r.dec.ReadToken(); err != nil {
			return nil, r.fail(err)
		}
		if depth == MaxDepth {
			return nil, r.tooDeep()
		}
		m := map[string]any{}
		for r.dec.PeekKind() != '}' {
			raw, err := r.dec.ReadValue()
			if err != nil {
				return nil, r.fail(err)
			}
			name, e := r.unquote(raw)
			if e != nil {
				return nil, e
			}
			key := string(name)
			v, e := r.parseValue(depth + 1)
			if e != nil {
				return nil, e
			}
			m[key] = v
		}
		if _, err := r.dec.ReadToken(); err != nil {
			return nil, r.fail(err)
		}
		return m, nil
	case '[':
		if _, err := r.dec.ReadToken(); err != nil {
			return nil, r.fail(err)
		}
		if depth == MaxDepth {
			return nil, r.tooDeep()
		}
		a := []any{}
		for r.dec.PeekKind() != ']' {
			v, e := r.parseValue(depth + 1)
			if e != nil {
				return nil, e
			}
			a = append(a, v)
		}
		if _, err := r.dec.ReadToken(); err != nil {
			return nil, r.fail(err)
		}
		return a, nil
	}
	raw, err := r.dec.ReadValue()
	if err != nil {
		return nil, r.fail(err)
	}
	switch raw[0] {
	case 'n':
		return nil, nil
	case 't':
		return true, nil
	case 'f':
		return false, nil
	case '"':
		s, e := r.unquote(raw)
		if e != nil {
			return nil, e
		}
		return string(s), nil
	default:
		if e := r.checkNumber(raw); e != nil {
			return nil, e
		}
		return Number(raw), nil
	}
}
