package sources

import (
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// Header names and values written in the sources file (forward.headers,
// key.headers, a provider option naming a header) are checked when the file
// loads, so a typo or a pasted line break is a configuration error naming
// its place, not a header that net/http refuses on every forward or one that
// splits into two (header injection). Errors never quote the name or value.

// headerNameRule is how a bad header name is described.
const headerNameRule = "must be an HTTP header name: one or more of the letters, digits and !#$%&'*+-.^_`|~ (an RFC 9110 section 5.1 token)"

// validHeaderName reports whether s is a field-name of RFC 9110 section 5.1:
// a token (section 5.6.2), one or more tchar.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTchar(s[i]) {
			return false
		}
	}
	return true
}

// isTchar reports whether c is a tchar of RFC 9110 section 5.6.2.
func isTchar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// validHeaderValue reports whether s may be sent as a header's value: no
// CR, LF or NUL, which RFC 9110 section 5.5 forbids in a field value (a
// CR or LF would end the header and start another).
func validHeaderValue(s string) bool {
	return !strings.ContainsAny(s, "\r\n\x00")
}

// checkForwardHeaders checks forward.headers after ${VAR} expansion (a
// variable's value is checked as a literal one is). A bad name is refused
// without naming it (it is the bad text); a bad value names its header.
func checkForwardHeaders(h map[string]string) error { return checkHeaders("forward.headers", h) }

// checkHeaders checks the headers setting at (forward.headers, a
// reconciler's headers) as checkForwardHeaders does.
func checkHeaders(at string, h map[string]string) error {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if !validHeaderName(k) {
			return fmt.Errorf("%s: a header name %s", at, headerNameRule)
		}
	}
	for _, k := range names {
		if !validHeaderValue(h[k]) {
			return fmt.Errorf("%s.%s: the value must not contain CR, LF or NUL (RFC 9110 section 5.5)", at, k)
		}
	}
	return nil
}

// checkOptionHeaders checks a source's options (after ${VAR} expansion)
// that name headers, at any depth: an option named header or ending in
// _header (options.header, options.key.id_header,
// options.signature.header) takes a header name, one named headers or
// ending in _headers a list of them. Errors name the option's path.
func checkOptionHeaders(v any, at, key string) error {
	switch t := v.(type) {
	case string:
		if (key == "header" || strings.HasSuffix(key, "_header")) && !validHeaderName(t) {
			return fmt.Errorf("%s %s", at, headerNameRule)
		}
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if err := checkOptionHeaders(t[k], at+"."+k, k); err != nil {
				return err
			}
		}
	case []any:
		for i, item := range t {
			k := ""
			if key == "headers" || strings.HasSuffix(key, "_headers") {
				k = "header"
			}
			if err := checkOptionHeaders(item, fmt.Sprintf("%s[%d]", at, i), k); err != nil {
				return err
			}
		}
	}
	return nil
}

// typeNames lists the registered provider types, comma-separated.
func typeNames() string {
	ts := verify.Types()
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = string(t)
	}
	return strings.Join(s, ", ")
}

// quietError is an error whose text is msg but which still matches err
// (errors.Is, errors.As), for errors whose own text would quote a value.
type quietError struct {
	err error
	msg string
}

func (e *quietError) Error() string { return e.msg }
func (e *quietError) Unwrap() error { return e.err }

// lineOf is the line of the value at the mapping keys path under the YAML
// document root, or of the deepest key found.
func lineOf(root *yaml.Node, path ...string) int {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := n.Line
	for _, k := range path {
		if n.Kind != yaml.MappingNode {
			return line
		}
		found := false
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				line, n, found = n.Content[i].Line, n.Content[i+1], true
				break
			}
		}
		if !found {
			return line
		}
	}
	return line
}

// badPort reports whether u names a port that is not one: an explicit
// port must be a decimal number from 1 to 65535 (RFC 3986 section 3.2.3
// allows any digits; TCP does not).
func badPort(u *url.URL) bool {
	p := u.Port()
	if p == "" {
		return strings.HasSuffix(u.Host, ":") // "host:" with the port left out
	}
	n, err := strconv.Atoi(p)
	return err != nil || n < 1 || n > 65535
}
