package verify

import (
	"fmt"
	"strconv"
)

// Code classifies a verification failure. Codes are stable; new ones may be
// added, none renamed.
type Code string

// Verification failure codes. Every failure is a client error (the request
// is not acceptable as sent), never a fault of ours.
const (
	// CodeMissingHeader: a required header is absent.
	CodeMissingHeader Code = "missing_header"
	// CodeMalformedHeader: a header (or the query string) is present but
	// cannot be parsed (a signature header without its timestamp, a
	// non-numeric timestamp, invalid percent-encoding, …).
	CodeMalformedHeader Code = "malformed_header"
	// CodeBadSignature: no signature (or shared token, or clientState) matches
	// any configured secret, or the request carries no signature of an
	// accepted scheme (Stripe v0 only, GitHub sha1 only).
	CodeBadSignature Code = "bad_signature"
	// CodeTimestampOutsideTolerance: the signed timestamp is further from the
	// clock than the configured tolerance (a stale replay or a future date).
	CodeTimestampOutsideTolerance Code = "timestamp_outside_tolerance"
	// CodeMalformedBody: the body is not the document the scheme requires
	// (not JSON, wrong shape).
	CodeMalformedBody Code = "malformed_body"
	// CodeMissingField: the body lacks a field needed for the event identity
	// (event id, subscription id, …).
	CodeMissingField Code = "missing_field"
	// CodeEventTypeNotAllowed: the event is authentic but its type is not in
	// the source's AllowedEventTypes.
	CodeEventTypeNotAllowed Code = "event_type_not_allowed"
)

// Location says where the field named by an [Error] is.
type Location string

// Field locations.
const (
	InHeader Location = "header" // Field is a header name
	InQuery  Location = "query"  // Field is a query parameter name
	InBody   Location = "body"   // Field is a JSON pointer (RFC 6901) into a JSON body, a form field name (optionally followed by a JSON pointer into that field's JSON value) for a form body, or "" for the body as a whole
)

// Error is a verification failure. It never contains a secret, a signature
// or body content other than an event type name (cut to 64 bytes), so it is
// safe to log and to return to the sender.
type Error struct {
	// Code classifies the failure.
	Code Code
	// In says where Field is.
	In Location
	// Field names the offending header, query parameter or body field (a
	// JSON pointer such as "/value/1/clientState").
	Field string
	// Reason is a short human explanation.
	Reason string
	// Authenticated reports that the request's signature was proven good
	// before the failure (an authentic event whose type is not allowed or
	// whose body lacks its id). Such a request came from the provider; a
	// retry will not change it, so an ingest endpoint may acknowledge it
	// (2xx, logged, nothing stored) rather than make the provider retry.
	// Always false for signature and replay-window failures.
	Authenticated bool

	// ambiguous: the body is JSON that decoders read differently
	// (strictjson.IsAmbiguous), not merely the wrong shape.
	ambiguous bool
}

// Error implements error: "verify: <code>: <location> <field>: <reason>".
func (e *Error) Error() string {
	loc := ""
	switch {
	case e.Field != "":
		loc = string(e.In) + " " + strconv.Quote(e.Field) + ": "
	case e.In != "":
		loc = string(e.In) + ": "
	}
	return fmt.Sprintf("verify: %s: %s%s", e.Code, loc, e.Reason)
}

// Is makes errors.Is(err, ErrBadSignature) and friends match on Code (and on
// In and Field when the target sets them).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	return t.Code == e.Code && (t.In == "" || t.In == e.In) && (t.Field == "" || t.Field == e.Field)
}

// Sentinels for errors.Is, one per [Code].
var (
	ErrMissingHeader             = &Error{Code: CodeMissingHeader}
	ErrMalformedHeader           = &Error{Code: CodeMalformedHeader}
	ErrBadSignature              = &Error{Code: CodeBadSignature}
	ErrTimestampOutsideTolerance = &Error{Code: CodeTimestampOutsideTolerance}
	ErrMalformedBody             = &Error{Code: CodeMalformedBody}
	ErrMissingField              = &Error{Code: CodeMissingField}
	ErrEventTypeNotAllowed       = &Error{Code: CodeEventTypeNotAllowed}
)

// ErrUnknownType matches (errors.Is) the error of [ParseType] and [New] for a
// scheme this package does not know.
var ErrUnknownType error = errUnknownType

var errUnknownType = &ConfigError{unknownType: true}

// ConfigError is an invalid configuration, returned by [New] (and by the
// providers' Build). It names the offending field ("Secrets[1]", "Tolerance", …)
// and never contains a secret.
type ConfigError struct {
	// Type is the scheme the config is for ("" when unknown).
	Type Type
	// Field is the config field, with an index for list elements.
	Field string
	// Reason says what is wrong and what is expected.
	Reason string

	unknownType bool
}

// Error implements error: "verify: <type> config: <field>: <reason>".
func (e *ConfigError) Error() string {
	t := string(e.Type)
	if t == "" {
		t = "verifier"
	}
	return fmt.Sprintf("verify: %s config: %s: %s", t, e.Field, e.Reason)
}

// Is matches [ErrUnknownType] for unknown-scheme errors.
func (e *ConfigError) Is(target error) bool {
	t, ok := target.(*ConfigError)
	return ok && t == errUnknownType && e.unknownType
}

func headerErr(code Code, name, reason string) *Error {
	return &Error{Code: code, In: InHeader, Field: name, Reason: reason}
}

func missingHeader(name string) *Error {
	return headerErr(CodeMissingHeader, name, "required header is absent")
}

func bodyErr(code Code, pointer, reason string) *Error {
	return &Error{Code: code, In: InBody, Field: pointer, Reason: reason}
}

// authenticated marks e as raised after a successful signature check.
func authenticated(e *Error) *Error {
	e.Authenticated = true
	return e
}
