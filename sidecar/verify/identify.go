package verify

import "errors"

// Identifier is implemented by the verifiers whose events can also be
// identified from a copy of the event that the provider's own API returns
// (an events list, a delivery log) rather than from a signed delivery:
// Stripe, GitHub and Square. Identify is the identity half of Verify, the
// very code Verify runs once the signature is proven: the same key, the
// same type, the same allowed_event_types filter. Gap detection and
// backfill (package backfill) key the events a provider lists through it,
// so a backfilled event is keyed exactly as its real delivery would be.
//
// h holds the delivery headers where the provider's API returns them
// (GitHub's delivery detail: X-GitHub-Delivery, X-GitHub-Event), nil
// otherwise; body is the event's JSON. Errors are authenticated *[Error]
// values naming the field (the caller vouches for the copy: it fetched it
// from the provider over TLS with its own credential).
type Identifier interface {
	Identify(h Header, body []byte) (Result, error)
}

// ErrNoIdentify is returned by [Identify] for a verifier that cannot
// identify an event without its signed delivery.
var ErrNoIdentify = errors.New("this provider's events cannot be identified from its API's copy")

// Identify runs v's [Identifier] over a provider-supplied copy of an
// event, or returns [ErrNoIdentify]. A nil h reads as no headers.
func Identify(v Verifier, h Header, body []byte) (Result, error) {
	id, ok := v.(Identifier)
	if !ok {
		return Result{}, ErrNoIdentify
	}
	if h == nil {
		h = HeaderFunc(func(string) string { return "" })
	}
	return id.Identify(h, body)
}
