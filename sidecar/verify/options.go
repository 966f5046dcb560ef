package verify

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
)

// DecodeOptions decodes a source's options as the sources file writes them
// (lower snake_case keys, YAML or JSON values) into a new value of p's
// options struct (p.Options()), ready for [New] or p.Build: a key names a
// field by its json tag, or else by its Go name in snake_case (id_header →
// IDHeader). A key that is not lower snake_case, or names no field, is an
// error naming it ("options.key.Id_header: …", "options: json: unknown
// field …", "options.public_key: no such option (options here: …)"); so
// is any option for a provider without options ("options: provider
// mailgun takes no options"). Empty raw
// gives p.Options() as it is (nil for a provider without options).
func (p *Provider) DecodeOptions(raw map[string]any) (any, error) {
	var opts any
	if p.Options != nil {
		opts = p.Options()
	}
	if len(raw) == 0 {
		return opts, nil
	}
	into := opts
	if into == nil {
		return nil, fmt.Errorf("options: provider %s takes no options", p.Type)
	}
	named, err := camelKeys(raw, reflect.TypeOf(into), "options")
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(named)
	if err != nil {
		return nil, fmt.Errorf("options: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			// encoding/json names the Go field path (Certificates,
			// Key.IDHeader): name the option as the file writes it.
			parts := strings.Split(te.Field, ".")
			for i, part := range parts {
				parts[i] = snakeName(part)
			}
			// te.Value is the JSON kind, and for a number the number
			// itself ("number 123"): only the kind is named.
			kind, _, _ := strings.Cut(te.Value, " ")
			return nil, fmt.Errorf("options.%s: must be %s, not a JSON %s", strings.Join(parts, "."), jsonKind(te.Type), kind)
		}
		if errors.As(err, &te) {
			kind, _, _ := strings.Cut(te.Value, " ")
			return nil, fmt.Errorf("options: must be %s, not a JSON %s", jsonKind(te.Type), kind)
		}
		return nil, fmt.Errorf("options: %w", err)
	}
	return opts, nil
}

// optionKey is how an options key is written: lower snake_case.
var optionKey = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// camelKeys turns the snake_case keys of options into the names
// encoding/json matches to the fields of t (the options struct's type) they
// stand for: a key that is a field's json tag name stays as it is
// (public_keys for `json:"public_keys"`), any other becomes the Go field
// name (id_header → IdHeader, which encoding/json matches to IDHeader). A
// key that is not lower snake_case is an error naming it, so no two keys
// can name one field (id_header and Id_header would, and one would
// silently win).
func camelKeys(v any, t reflect.Type, at string) (any, error) {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch val := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(val))
		for k, item := range val {
			if !optionKey.MatchString(k) {
				return nil, fmt.Errorf("%s.%s: option names are lower snake_case (e.g. id_header)", at, k)
			}
			name, ft := optionField(t, k)
			if ft == nil && t != nil && t.Kind() == reflect.Struct {
				return nil, fmt.Errorf("%s.%s: no such option (options here: %s)", at, k, strings.Join(optionNames(t), ", "))
			}
			c, err := camelKeys(item, ft, at+"."+k)
			if err != nil {
				return nil, err
			}
			out[name] = c
		}
		return out, nil
	case []any:
		var et reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			et = t.Elem()
		}
		out := make([]any, len(val))
		for i := range val {
			c, err := camelKeys(val[i], et, fmt.Sprintf("%s[%d]", at, i))
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	}
	return v, nil
}

// OptionNames lists the option keys struct type t takes, as the sources
// file writes them: a field's json tag, else its Go name in snake_case
// (id_header for IDHeader).
func OptionNames(t reflect.Type) []string { return optionNames(t) }

// OptionField returns the type of the field of struct type t that option
// key k names (as DecodeOptions matches it: the json tag, else the Go
// name in snake_case), nil when k is not lower snake_case or names none.
func OptionField(t reflect.Type, k string) reflect.Type {
	if !optionKey.MatchString(k) {
		return nil
	}
	_, ft := optionField(t, k)
	return ft
}

// optionNames lists the option keys struct type t takes, as the sources
// file writes them: a field's json tag, else its Go name in snake_case.
func optionNames(t reflect.Type) []string {
	var names []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case tag == "-":
			continue
		case tag != "":
			names = append(names, tag)
		default:
			names = append(names, snakeName(f.Name))
		}
	}
	return names
}

// snakeName is a Go field name in snake_case (IDHeader → id_header,
// PublicKeys → public_keys).
func snakeName(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		upper := c >= 'A' && c <= 'Z'
		if upper && i > 0 {
			prevLower := r[i-1] >= 'a' && r[i-1] <= 'z' || r[i-1] >= '0' && r[i-1] <= '9'
			nextLower := i+1 < len(r) && r[i+1] >= 'a' && r[i+1] <= 'z'
			if prevLower || (r[i-1] >= 'A' && r[i-1] <= 'Z' && nextLower) {
				b.WriteByte('_')
			}
		}
		if upper {
			c += 'a' - 'A'
		}
		b.WriteRune(c)
	}
	return b.String()
}

// optionField returns the JSON name for option key k in struct type t and
// the type of the field it names (nil when t is no struct or has no such
// field: the decoder then refuses the key).
func optionField(t reflect.Type, k string) (string, reflect.Type) {
	if t == nil {
		return camel(k), nil
	}
	if t.Kind() == reflect.Map {
		return k, t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return camel(k), nil
	}
	c := camel(k)
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == k {
			return k, f.Type
		}
		if tag == "" && strings.EqualFold(f.Name, c) {
			return c, f.Type
		}
	}
	return c, nil
}

func camel(s string) string {
	parts := strings.Split(s, "_")
	for i, p := range parts {
		if p != "" {
			parts[i] = strings.ToUpper(p[:1]) + p[1:]
		}
	}
	return strings.Join(parts, "")
}

// jsonKind says what a value of Go type t is written as in the sources
// file: "a list", "a mapping", "a number", "true or false", "a string".
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	default:
		return "a number"
	}
}
