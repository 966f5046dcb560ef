package strictjson

import (
	"encoding"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Error is a strict-decoding or canonicalisation failure. Every error
// returned by this package is an *Error (use errors.As).
//
// Its text names the reason and the pointer, never a string or number value
// from the document, so it is safe to log and to answer to a sender.
type Error struct {
	// Pointer is the RFC 6901 JSON pointer of the offending value or member
	// ("" = the whole document), for example "/items/3/id". Pointers longer
	// than MaxPointerLen bytes are shortened in the middle with "…".
	Pointer string
	// Reason is a short, stable, human phrase: one of the Reason constants,
	// or one of these families:
	//   - `member name differs from the known field "id" only in letter case`
	//     (Unmarshal; the field name comes from the Go struct tag),
	//   - "must be a JSON string" | "must be a JSON number" |
	//     "must be a JSON boolean" | "must be a JSON object" |
	//     "must be a JSON array" | "must be a base64 JSON string" |
	//     "must be an integer" (Unmarshal, the JSON kind does not fit the Go
	//     type),
	//   - "cannot decode into Go type T" (Unmarshal, the target type is not
	//     decodable),
	//   - "unsupported Go type T in tree" (CanonicalValue).
	Reason string
	// Offset is the byte offset in the input at or after which the problem
	// lies, or -1 when the error is not tied to input bytes (CanonicalValue,
	// an invalid Unmarshal target).
	Offset int64

	// cause is the error returned by a target type's own unmarshal method
	// (ReasonRejectedByType only); see Unwrap.
	cause error
}

// Reasons of Error with a fixed text.
const (
	// ReasonEmpty: the input holds no JSON value (empty or only whitespace).
	ReasonEmpty = "empty document"
	// ReasonBOM: the input starts with a UTF-8 byte order mark. Callers that
	// tolerate one strip it with TrimBOM first.
	ReasonBOM = "leading UTF-8 byte order mark"
	// ReasonTooLarge: the input is longer than MaxBytes.
	ReasonTooLarge = "document too large"
	// ReasonTooDeep: objects and arrays nest deeper than MaxDepth.
	ReasonTooDeep = "nesting too deep"
	// ReasonSyntax: the input is not JSON (RFC 8259 grammar).
	ReasonSyntax = "not valid JSON"
	// ReasonTruncated: the input ends inside a value.
	ReasonTruncated = "unexpected end of input"
	// ReasonTrailing: something other than whitespace follows the value.
	ReasonTrailing = "trailing data after the JSON value"
	// ReasonDuplicateName: an object has two members of the same name
	// (compared after unescaping, so "a" and "\u0061" are the same name).
	ReasonDuplicateName = "duplicate member name"
	// ReasonInvalidUTF8: the input is not valid UTF-8.
	ReasonInvalidUTF8 = "invalid UTF-8"
	// ReasonSurrogate: a \u escape encodes half of a UTF-16 surrogate pair
	// without its other half.
	ReasonSurrogate = "unpaired UTF-16 surrogate"
	// ReasonNumberRange: a number's scientific exponent exceeds
	// MaxExponent, or (Unmarshal) the number does not fit the Go numeric
	// type.
	ReasonNumberRange = "number out of range"
	// ReasonNotNumber: a Number or a literal given to CanonicalNumber is not
	// a JSON number literal.
	ReasonNotNumber = "not a JSON number"
	// ReasonUnknownMember: (Unmarshal with RejectUnknown) the member matches
	// no field of the target struct.
	ReasonUnknownMember = "unknown member"
	// ReasonRejectedByType: (Unmarshal) the target type's own UnmarshalJSON,
	// UnmarshalJSONFrom or UnmarshalText method failed; Unwrap returns its
	// error.
	ReasonRejectedByType = "rejected by the target type's unmarshal method"
	// ReasonNotPointer: (Unmarshal) the target is not a non-nil pointer.
	ReasonNotPointer = "target must be a non-nil pointer"
)

// MaxPointerLen bounds Error.Pointer, in bytes (plus the "…" marker).
const MaxPointerLen = 200

// Error returns "strictjson: <reason>", followed by ` at "<pointer>"` when
// the pointer is not empty and " (offset N)" when the offset is known. The
// pointer is quoted with strconv.Quote, so control characters in member
// names cannot forge log lines.
func (e *Error) Error() string {
	b := append([]byte("strictjson: "), e.Reason...)
	if e.Pointer != "" {
		b = append(b, " at "...)
		b = strconv.AppendQuote(b, e.Pointer)
	}
	if e.Offset >= 0 {
		b = append(b, " (offset "...)
		b = strconv.AppendInt(b, e.Offset, 10)
		b = append(b, ')')
	}
	return string(b)
}

// Unwrap returns the error of the target type's own unmarshal method when
// Reason is ReasonRejectedByType, and nil otherwise. Errors of the decoder
// itself are not exposed: their text can quote the document.
func (e *Error) Unwrap() error { return e.cause }

// capPointer shortens p to about MaxPointerLen bytes, keeping its start and
// its end (the member that failed), cut on UTF-8 boundaries.
func capPointer(p string) string {
	if len(p) <= MaxPointerLen {
		return p
	}
	head := MaxPointerLen/2 - 4
	for head > 0 && !utf8.RuneStart(p[head]) {
		head--
	}
	tail := len(p) - MaxPointerLen/2
	for tail < len(p) && !utf8.RuneStart(p[tail]) {
		tail++
	}
	return p[:head] + "…" + p[tail:]
}

// decodeError maps an error of a jsontext.Decoder reading data into an
// *Error. jsontext exports a sentinel only for duplicate names; invalid
// UTF-8 and unpaired surrogates are recognised from the input bytes at the
// reported offset, never from error text.
func decodeError(data []byte, err error) *Error {
	var se *jsontext.SyntacticError
	if !errors.As(err, &se) {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return &Error{Reason: ReasonTruncated, Offset: int64(len(data))}
		}
		return &Error{Reason: ReasonSyntax, Offset: -1}
	}
	e := &Error{Pointer: capPointer(string(se.JSONPointer)), Offset: se.ByteOffset}
	switch off := se.ByteOffset; {
	case errors.Is(se, jsontext.ErrDuplicateName):
		e.Reason = ReasonDuplicateName
	case errors.Is(se, io.ErrUnexpectedEOF):
		e.Reason = ReasonTruncated
	case surrogateEscapeAt(data, off):
		e.Reason = ReasonSurrogate
	case invalidUTF8At(data, off):
		e.Reason = ReasonInvalidUTF8
	default:
		e.Reason = ReasonSyntax
	}
	return e
}

