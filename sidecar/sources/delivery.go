package sources

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// A source's rules, in one place for every door a delivery comes through:
// POST /ingest/{source} (the provider posts to claimd, which stores the
// events) and POST /v1/trigger/{source} (the provider posts to n8n, whose
// trigger node hands the request to claimd, which claims the events).
// Source.Verify runs them in order: the Content-Encoding check, the
// signature over the raw bytes with the replay window, handshakes, the
// batch items refused on their own, the key rule, and the payload hash.
// What the door then does with the events (store, claim) and how it
// answers is the door's.

// Delivery is one provider request as it arrived, whatever door it came
// through. Verify only reads it.
type Delivery struct {
	// Method is the HTTP method; "" means POST. Any other reaches the
	// verifier only when the source's provider lists it (Source.Methods):
	// a handshake, never an event.
	Method string
	// Header returns every value of the named header (case-insensitive
	// name) in arrival order; nil or empty when it is absent.
	Header func(name string) []string
	// RawQuery is the request URL's query string exactly as received,
	// without the leading '?', not decoded.
	RawQuery string
	// Body is the raw request body, byte for byte as received (at most
	// the source's MaxBodyBytes: the door bounds it).
	Body []byte
}

// Verified is a delivery that passed its source's rules: either a
// handshake to answer, or its events, each keyed and hashed.
type Verified struct {
	// Handshake, when non-nil, is a provider handshake (Slack
	// url_verification, Microsoft Graph validationToken, Zoom
	// url_validation) to answer exactly as given; it creates no work and
	// nothing else is set.
	Handshake *verify.Handshake
	// Events are the delivery's events in body order: one for most
	// providers, several for a batch (Microsoft Graph value[], a
	// CloudEvents batch).
	Events []Event
	// Rejected counts the batch items left out on their own: an item that
	// failed its own authentication (a Graph clientState matching no
	// secret), or whose type allowed_event_types leaves out.
	Rejected int
	// Reply, when non-nil, is the provider's own answer for the delivery
	// once its events are taken (verify.Result.Reply: Discord's deferred
	// interaction response), sent instead of the door's receipt when
	// every event was stored or claimed (won) or is a duplicate; any
	// other end keeps the door's answer.
	Reply *verify.Handshake
	// Nonce, when non-nil, is the one-time value the provider signed for
	// this delivery (verify.Result.Nonce: Mailgun's token), which the
	// door records with the events it stores or claims and refuses when
	// it came before with other events (inbox.Inbox.Store, inbox.Inbox.CheckNonce).
	Nonce *verify.Nonce
}

// Event is one verified event of a delivery, keyed and hashed by its
// source's rules.
type Event struct {
	// Event is the verifier's event; its ID is the source's key rule's
	// (Identify) as the provider sent it, before it is made header-safe.
	verify.Event
	// Request is the event as the claim ledger keys it: the source's
	// tenant, its scope (dedupe_scope) as Source, the header-safe event id
	// (or its sha256: stand-in), the event type (cut to
	// claim.MaxEventTypeLen bytes), the receipt hash as PayloadHash
	// (volatile_fields left out), and the object id and version when the
	// scheme names both. Lease, lease policy, request id and execution id
	// are the door's to set.
	Request claim.Request
	// Payload is what the event's hash covers the bytes of and what is
	// stored for it: the whole body, or a batch item's own JSON
	// (Event.Payload); never nil.
	Payload []byte
	// ContentType is the content type of Payload: the request's, or a
	// batch item's (application/cloudevents+json in a CloudEvents batch).
	ContentType string
}

