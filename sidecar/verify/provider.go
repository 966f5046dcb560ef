package verify

import (
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"
)

// Provider is everything claimd knows of one provider type: how to verify
// its deliveries, which headers carry its credentials, what it sends besides
// POST, what it expects back, which fields change on every retry, and how it
// redelivers (the provider table of sidecar/docs/ingest.md is generated
// from it). A provider is registered once, from the init function of the
// file that implements it, with [Register]; nothing else in claimd
// switches on provider types.
type Provider struct {
	// Type is the name written in a source's `provider:` (lower case, digits
	// and '-'). Required, unique.
	Type Type
	// Name is the provider's own name for people ("Stripe", "Google Cloud
	// Pub/Sub push"). Required.
	Name string
	// Docs are the documentation pages the implementation follows (https
	// URLs), the verification page first. At least one.
	Docs []string
	// Options returns a new pointer to the provider's own options struct,
	// which a source's `options` (snake_case keys for the struct's fields)
	// is decoded into before Build; nil when the provider takes no options.
	Options func() any
	// Build returns the verifier for a source: core holds what every
	// provider shares, opts the value Options returned, decoded (nil when
	// Options is nil). Build is called by [Provider.New] (and [New]) only,
	// and core arrives defaulted AND validated: New applies
	// [Core.WithDefaults] with DefaultTolerance (Tolerance, Now and
	// HTTPClient are set) and then [Core.Validate] with SecretsOptional
	// (the secrets, the tolerance and the event-type patterns are sound),
	// so Build does neither again. It checks only what is its own (the
	// options, the form a provider wants of a secret) and returns a
	// *[ConfigError] naming the field (Field "Secrets[0]", or the options
	// struct's Go field path such as "Key.IDHeader") on a bad
	// configuration.
	Build func(core Core, opts any) (Verifier, error)
	// SecretsOptional is true for a provider that can be configured without
	// shared secrets (its keys come from options: a public key, a JWKS);
	// otherwise Build is never called with an empty Secrets.
	SecretsOptional bool
	// SignsTimestamp is true for a provider whose deliveries carry a signed
	// timestamp checked against Core.Tolerance: a source's
	// tolerance_seconds is refused for any other (it would protect
	// nothing).
	SignsTimestamp bool
	// DefaultTolerance is the replay window of a source that sets none
	// (tolerance_seconds), where the provider documents one of its own;
	// zero means the package's [DefaultTolerance] (300 s). [New] applies
	// it before Build.
	DefaultTolerance time.Duration
	// CredentialHeaders returns the names of the headers that carry the
	// provider's signature or shared token for a source with these options
	// (opts as for Build): they are never stored or forwarded. Nil when the
	// provider authenticates in the body or the query only.
	CredentialHeaders func(opts any) []string
	// CredentialQueryParams returns the names of the query parameters that
	// carry the provider's shared token for a source with these options
	// (opts as for Build): Mollie's classic webhookUrl token, Pub/Sub's
	// query_token, Meta's hub.verify_token. Query parameter names are
	// case-sensitive. claimd never stores, logs, forwards or echoes them:
	// they are removed from every header value that repeats the request
	// URL (a proxy's X-Original-URL, a Referer) before it is stored and
	// forwarded, and the trigger route names them for the n8n node to
	// leave out of its items. Nil when no credential travels in the query.
	CredentialQueryParams func(opts any) []string
	// Methods lists the HTTP methods the provider sends besides POST (GET
	// for Meta's hub.challenge, HEAD for Trello's URL check). Requests with
	// them reach Verify, which must answer them with a Handshake or an
	// error; they never carry events.
	Methods []string
	// AcceptedStatus is the 2xx the provider expects for a delivery whose
	// events were taken; zero means 200.
	AcceptedStatus int
	// VolatileFields are JSON pointers the provider changes on every retry
	// of one event (Stripe's /pending_webhooks): left out of the payload
	// hash by default, so a retry is a duplicate, not a conflict. A source's
	// own volatile_fields are added to them.
	VolatileFields []string
	// RetryHeaders are the lower-case names of the headers the provider
	// sets on a retry of a delivery to say so (Square's
	// square-retry-number and square-retry-reason). Their values are the
	// delivery log's evidence of a provider retry (sources.Event's
	// Request.RetrySignal); nil when the provider sends none.
	RetryHeaders []string
	// Redelivery is how the provider retries and names events, for the
	// provider table of sidecar/docs/ingest.md#durable-ingest-providers-post-to-the-sidecar.
	// Required.
	Redelivery Redelivery
	// Setup is what a user configuring a source needs beyond the options
	// (listed from the Options struct's tags, see [Provider.OptionList]),
	// for sidecar/docs/ingest.md#configuring-each-provider. Required.
	Setup Setup
}

// Setup says how a source of a provider is configured.
type Setup struct {
	// Secrets says what a source's `secrets` hold for the provider and
	// where the user finds it in the provider's dashboard or API ("the
	// endpoint's signing secret (whsec_…), Dashboard → Developers →
	// Webhooks"), or, for a provider whose secrets are optional
	// (SecretsOptional), when they may be left out and what replaces them
	// ("none: …"). Required.
	Secrets string
}

