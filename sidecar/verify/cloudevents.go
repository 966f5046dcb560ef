package verify

import (
	"crypto/sha256"
	"mime"
	"net/url"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// CloudEvents HTTP binding names
// (https://github.com/cloudevents/spec/blob/v1.0.2/cloudevents/bindings/http-protocol-binding.md).
const (
	CloudEventsIDHeader          = "ce-id"
	CloudEventsSourceHeader      = "ce-source"
	CloudEventsTypeHeader        = "ce-type"
	CloudEventsSpecVersionHeader = "ce-specversion"
	CloudEventsSubjectHeader     = "ce-subject"
	CloudEventsJSONMediaType     = "application/cloudevents+json"
	CloudEventsBatchMediaType    = "application/cloudevents-batch+json"
)

// CloudEvents authentication modes. The CloudEvents spec defines no
// signature, so a source must say how senders authenticate.
const (
	CloudEventsAuthBearer = "bearer" // Authorization: Bearer <one of Secrets>
	CloudEventsAuthHMAC   = "hmac"   // an HMAC of the raw body in Signature.Header
)

// CloudEventsOptions are the options of the "cloudevents" provider type:
// CloudEvents 1.0
// over HTTP
// (https://github.com/cloudevents/spec/blob/v1.0.2/cloudevents/bindings/http-protocol-binding.md)
// in any of its three modes:
//
//   - binary: attributes in ce-* headers (ce-id, ce-source, ce-type,
//     ce-specversion required), percent-decoded as §3.1.3.2 requires, data in
//     the body;
//   - structured: Content-Type application/cloudevents+json, the whole event
//     as a JSON object (JSON event format,
//     https://github.com/cloudevents/spec/blob/v1.0.2/cloudevents/formats/json-format.md);
//   - batch: Content-Type application/cloudevents-batch+json, a JSON array of
//     events; one [Event] per item, malformed items in Result.Rejected.
//
// Authentication comes first and covers the raw body: Auth "bearer" (the
// default) compares the Authorization Bearer token with Secrets in constant
// time; Auth "hmac" checks an HMAC of the raw body (keyed with one of
// Core.Secrets, raw strings) as described by Signature. There is no unauthenticated mode.
//
// The identity: the spec makes source+id unique per distinct event
// (https://github.com/cloudevents/spec/blob/v1.0.2/cloudevents/spec.md#id),
// so ID is JoinKey(source, id): the same event sent in binary and in
// structured mode gets the same key, the same id from another source does
// not. Type is the type attribute, ObjectID the subject attribute.
type CloudEventsOptions struct {
	// Auth is "bearer" (default) or "hmac".
	Auth string `doc:"bearer (default: Authorization Bearer one of the secrets) or hmac"`
	// Signature locates the HMAC for Auth "hmac" (Signature.Header
	// required then; algorithm default sha256, encoding default hex).
	Signature SignatureSpec `doc:"where the HMAC is with auth hmac (signature.header required then)"`
}

func init() {
	Register(Provider{
		Type: TypeCloudEvents,
		Name: "CloudEvents (HTTP binding)",
		Docs: []string{
			"https://github.com/cloudevents/spec/blob/v1.0.2/cloudevents/bindings/http-protocol-binding.md",
			"https://github.com/cloudevents/spec/blob/v1.0.2/cloudevents/spec.md#id",
		},
		Options: func() any { return &CloudEventsOptions{} },
		Build: func(c Core, opts any) (Verifier, error) {
			return opts.(*CloudEventsOptions).WithDefaults().compile(c)
		},
		CredentialHeaders: func(opts any) []string {
			if o := opts.(*CloudEventsOptions).WithDefaults(); o.Auth == CloudEventsAuthHMAC {
				return []string{o.Signature.Header}
			}
			return []string{"Authorization"}
		},
		Setup: Setup{Secrets: "the shared bearer tokens (`auth: bearer`, sent as `Authorization: Bearer …`) or HMAC keys (`auth: hmac`) the sender was given"},
		Redelivery: Redelivery{
			Key:     "`source` + `id`",
			Retries: "the sender's; a re-sent event keeps `source` and `id`",
			Horizon: "forever: source + id is unique per distinct event",
			Batches: "batch mode (`application/cloudevents-batch+json`): one record per event",
			Resends: "no",
		},
	})
}

// WithDefaults returns a copy with Auth (and, for hmac, Signature's
// algorithm and encoding) defaulted.
func (c CloudEventsOptions) WithDefaults() CloudEventsOptions {
	if c.Auth == "" {
		c.Auth = CloudEventsAuthBearer
	}
	if c.Auth == CloudEventsAuthHMAC {
		c.Signature = c.Signature.withDefaults()
	}
	return c
}

func (c CloudEventsOptions) compile(core Core) (*cloudEventsVerifier, error) {
	const t = TypeCloudEvents
	v := &cloudEventsVerifier{types: newTypeFilter(core.AllowedEventTypes)}
	switch c.Auth {
	case CloudEventsAuthBearer:
		v.token = &tokenAuth{header: "Authorization", scheme: "Bearer", tokens: append([]string(nil), core.Secrets...)}
	case CloudEventsAuthHMAC:
		if err := c.Signature.validate(t, "Signature"); err != nil {
			return nil, err
		}
		v.sig, v.keys = c.Signature, secretKeys(core.Secrets)
	default:
		return nil, &ConfigError{Type: t, Field: "Auth", Reason: "must be bearer or hmac (CloudEvents has no signature of its own; unauthenticated sources are not supported)"}
	}
	return v, nil
}

type cloudEventsVerifier struct {
	token *tokenAuth
	sig   SignatureSpec
	keys  [][]byte
	types typeFilter
}

func (*cloudEventsVerifier) Type() Type { return TypeCloudEvents }

func (v *cloudEventsVerifier) authenticate(r Request) error {
	if v.token != nil {
		return v.token.check(r.Header)
	}
	raw := header(r.Header, v.sig.Header)
	if raw == "" {
		return missingHeader(v.sig.Header)
	}
	h := hashFor(v.sig.Algorithm)
	if h == nil {
		h = sha256.New
	}
	cands := v.sig.candidates(h, raw)
	if len(cands) == 0 {
		return headerErr(CodeMalformedHeader, v.sig.Header, "holds no readable "+v.sig.Encoding+" signature of the configured size and prefix")
	}
	if !anyMACMatches(h, v.keys, cands, r.Body) {
		return headerErr(CodeBadSignature, v.sig.Header, "signature does not match the payload under any configured secret")
	}
	return nil
}

// ceAttrs are the context attributes the identity needs.
type ceAttrs struct {
	SpecVersion string `json:"specversion"`
	ID          string `json:"id"`
	Source      string `json:"source"`
	Type        string `json:"type"`
	Subject     string `json:"subject"`
}

func (v *cloudEventsVerifier) Verify(r Request) (Result, error) {
	if err := v.authenticate(r); err != nil {
		return Result{}, err
	}
	mt, _, _ := mime.ParseMediaType(header(r.Header, "Content-Type"))
	switch mt {
	case CloudEventsJSONMediaType:
		var a ceAttrs
		if e := unmarshalBody(r.Body, &a); e != nil {
			return Result{}, authenticated(e)
		}
		ev, err := v.event(a, InBody, "")
		if err != nil {
			return Result{}, err
		}
		return Result{Events: []Event{ev}}, nil
	case CloudEventsBatchMediaType:
		var items []jsontext.Value
		if e := unmarshalBody(r.Body, &items); e != nil {
			return Result{}, authenticated(e)
		}
		if len(items) == 0 {
			return Result{}, authenticated(bodyErr(CodeMalformedBody, "", "the batch holds no events"))
		}
		return splitBatch(items, func(i int, raw jsontext.Value) (Event, error) {
			base := "/" + strconv.Itoa(i)
			var a ceAttrs
			if e := unmarshalBody(raw, &a); e != nil {
				e.Field = base + e.Field
				return Event{}, authenticated(e)
			}
			ev, err := v.event(a, InBody, base)
			ev.Payload = []byte(raw)
			return ev, err
		})
	}
	if strings.HasPrefix(mt, "application/cloudevents") {
		return Result{}, authenticated(headerErr(CodeMalformedHeader, "Content-Type", "only the JSON event format is supported in structured mode"))
	}
	var a ceAttrs
	for _, f := range []struct {
		name string
		dst  *string
	}{
		{CloudEventsSpecVersionHeader, &a.SpecVersion},
		{CloudEventsIDHeader, &a.ID},
		{CloudEventsSourceHeader, &a.Source},
		{CloudEventsTypeHeader, &a.Type},
		{CloudEventsSubjectHeader, &a.Subject},
	} {
		raw := header(r.Header, f.name)
		s, err := url.PathUnescape(raw)
		if err != nil {
			return Result{}, authenticated(headerErr(CodeMalformedHeader, f.name, "invalid percent-encoding"))
		}
		*f.dst = s
	}
	ev, err := v.event(a, InHeader, "")
	if err != nil {
		return Result{}, err
	}
	return Result{Events: []Event{ev}}, nil
}

// event validates the required attributes and builds the identity. For
// headers, fields are named ce-<attr>; for bodies, base/<attr>.
func (v *cloudEventsVerifier) event(a ceAttrs, in Location, base string) (Event, error) {
	name := func(attr string) string {
		if in == InHeader {
			return "ce-" + attr
		}
		return base + "/" + attr
	}
	missing := func(attr string) error {
		if in == InHeader {
			return authenticated(missingHeader(name(attr)))
		}
		return authenticated(bodyErr(CodeMissingField, name(attr), "required CloudEvents attribute is absent or empty"))
	}
	switch {
	case a.SpecVersion == "":
		return Event{}, missing("specversion")
	case a.ID == "":
		return Event{}, missing("id")
	case a.Source == "":
		return Event{}, missing("source")
	case a.Type == "":
		return Event{}, missing("type")
	}
	if !strings.HasPrefix(a.SpecVersion, "1.") {
		e := &Error{Code: CodeMalformedBody, In: in, Field: name("specversion"), Reason: "only CloudEvents 1.x is supported"}
		if in == InHeader {
			e.Code = CodeMalformedHeader
		}
		return Event{}, authenticated(e)
	}
	if err := v.types.check(a.Type, in, name("type")); err != nil {
		return Event{}, err
	}
	return Event{ID: JoinKey(a.Source, a.ID), Type: a.Type, ObjectID: a.Subject}, nil
}
