package verify

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
)

// pointer is a parsed JSON Pointer (RFC 6901,
// https://www.rfc-editor.org/rfc/rfc6901): its unescaped reference tokens.
type pointer struct {
	raw    string
	tokens []string
}

// parsePointer parses an RFC 6901 JSON Pointer: "" (the whole document) or
// "/"-separated reference tokens where "~1" stands for "/" and "~0" for "~";
// any other "~" sequence is an error (RFC 6901 §3).
func parsePointer(s string) (pointer, error) {
	if s == "" {
		return pointer{raw: s}, nil
	}
	if s[0] != '/' {
		return pointer{}, errors.New("a JSON pointer must be empty or start with '/'")
	}
	parts := strings.Split(s[1:], "/")
	for i, p := range parts {
		for j := 0; j < len(p); j++ {
			if p[j] == '~' && (j+1 >= len(p) || (p[j+1] != '0' && p[j+1] != '1')) {
				return pointer{}, errors.New("'~' must be followed by '0' or '1' in a JSON pointer")
			}
		}
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(p, "~1", "/"), "~0", "~")
	}
	return pointer{raw: s, tokens: parts}, nil
}

// get walks doc (decoded by decodeJSON) along the pointer. Array indexes are
// decimal without leading zeros (RFC 6901 §4); "-" never exists.
func (p pointer) get(doc any) (any, bool) {
	cur := doc
	for _, t := range p.tokens {
		switch v := cur.(type) {
		case map[string]any:
			next, ok := v[t]
			if !ok {
				return nil, false
			}
			cur = next
		case []any:
			if t == "" || (len(t) > 1 && t[0] == '0') {
				return nil, false
			}
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(v) {
				return nil, false
			}
			cur = v[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// scalar returns the value at p as text: a JSON string as is, a JSON number
// in its exact source spelling. Absent, null, empty-string, boolean, object
// and array values are errors naming the pointer.
func (p pointer) scalar(doc any) (string, *Error) {
	v, ok := p.get(doc)
	if !ok || v == nil {
		return "", bodyErr(CodeMissingField, p.raw, "field is absent or null")
	}
	switch x := v.(type) {
	case string:
		if x == "" {
			return "", bodyErr(CodeMissingField, p.raw, "field is an empty string")
		}
		return x, nil
	case json.Number:
		return x.String(), nil
	}
	return "", bodyErr(CodeMalformedBody, p.raw, "field must be a string or a number")
}

// decodeJSON decodes exactly one JSON value, keeping numbers exact
// (json.Number), and rejects trailing data.
func decodeJSON(body []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

// unmarshalBody decodes body into v (a struct), returning a malformed_body
// error that names nothing of the content.
func unmarshalBody(body []byte, v any) *Error {
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return bodyErr(CodeMalformedBody, "/"+strings.ReplaceAll(te.Field, ".", "/"), "field has the wrong JSON type")
		}
		return bodyErr(CodeMalformedBody, "", "body is not the expected JSON document")
	}
	return nil
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
