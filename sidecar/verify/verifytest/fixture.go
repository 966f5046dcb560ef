package verifytest

import (
	"net/http"
	"sort"
	"sync"
	"time"
)

// Delivery is one HTTP request as a provider sends it to a source.
type Delivery struct {
	// Method is the HTTP method; "" means POST.
	Method string
	// Header holds the request headers, exactly as the provider names them.
	Header http.Header
	// RawQuery is the query string without '?', as sent.
	RawQuery string
	// Body is the raw body.
	Body []byte
}

// Handshake is a provider's endpoint check and the answer it expects.
type Handshake struct {
	Delivery Delivery
	// Status and Body are what the source must answer (Body nil: any).
	Status int
	Body   []byte
}

// Cases are the deliveries every provider's tests replay, signed at one
// moment (Fixture.Cases' now) with the fixture's secrets.
type Cases struct {
	// Distinct are deliveries of different events that must become
	// different records (at least two; where it matters, events about one
	// object at one moment).
	Distinct []Delivery
	// Redelivery are the same event delivered again the way the provider
	// retries it (its retry headers, counters and re-signing): every one
	// must be a duplicate of the first (at least two; none with Nudges).
	Redelivery []Delivery
	// Nudges marks a provider whose deliveries only say "something
	// changed" in a body that is the same for every change (Dropbox, Mollie
	// classic): every delivery is a new event, so Distinct may hold
	// identical deliveries, each its own record, and Redelivery is empty
	// (a retry cannot be told from a new nudge).
	Nudges bool
	// Tampered is a delivery whose body was changed after signing: refused.
	Tampered Delivery
	// Handshakes are the provider's endpoint checks, answered without an
	// event (none for most providers).
	Handshakes []Handshake
	// EventsPerDelivery is how many events each Distinct delivery carries
	// (0 means 1; batch providers may carry more).
	EventsPerDelivery int
	// Reply is the body of the provider's own answer to every Distinct and
	// Redelivery delivery (verify.Result.Reply, Discord's deferred
	// interaction response), sent with the provider's accepted status
	// instead of claimd's receipts; nil when claimd's receipts answer them.
	Reply []byte
}

// Fixture is what a provider's tests need to drive a source of it end to
// end: its sources-file configuration and deliveries signed the way the
// provider signs them. A fixture is registered from the init function of
// the provider's file in this package (verifytest/<provider>.go); the
// generic tests (sidecar/verify and the real handler on PostgreSQL in
// sidecar/httpapi) replay every registered fixture.
type Fixture struct {
	// Type is the provider type (a verify.Type; this package does not
	// import verify, whose own tests use it).
	Type string
	// Secrets and Options configure the source as the sources file would
	// (Options with snake_case keys; nil when none).
	Secrets []string
	Options map[string]any
	// Setup, when set, starts what the fixture needs (a local JWKS server)
	// and returns Options to use instead of Options; it registers its own
	// cleanup with t.Cleanup.
	Setup func(t TB) map[string]any
	// Cases returns the deliveries, signed for the clock reading now.
	Cases func(now time.Time) Cases
}

// TB is the part of testing.TB fixtures use.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

var fixtures = struct {
	sync.Mutex
	byType map[string]Fixture
}{byType: map[string]Fixture{}}

// RegisterFixture adds f; it panics when f.Type has a fixture already or
// f.Cases is nil.
func RegisterFixture(f Fixture) {
	if f.Cases == nil {
		panic("verifytest.RegisterFixture: " + f.Type + ": Cases is required")
	}
	fixtures.Lock()
	defer fixtures.Unlock()
	if _, dup := fixtures.byType[f.Type]; dup {
		panic("verifytest.RegisterFixture: " + f.Type + " registered twice")
	}
	fixtures.byType[f.Type] = f
}

// Fixtures returns every registered fixture, sorted by Type.
func Fixtures() []Fixture {
	fixtures.Lock()
	defer fixtures.Unlock()
	out := make([]Fixture, 0, len(fixtures.byType))
	for _, f := range fixtures.byType {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out
}
