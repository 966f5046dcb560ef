// Package apperr is the one application error type of the sidecar. Domain
// packages return *Error with a stable Code; the HTTP transport maps codes to
// statuses in a single table. Anything that is not an *Error is an internal
// fault: logged in full, answered with a generic message and a 5xx.
package apperr

import (
	"errors"
	"fmt"
	"time"
)

// Code is a stable, machine-readable error code. Codes are part of the wire
// contract: they may be added, never renamed.
type Code string

// Error codes.
const (
	// Malformed: the body is not valid JSON or a field has the wrong JSON
	// type or is unknown (400).
	Malformed Code = "malformed"
	// Invalid: a field fails validation (422).
	Invalid Code = "invalid"
	// Unauthorized: missing, unknown or revoked API key (401).
	Unauthorized Code = "unauthorized"
	// RateLimited: too many failed authentications from the caller's
	// address; nothing was checked, retry after RetryAfter (429).
	RateLimited Code = "rate_limited"
	// Forbidden: a console form that fails its CSRF checks: its token is
	// missing or wrong, or the browser says it was sent from another site
	// (403). Nothing was done.
	Forbidden Code = "forbidden"
	// NotFound: no such record for this tenant (404). Another tenant's record
	// is reported exactly like a missing one.
	NotFound Code = "not_found"
	// LeaseLost: the claim token is not the current one, the lease was
	// reclaimed by another holder or the record left the processing state (409).
	LeaseLost Code = "lease_lost"
	// ReconcileTokenStale: a reconciler's answer whose reconcile token is
	// not the call in flight for the claim: that call was answered,
	// failed or passed its deadline, or a later call was made (409).
	// Nothing was written.
	ReconcileTokenStale Code = "reconcile_token_stale"
	// InvalidState: the operation does not apply to the record's state, e.g.
	// resolving a completed record (409).
	InvalidState Code = "invalid_state"
	// TooLarge: the request body exceeds the limit of its route (413):
	// CLAIMD_BODY_LIMIT_BYTES on /v1, the source's max_body_bytes on
	// /ingest/{source}. Nothing was stored. Clients should also accept
	// "too_large", the name older sidecars answer it under.
	TooLarge Code = "body_too_large"
	// BadRequest: the request is not well-formed HTTP/1.1 (400): a request
	// line or header the server cannot parse, or framing RFC 9112 section
	// 6.3 makes ambiguous (Content-Length together with
	// Transfer-Encoding, two different Content-Length values, a transfer
	// coding other than chunked, obsolete line folding). The connection is
	// closed after the answer.
	BadRequest Code = "bad_request"
	// HeaderTooLarge: the request line and headers exceed
	// CLAIMD_MAX_HEADER_BYTES (431). The connection is closed.
	HeaderTooLarge Code = "header_too_large"
	// RequestTimeout: the request's headers and body did not arrive
	// within CLAIMD_READ_TIMEOUT_SECONDS (408). The connection is closed.
	RequestTimeout Code = "request_timeout"
	// MethodNotAllowed: the route exists but not for this method (405).
	MethodNotAllowed Code = "method_not_allowed"
	// UnsupportedEncoding: the request carries a Content-Encoding this
	// route does not take (415). Nothing was stored.
	UnsupportedEncoding Code = "unsupported_encoding"
	// NotStored: an authentic provider delivery that cannot be stored as
	// sent: its body is ambiguous JSON (duplicate or case-variant member
	// names, invalid UTF-8, unpaired surrogates) or lacks the fields its
	// source's key rule needs (422). Nothing was stored; the provider shows
	// the refusal and retries, and a retry is stored once the body or the
	// source's key rule is fixed. Never answered 2xx: a provider that got a
	// 2xx would not send the event again.
	NotStored Code = "not_stored"
	// Unavailable: a dependency (PostgreSQL) is unreachable; retry later (503).
	Unavailable Code = "unavailable"
	// Internal: our own fault (500).
	Internal Code = "internal"
)

// Error is an application error with a stable code, a human message safe to
// show to the caller, and optionally the request field it is about.
type Error struct {
	Code    Code
	Message string
	// Field names the offending request field (JSON name, dotted path for
	// nested fields, e.g. "claims[3].source"), when there is one.
	Field string
	// Err is the underlying cause; never shown to callers.
	Err error
	// RetryAfter, when positive, is how long the caller should wait before
	// asking again (RateLimited); the transport sends it as Retry-After in
	// whole seconds, rounded up.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s: %s: %s", e.Code, e.Field, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// New returns an *Error with code and message.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Field returns an Invalid error about one request field.
func Field(field, format string, args ...any) *Error {
	return &Error{Code: Invalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of err: the Code of the first *Error in its chain,
// or Internal for any other non-nil error, or "" for nil.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Internal
}

// As returns the first *Error in err's chain, or nil.
func As(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}
