package verify

import (
	"strings"

	"github.com/idempotent-claim/idempotent-claim/sidecar/strictjson"
)

// TokenOptions are the options of the "token" provider type: the sender
// proves itself with a shared secret (one of Core.Secrets) sent verbatim in
// a header, compared in constant time. By default the header is
// Authorization with the Bearer scheme (RFC 6750 §2.1,
// https://www.rfc-editor.org/rfc/rfc6750#section-2.1). It suits senders that
// sign nothing (Documenso's X-Documenso-Secret, an internal service). A
// token proves origin but not integrity, and there is no replay window:
// prefer a signing scheme wherever the sender offers one.
type TokenOptions struct {
	// Header carries the token. Default "Authorization" (with Scheme
	// defaulting to "Bearer").
	Header string `doc:"header carrying the token (default Authorization)"`
	// Scheme, when set, is an auth scheme that precedes the token and a
	// space ("Bearer <token>"), matched case-insensitively. When Header is
	// set and Scheme is empty, the whole header value is the token.
	Scheme string `doc:"auth scheme before the token (Bearer with the default header)"`
	// Key locates the event identity.
	Key KeyRule `required:"true" doc:"where the event id is"`
}

func init() {
	Register(Provider{
		Type:    TypeToken,
		Name:    "Shared token in a header",
		Docs:    []string{"https://www.rfc-editor.org/rfc/rfc6750#section-2.1"},
		Options: func() any { return &TokenOptions{} },
		Build: func(c Core, opts any) (Verifier, error) {
			return opts.(*TokenOptions).WithDefaults().compile(c)
		},
		CredentialHeaders: func(opts any) []string { return []string{opts.(*TokenOptions).WithDefaults().Header} },
		Setup:             Setup{Secrets: "the shared tokens the sender puts in `options.header` (`Authorization: Bearer …` by default)"},
		Redelivery: Redelivery{
			Key:     "the source's `options.key`: a header, or JSON pointers joined",
			Retries: "the sender's",
			Horizon: "the sender's id's",
			Batches: "no",
			Resends: "the sender's",
		},
	})
}

// WithDefaults returns a copy with Header (and then Scheme) defaulted.
func (c TokenOptions) WithDefaults() TokenOptions {
	if c.Header == "" {
		c.Header = "Authorization"
		if c.Scheme == "" {
			c.Scheme = "Bearer"
		}
	}
	return c
}

func (c TokenOptions) compile(core Core) (*tokenVerifier, error) {
	const t = TypeToken
	if c.Header == "" {
		return nil, &ConfigError{Type: t, Field: "Header", Reason: "is required"}
	}
	if strings.ContainsAny(c.Scheme, " \t") {
		return nil, &ConfigError{Type: t, Field: "Scheme", Reason: "must be a single token such as Bearer"}
	}
	kr, err := c.Key.compile(t)
	if err != nil {
		return nil, err
	}
	return &tokenVerifier{auth: tokenAuth{header: c.Header, scheme: c.Scheme, tokens: append([]string(nil), core.Secrets...)}, key: kr, types: newTypeFilter(core.AllowedEventTypes)}, nil
}

type tokenVerifier struct {
	auth  tokenAuth
	key   keyRule
	types typeFilter
}

func (*tokenVerifier) Type() Type { return TypeToken }

func (v *tokenVerifier) Verify(r Request) (Result, error) {
	if err := v.auth.check(r.Header); err != nil {
		return Result{}, err
	}
	var doc *strictjson.Doc
	if v.key.needsBody() {
		var e *Error
		if doc, e = decodeJSON(r.Body); e != nil {
			return Result{}, authenticated(e)
		}
	}
	ev, err := v.key.event(r.Header, doc, v.types)
	if err != nil {
		return Result{}, err
	}
	return Result{Events: []Event{ev}}, nil
}

// tokenAuth checks a shared token in a header.
type tokenAuth struct {
	header string
	scheme string
	tokens []string
}

func (a tokenAuth) check(h Header) error {
	raw := header(h, a.header)
	if raw == "" {
		return missingHeader(a.header)
	}
	tok := raw
	if a.scheme != "" {
		s, rest, ok := strings.Cut(raw, " ")
		if !ok || !strings.EqualFold(s, a.scheme) {
			return headerErr(CodeMalformedHeader, a.header, "must be "+a.scheme+" followed by a space and the token")
		}
		tok = strings.TrimSpace(rest)
	}
	ok := false
	for _, want := range a.tokens {
		if equalSecret(tok, want) {
			ok = true
		}
	}
	if !ok {
		return headerErr(CodeBadSignature, a.header, "token does not match any configured secret")
	}
	return nil
}
