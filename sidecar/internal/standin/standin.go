// Package standin holds local stand-ins for providers' APIs: servers that
// follow each provider's documented requests and answers (cited in each
// file), hold seeded events, check the shape of every request they get,
// and can be switched to answer a rate limit or to refuse a revoked
// credential.
//
// Tests start one with NewStripe, NewGitHub or NewSquare: it serves on a
// loopback httptest server of its own (URL) until the test ends, and
// reports a request off its provider's shape as a test error. The standin
// command (sidecar/cmd/standin) builds one with NewStripeAt, NewGitHubAt
// or NewSquareAt for the base URL it serves it at: each stand-in is an
// http.Handler, and reports to the Reporter it was given.
package standin

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// Reporter is told what a stand-in finds wrong: a request that does not
// follow the provider's documented shape, a redelivery the ingest door
// refused. testing.TB satisfies it.
type Reporter interface {
	Errorf(format string, args ...any)
}

// TestReporter is a Reporter that runs functions when it ends: a
// testing.TB.
type TestReporter interface {
	Reporter
	Cleanup(func())
}

// serveTest serves h on a loopback httptest server until t ends and
// returns its base URL (http://127.0.0.1:PORT).
func serveTest(t TestReporter, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// api is what each stand-in keeps besides its provider's data: its base
// URL, its Reporter, its lock, the requests it got (R: its provider's
// record of one), whether its credential is revoked, and the rate limits
// it is to answer next.
type api[R any] struct {
	// URL is the base URL the stand-in is served at (claimd's base_url).
	URL string
	t   Reporter

	mu       sync.Mutex
	revoked  bool
	limits   []string // the Retry-After of each rate limit to answer next ("" none)
	requests []R
}

// FailNext429 makes the next request a rate limit with this Retry-After
// value ("" for none), answered as the provider answers one (see the
// stand-in's type).
func (a *api[R]) FailNext429(retryAfter string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.limits = append(a.limits, retryAfter)
}

// Revoke makes the credential refused from now on (401).
func (a *api[R]) Revoke() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.revoked = true
}

// Requests returns the requests so far.
func (a *api[R]) Requests() []R {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]R(nil), a.requests...)
}

// rateLimited takes the next rate limit asked for (FailNext429) and sets
// its Retry-After on w; false when none is due. The caller holds mu.
func (a *api[R]) rateLimited(w http.ResponseWriter) bool {
	if len(a.limits) == 0 {
		return false
	}
	ra := a.limits[0]
	a.limits = a.limits[1:]
	if ra != "" {
		w.Header().Set("Retry-After", ra)
	}
	return true
}

// bearer returns the token of authorization (an Authorization header
// value, "Bearer TOKEN") and whether it is want and not revoked. The
// caller holds mu.
func (a *api[R]) bearer(authorization, want string) (string, bool) {
	tok, ok := strings.CutPrefix(authorization, "Bearer ")
	return tok, ok && tok == want && !a.revoked
}
