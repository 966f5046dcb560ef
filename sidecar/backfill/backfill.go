// Package backfill finds the events a provider holds that never reached
// claimd (gap detection) and recovers them (backfill).
//
// Contract. A scan of a source lists the events its provider's own API
// returns for the account over a window, [max(last scan − overlap,
// now − window), now − grace) (Window; and its backlog, below): Stripe's GET /v1/events
// (https://docs.stripe.com/api/events/list), GitHub's hook deliveries
// (https://docs.github.com/rest/webhooks/repo-deliveries), Square's
// SearchEvents (https://developer.squareup.com/reference/square/events-api/SearchEvents).
// Every listed event is keyed by the source's own rules, through the
// verifier's identity half and the source's key rule
// (sources.Source.IdentifyUnsigned): never by a key builder of its own, so
// a backfilled event and its real delivery share one key. An event whose
// key the ledger does not hold is missed; a scan then, by the source's
// mode, only reports it, fetches the provider's copy and stores it as an
// inbox event of origin backfill (dispatched once, with
// X-Idempotency-Origin: backfill), or asks the provider to redeliver it
// (GitHub), whose signed delivery then enters through the normal door.
// The late real delivery of a backfilled event is a duplicate, also when
// the provider rendered the event otherwise (claim.ReceiveBackfilledTx).
//
// Windows: younger than grace, an event is not judged (its delivery may
// be in flight); older than the provider's window, it cannot be listed.
//
// Credentials: a source's backfill.credentials are read keys of the
// provider's API (sources.Secret). They travel in one request header and
// nowhere else: never logged, stored, or put in an error or an answer;
// a provider's 4xx body (Stripe's quotes part of the key) is never read
// into an error or a log line, only its status and request id header.
//
// Pages and the backlog: a scan reads at most backfill.max_pages pages.
// One that stops there ends partial, not error: the lists are newest
// first, so everything created after the oldest event it reached is
// covered; the cursor moves past it, and the rest is the source's
// backlog (backfill_state.backlog_from/to, and for GitHub, which has no
// time filter, backlog_cursor: the rel="next" URL's path and query, never
// a host or a credential, followed again only as this hook's list on the
// API's own origin). Later scans list the new part first and spend the
// pages left on the backlog until it is done; a backlog part that left
// the provider's window is dropped and the scan's notes say so. A scan
// judges only events created in the range it asked for, also when the
// provider ignores the filter.
//
// Recorded misses: a scan in a mode that recovers (fetch, redeliver,
// auto) reaches back to the oldest event recorded missed (by a report
// scan) still inside the window, so relisting recovers it; older ones
// stay missed and the scan's notes count them.
//
// Rate limits: a 429 (GitHub also a 403 with x-ratelimit-remaining: 0)
// waits Retry-After, else GitHub's x-ratelimit-reset, else a capped
// exponential backoff with full jitter, and tries again; a scan's total
// wait is bounded by backfill.max_wait_seconds, after which it ends
// rate_limited without advancing its cursor.
//
// Other failures: a 5xx, and a call without an answer that may pass
// (timeout, connection refused or reset, an answer cut short or not
// HTTP), are tried ServerTries times in all after a capped exponential
// backoff outside the rate-limit budget; then, or at once for a name that
// does not resolve or a refused TLS handshake, the scan ends error with a
// fixed text ("the provider's API answered HTTP 503 (3 tries)", or the
// failure class's: TransportError, Class*), never rate_limited. The
// class is the code_class of the provider request metric.
package backfill

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"
)

// Range is the half-open creation-time range [From, To) a scan lists.
type Range struct {
	From, To time.Time
	// Cursor, when not empty, is where the list resumes: the provider's
	// own pagination cursor (GitHub: the path and query of a Link
	// rel="next" URL, on the API's own origin), as a Page's Next gave it.
	// Empty: the list starts at its newest event.
	Cursor string
}

// Item is one event a provider lists.
type Item struct {
	// ProviderID is the provider's id of the event (Stripe evt_…, Square
	// event_id) or of the delivery (GitHub's guid).
	ProviderID string
	// DeliveryID is GitHub's numeric delivery id (for the detail and
	// redelivery calls); zero elsewhere.
	DeliveryID int64
	// Type is the event type as listed.
	Type string
	// CreatedAt is when the provider created the event (GitHub: delivered_at).
	CreatedAt time.Time
	// Failed is the provider's word that the delivery failed, shown, never
	// trusted (a 2xx from a proxy that lost the event is still missed).
	Failed bool
	// Body is the event's JSON when the list carries it (Stripe, Square);
	// nil when it must be fetched (GitHub).
	Body []byte
	// Header holds the delivery headers the list names (GitHub: the
	// guid as X-GitHub-Delivery, the event as X-GitHub-Event), nil else.
	Header http.Header
}

