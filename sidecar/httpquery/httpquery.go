// Package httpquery reads the query parameters of claimd's own routes:
// the /v1 API's and the console's. (A provider's query string at the
// ingest door, or the one a trigger request carries, is the provider's
// request and is taken as it came; nothing here applies to it.)
package httpquery

import (
	"net/url"
	"slices"
	"sort"

	"github.com/valyala/fasthttp"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
)

// Once returns an *apperr.Error with code Malformed (400) naming the first
// of names (in the order given) that args holds more than once
// (?state=a&state=b, ?state=&state=a), and nil when each is there at most
// once. Which of two values would count is nobody's guess, so neither
// does: a route reads its parameters only after Once passed. The error
// names the parameter and quotes none of its values. Parameters not in
// names are not looked at.
func Once(args *fasthttp.Args, names ...string) error {
	for _, name := range names {
		if len(args.PeekMulti(name)) > 1 {
			return &apperr.Error{Code: apperr.Malformed, Field: name,
				Message: "must be given at most once (query parameter)"}
		}
	}
	return nil
}

// FormOnce is Once for a form body (application/x-www-form-urlencoded,
// parsed into form): an *apperr.Error with code Malformed (400) for the
// first field, in name order, that form holds more than once
// (whole_window=yes&whole_window=no), nil when each is there at most once.
// Every field is looked at, since a form's handler reads any of them; the
// error names the field when it is one of names (the fields the form
// reads), and otherwise names none, so nothing the caller made up is
// repeated. It quotes no value.
func FormOnce(form url.Values, names ...string) error {
	keys := make([]string, 0, len(form))
	for k, vs := range form {
		if len(vs) > 1 {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	sort.Strings(keys)
	for _, k := range keys {
		if slices.Contains(names, k) {
			return &apperr.Error{Code: apperr.Malformed, Field: k, Message: "must be given at most once (form field)"}
		}
	}
	return apperr.New(apperr.Malformed, "a form field is given more than once: give each at most once")
}
