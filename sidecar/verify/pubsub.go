package verify

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
)

// TypePubSub is Google Cloud Pub/Sub push delivery.
const TypePubSub Type = "pubsub"

// GoogleJWKSURL is where Google publishes the keys that sign its OIDC
// tokens (https://developers.google.com/identity/openid-connect/openid-connect#validatinganidtoken),
// the default PubSubOptions.JWKSURL.
const GoogleJWKSURL = "https://www.googleapis.com/oauth2/v3/certs"

// PubSubAuthorizationHeader carries the push request's OIDC token.
const PubSubAuthorizationHeader = "Authorization"

// pubsubMaxToken bounds the bearer token read (Google's are about 1 KiB).
const pubsubMaxToken = 8 << 10

// Pub/Sub authentication modes (PubSubOptions.Auth).
const (
	PubSubAuthOIDC       = "oidc"
	PubSubAuthQueryToken = "query_token"
)

// PubSubOptions are the "pubsub" provider's options (a source's `options`).
type PubSubOptions struct {
	// Auth is how push requests prove they come from the subscription:
	// "oidc" (default) for a push subscription with authentication, whose
	// requests carry a Google-signed OIDC token; "query_token" for an
	// endpoint URL holding a secret token in its query string (the
	// source's secrets are the accepted tokens).
	Auth string `json:"auth" yaml:"auth" doc:"oidc (default: Google-signed token) or query_token (a token in the endpoint URL's query)"`
	// Audience is the token's expected `aud`: the audience set on the push
	// subscription, or its push endpoint URL when none was set. Required
	// with oidc.
	Audience string `json:"audience" yaml:"audience" required:"true" doc:"the push subscription's audience (or its endpoint URL when none was set); auth oidc only"`
	// ServiceAccountEmail, when set, is the service account the
	// subscription signs as: the token's `email` must equal it and
	// `email_verified` be true. Recommended: without it any Google service
	// account's token for this audience is accepted.
	ServiceAccountEmail string `json:"service_account_email" yaml:"service_account_email" recommended:"true" doc:"the service account the subscription signs as; without it any Google service account's token for the audience passes"`
	// JWKSURL is the key set the tokens are checked against (https).
	// Default GoogleJWKSURL.
	JWKSURL string `json:"jwks_url" yaml:"jwks_url" doc:"key set for the tokens (default Google's)"`
	// TokenParam is the query parameter holding the token with
	// query_token. Default "token".
	TokenParam string `json:"token_param" yaml:"token_param" doc:"query parameter holding the token with auth query_token (default token)"`
	// KeyAttribute, when set, names a message attribute the publisher sets
	// to its own id for a fact: the key becomes subscription + that
	// attribute instead of subscription + messageId, so a message the
	// publisher published twice (a publisher retry gets a new messageId)
	// is one event. A message without the attribute is refused.
	KeyAttribute string `json:"key_attribute" yaml:"key_attribute" doc:"message attribute holding the publisher's own id, keyed instead of messageId"`
	// TypeAttribute, when set, names the message attribute giving the
	// event type (Pub/Sub has none of its own); allowed_event_types needs
	// it.
	TypeAttribute string `json:"type_attribute" yaml:"type_attribute" doc:"message attribute giving the event type"`
}

