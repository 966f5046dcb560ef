package verify

import (
	"encoding/base64"
	"encoding/hex"
	"hash"
	"strconv"
	"strings"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/strictjson"
)

// Encodings of signatures and secrets in generic schemes.
const (
	EncodingHex    = "hex"    // lower- or upper-case hexadecimal
	EncodingBase64 = "base64" // standard base64 with padding (RFC 4648 §4)
	EncodingRaw    = "raw"    // secrets only: the string's bytes as is
)

// Timestamp units of generic schemes.
const (
	UnitSeconds      = "s"
	UnitMilliseconds = "ms"
)

// KeyRule says where a generic scheme finds the event identity.
type KeyRule struct {
	// IDHeader names the header holding the event or delivery id.
	IDHeader string `required:"true" doc:"header holding the event id (or key.id_pointers instead)"`
	// IDPointers are JSON pointers (RFC 6901) into the body whose values
	// (strings or numbers) make the event id: one pointer gives its value as
	// is, several are joined with [JoinKey]. Exactly one of IDHeader and
	// IDPointers is required.
	IDPointers []string `doc:"JSON pointers into the body joined into the event id (instead of key.id_header)"`
	// TypeHeader or TypePointer (at most one) locates the event type.
	TypeHeader  string `doc:"header holding the event type"`
	TypePointer string `doc:"JSON pointer to the event type (instead of key.type_header)"`
	// ObjectIDPointer optionally locates the id of the object the event is
	// about.
	ObjectIDPointer string `doc:"JSON pointer to the id of the object the event is about"`
	// ObjectVersionPointer optionally locates an integer object version
	// (for out-of-order protection).
	ObjectVersionPointer string `doc:"JSON pointer to an integer object version (out-of-order protection)"`
}

type keyRule struct {
	idHeader   string
	idPtrs     []pointer
	typeHeader string
	typePtr    *pointer
	objPtr     *pointer
	verPtr     *pointer
}

func (k KeyRule) compile(t Type) (keyRule, error) {
	var kr keyRule
	if (k.IDHeader == "") == (len(k.IDPointers) == 0) {
		return kr, &ConfigError{Type: t, Field: "Key.IDHeader", Reason: "exactly one of Key.IDHeader and Key.IDPointers is required"}
	}
	if k.TypeHeader != "" && k.TypePointer != "" {
		return kr, &ConfigError{Type: t, Field: "Key.TypePointer", Reason: "set at most one of Key.TypeHeader and Key.TypePointer"}
	}
	kr.idHeader, kr.typeHeader = k.IDHeader, k.TypeHeader
	for i, p := range k.IDPointers {
		ptr, err := parsePointer(p)
		if err != nil || p == "" {
			reason := "must be a non-empty JSON pointer"
			if err != nil {
				reason = err.Error()
			}
			return kr, &ConfigError{Type: t, Field: "Key.IDPointers[" + strconv.Itoa(i) + "]", Reason: reason}
		}
		kr.idPtrs = append(kr.idPtrs, ptr)
	}
	opt := func(field, s string) (*pointer, error) {
		if s == "" {
			return nil, nil
		}
		ptr, err := parsePointer(s)
		if err != nil {
			return nil, &ConfigError{Type: t, Field: field, Reason: err.Error()}
		}
		return &ptr, nil
	}
	var err error
	if kr.typePtr, err = opt("Key.TypePointer", k.TypePointer); err != nil {
		return kr, err
	}
	if kr.objPtr, err = opt("Key.ObjectIDPointer", k.ObjectIDPointer); err != nil {
		return kr, err
	}
	if kr.verPtr, err = opt("Key.ObjectVersionPointer", k.ObjectVersionPointer); err != nil {
		return kr, err
	}
	return kr, nil
}

func (k keyRule) needsBody() bool {
	return len(k.idPtrs) > 0 || k.typePtr != nil || k.objPtr != nil || k.verPtr != nil
}

