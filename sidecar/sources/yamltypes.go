package sources

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"regexp"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// decodeError rewrites an error of decoding the sources file b so that it
// never quotes a value written in the file: the file holds secrets and
// credentials, and yaml.v3's type errors quote the start of the value
// they could not decode ("cannot unmarshal !!str `sk_live…` into int").
// A type error names the line, the setting's path and what the setting
// takes (typeMismatch); each line of a yaml.TypeError this does not find
// is kept without its value or key (a key written twice, or naming no
// setting, is not quoted). Any other error (YAML syntax)
// is returned wrapped: yaml.v3 quotes no value in those.
func decodeError(b []byte, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("sources file: %w", err)
	}
	var root yaml.Node
	if yaml.Unmarshal(b, &root) == nil {
		if mis := typeMismatch(&root, reflect.TypeFor[File](), ""); mis != nil {
			return mis
		}
	}
	lines := make([]string, len(te.Errors))
	for i, e := range te.Errors {
		lines[i] = withoutValue(e)
	}
	return errors.New("sources file: " + strings.Join(lines, "; "))
}

// unmarshalLine is yaml.v3's type error line: "line N: cannot unmarshal
// !!tag `value` into type" (the value cut to 7 characters and "...").
var unmarshalLine = regexp.MustCompile("^(line \\d+: cannot unmarshal !![a-z]+)( .*)? into ([^ `]+)$")

// duplicateKeyLine and unknownFieldLine are yaml.v3's errors for a key
// written twice and a key naming no field: both quote the key (which may
// be a secret pasted in the wrong place), the second a Go type.
var (
	duplicateKeyLine = regexp.MustCompile(`^(line \d+): mapping key .* already defined at line (\d+)$`)
	unknownFieldLine = regexp.MustCompile(`^(line \d+): field .* not found in type .*$`)
)

// withoutValue is a yaml.v3 type error line with the value it quotes
// left out; a line of any other shape is kept only when it quotes
// nothing (no backtick).
func withoutValue(line string) string {
	if m := unmarshalLine.FindStringSubmatch(line); m != nil {
		return m[1] + " into " + m[3]
	}
	if m := duplicateKeyLine.FindStringSubmatch(line); m != nil {
		return m[1] + ": a key is written twice in one map (first at line " + m[2] + ")"
	}
	if m := unknownFieldLine.FindStringSubmatch(line); m != nil {
		return m[1] + ": unknown setting" // checkSettings names its place first
	}
	if strings.ContainsRune(line, '`') {
		line, _, _ = strings.Cut(line, "`")
		return strings.TrimSpace(line) + " (value not shown)"
	}
	return line
}

// typeMismatch walks the sources file's YAML nodes n along the Go type t
// they decode into (as checkWholeNumbers does) and returns an error for
// the first value of the wrong type: "sources file line 7:
// sources.pay.lease_seconds must be a whole number". It names the line,
// the path and the type the setting takes, never the value written. nil
// when every value decodes.
func typeMismatch(n *yaml.Node, t reflect.Type, path string) error {
	w := settingsWalk{field: knownField, visit: func(n *yaml.Node, t reflect.Type, path string) (bool, error) {
		if t.Kind() == reflect.Interface {
			return false, nil // any value (options: checked by the provider)
		}
		wrong := func() error {
			name := path
			if name == "" {
				name = "the file"
			}
			if n.Kind == yaml.ScalarNode && (n.ShortTag() == "!!int" || wholeFloatOutOfRange(n, t)) && strings.Contains(typeWords(t), "whole number") {
				return fmt.Errorf("sources file line %d: %s must be %s; the number written is out of range", n.Line, name, typeWords(t))
			}
			return fmt.Errorf("sources file line %d: %s must be %s, not %s", n.Line, name, typeWords(t), nodeWords(n))
		}
		switch t.Kind() {
		case reflect.Struct, reflect.Map:
			if n.Kind != yaml.MappingNode {
				return false, wrong()
			}
			return true, nil
		case reflect.Slice, reflect.Array:
			if n.Kind != yaml.SequenceNode {
				return false, wrong()
			}
			return true, nil
		}
		if n.Kind != yaml.ScalarNode {
			return false, wrong()
		}
		// A scalar setting: it is wrong exactly when yaml.v3 cannot decode
		// it into the setting's type (a word into a number, a number out
		// of range, "maybe" into true or false).
		if n.Decode(reflect.New(t).Interface()) != nil {
			return false, wrong()
		}
		return false, nil
	}}
	return w.walk(n, t, path)
}

// typeWords says what a setting of type t takes.
func typeWords(t reflect.Type) string {
	if t == reflect.TypeFor[time.Duration]() {
		return "a duration (30s, 5m)"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return fmt.Sprintf("a whole number (%d bits)", t.Bits())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprintf("a whole number, not negative (%d bits)", t.Bits())
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "text (a string)"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a map (key: value)"
	}
	return "another type"
}

// nodeWords says what kind of YAML value n is, without its value.
func nodeWords(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a map"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.ShortTag() {
	case "!!int":
		return "a whole number"
	case "!!float":
		return "a number with a fraction"
	case "!!bool":
		return "true or false"
	case "!!str":
		return "text"
	}
	return "a YAML " + strings.TrimPrefix(n.ShortTag(), "!!")
}

// wholeFloatOutOfRange reports whether n is a YAML float that is a whole
// number (1e30, .inf) outside the range of the integer type t: such a
// number is out of range, not one with a fraction.
func wholeFloatOutOfRange(n *yaml.Node, t reflect.Type) bool {
	if n.ShortTag() != "!!float" {
		return false
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
	default:
		return false
	}
	var f float64
	if err := n.Decode(&f); err != nil || math.IsNaN(f) {
		return false
	}
	if math.IsInf(f, 0) {
		return true
	}
	if f != math.Trunc(f) {
		return false
	}
	v, _ := new(big.Float).SetFloat64(f).Int(nil)
	lo, hi := new(big.Int), new(big.Int)
	if t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64 {
		hi.SetUint64(math.MaxUint64 >> (64 - t.Bits()))
	} else {
		hi.SetInt64(math.MaxInt64 >> (64 - t.Bits()))
		lo.Neg(hi).Sub(lo, big.NewInt(1))
	}
	return v.Cmp(lo) < 0 || v.Cmp(hi) > 0
}