// Verify runs the source's rules over d, in order, and returns the
// handshake to answer or the delivery's events, each keyed (the source's
// key rule) and hashed (its volatile_fields left out):
//
//  1. a Content-Encoding other than identity, in any value of the header,
//     is refused (UnsupportedEncoding *apperr.Error, field
//     Content-Encoding), since signatures cover the bytes as sent;
//  2. the scheme's verification over the raw body: signature or token in
//     constant time, the replay window where the provider signs a
//     timestamp; a handshake is returned at once;
//  3. a batch item that is authentic but cannot be taken (anything but a
//     filtered event type) refuses the whole delivery;
//  4. the key rule (Identify), then the payload hash of each event.
//
// A header that steps 2 to 4 read must have one value: one sent twice with
// different values names two events at once, reads as absent, and the
// delivery is refused naming it (unauthenticated when it is the signature
// header itself). Errors are *verify.Error values (Authenticated false:
// nothing of the request may be trusted; true: an authentic delivery that
// cannot be taken as sent, or, with CodeEventTypeNotAllowed, one the
// source filters out), or the UnsupportedEncoding error of step 1.
func (s *Source) Verify(d Delivery) (Verified, error) {
	header := d.Header
	if header == nil {
		header = func(string) []string { return nil }
	}
	if err := CheckEncoding(header("Content-Encoding")); err != nil {
		return Verified{}, err
	}
	var repeated string
	hdr := verify.HeaderFunc(func(name string) string {
		vals := header(name)
		if len(vals) == 0 {
			return ""
		}
		for _, v := range vals[1:] {
			if v != vals[0] {
				if repeated == "" {
					repeated = name
				}
				return ""
			}
		}
		return vals[0]
	})
	// fail is the refusal of err (or nil): a repeated header the step
	// read first, as repeatedHeader decides.
	fail := func(err error) error {
		if rerr := repeatedHeader(repeated, err); rerr != nil {
			return rerr
		}
		return err
	}
	handshakeOnly := d.Method != "" && d.Method != http.MethodPost
	if handshakeOnly && !slices.Contains(s.Methods, d.Method) {
		return Verified{}, &verify.Error{Code: verify.CodeMalformedHeader, Reason: "the provider sends no " + d.Method + " request"}
	}
	res, err := s.Verifier.Verify(verify.Request{Method: d.Method, Header: hdr, RawQuery: d.RawQuery, Body: d.Body})
	if err := fail(err); err != nil {
		return Verified{}, err
	}
	if res.IsHandshake() {
		return Verified{Handshake: res.Handshake}, nil
	}
	if handshakeOnly {
		// A verifier answers its provider's GET or HEAD with a handshake
		// or an error: such a request never carries an event.
		return Verified{}, &verify.Error{Code: verify.CodeMalformedHeader, Reason: "a " + d.Method + " request carries no event"}
	}
	for _, item := range res.Rejected {
		var verr *verify.Error
		if errors.As(item.Err, &verr) && verr.Authenticated && verr.Code != verify.CodeEventTypeNotAllowed {
			// An authentic item that cannot be taken: refuse the whole
			// delivery rather than take it with the item dropped. (An
			// item of a type the source filters out is left out by
			// configuration; the others are taken.)
			return Verified{}, item.Err
		}
	}
	events, err := s.Identify(hdr, res.Events, d.Body)
	if err := fail(err); err != nil {
		return Verified{}, err
	}
	prepared, err := s.Prepare(events, d.Body, hdr.Get("Content-Type"))
	if err := fail(err); err != nil {
		return Verified{}, err
	}
	fp, retry := s.fingerprint(header, d.RawQuery, d.Body)
	for i := range prepared {
		prepared[i].Request.Fingerprint, prepared[i].Request.RetrySignal = fp, retry
	}
	return Verified{Events: prepared, Rejected: len(res.Rejected), Reply: res.Reply, Nonce: res.Nonce}, nil
}

// fingerprint is the SHA-256 of one provider request as the delivery log
// keeps it (claim.Request.Fingerprint), and the provider's retry signal
// (claim.Request.RetrySignal, "" for none). The hash covers, each
// length-prefixed, the values of the source's credential headers (a
// provider that signs each retry again, as Stripe does with a new
// timestamp, makes a new fingerprint), of its retry headers, the raw query
// and the raw body: the very same request bytes again hash alike. It is a
// hash of a MAC and of what the provider sent, so it holds no secret.
// The retry signal names each retry header present with its value, cut to
// 64 printable ASCII bytes (these headers are not signed: evidence, never
// a decision).
func (s *Source) fingerprint(header func(string) []string, rawQuery string, body []byte) ([]byte, string) {
	h := sha256.New()
	put := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	for _, name := range s.CredentialHeaders {
		for _, v := range header(name) {
			put([]byte(v))
		}
	}
	var signal []string
	for _, name := range s.RetryHeaders {
		for _, v := range header(name) {
			put([]byte(v))
			signal = append(signal, name+": "+printable(v, 64))
		}
	}
	put([]byte(rawQuery))
	put(body)
	return h.Sum(nil), strings.Join(signal, "; ")
}

