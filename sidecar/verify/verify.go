// Package verify checks that an incoming webhook request really comes from the
// provider a source is configured for, and extracts the identity of the event
// it carries (the idempotency key the claim ledger needs).
//
// Every provider type is registered once ([Register], from the init function
// of the file that implements it) and sits behind one interface, [Verifier],
// built by [New] from the configuration every provider shares ([Core]) and
// the provider's own options struct. A verifier works on the raw body bytes exactly as
// they arrived (never a re-serialised or decompressed copy: signatures are
// computed over the bytes the provider sent) and on the request headers
// through the small [Header] interface, which net/http's http.Header
// satisfies; the package does not know any HTTP framework.
//
// Rules followed everywhere:
//   - fail closed: an unknown scheme, an unknown type or an empty secret list is
//     a configuration error, never an open door;
//   - secrets and signatures are compared in constant time (crypto/hmac.Equal);
//   - several secrets may be configured at once, so a secret can be rotated
//     without downtime: a request is accepted when any of them verifies;
//   - where the provider signs a timestamp, it must lie within a replay window
//     (Tolerance, default [DefaultTolerance]) of the injectable clock (Now);
//   - no error message contains a secret, a signature or body content (an
//     event type name excepted).
//
// A verification yields a [Result]: either one or more [Event]s (a batch
// provider such as Microsoft Graph or CloudEvents batch mode delivers several
// per request), or a [Handshake] to answer without creating any work (Slack
// url_verification, Microsoft Graph validationToken, Zoom
// endpoint.url_validation). Failures are *[Error] values with a stable [Code]
// and the header or body field they are about.
package verify