// Redelivery is what a provider documents about identity and retries.
type Redelivery struct {
	// Key says which field or header the event's id (Event.ID) comes from,
	// e.g. "event `id` (Connect: `account` + `id`)".
	Key string
	// Retries says whether and for how long the provider retries an
	// unanswered delivery, e.g. "up to 3 days, exponential backoff".
	Retries string
	// Horizon says how long the id is unique: "forever", "within a day"…;
	// and what claimd makes of it (a key that folds in the day).
	Horizon string
	// Batches says whether one request carries several events and how they
	// are split ("no" when it never does).
	Batches string
	// Resends says whether the provider can send one fact again under a
	// new id, and the documented second-line business key to claim on
	// ("no" when it does not).
	Resends string
}

// Core is the configuration every provider shares, from a source's
// secrets, tolerance_seconds and allowed_event_types.
type Core struct {
	// Secrets are the shared secrets or tokens; several may be active
	// during rotation. Validated by [Provider.New] (see [Core.Validate])
	// before Build.
	Secrets []string
	// Tolerance is the replay window for signed timestamps; zero means the
	// provider's documented default (or [DefaultTolerance]).
	Tolerance time.Duration
	// AllowedEventTypes restricts accepted event types (exact, "*" or a
	// "prefix*" pattern); empty allows all.
	AllowedEventTypes []string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// HTTPClient fetches key sets from URLs (a JWKS); nil means a client
	// with a 10 s timeout.
	HTTPClient *http.Client
}

// WithDefaults returns c with Tolerance (to def when zero, or
// DefaultTolerance when def is zero too), Now and HTTPClient set.
func (c Core) WithDefaults(def time.Duration) Core {
	if c.Tolerance == 0 {
		c.Tolerance = def
	}
	c.Tolerance = defaultTolerance(c.Tolerance)
	c.Now = defaultNow(c.Now)
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	return c
}

// Validate checks the shared fields for provider t: the secrets (unless
// optional and absent), the tolerance and the event-type patterns, and
// returns the first problem as a *[ConfigError].
func (c Core) Validate(t Type, secretsOptional bool) error {
	if !(secretsOptional && len(c.Secrets) == 0) {
		if err := validateSecrets(t, "Secrets", c.Secrets); err != nil {
			return err
		}
	}
	if err := validateTolerance(t, c.Tolerance); err != nil {
		return err
	}
	return validateAllowed(t, c.AllowedEventTypes)
}

// Types filters event types by c.AllowedEventTypes.
func (c Core) Types() TypeFilter { return TypeFilter{newTypeFilter(c.AllowedEventTypes)} }

// TypeFilter applies a source's allowed_event_types.
type TypeFilter struct{ f typeFilter }

// Check returns an authenticated event_type_not_allowed *[Error] naming
// field (in the header or body, as in says) when eventType is not allowed,
// or nil.
func (f TypeFilter) Check(eventType string, in Location, field string) error {
	return f.f.check(eventType, in, field)
}

var registry = struct {
	sync.RWMutex
	byType map[Type]*Provider
}{byType: map[Type]*Provider{}}

// Register adds p to the providers claimd knows. It panics on a missing
// required field or a Type registered twice: both are programming errors
// found by any test run.
func Register(p Provider) {
	switch {
	case p.Type == "" || !typeNameOK(string(p.Type)):
		panic("verify.Register: bad Type " + strconv.Quote(string(p.Type)))
	case p.Name == "" || len(p.Docs) == 0 || p.Build == nil:
		panic("verify.Register: " + string(p.Type) + ": Name, Docs and Build are required")
	case p.Redelivery.Key == "" || p.Redelivery.Retries == "" || p.Redelivery.Horizon == "" ||
		p.Redelivery.Batches == "" || p.Redelivery.Resends == "":
		panic("verify.Register: " + string(p.Type) + ": every Redelivery field is required")
	case p.Setup.Secrets == "":
		panic("verify.Register: " + string(p.Type) + ": Setup.Secrets is required")
	}
	for _, m := range p.Methods {
		if m != http.MethodGet && m != http.MethodHead {
			panic("verify.Register: " + string(p.Type) + ": Methods may hold GET and HEAD only")
		}
	}
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.byType[p.Type]; dup {
		panic("verify.Register: " + string(p.Type) + " registered twice")
	}
	cp := p
	cp.Docs = slices.Clone(p.Docs)
	cp.Methods = slices.Clone(p.Methods)
	cp.VolatileFields = slices.Clone(p.VolatileFields)
	registry.byType[p.Type] = &cp
}

func typeNameOK(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0) {
			return false
		}
	}
	return true
}

// Lookup returns the registered provider of type t.
func Lookup(t Type) (*Provider, bool) {
	registry.RLock()
	defer registry.RUnlock()
	p, ok := registry.byType[t]
	return p, ok
}

// Providers returns every registered provider, sorted by Type.
func Providers() []*Provider {
	registry.RLock()
	defer registry.RUnlock()
	out := make([]*Provider, 0, len(registry.byType))
	for _, p := range registry.byType {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out
}