// printable is s without the bytes outside printable ASCII, cut to n bytes.
func printable(s string, n int) string {
	b := make([]byte, 0, min(len(s), n))
	for i := 0; i < len(s) && len(b) < n; i++ {
		if c := s[i]; c >= 0x20 && c < 0x7f {
			b = append(b, c)
		}
	}
	return string(b)
}

// Prepare keys and hashes the verified (and identified) events of one
// delivery: per event its claim request as Event.Request describes and
// what is stored for it. body is the whole raw body (nil reads as empty),
// contentType the request's Content-Type. Every hash is computed before
// anything is returned, so a body that cannot be hashed strictly (JSON
// that is ambiguous or beyond exact canonicalisation) is an authenticated
// *verify.Error and nothing is taken.
func (s *Source) Prepare(events []verify.Event, body []byte, contentType string) ([]Event, error) {
	if body == nil {
		body = []byte{} // an empty body is a body
	}
	out := make([]Event, len(events))
	for i, ev := range events {
		payload, ct := body, contentType
		if ev.Payload != nil {
			payload, ct = ev.Payload, itemContentType(contentType)
		}
		h, err := s.receiptHash(ct, payload)
		if err != nil {
			return nil, err
		}
		r := claim.Request{Tenant: s.Tenant, Key: claim.Key{Source: s.Scope, EventID: eventID(ev)},
			EventType: Truncate(ev.Type, claim.MaxEventTypeLen), PayloadHash: h, Door: s.Name}
		if ev.ObjectID != "" && ev.ObjectVersion != nil {
			r.ObjectID, r.ObjectVersion = fitID(ev.ObjectID, claim.MaxObjectIDLen), ev.ObjectVersion
		}
		out[i] = Event{Event: ev, Request: r, Payload: payload, ContentType: ct}
	}
	return out, nil
}

// CheckEncoding refuses a delivery whose Content-Encoding values name any
// coding but identity (UnsupportedEncoding, 415, field Content-Encoding):
// signatures are checked over the bytes as sent, and the event is stored
// and forwarded as received, so a compressed body could only be verified
// against the wrong bytes or forwarded as something it is not. Only
// registered codings are named in the message; nothing else of the header
// is echoed. values are the header's values; none is fine.
func CheckEncoding(values []string) error {
	for _, v := range values {
		enc := strings.ToLower(strings.TrimSpace(v))
		if enc == "" || enc == "identity" {
			continue
		}
		name := "this Content-Encoding"
		switch enc {
		case "gzip", "x-gzip", "deflate", "br", "compress", "x-compress", "zstd":
			name = "Content-Encoding " + enc
		}
		return &apperr.Error{Code: apperr.UnsupportedEncoding, Field: "Content-Encoding",
			Message: name + " is not accepted on ingest: signatures are verified over the bytes as sent and " +
				"the event is stored and forwarded as received; send the body uncompressed (identity)"}
	}
	return nil
}

// repeatedHeader is the refusal of a delivery that sent a header the
// verification or key rule read with two different values, or nil. err
// is the step's own result: a request that failed verification for
// another reason first is refused as unauthenticated; an authentic one (or
// one the repetition made fail) names the header.
func repeatedHeader(name string, err error) error {
	if name == "" {
		return nil
	}
	var verr *verify.Error
	if err != nil && errors.As(err, &verr) && !verr.Authenticated && !strings.EqualFold(verr.Field, name) {
		return err
	}
	return &verify.Error{Code: verify.CodeMalformedHeader, In: verify.InHeader, Field: name,
		Reason: "header appears more than once with different values; it must name one event", Authenticated: err == nil || (verr != nil && verr.Authenticated)}
}