// event derives the identity from headers and, when needed, the decoded body
// (doc, nil when not needed). Every failure is authenticated: callers only
// get here after verification.
func (k keyRule) event(h Header, doc *strictjson.Doc, types typeFilter) (Event, error) {
	var ev Event
	if k.idHeader != "" {
		ev.ID = header(h, k.idHeader)
		if ev.ID == "" {
			return ev, authenticated(missingHeader(k.idHeader))
		}
	} else {
		parts := make([]string, len(k.idPtrs))
		for i, p := range k.idPtrs {
			s, e := p.scalar(doc)
			if e != nil {
				return ev, authenticated(e)
			}
			parts[i] = s
		}
		if len(parts) == 1 {
			ev.ID = parts[0]
		} else {
			ev.ID = JoinKey(parts...)
		}
	}
	typeIn, typeField := InBody, ""
	switch {
	case k.typeHeader != "":
		ev.Type, typeIn, typeField = header(h, k.typeHeader), InHeader, k.typeHeader
	case k.typePtr != nil:
		typeField = k.typePtr.raw
		v, ok, e := k.typePtr.get(doc)
		if e != nil {
			return ev, authenticated(e)
		}
		if ok {
			ev.Type, _ = v.(string)
		}
	}
	if err := types.check(ev.Type, typeIn, typeField); err != nil {
		return ev, err
	}
	if k.objPtr != nil {
		if s, e := k.objPtr.scalar(doc); e == nil {
			ev.ObjectID = s
		}
	}
	if k.verPtr != nil {
		s, e := k.verPtr.scalar(doc)
		if e != nil {
			return ev, authenticated(e)
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return ev, authenticated(bodyErr(CodeMalformedBody, k.verPtr.raw, "object version must be an integer"))
		}
		ev.ObjectVersion = &n
	}
	return ev, nil
}

// HMACOptions are the options of the "hmac" provider type: a generic HMAC
// signature over the raw body (optionally with a timestamp and an id), for
// senders without a dedicated type. It follows the common construction of
// https://www.rfc-editor.org/rfc/rfc2104 over a signed-content template.
// Examples:
//
//   - Linear (https://linear.app/developers/webhooks#securing-webhooks):
//     Signature{Header: "Linear-Signature"} (hex HMAC-SHA256 of the body),
//     TimestampPointer "/webhookTimestamp" with TimestampUnit "ms",
//     Key{IDHeader: "Linear-Delivery", TypeHeader: "Linear-Event"};
//   - a "t.body" sender: TimestampHeader "X-Timestamp",
//     SignedContent "{timestamp}.{body}";
//   - a Stripe-style header "t=<unix time>,v1=<hex>[,v1=<hex>…]":
//     Signature{Header: "X-Signature", Layout: "elements"} (SignedContent
//     then defaults to "{timestamp}.{body}", {timestamp} being the t
//     element as sent); with t in milliseconds, TimestampUnit "ms";
//   - a GitHub-style "sha256=<hex>": Signature{Header: …, Prefix:
//     "sha256="}; a bare base64 signature: Signature{Header: …,
//     Encoding: "base64"}.
//
// The timestamp unit is never guessed from the number's size: a timestamp
// read in the wrong unit lies decades away (milliseconds read as seconds:
// tens of thousands of years ahead; seconds read as milliseconds: January
// 1970) and every delivery is refused as outside the tolerance, so a wrong
// TimestampUnit fails closed and shows at the first delivery.
//
// The signature is checked first (under every one of Core.Secrets, written
// as SecretEncoding says); then the timestamp, when configured, must lie
// within Core.Tolerance of the clock; then the key rule is applied.
type HMACOptions struct {
	// SecretEncoding says how the source's secrets are written: "raw"
	// (default: the string's bytes are the key), "base64" or "hex".
	SecretEncoding string `doc:"how the secrets are written: raw (default), base64 or hex"`
	// Signature locates and decodes the signature. Signature.Header is
	// required.
	Signature SignatureSpec `required:"true" doc:"where the signature is and how it is encoded"`
	// SignedContent is the template of the signed bytes: "{body}" (the
	// default; "{timestamp}.{body}" with Signature.Layout "elements") is
	// the raw body; "{timestamp}" is the TimestampHeader value (or the
	// signature header's timestamp element) as sent; "{id}" is the
	// Key.IDHeader value as sent. Any other text is literal; any other
	// "{…}" is an error. It must contain {body}, and {timestamp} with
	// Layout "elements".
	SignedContent string `doc:"template of the signed bytes: {body} (default), {timestamp}, {id} and literal text"`
	// TimestampHeader or TimestampPointer (at most one) locates a signed
	// timestamp: a header, which SignedContent must then include as
	// {timestamp}, or a JSON pointer into the (signed) body whose value is a
	// number or a string of digits. Neither may be set with
	// Signature.Layout "elements", whose timestamp is an element of the
	// signature header.
	TimestampHeader  string `doc:"header with the signed timestamp (signed_content must use {timestamp})"`
	TimestampPointer string `doc:"JSON pointer to a signed timestamp in the body (instead of timestamp_header)"`
	// TimestampUnit is the unit of the timestamp wherever it is: "s"
	// (default, unix seconds) or "ms" (unix milliseconds).
	TimestampUnit string `doc:"s (default) or ms"`
	// Key locates the event identity.
	Key KeyRule `required:"true" doc:"where the event id is"`
}

