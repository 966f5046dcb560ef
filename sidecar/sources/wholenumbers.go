package sources

import (
	"fmt"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"
)

// checkWholeNumbers walks the sources file's YAML nodes n along the Go
// type t they decode into (File: structs by their yaml tags, pointers,
// maps, slices) and refuses a number written with a fraction or an
// exponent where the setting is a whole number (lease_seconds: 1.5,
// backfill.interval_minutes: 0.5). yaml.v3 decodes such a number into an
// integer field by cutting the fraction, so 0.5 minutes would silently
// become 0 (on demand only). The error names the line and the setting,
// never the value written.
func checkWholeNumbers(n *yaml.Node, t reflect.Type, path string) error {
	w := settingsWalk{field: knownField, visit: func(n *yaml.Node, t reflect.Type, path string) (bool, error) {
		switch t.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			if n.Kind == yaml.ScalarNode && n.Tag == "!!float" {
				return false, fmt.Errorf("sources file line %d: %s must be a whole number", n.Line, path)
			}
		}
		return true, nil
	}}
	return w.walk(n, t, path)
}

// yamlFields maps the yaml names of t's fields (inline structs' too) to
// their types.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if strings.Contains(opts, "inline") {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range yamlFields(ft) {
					out[k] = v
				}
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f.Type
	}
	return out
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