// Page is one page of a list.
type Page struct {
	// Items are the page's events created in the listed range.
	Items []Item
	// More reports that the list has a page after this one within the
	// range (a provider that ignores the range's lower bound is cut at
	// its first older event: the lists are newest first).
	More bool
	// Next is the cursor of the page after this one (Range.Cursor) where
	// the provider has no time filter to resume by (GitHub); "" else.
	Next string
	// Oldest is the oldest creation time of the page's rows, in the
	// range or not (zero for an empty page): with the list newest first,
	// everything created in [Oldest + 1 s, range end) has been listed
	// once this page is (the provider's times have whole seconds; the
	// second of Oldest may go on on the next page).
	Oldest time.Time
}

// see records a row created at at in p.Oldest and says where it stands
// against r, the lists being newest first: in [r.From, r.To) it is
// judged (in); before r.From the list has passed r (past: it ends after
// this page); at or after r.To it is neither (within the grace, or listed
// by another part of the scan).
func (p *Page) see(at time.Time, r Range) (in, past bool) {
	if p.Oldest.IsZero() || at.Before(p.Oldest) {
		p.Oldest = at
	}
	if at.Before(r.From) {
		return false, true
	}
	return at.Before(r.To), false
}

// Lister reads one provider's event list for one source.
type Lister interface {
	// List calls fn with each page of the events created in r, newest
	// first, from r.Cursor when it is set, until the list ends (a page
	// without More) or fn returns an error (returned as is).
	List(ctx context.Context, r Range, fn func(Page) error) error
	// Fetch returns the event's body and the delivery headers to key and
	// store it with (nil headers where the provider has none).
	Fetch(ctx context.Context, it Item) (body []byte, hdr http.Header, err error)
	// Redeliver asks the provider to deliver the event again to the
	// source's endpoint; ErrNoRedelivery where it cannot.
	Redeliver(ctx context.Context, it Item) error
	// CanRedeliver reports whether Redeliver may succeed for it now.
	CanRedeliver(it Item, now time.Time) bool
}

// Errors of a provider call. Their texts are fixed: they never quote a
// provider's answer or a credential.
var (
	// ErrNoRedelivery: the provider offers no redelivery of this event.
	ErrNoRedelivery = errors.New("the provider offers no redelivery of this event")
	// ErrCredentialRefused: the provider refused the backfill credential
	// (401, 403 without a rate limit, GitHub's 404 for a token without
	// access).
	ErrCredentialRefused = errors.New("the provider refused the backfill credential: check backfill.credentials (a read key of the provider's API) and its permissions")
	// ErrRateLimited: the scan's rate-limit wait budget (max_wait_seconds)
	// is spent.
	ErrRateLimited = errors.New("the provider's rate limit outlasted backfill.max_wait_seconds")
)

// ProviderError is an unexpected answer of the provider's API: its status
// only (the body is never read into it), and for a 5xx how many times the
// call was made (ServerTries).
type ProviderError struct {
	Status int
	Tries  int
}

func (e *ProviderError) Error() string {
	s := "the provider's API answered HTTP " + strconv.Itoa(e.Status)
	if e.Tries > 1 {
		s += " (" + strconv.Itoa(e.Tries) + " tries)"
	}
	return s
}

// Observer receives scan events for metrics (claimd_backfill_*).
type Observer interface {
	// Scanned is a finished scan of source with its result.
	Scanned(source, result string, at time.Time)
	// Missed counts events found missed.
	Missed(source string, n int)
	// Recovered counts events recovered, how = fetched | redelivered.
	Recovered(source, how string, n int)
	// ProviderRequest is one call to the provider's API, by status class
	// ("2xx", "4xx", "429", "5xx"), or for a call without an HTTP answer
	// by failure class ("timeout", "unreachable", "dns", "tls",
	// "unreadable", "error": the Class* constants).
	ProviderRequest(source, codeClass string)
}

type nopObserver struct{}

func (nopObserver) Scanned(string, string, time.Time) {}
func (nopObserver) Missed(string, int)                {}
func (nopObserver) Recovered(string, string, int)     {}
func (nopObserver) ProviderRequest(string, string)    {}