// surrogateEscapeAt reports whether data[off:] starts with a \u escape of a
// UTF-16 surrogate (U+D800–U+DFFF). jsontext reports an unpaired surrogate
// at the offset of its first escape.
func surrogateEscapeAt(data []byte, off int64) bool {
	if off < 0 || off+6 > int64(len(data)) || data[off] != '\\' || data[off+1] != 'u' {
		return false
	}
	v, err := strconv.ParseUint(string(data[off+2:off+6]), 16, 16)
	return err == nil && 0xD800 <= v && v <= 0xDFFF
}

// invalidUTF8At reports whether data[off:] starts with a byte sequence that
// is not UTF-8. A literal U+FFFD (EF BF BD) is valid and not matched.
func invalidUTF8At(data []byte, off int64) bool {
	if off < 0 || off >= int64(len(data)) || data[off] < utf8.RuneSelf {
		return false
	}
	r, size := utf8.DecodeRune(data[off:])
	return r == utf8.RuneError && size <= 1
}

// unmarshalError maps an error of json.Unmarshal into an *Error. Syntactic
// problems were already caught by the strict pre-pass, so what remains is
// semantic: the JSON does not fit the Go type.
func unmarshalError(data []byte, err error) *Error {
	var se *json.SemanticError
	if !errors.As(err, &se) {
		return decodeError(data, err)
	}
	e := &Error{Pointer: capPointer(string(se.JSONPointer)), Offset: se.ByteOffset}
	var own *Error
	switch {
	case errors.As(se.Err, &own): // from Number.UnmarshalJSON
		e.Reason = own.Reason
	case errors.Is(se.Err, json.ErrUnknownName):
		e.Reason = ReasonUnknownMember
	case errors.Is(se.Err, strconv.ErrRange):
		e.Reason = ReasonNumberRange
	case se.Err != nil && se.GoType != nil && hasUnmarshalMethod(se.GoType):
		e.Reason, e.cause = ReasonRejectedByType, se.Err
	case errors.Is(se.Err, strconv.ErrSyntax) && isIntKind(se.GoType):
		e.Reason = "must be an integer"
	case se.Err == nil && se.JSONKind != 0 && se.GoType != nil:
		e.Reason = kindMismatchReason(se.GoType)
	case se.GoType != nil:
		e.Reason = "cannot decode into Go type " + se.GoType.String()
	default:
		e.Reason = ReasonSyntax
	}
	return e
}

var (
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	unmarshalerFromType = reflect.TypeFor[json.UnmarshalerFrom]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
	jsontextValueType   = reflect.TypeFor[jsontext.Value]()
)

// hasUnmarshalMethod reports whether t or *t decodes itself.
func hasUnmarshalMethod(t reflect.Type) bool {
	for _, u := range []reflect.Type{t, reflect.PointerTo(t)} {
		if u.Implements(unmarshalerType) || u.Implements(unmarshalerFromType) || u.Implements(textUnmarshalerType) {
			return true
		}
	}
	return false
}

func isIntKind(t reflect.Type) bool {
	if t == nil {
		return false
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return true
	}
	return false
}

// kindMismatchReason names the JSON kind the Go type t expects.
func kindMismatchReason(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if hasUnmarshalMethod(t) {
		if t.Implements(textUnmarshalerType) || reflect.PointerTo(t).Implements(textUnmarshalerType) {
			return "must be a JSON string" // time.Time, netip.Addr, …
		}
		return "cannot decode into Go type " + t.String()
	}
	switch t.Kind() {
	case reflect.String:
		return "must be a JSON string"
	case reflect.Bool:
		return "must be a JSON boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64:
		return "must be a JSON number"
	case reflect.Struct, reflect.Map:
		return "must be a JSON object"
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 && !hasUnmarshalMethod(t.Elem()) {
			return "must be a base64 JSON string"
		}
		return "must be a JSON array"
	}
	return fmt.Sprintf("cannot decode into Go type %s", t)
}

// IsAmbiguous reports whether err is an *Error saying the document can be
// read more than one way: a duplicate member name, a member name that
// differs from another (or from a known field) only in letter case,
// invalid UTF-8 or an unpaired surrogate, each of which other decoders
// resolve differently (last wins, case folding, U+FFFD). Grammar, type
// and range failures are not ambiguity: the document is simply not what
// was expected.
func IsAmbiguous(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Reason {
	case ReasonDuplicateName, ReasonInvalidUTF8, ReasonSurrogate:
		return true
	}
	return strings.Contains(e.Reason, "only in letter case")
}
