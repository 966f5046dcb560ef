package sources

import (
	"fmt"
	"math"
	"math/big"
	"reflect"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// checkSettings walks the sources file's YAML nodes n along the Go type t
// they decode into (File: structs by their yaml tags, pointers, maps,
// slices) before the file is decoded, and refuses:
//
//   - a key that names no setting: "sources file line 9: unknown setting
//     under sources.pay.backfill (allowed: …)". The key is not quoted (a
//     secret pasted where a key goes would be echoed) and no Go type is
//     named (yaml.v3's own error, "field … not found in type
//     sources.BackfillSpec", does both and names no path);
//   - a boolean setting written other than plainly true or false: yaml.v3
//     decodes the YAML 1.1 words yes, no, on, off, y, n (unquoted or
//     quoted) and True, FALSE into a bool field, so `shadow: "yes"` would
//     turn shadow mode on while `shadow: "true"` is refused. YAML 1.2's
//     core schema (yaml.org/spec/1.2.2, 10.3.2) has true and false; the
//     file takes them lowercase and unquoted only;
//   - a whole number outside the range of its setting's type (yaml.v3
//     reads 99999999999999999999 as a float and would report a fraction).
//
// Every error names the line and the setting's path, never the value or
// key written. A source's options are walked along its provider's
// options struct (checkOptions).
func checkSettings(n *yaml.Node, t reflect.Type, path string) error {
	w := settingsWalk{merge: true, field: settingField, visit: func(n *yaml.Node, t reflect.Type, path string) (bool, error) {
		if t == reflect.TypeFor[yaml.Node]() {
			return false, nil // decoded by its setting (retry_statuses: a list or "500-599")
		}
		return true, checkSettingLeaf(n, t, path)
	}}
	return w.walk(n, t, path)
}

// settingField is settingsWalk.field for checkSettings: the type of the
// setting key k (value v) names in the struct t, an error naming the
// line and place of a key that names none, and a source's options walked
// along its provider's options struct (checkOptions; nil is returned for
// them).
func settingField(n, k, v *yaml.Node, t reflect.Type, path string) (reflect.Type, error) {
	fields := yamlFields(t)
	ft, ok := fields[k.Value]
	if !ok {
		return nil, fmt.Errorf("sources file line %d: unknown setting %s (allowed: %s)", k.Line, under(path),
			strings.Join(sortedKeys(fields), ", "))
	}
	if t == reflect.TypeFor[SourceSpec]() && k.Value == "options" {
		if ot := optionsType(n); ot != nil {
			if err := checkOptions(v, ot, join(path, k.Value)); err != nil {
				return nil, err
			}
		}
		return nil, nil
	}
	return ft, nil
}

// checkSettingLeaf refuses a boolean not written plainly and a whole
// number out of its type's range (checkSettings); values of other types
// pass.
func checkSettingLeaf(n *yaml.Node, t reflect.Type, path string) error {
	switch t.Kind() {
	case reflect.Bool:
		if n.Kind == yaml.ScalarNode && (n.Style != 0 || (n.Value != "true" && n.Value != "false")) {
			return fmt.Errorf("sources file line %d: %s must be true or false, written plainly "+
				"(lowercase, unquoted; yes, no, on, off and quoted words are not taken)", n.Line, settingName(path))
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n.Kind == yaml.ScalarNode && n.Style == 0 {
			return checkRange(n, t, path)
		}
	}
	return nil
}

// checkRange refuses a plain whole number n (decimal, or 0x, 0o, 0b;
// "_" between digits) outside the range of the integer type t. Anything
// else is left to typeMismatch and checkWholeNumbers.
func checkRange(n *yaml.Node, t reflect.Type, path string) error {
	v, ok := new(big.Int).SetString(strings.ReplaceAll(n.Value, "_", ""), 0)
	if !ok {
		return nil
	}
	lo, hi := new(big.Int), new(big.Int)
	switch t.Kind() {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		hi.SetUint64(math.MaxUint64 >> (64 - t.Bits()))
	default:
		hi.SetInt64(math.MaxInt64 >> (64 - t.Bits()))
		lo.Neg(hi).Sub(lo, big.NewInt(1))
	}
	if v.Cmp(lo) >= 0 && v.Cmp(hi) <= 0 {
		return nil
	}
	return fmt.Errorf("sources file line %d: %s is out of range: it takes a whole number from %s to %s "+
		"(%d bits; the setting's own limits may be narrower)", n.Line, settingName(path), lo, hi, t.Bits())
}

// settingName is path, or "the file" for the top level.
func settingName(path string) string {
	if path == "" {
		return "the file"
	}
	return path
}

// under says where an unknown key was found: "under sources.pay.backfill",
// or "at the top of the file".
func under(path string) string {
	if path == "" {
		return "at the top of the file"
	}
	return "under " + path
}

func sortedKeys(m map[string]reflect.Type) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// optionsType is the options struct type of the provider a source's
// mapping n names (provider: …), nil when it names none registered or
// the provider takes no options (Parse refuses those).
func optionsType(n *yaml.Node) reflect.Type {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k, v := n.Content[i], n.Content[i+1]; k.Value == "provider" && v.Kind == yaml.ScalarNode {
			p, ok := verify.Lookup(verify.Type(v.Value))
			if !ok || p.Options == nil {
				return nil
			}
			return reflect.TypeOf(p.Options())
		}
	}
	return nil
}

// checkOptions is checkSettings for a source's options, whose keys name
// the fields of the provider's options struct t as verify.DecodeOptions
// matches them (json tag, else the Go name in snake_case): an unknown
// option is refused by line and place, never quoted, and a boolean or
// whole-number option as checkSettings refuses one.
func checkOptions(n *yaml.Node, t reflect.Type, path string) error {
	w := settingsWalk{
		visit: func(n *yaml.Node, t reflect.Type, path string) (bool, error) {
			if isContainer(t) {
				return true, nil
			}
			return false, checkSettingLeaf(n, t, path)
		},
		field: func(_, k, _ *yaml.Node, t reflect.Type, path string) (reflect.Type, error) {
			ft := verify.OptionField(t, k.Value)
			if ft == nil {
				return nil, fmt.Errorf("sources file line %d: unknown option under %s (allowed: %s)", k.Line, path,
					strings.Join(verify.OptionNames(t), ", "))
			}
			return ft, nil
		},
	}
	return w.walk(n, t, path)
}