// The "pubsub" provider verifies Google Cloud Pub/Sub push requests
// (wrapped payloads, the default), per
// https://cloud.google.com/pubsub/docs/authenticate-push-subscriptions and
// https://cloud.google.com/pubsub/docs/push:
//
//   - oidc (default): `Authorization: Bearer <JWT>`, an OpenID Connect
//     token Google signs with RS256. The signature is checked against the
//     key set at JWKSURL (Google's by default, fetched and cached: see
//     [JWKSMaxAge], [JWKSUnknownKIDEvery], [JWKSRetryEvery],
//     [JWKSMaxBytes]), `aud` must equal Audience, `iss` be
//     "https://accounts.google.com" or "accounts.google.com", `exp` and
//     `iat` hold with the source's tolerance as leeway (default 300 s),
//     and, when ServiceAccountEmail is set, `email` must equal it with
//     `email_verified` true. The token authenticates the sender, not the
//     body: Pub/Sub signs no digest of the message, so integrity rests on
//     TLS (a changed body under a valid token verifies);
//   - query_token: the push endpoint URL carries a secret token in its
//     query string (TokenParam, default "token"), compared in constant
//     time with each of the source's secrets (several for rotation). It
//     proves knowledge of the URL only: prefer oidc.
//
// The body is {"message":{"data","attributes","messageId","publishTime",…},
// "subscription","deliveryAttempt"?}. Key rule: ID is JoinKey(subscription,
// messageId). messageId is unique within the topic and kept by every
// redelivery of the message
// (https://cloud.google.com/pubsub/docs/reference/rest/v1/PubsubMessage);
// it is scoped by the subscription, because each subscription of a topic
// gets its own copy of the message. Push subscriptions do not offer
// exactly-once delivery (https://cloud.google.com/pubsub/docs/exactly-once-delivery):
// a message is redelivered, same messageId, until acknowledged (a 2xx) or
// the subscription's retention ends (default 7 days). A publisher that
// retries a publish gets a new messageId for the same fact: KeyAttribute
// switches the key to JoinKey(subscription, attributes[KeyAttribute]).
// deliveryAttempt (present with a dead-letter policy) counts the attempts,
// so it is volatile; so are the message's own id and publish time (both
// spellings Pub/Sub sends, messageId/message_id and
// publishTime/publish_time): a redelivery keeps them, and a publisher's
// retry of one fact, keyed by KeyAttribute, changes them and must be a
// duplicate, not a conflict. Under the default key the id is in the key
// anyway. Type is attributes[TypeAttribute] when set; Scope is the
// subscription; Timestamp is the token's `iat` (oidc).
type pubsubVerifier struct {
	opts    PubSubOptions
	tokens  []string // query_token
	parser  *jwt.Parser
	keyfunc jwt.Keyfunc
	types   TypeFilter
	typed   bool
}

func init() {
	Register(Provider{
		Type: TypePubSub,
		Name: "Google Cloud Pub/Sub push",
		Docs: []string{
			"https://cloud.google.com/pubsub/docs/authenticate-push-subscriptions",
			"https://cloud.google.com/pubsub/docs/push",
			"https://cloud.google.com/pubsub/docs/exactly-once-delivery",
			"https://cloud.google.com/pubsub/docs/reference/rest/v1/PubsubMessage",
		},
		Options:         func() any { return &PubSubOptions{} },
		Build:           buildPubSub,
		SignsTimestamp:  true,
		SecretsOptional: true,
		CredentialHeaders: func(opts any) []string {
			if o, ok := opts.(*PubSubOptions); ok && o.Auth == PubSubAuthQueryToken {
				return nil
			}
			return []string{PubSubAuthorizationHeader}
		},
		CredentialQueryParams: func(opts any) []string {
			if o, ok := opts.(*PubSubOptions); ok && o.Auth == PubSubAuthQueryToken {
				if o.TokenParam != "" {
					return []string{o.TokenParam}
				}
				return []string{"token"}
			}
			return nil
		},
		VolatileFields: []string{"/deliveryAttempt", "/message/messageId", "/message/message_id",
			"/message/publishTime", "/message/publish_time"},
		Setup: Setup{Secrets: "none with `auth: oidc` (the default: Google signs an OIDC token, set `options.audience`); with `auth: query_token`, the tokens your push endpoint URL carries in its query"},
		Redelivery: Redelivery{
			Key:     "`subscription` + `message.messageId` (option `key_attribute`: `subscription` + that attribute)",
			Retries: "until acknowledged (2xx) or the subscription's message retention ends (default 7 days), backoff; same messageId",
			Horizon: "forever within a subscription (messageId is unique within the topic)",
			Batches: "no (one message per push request)",
			Resends: "a publisher retry publishes the fact again under a new messageId: claim on a publisher-set attribute with `key_attribute`",
		},
	})
}