func init() {
	Register(Provider{
		Type:    TypeHMAC,
		Name:    "Generic HMAC",
		Docs:    []string{"https://www.rfc-editor.org/rfc/rfc2104"},
		Options: func() any { return &HMACOptions{} },
		Build: func(c Core, opts any) (Verifier, error) {
			return opts.(*HMACOptions).WithDefaults().compile(c)
		},
		SignsTimestamp:    true,
		CredentialHeaders: func(opts any) []string { return []string{opts.(*HMACOptions).Signature.Header} },
		Setup:             Setup{Secrets: "the sender's HMAC keys, written as `options.secret_encoding` says (raw by default)"},
		Redelivery: Redelivery{
			Key:     "the source's `options.key`: a header, or JSON pointers joined",
			Retries: "the sender's",
			Horizon: "the sender's id's",
			Batches: "no",
			Resends: "the sender's",
		},
	})
}

// WithDefaults returns a copy with the algorithm, encodings, template and
// timestamp unit defaulted.
func (c HMACOptions) WithDefaults() HMACOptions {
	c.Signature = c.Signature.withDefaults()
	if c.SecretEncoding == "" {
		c.SecretEncoding = EncodingRaw
	}
	if c.SignedContent == "" {
		c.SignedContent = "{body}"
		if c.Signature.Layout == LayoutElements {
			c.SignedContent = "{timestamp}.{body}"
		}
	}
	if c.TimestampUnit == "" {
		c.TimestampUnit = UnitSeconds
	}
	return c
}

type hmacVerifier struct {
	keys     [][]byte
	sig      SignatureSpec
	h        func() hash.Hash
	template []segment
	tsHeader string
	// tsElement: the timestamp is the signature header's timestamp
	// element (Signature.Layout "elements").
	tsElement bool
	tsPtr     *pointer
	tsMillis  bool
	tol       time.Duration
	now       func() time.Time
	key       keyRule
	types     typeFilter
}

// segment is one piece of a signed-content template: literal text or a
// placeholder.
type segment struct {
	lit string
	ph  string // "body", "timestamp", "id" or "" for a literal
}

func parseTemplate(s string) ([]segment, error) {
	var out []segment
	for s != "" {
		i := strings.IndexByte(s, '{')
		if i < 0 {
			out = append(out, segment{lit: s})
			break
		}
		if i > 0 {
			out = append(out, segment{lit: s[:i]})
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			return nil, errorString("unclosed '{'")
		}
		name := s[i+1 : i+j]
		switch name {
		case "body", "timestamp", "id":
		default:
			return nil, errorString("has an unknown placeholder (known: {body}, {timestamp}, {id})") // not quoted: configuration text is not repeated
		}
		out = append(out, segment{ph: name})
		s = s[i+j+1:]
	}
	return out, nil
}

