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