func buildPubSub(core Core, opts any) (Verifier, error) {
	o, ok := opts.(*PubSubOptions)
	if !ok || o == nil {
		o = &PubSubOptions{}
	}
	cfgErr := func(field, reason string) error {
		return &ConfigError{Type: TypePubSub, Field: field, Reason: reason}
	}
	v := &pubsubVerifier{opts: *o, types: core.Types(), typed: o.TypeAttribute != ""}
	if len(core.AllowedEventTypes) > 0 && o.TypeAttribute == "" {
		return nil, cfgErr("AllowedEventTypes", "Pub/Sub messages have no type: set options.type_attribute to the attribute that carries one")
	}
	switch o.Auth {
	case "", PubSubAuthOIDC:
		v.opts.Auth = PubSubAuthOIDC
		if len(core.Secrets) > 0 {
			return nil, cfgErr("Secrets", "not used with oidc (the token is checked against Google's keys); secrets are the tokens of auth: query_token")
		}
		if o.Audience == "" {
			return nil, cfgErr("Audience", "required with oidc: the push subscription's audience (or its push endpoint URL when it sets none)")
		}
		if o.TokenParam != "" {
			return nil, cfgErr("TokenParam", "only used with auth: query_token")
		}
		if v.opts.JWKSURL == "" {
			v.opts.JWKSURL = GoogleJWKSURL
		}
		u, err := url.Parse(v.opts.JWKSURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return nil, cfgErr("JWKSURL", "must be an absolute http(s) URL")
		}
		cache := newJWKSCache(v.opts.JWKSURL, core.HTTPClient, core.Now)
		kf, err := keyfunc.New(keyfunc.Options{Storage: cache, UseWhitelist: []jwkset.USE{jwkset.UseSig, ""}})
		if err != nil {
			return nil, cfgErr("JWKSURL", "cannot use the key set")
		}
		v.keyfunc = kf.KeyfuncCtx(context.Background())
		v.parser = jwt.NewParser(
			jwt.WithValidMethods([]string{jwt.SigningMethodRS256.Alg()}),
			jwt.WithAudience(o.Audience),
			jwt.WithLeeway(core.Tolerance),
			jwt.WithExpirationRequired(),
			jwt.WithIssuedAt(),
			jwt.WithTimeFunc(core.Now),
		)
	case PubSubAuthQueryToken:
		if len(core.Secrets) == 0 {
			return nil, cfgErr("Secrets", "at least one token is required with auth: query_token (several are allowed for rotation)")
		}
		if o.Audience != "" || o.ServiceAccountEmail != "" || o.JWKSURL != "" {
			return nil, cfgErr("Audience", "audience, service_account_email and jwks_url are only used with auth: oidc")
		}
		if v.opts.TokenParam == "" {
			v.opts.TokenParam = "token"
		}
		v.tokens = append([]string(nil), core.Secrets...)
	default:
		return nil, cfgErr("Auth", `must be "oidc" or "query_token"`)
	}
	return v, nil
}

func (*pubsubVerifier) Type() Type { return TypePubSub }

// pubsubClaims are the claims of Google's push token.
type pubsubClaims struct {
	jwt.RegisteredClaims
	Email         string `json:"email"`
	EmailVerified bool   `json:"email_verified"`
}