type errorString string

func (e errorString) Error() string { return string(e) }

func decodeSecrets(t Type, enc string, secrets []string) ([][]byte, error) {
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		var err error
		switch enc {
		case EncodingRaw:
			keys[i] = []byte(s)
		case EncodingBase64:
			keys[i], err = base64.StdEncoding.DecodeString(s)
		case EncodingHex:
			keys[i], err = hex.DecodeString(s)
		default:
			return nil, &ConfigError{Type: t, Field: "SecretEncoding", Reason: "must be raw, base64 or hex"}
		}
		if err != nil {
			return nil, &ConfigError{Type: t, Field: "Secrets[" + strconv.Itoa(i) + "]", Reason: "is not valid " + enc}
		}
		if len(keys[i]) == 0 {
			return nil, &ConfigError{Type: t, Field: "Secrets[" + strconv.Itoa(i) + "]", Reason: "decodes to an empty key"}
		}
	}
	return keys, nil
}

func (c HMACOptions) compile(core Core) (*hmacVerifier, error) {
	const t = TypeHMAC
	keys, err := decodeSecrets(t, c.SecretEncoding, core.Secrets)
	if err != nil {
		return nil, err
	}
	if err := c.Signature.check(t, "Signature", true); err != nil {
		return nil, err
	}
	tpl, err := parseTemplate(c.SignedContent)
	if err != nil {
		return nil, &ConfigError{Type: t, Field: "SignedContent", Reason: err.Error()}
	}
	has := map[string]bool{}
	for _, s := range tpl {
		has[s.ph] = true
	}
	if !has["body"] {
		return nil, &ConfigError{Type: t, Field: "SignedContent", Reason: "must contain {body}: the body must be signed"}
	}
	elements := c.Signature.Layout == LayoutElements
	if elements {
		for _, f := range [...]struct{ name, value string }{{"TimestampHeader", c.TimestampHeader}, {"TimestampPointer", c.TimestampPointer}} {
			if f.value != "" {
				return nil, &ConfigError{Type: t, Field: f.name, Reason: "must not be set with Signature.Layout elements: the timestamp is the signature header's timestamp element (Signature.TimestampElement)"}
			}
		}
		if !has["timestamp"] {
			return nil, &ConfigError{Type: t, Field: "SignedContent", Reason: "must contain {timestamp} with Signature.Layout elements: an unsigned timestamp gives no replay protection"}
		}
	}
	if c.TimestampHeader != "" && c.TimestampPointer != "" {
		return nil, &ConfigError{Type: t, Field: "TimestampPointer", Reason: "set at most one of TimestampHeader and TimestampPointer"}
	}
	if c.TimestampHeader != "" && !has["timestamp"] {
		return nil, &ConfigError{Type: t, Field: "SignedContent", Reason: "TimestampHeader is set but SignedContent has no {timestamp}: an unsigned timestamp gives no replay protection"}
	}
	if has["timestamp"] && c.TimestampHeader == "" && !elements {
		return nil, &ConfigError{Type: t, Field: "TimestampHeader", Reason: "SignedContent uses {timestamp}, so TimestampHeader is required"}
	}
	if has["id"] && c.Key.IDHeader == "" {
		return nil, &ConfigError{Type: t, Field: "Key.IDHeader", Reason: "SignedContent uses {id}, so Key.IDHeader is required"}
	}
	if c.TimestampUnit != UnitSeconds && c.TimestampUnit != UnitMilliseconds {
		return nil, &ConfigError{Type: t, Field: "TimestampUnit", Reason: "must be s or ms"}
	}
	v := &hmacVerifier{
		keys: keys, sig: c.Signature, h: hashFor(c.Signature.Algorithm), template: tpl,
		tsHeader: c.TimestampHeader, tsElement: elements, tsMillis: c.TimestampUnit == UnitMilliseconds,
		tol: core.Tolerance, now: core.Now,
	}
	if c.TimestampPointer != "" {
		p, err := parsePointer(c.TimestampPointer)
		if err != nil {
			return nil, &ConfigError{Type: t, Field: "TimestampPointer", Reason: err.Error()}
		}
		v.tsPtr = &p
	}
	if v.key, err = c.Key.compile(t); err != nil {
		return nil, err
	}
	v.types = newTypeFilter(core.AllowedEventTypes)
	return v, nil
}