import (
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// DefaultTolerance is the replay window used when a config leaves Tolerance
// zero: a signed timestamp may be at most this far from the clock, in either
// direction. 300 s is the default of Stripe's libraries
// (https://docs.stripe.com/webhooks#verify-manually), the Standard Webhooks
// reference libraries
// (https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md#verifying-signatures)
// and Slack's documented window
// (https://api.slack.com/authentication/verifying-requests-from-slack).
const DefaultTolerance = 300 * time.Second

// Header is the read side of a request's headers. Get returns the first value
// of the named header or "" when it is absent; names are case-insensitive
// (RFC 9110 §5.1). http.Header satisfies it; a framework's header store can be
// adapted with [HeaderFunc]. When an http.Header holds non-canonical keys (a
// map literal rather than Add/Set), the lookup falls back to a
// case-insensitive scan.
type Header interface {
	Get(name string) string
}

// HeaderFunc adapts a lookup function to [Header], e.g. over a framework's
// request headers. The function must treat names case-insensitively and
// return "" for an absent header. Verifiers keep no reference to the request
// after Verify returns.
type HeaderFunc func(name string) string

// Get implements [Header].
func (f HeaderFunc) Get(name string) string { return f(name) }

// Request is what a verifier sees of an incoming webhook delivery.
type Request struct {
	// Method is the HTTP method; "" means POST. Only providers whose
	// [Provider.Methods] list GET or HEAD ever see those (a handshake).
	Method string
	// Header holds the request headers. A nil Header behaves as empty.
	Header Header
	// RawQuery is the request URL's query string exactly as received, without
	// the leading '?', not decoded (Microsoft Graph's validationToken and
	// Twilio's signed URL read it).
	RawQuery string
	// Body is the raw request body, byte for byte as received: not
	// decompressed, not re-encoded. Verifiers never modify it.
	Body []byte
}

// Verifier verifies one source's deliveries. Implementations are immutable
// after construction and safe for concurrent use.
type Verifier interface {
	// Type names the scheme this verifier implements.
	Type() Type
	// Verify checks r and returns the events it carries or the handshake to
	// answer. On failure the error is an *[Error]; nothing in the request may
	// then be trusted or stored (see [Error.Authenticated] for failures that
	// happen after the signature was proven good).
	Verify(r Request) (Result, error)
}

// Result is a successful verification: exactly one of Handshake or Events is
// set (Reply goes with Events only).
type Result struct {
	// Handshake, when non-nil, is a provider handshake or endpoint check to
	// answer as given; it creates no work and carries no event.
	Handshake *Handshake
	// Events are the verified events of the request, in body order: one for
	// most providers, several for batch deliveries.
	Events []Event
	// Reply, when non-nil, is the answer the provider expects, instead of
	// claimd's own receipt, for a delivery whose events were taken: its
	// Status, Header and Body are sent as they are once every event of the
	// delivery was stored (or claimed: won) or found a duplicate of one
	// already taken. A delivery that is not taken keeps claimd's answer
	// whatever Reply says: a refusal, an event in progress or not yet due
	// for a retry (503), a conflict, an error of claimd's, so the provider
	// retries or an operator sees it. A provider whose protocol wants the
	// answer to say something about the event sets it (Discord's
	// interactions: a deferred interaction response, see discord.go); nil
	// for the others. Its Header should hold Content-Type.
	Reply *Handshake
	// Nonce, when non-nil, is a one-time value the provider signs once per
	// delivery (Mailgun's signature token), for the caller's replay check:
	// where the signature does not cover the whole body (Mailgun signs
	// timestamp + token only, not event-data), a captured signature could
	// otherwise carry any other body until its timestamp leaves the
	// tolerance. The caller must refuse a second delivery of the same
	// nonce within Nonce.TTL unless it is the same delivery again (a
	// provider retry resending the same body with the same signature is
	// answered as the duplicate it is). Nonce.Value is a credential: never
	// log it or store it in clear (a store keeps its SHA-256). nil for
	// providers that sign no such value.
	Nonce *Nonce
	// Rejected lists the items of a batch delivery that failed on their own
	// (for instance a Microsoft Graph notification whose clientState does not
	// match) while others in the same request were accepted. Each item is
	// named by its index in the batch. When every item fails, Verify returns
	// an error instead.
	Rejected []ItemError
}

// Nonce is a value a provider signs once per delivery (see [Result.Nonce]).
type Nonce struct {
	// Value is the nonce as the provider sent it (a credential: never
	// logged, stored only as a hash). Never empty.
	Value string
	// TTL is how long after verification a second delivery of Value must
	// still be recognised: at least as long as the signature carrying it
	// verifies (for a signed timestamp, the tolerance on either side of
	// it, so twice the tolerance) plus a margin for clock skew. Positive.
	TTL time.Duration
	// In and Field name where the nonce was read, for the refusal of a
	// replay: an *[Error] with [CodeBadSignature], In and Field.
	In    Location
	Field string
}

// IsHandshake reports whether r is a handshake to answer without creating
// work.
func (r Result) IsHandshake() bool { return r.Handshake != nil }

// Handshake is a response to send back verbatim: Status, the headers in Header
// (Content-Type at least) and Body.
type Handshake struct {
	// Status is the HTTP status code to answer with (200).
	Status int
	// Header holds the response headers to set, at least Content-Type.
	Header http.Header
	// Body is the exact response body.
	Body []byte
}

// Event is the identity of one verified provider event.
type Event struct {
	// ID is the provider's event or delivery identifier to use as event_id
	// of the claim (the idempotency key within the source). Where the
	// provider's id is only unique within a scope or a pair of fields, ID is
	// already the unambiguous composite (see [JoinKey]). Never empty.
	ID string
	// Type is the provider's event type (Stripe "customer.created", GitHub
	// X-GitHub-Event, Shopify topic, Graph changeType…), or "" when the
	// scheme carries none.
	Type string
	// Scope is the provider-side account the event belongs to, when the
	// provider names one (Stripe Connect account, Shopify shop domain, Slack
	// team id, Graph tenant id). Informational: where it is needed for
	// uniqueness it is already part of ID.
	Scope string
	// ObjectID is the id of the object the event is about, when known (Stripe
	// data.object.id, Graph resourceData.id, CloudEvents subject, …). It is
	// informational and never a dedupe key by itself.
	ObjectID string
	// ObjectVersion is the object's version when the source provides one
	// (generic schemes with ObjectVersionPointer), for out-of-order protection.
	ObjectVersion *int64
	// Timestamp is the signed delivery timestamp, or the zero time when the
	// scheme signs none.
	Timestamp time.Time
	// Digest reports that ID is a digest this package derived ("sha256:"
	// and hex, from a body or its parameters), not an id the provider sent:
	// a store that keeps provider ids as they are but stands a hash in for
	// those it cannot keep (too long, not UTF-8) must not take such an id
	// for one of its own stand-ins.
	Digest bool
	// Payload is this event's own JSON, a copy owned by the Event, when the
	// request carries a batch (a Graph notification, a CloudEvents batch
	// item); nil means the event is the whole request body.
	Payload []byte
}

// ItemError is the failure of one item of a batch delivery.
type ItemError struct {
	// Index is the item's zero-based position in the batch.
	Index int
	// Err is an *[Error] naming the field as a JSON pointer into the body.
	Err error
}

// Type names a provider type: a registered [Provider] (see [Register]).
type Type string

// The provider types implemented in this package's own files; every other
// registered type is just its [Provider.Type].
const (
	TypeStripe           Type = "stripe"            // stripe.go
	TypeGitHub           Type = "github"            // github.go
	TypeStandardWebhooks Type = "standard-webhooks" // standardwebhooks.go
	TypeShopify          Type = "shopify"           // shopify.go
	TypeSlack            Type = "slack"             // slack.go
	TypeMSGraph          Type = "msgraph"           // msgraph.go
	TypeCloudEvents      Type = "cloudevents"       // cloudevents.go, [CloudEventsOptions]
	TypeHMAC             Type = "hmac"              // generic.go, [HMACOptions]
	TypeToken            Type = "token"             // token.go, [TokenOptions]
	TypePaddle           Type = "paddle"            // paddle.go
	TypeZoom             Type = "zoom"              // zoom.go
	TypeTwilio           Type = "twilio"            // twilio.go, [TwilioOptions]
)

// Types lists every registered provider type, sorted.
func Types() []Type {
	ps := Providers()
	ts := make([]Type, len(ps))
	for i, p := range ps {
		ts[i] = p.Type
	}
	return ts
}

// ParseType returns the registered Type named s (exact, lower-case
// spelling as in [Types]). Anything else is an error matching
// [ErrUnknownType]: unknown providers fail closed.
func ParseType(s string) (Type, error) {
	if _, ok := Lookup(Type(s)); ok {
		return Type(s), nil
	}
	return "", unknownType(s)
}

// unknownType does not repeat s: a secret pasted in the wrong place must
// not reach an error or a log.
func unknownType(s string) *ConfigError {
	return &ConfigError{Field: "Type", Reason: "unknown verification type (known: " + typeList() + ")", unknownType: true}
}

func typeList() string {
	ts := Types()
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = string(t)
	}
	return strings.Join(s, ", ")
}

