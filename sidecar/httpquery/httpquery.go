// Package httpquery reads the query parameters of claimd's own routes:
// the /v1 API's and the console's. (A provider's query string at the
// ingest door, or the one a trigger request carries, is the provider's
// request and is taken as it came; nothing here applies to it.)
package httpquery

import (
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
