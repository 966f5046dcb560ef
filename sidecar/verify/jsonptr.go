package verify

import (
	"encoding/json"
	"errors"

	"github.com/idempotent-claim/idempotent-claim/sidecar/strictjson"
)

// pointer is a parsed JSON Pointer (RFC 6901,
// https://www.rfc-editor.org/rfc/rfc6901) into a body decoded by decodeJSON.
type pointer struct {
	raw string
	p   strictjson.Pointer
}

// parsePointer parses an RFC 6901 JSON Pointer: "" (the whole document) or
// "/"-separated reference tokens where "~1" stands for "/" and "~0" for "~";
// any other "~" sequence is an error (RFC 6901 §3).
func parsePointer(s string) (pointer, error) {
	p, err := strictjson.ParsePointer(s)
	if err != nil {
		return pointer{}, err
	}
	return pointer{raw: s, p: p}, nil
}

// get walks doc (decoded by decodeJSON) along the pointer. Members match
// exactly; a member whose name differs from the one looked up only in
// letter case ("Id" beside "id") makes the body ambiguous: an error.
func (p pointer) get(doc *strictjson.Doc) (any, bool, *Error) {
	v, ok, err := doc.Get(p.p)
	if err != nil {
		return nil, false, strictErr(err)
	}
	return v, ok, nil
}

// scalar returns the value at p as text: a JSON string as is, a JSON number
// by its exact value (strictjson.KeyText: an integer in plain digits, so 100
// and 1e2 are one value and 2^53+1 stays itself). Absent, null, empty-string,
// boolean, object and array values are errors naming the pointer.
func (p pointer) scalar(doc *strictjson.Doc) (string, *Error) {
	v, ok, e := p.get(doc)
	if e != nil {
		return "", e
	}
	if !ok || v == nil {
		return "", bodyErr(CodeMissingField, p.raw, "field is absent or null")
	}
	switch x := v.(type) {
	case string:
		if x == "" {
			return "", bodyErr(CodeMissingField, p.raw, "field is an empty string")
		}
		return x, nil
	case strictjson.Number:
		s, err := strictjson.KeyText(string(x))
		if err != nil {
			return "", bodyErr(CodeMalformedBody, p.raw, "field is a number out of range")
		}
		return s, nil
	}
	return "", bodyErr(CodeMalformedBody, p.raw, "field must be a string or a number")
}

// decodeJSON decodes exactly one JSON value strictly (strictjson.ParseDoc,
// read as strictjson.Parse reads it, without building its tree): duplicate
// member names, invalid UTF-8, unpaired surrogates and trailing data are
// errors, numbers stay exact. A leading UTF-8 BOM is ignored (RFC 8259
// §8.1); signatures are still checked over the raw bytes, BOM included.
func decodeJSON(body []byte) (*strictjson.Doc, *Error) {
	v, err := strictjson.ParseDoc(strictjson.TrimBOM(body))
	if err != nil {
		return nil, strictErr(err)
	}
	return v, nil
}

// unmarshalBody decodes body into v (a struct) strictly, as decodeJSON,
// with member names matched exactly (a case variant of a field's name is
// an error, not a match), returning a malformed_body error that names
// where, never what.
func unmarshalBody(body []byte, v any) *Error {
	if err := strictjson.Unmarshal(strictjson.TrimBOM(body), v); err != nil {
		return strictErr(err)
	}
	return nil
}

// strictErr is the malformed_body error of a strict-decoding failure.
func strictErr(err error) *Error {
	var se *strictjson.Error
	if errors.As(err, &se) {
		if strictjson.IsAmbiguous(err) {
			e := bodyErr(CodeMalformedBody, se.Pointer, "body is not strict JSON: "+se.Reason)
			e.ambiguous = true
			return e
		}
		return bodyErr(CodeMalformedBody, se.Pointer, "body is not the JSON this provider sends: "+se.Reason)
	}
	return bodyErr(CodeMalformedBody, "", "body is not the expected JSON document")
}

// flexString decodes a JSON string or number into its text; any other JSON
// value (null, bool, object, array) decodes to "" without error, so an
// informational field of an unexpected shape never fails a verification.
type flexString string

// UnmarshalJSON implements json.Unmarshaler.
func (f *flexString) UnmarshalJSON(b []byte) error {
	*f = ""
	if len(b) == 0 {
		return nil
	}
	switch c := b[0]; {
	case c == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*f = flexString(s)
	case c == '-' || (c >= '0' && c <= '9'):
		*f = flexString(b)
	}
	return nil
}
