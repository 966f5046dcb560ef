package sources

import (
	"reflect"
	"strconv"

	"gopkg.in/yaml.v3"
)

// settingsWalk walks the sources file's YAML nodes along the Go type they
// decode into (File: structs by their yaml tags, pointers, maps, slices)
// for the checks made before and after decoding (checkSettings,
// checkWholeNumbers, typeMismatch). Pointers are followed to their
// element type, a document node to its content and an alias to the node
// it names; a null leaves the zero value and is not visited.
type settingsWalk struct {
	// visit checks node n (decoding into t, at path) before the walk
	// goes into it: an error stops the walk; descend false leaves n's
	// content unwalked.
	visit func(n *yaml.Node, t reflect.Type, path string) (descend bool, err error)
	// field is the type the value v of key k in mapping n takes when n
	// decodes into the struct t at path; nil skips the value, an error
	// stops the walk.
	field func(n, k, v *yaml.Node, t reflect.Type, path string) (reflect.Type, error)
	// merge walks the value of a "<<" merge key along the mapping's own
	// type and path.
	merge bool
}

// walk walks n along t at path, returning the first error a visit or
// field reports, nil when none does.
func (w *settingsWalk) walk(n *yaml.Node, t reflect.Type, path string) error {
	if n == nil {
		return nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := w.walk(c, t, path); err != nil {
				return err
			}
		}
		return nil
	case yaml.AliasNode:
		return w.walk(n.Alias, t, path)
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil // null leaves the zero value
	}
	if descend, err := w.visit(n, t, path); err != nil || !descend {
		return err
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if w.merge && k.ShortTag() == "!!merge" {
				if err := w.walk(v, t, path); err != nil {
					return err
				}
				continue
			}
			ft, err := w.field(n, k, v, t, path)
			if err != nil {
				return err
			}
			if ft == nil {
				continue
			}
			if err := w.walk(v, ft, join(path, k.Value)); err != nil {
				return err
			}
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if w.merge && k.ShortTag() == "!!merge" {
				if err := w.walk(v, t, path); err != nil {
					return err
				}
				continue
			}
			if err := w.walk(v, t.Elem(), join(path, k.Value)); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		if n.Kind != yaml.SequenceNode {
			return nil
		}
		for i, c := range n.Content {
			if err := w.walk(c, t.Elem(), path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
	}
	return nil
}

// knownField is settingsWalk.field for checks that leave a key naming no
// setting to another check: the type of the struct field k names by its
// yaml tag, nil for an unknown key.
func knownField(_, k, _ *yaml.Node, t reflect.Type, _ string) (reflect.Type, error) {
	return yamlFields(t)[k.Value], nil
}

// isContainer reports whether the walk goes into a value of type t
// (structs, maps, slices, arrays).
func isContainer(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Struct, reflect.Map, reflect.Slice, reflect.Array:
		return true
	}
	return false
}