func (v *pubsubVerifier) authenticate(r Request) (time.Time, error) {
	if v.opts.Auth == PubSubAuthQueryToken {
		q, err := url.ParseQuery(r.RawQuery)
		if err != nil {
			return time.Time{}, &Error{Code: CodeMalformedHeader, In: InQuery, Reason: "query string is not validly encoded"}
		}
		tok, e := formValue(q, v.opts.TokenParam)
		if e != nil {
			e.Authenticated, e.In = false, InQuery
			return time.Time{}, e
		}
		if tok == "" {
			return time.Time{}, &Error{Code: CodeMissingHeader, In: InQuery, Field: v.opts.TokenParam, Reason: "required query parameter is absent"}
		}
		ok := false
		for _, s := range v.tokens {
			if equalSecret(tok, s) {
				ok = true
			}
		}
		if !ok {
			return time.Time{}, &Error{Code: CodeBadSignature, In: InQuery, Field: v.opts.TokenParam, Reason: "token does not match any configured secret"}
		}
		return time.Time{}, nil
	}

	const h = PubSubAuthorizationHeader
	raw := header(r.Header, h)
	if raw == "" {
		return time.Time{}, missingHeader(h)
	}
	scheme, tok, ok := strings.Cut(raw, " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return time.Time{}, headerErr(CodeMalformedHeader, h, `must be "Bearer <token>"`)
	}
	if len(tok) > pubsubMaxToken {
		return time.Time{}, headerErr(CodeMalformedHeader, h, "token is too long")
	}
	var claims pubsubClaims
	_, err := v.parser.ParseWithClaims(tok, &claims, v.keyfunc)
	switch {
	case err == nil:
	case errors.Is(err, jwt.ErrTokenExpired), errors.Is(err, jwt.ErrTokenUsedBeforeIssued), errors.Is(err, jwt.ErrTokenNotValidYet):
		return time.Time{}, headerErr(CodeTimestampOutsideTolerance, h, "token is expired or not yet valid")
	case errors.Is(err, jwt.ErrTokenMalformed):
		return time.Time{}, headerErr(CodeMalformedHeader, h, "token is not a JWT")
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return time.Time{}, headerErr(CodeBadSignature, h, "token audience is not the configured audience")
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return time.Time{}, headerErr(CodeBadSignature, h, "token lacks a required claim (exp, aud)")
	case errors.Is(err, errNoKeySet):
		return time.Time{}, headerErr(CodeBadSignature, h, "the key set to check the token against could not be fetched")
	default:
		return time.Time{}, headerErr(CodeBadSignature, h, "token signature does not verify under the key set")
	}
	if claims.Issuer != "https://accounts.google.com" && claims.Issuer != "accounts.google.com" {
		return time.Time{}, headerErr(CodeBadSignature, h, "token issuer is not Google")
	}
	if v.opts.ServiceAccountEmail != "" && (claims.Email != v.opts.ServiceAccountEmail || !claims.EmailVerified) {
		return time.Time{}, headerErr(CodeBadSignature, h, "token is not the configured service account's")
	}
	var iat time.Time
	if claims.IssuedAt != nil {
		iat = claims.IssuedAt.Time
	}
	return iat, nil
}

func (v *pubsubVerifier) Verify(r Request) (Result, error) {
	iat, err := v.authenticate(r)
	if err != nil {
		return Result{}, err
	}
	var body struct {
		Message *struct {
			MessageID  string            `json:"messageId"`
			MessageID2 string            `json:"message_id"`
			Attributes map[string]string `json:"attributes"`
		} `json:"message"`
		Subscription string `json:"subscription"`
	}
	if e := unmarshalBody(r.Body, &body); e != nil {
		return Result{}, authenticated(e)
	}
	if body.Message == nil {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/message", "the push request has no message (unwrapped payloads are not supported)"))
	}
	if body.Subscription == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/subscription", "the push request has no subscription"))
	}
	m := body.Message
	id := m.MessageID
	switch {
	case id == "" && m.MessageID2 == "":
		return Result{}, authenticated(bodyErr(CodeMissingField, "/message/messageId", "the message has no messageId"))
	case id == "":
		id = m.MessageID2
	case m.MessageID2 != "" && m.MessageID2 != id:
		return Result{}, authenticated(bodyErr(CodeMalformedBody, "/message/message_id", "differs from messageId"))
	}
	key := JoinKey(body.Subscription, id)
	if a := v.opts.KeyAttribute; a != "" {
		val := m.Attributes[a]
		if val == "" {
			return Result{}, authenticated(bodyErr(CodeMissingField, "/message/attributes/"+escapePointerToken(a), "the message lacks the key attribute"))
		}
		key = JoinKey(body.Subscription, val)
	}
	var typ string
	if v.typed {
		typ = m.Attributes[v.opts.TypeAttribute]
		if err := v.types.Check(typ, InBody, "/message/attributes/"+escapePointerToken(v.opts.TypeAttribute)); err != nil {
			return Result{}, err
		}
	}
	return Result{Events: []Event{{ID: key, Type: typ, Scope: body.Subscription, Timestamp: iat}}}, nil
}

// escapePointerToken escapes s as one JSON Pointer reference token
// (RFC 6901 §3).
func escapePointerToken(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}