func (*hmacVerifier) Type() Type { return TypeHMAC }

func (v *hmacVerifier) Verify(r Request) (Result, error) {
	raw := header(r.Header, v.sig.Header)
	if raw == "" {
		return Result{}, missingHeader(v.sig.Header)
	}
	var cands [][]byte
	var tsRaw, id string
	if v.tsElement {
		var e *Error
		if tsRaw, cands, e = v.sig.elements(v.h, raw, v.unit()); e != nil {
			return Result{}, e
		}
	} else if cands = v.sig.candidates(v.h, raw); len(cands) == 0 {
		return Result{}, headerErr(CodeMalformedHeader, v.sig.Header, "holds no readable "+v.sig.Encoding+" signature of the configured size and prefix")
	}
	content := make([][]byte, 0, len(v.template))
	for _, s := range v.template {
		switch s.ph {
		case "":
			content = append(content, []byte(s.lit))
		case "body":
			content = append(content, r.Body)
		case "timestamp":
			if v.tsElement {
				content = append(content, []byte(tsRaw))
				continue
			}
			if tsRaw = header(r.Header, v.tsHeader); tsRaw == "" {
				return Result{}, missingHeader(v.tsHeader)
			}
			content = append(content, []byte(tsRaw))
		case "id":
			if id = header(r.Header, v.key.idHeader); id == "" {
				return Result{}, missingHeader(v.key.idHeader)
			}
			content = append(content, []byte(id))
		}
	}
	if v.tsHeader != "" {
		if _, ok := parseUnix(tsRaw); !ok {
			return Result{}, headerErr(CodeMalformedHeader, v.tsHeader, "must be a unix timestamp in "+v.unit())
		}
	}
	if !anyMACMatches(v.h, v.keys, cands, content...) {
		return Result{}, headerErr(CodeBadSignature, v.sig.Header, "signature does not match the payload under any configured secret")
	}
	var doc *strictjson.Doc
	if v.tsPtr != nil || v.key.needsBody() {
		var e *Error
		if doc, e = decodeJSON(r.Body); e != nil {
			return Result{}, authenticated(e)
		}
	}
	var ts time.Time
	switch {
	case v.tsHeader != "" || v.tsElement:
		n, _ := parseUnix(tsRaw)
		ts = v.toTime(n)
		if now := v.now(); !within(now, ts, v.tol) {
			field := v.tsHeader
			if v.tsElement {
				field = v.sig.Header
			}
			return Result{}, windowErr(InHeader, field, now, ts, v.tol)
		}
	case v.tsPtr != nil:
		s, e := v.tsPtr.scalar(doc)
		if e != nil {
			return Result{}, authenticated(e)
		}
		n, ok := parseUnix(s)
		if !ok {
			return Result{}, authenticated(bodyErr(CodeMalformedBody, v.tsPtr.raw, "must be a unix timestamp in "+v.unit()))
		}
		ts = v.toTime(n)
		if now := v.now(); !within(now, ts, v.tol) {
			return Result{}, windowErr(InBody, v.tsPtr.raw, now, ts, v.tol)
		}
	}
	ev, err := v.key.event(r.Header, doc, v.types)
	if err != nil {
		return Result{}, err
	}
	ev.Timestamp = ts
	return Result{Events: []Event{ev}}, nil
}

func (v *hmacVerifier) unit() string {
	if v.tsMillis {
		return "milliseconds"
	}
	return "seconds"
}

func (v *hmacVerifier) toTime(n int64) time.Time {
	if v.tsMillis {
		return time.UnixMilli(n)
	}
	return time.Unix(n, 0)
}