// New builds the verifier of a source of provider type t:
//
//   - core is what every provider shares (secrets, tolerance, allowed event
//     types, clock); New applies [Core.WithDefaults] (with the provider's
//     [Provider.DefaultTolerance]) and [Core.Validate]
//     (secrets may be empty only where [Provider.SecretsOptional]);
//   - opts is the provider's options struct, the type [Provider.Options]
//     returns (a pointer, or the struct by value); nil means its zero
//     value. It must be nil for a provider without options.
//
// Then the provider's Build validates what it uses. Every error is a
// *[ConfigError] naming the field: "Secrets[1]", "Tolerance",
// "AllowedEventTypes[0]", "Options" (opts of the wrong type), or a field of
// the options struct by its Go path ("Signature.Header", "Key.IDHeader").
// An unregistered t matches [ErrUnknownType].
func New(t Type, core Core, opts any) (Verifier, error) {
	p, ok := Lookup(t)
	if !ok {
		return nil, unknownType(string(t))
	}
	return p.New(core, opts)
}

// New builds the verifier of a source of p, as [New] does for a registered
// type.
func (p *Provider) New(core Core, opts any) (Verifier, error) {
	t := p.Type
	opts, err := p.options(opts)
	if err != nil {
		return nil, err
	}
	core = core.WithDefaults(p.DefaultTolerance)
	if err := core.Validate(t, p.SecretsOptional); err != nil {
		return nil, err
	}
	return p.Build(core, opts)
}

// options returns opts as the pointer Build expects: p.Options() when nil,
// a pointer to a copy when given by value.
func (p *Provider) options(opts any) (any, error) {
	if p.Options == nil {
		if opts != nil {
			return nil, &ConfigError{Type: p.Type, Field: "Options", Reason: "provider " + string(p.Type) + " takes no options"}
		}
		return nil, nil
	}
	want := p.Options()
	if opts == nil {
		return want, nil
	}
	wt, got := reflect.TypeOf(want), reflect.ValueOf(opts)
	switch {
	case got.Type() == wt:
		if got.Kind() == reflect.Pointer && got.IsNil() {
			return want, nil
		}
		return opts, nil
	case wt.Kind() == reflect.Pointer && got.Type() == wt.Elem():
		ptr := reflect.New(wt.Elem())
		ptr.Elem().Set(got)
		return ptr.Interface(), nil
	}
	return nil, &ConfigError{Type: p.Type, Field: "Options", Reason: "must be a " + wt.String()}
}

// JoinKey joins parts into one unambiguous key: each part is written as its
// length in bytes, ':' and the part itself, and parts are separated by '|'.
// So ("abc", "de") gives "3:abc|2:de", and ("a:b", "c") and ("a", "b:c") give
// "3:a:b|1:c" and "1:a|3:b:c", which can never collide whatever the parts
// contain. The encoding is identical to the claim ledger's composite event
// ids, so a key joined here equals the one the sidecar derives from the same
// key_parts. JoinKey() is "".
func JoinKey(parts ...string) string {
	n := 0
	for _, p := range parts {
		n += len(p) + 4
	}
	var b strings.Builder
	b.Grow(n)
	for i, p := range parts {
		if i > 0 {
			b.WriteByte('|')
		}
		b.WriteString(strconv.Itoa(len(p)))
		b.WriteByte(':')
		b.WriteString(p)
	}
	return b.String()
}

// header returns the trimmed first value of name, or "".
func header(h Header, name string) string {
	if h == nil {
		return ""
	}
	if v := h.Get(name); v != "" {
		return strings.TrimSpace(v)
	}
	if hh, ok := h.(http.Header); ok {
		for k, vs := range hh {
			if len(vs) > 0 && strings.EqualFold(k, name) {
				return strings.TrimSpace(vs[0])
			}
		}
	}
	return ""
}
