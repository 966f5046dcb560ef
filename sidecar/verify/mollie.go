package verify

import (
	"crypto/rand"
	"crypto/sha256"
	"net/url"
	"regexp"
	"strings"
)

// MollieSignatureHeader is the header Mollie signs next-gen webhook events
// in (https://docs.mollie.com/reference/webhooks-new,
// https://docs.mollie.com/reference/webhooks-best-practices).
const MollieSignatureHeader = "X-Mollie-Signature"

// TypeMollie is Mollie's webhooks, classic or next-gen.
const TypeMollie Type = "mollie"

// The Mollie webhook kinds a source takes (MollieOptions.Webhooks).
const (
	MollieClassic = "classic"
	MollieNextGen = "next-gen"
)

// mollieID is the shape of a Mollie resource id: a lower-case prefix, '_'
// and letters and digits (tr_d0b0E3EA3v, ord_…, sub_…, re_…).
var mollieID = regexp.MustCompile(`^[a-z]{1,12}_[A-Za-z0-9]{1,64}$`)

// MollieOptions are the options of a "mollie" source.
type MollieOptions struct {
	// Webhooks is the kind of webhook the source receives: "classic"
	// (default: the unsigned id=… form posted to a payment's, order's or
	// subscription's webhookUrl) or "next-gen" (signed JSON events of the
	// Webhooks API).
	Webhooks string `doc:"classic (default: the unsigned id=… form) or next-gen (signed events)"`
	// TokenParameter names the query parameter that carries the source's
	// token in a classic webhookUrl (…?token=<one of the secrets>);
	// default "token". Classic only.
	TokenParameter string `doc:"query parameter of a classic webhookUrl holding the token (default token)"`
}

// The "mollie" provider verifies Mollie webhooks of one of two kinds.
//
// Classic webhooks (https://docs.mollie.com/reference/webhooks): Mollie
// POSTs a form body with one parameter, id=<resource id> (id=tr_d0b0E3EA3v),
// whenever the resource's status changes (a payment paid, expired, failed,
// canceled; a refund or chargeback on it), the same body for every change,
// and retries it, the same, for a few hours until answered 200. The call
// is unsigned and says only "something changed": the receiver is to fetch
// the resource and act on its status. So:
//
//   - authentication is a token the user puts in the webhookUrl they give
//     Mollie (…/ingest/<source>?token=<secret>): the query parameter
//     TokenParameter must equal one of the source's secrets, compared in
//     constant time (several may be active during rotation). The query
//     string then carries a credential: the provider names the parameter
//     in Provider.CredentialQueryParams, so claimd never stores, logs,
//     forwards or echoes it;
//   - the nudge is never keyed on the id alone: that would take the second
//     status change of a payment (paid after authorized, then refunded)
//     for a duplicate of the first and lose it. Every nudge is a new event:
//     ID is JoinKey(id, "nudge", 130 random bits from crypto/rand.Text). A
//     Mollie retry of an unanswered nudge is therefore a new event too,
//     which costs one more workflow run and nothing else: the workflow
//     fetches the resource (GET /v2/payments/{id}) and claims, with the
//     Idempotent Claim node, on the transition it found, id + status
//     (tr_d0b0E3EA3v + paid), so each transition runs its side effects once
//     however many nudges announce it;
//   - ObjectID is the id, Type is "" (a nudge names no event type, so
//     allowed_event_types is refused for a classic source).
//
// Next-gen webhooks (https://docs.mollie.com/reference/webhooks-new, in
// beta): Mollie POSTs a JSON event (id "event_…", type
// "payment-link.paid", entityId, createdAt, _embedded.entity) and signs it:
//
//   - X-Mollie-Signature is "sha256=" and the hex HMAC-SHA256 of the raw
//     body, keyed with the webhook's signing secret
//     (https://docs.mollie.com/reference/webhooks-best-practices); a bare
//     hex value is accepted too, as Mollie's own library does
//     (SignatureValidator in mollie-api-php); several secrets may be
//     configured during rotation;
//   - no timestamp is signed, so there is no replay window;
//   - ID is the event id, which names one event; Type is "type", ObjectID
//     "entityId". A delivery not answered in time (15 s) is retried on
//     Mollie's retry schema.
type mollieVerifier struct {
	nextGen bool
	param   string
	secrets []string
	keys    [][]byte
	types   TypeFilter
}

func init() {
	Register(Provider{
		Type: TypeMollie,
		Name: "Mollie",
		Docs: []string{
			"https://docs.mollie.com/reference/webhooks",
			"https://docs.mollie.com/reference/webhooks-new",
			"https://docs.mollie.com/reference/webhooks-best-practices",
		},
		Options: func() any { return &MollieOptions{} },
		Build:   buildMollie,
		CredentialHeaders: func(opts any) []string {
			if o, _ := opts.(*MollieOptions); o != nil && o.Webhooks == MollieNextGen {
				return []string{MollieSignatureHeader}
			}
			return nil
		},
		CredentialQueryParams: func(opts any) []string {
			o, _ := opts.(*MollieOptions)
			switch {
			case o == nil || o.Webhooks == "" || o.Webhooks == MollieClassic:
				if o != nil && o.TokenParameter != "" {
					return []string{o.TokenParameter}
				}
				return []string{"token"}
			}
			return nil
		},
		Setup: Setup{Secrets: "classic webhooks: the tokens you put in each webhookUrl's query (`…?token=…`, see `options.token_parameter`); `webhooks: next-gen`: the webhook's signing secret (Dashboard → Developers → Webhooks)"},
		Redelivery: Redelivery{
			Key:     "classic: none, every `id=…` nudge is a new event (the workflow fetches the resource and claims on id + status); next-gen: event `id`",
			Retries: "retried for a few hours until answered 200 (classic: the same id=… body)",
			Horizon: "classic: the nudge is not deduplicated, the claim on id + status is forever; next-gen: forever",
			Batches: "no",
			Resends: "classic: one id=… body for every status change of a resource, which is why it is never a key",
		},
	})
}

func buildMollie(core Core, opts any) (Verifier, error) {
	o, _ := opts.(*MollieOptions)
	if o == nil {
		o = &MollieOptions{}
	}
	v := &mollieVerifier{secrets: append([]string(nil), core.Secrets...), keys: secretKeys(core.Secrets), types: core.Types()}
	switch o.Webhooks {
	case "", MollieClassic:
		v.param = o.TokenParameter
		if v.param == "" {
			v.param = "token"
		}
		if strings.TrimSpace(v.param) != v.param || url.QueryEscape(v.param) != v.param {
			return nil, &ConfigError{Type: TypeMollie, Field: "TokenParameter", Reason: "must be a plain query parameter name (letters, digits, '-', '_', '.')"}
		}
		if len(core.AllowedEventTypes) > 0 {
			return nil, &ConfigError{Type: TypeMollie, Field: "AllowedEventTypes", Reason: "classic Mollie webhooks carry no event type; filter in the workflow on the fetched status"}
		}
	case MollieNextGen:
		if o.TokenParameter != "" {
			return nil, &ConfigError{Type: TypeMollie, Field: "TokenParameter", Reason: "applies to classic webhooks only (next-gen events are signed)"}
		}
		v.nextGen = true
	default:
		return nil, &ConfigError{Type: TypeMollie, Field: "Webhooks", Reason: `must be "classic" or "next-gen"`}
	}
	return v, nil
}

func (*mollieVerifier) Type() Type { return TypeMollie }

func (v *mollieVerifier) Verify(r Request) (Result, error) {
	if v.nextGen {
		return v.verifyNextGen(r)
	}
	return v.verifyClassic(r)
}

func (v *mollieVerifier) verifyClassic(r Request) (Result, error) {
	q, err := url.ParseQuery(r.RawQuery)
	if err != nil {
		return Result{}, &Error{Code: CodeMalformedHeader, In: InQuery, Reason: "query string is not validly encoded"}
	}
	vs := q[v.param]
	if len(vs) == 0 || vs[0] == "" {
		return Result{}, &Error{Code: CodeMissingHeader, In: InQuery, Field: v.param, Reason: "the webhook URL carries no token"}
	}
	if len(vs) > 1 {
		return Result{}, &Error{Code: CodeMalformedHeader, In: InQuery, Field: v.param, Reason: "the token parameter appears more than once"}
	}
	ok := false
	for _, s := range v.secrets {
		if equalSecret(vs[0], s) {
			ok = true
		}
	}
	if !ok {
		return Result{}, &Error{Code: CodeBadSignature, In: InQuery, Field: v.param, Reason: "token matches no configured secret"}
	}
	form, err := url.ParseQuery(string(r.Body))
	if err != nil {
		return Result{}, authenticated(bodyErr(CodeMalformedBody, "", "body is not the form Mollie sends (id=…)"))
	}
	id, e := formValue(form, "id")
	if e != nil {
		return Result{}, e
	}
	if id == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "id", "the form has no id"))
	}
	if !mollieID.MatchString(id) {
		return Result{}, authenticated(bodyErr(CodeMalformedBody, "id", "is not a Mollie resource id (prefix, '_', letters and digits)"))
	}
	// rand.Text: 26 base32 characters, 130 random bits.
	return Result{Events: []Event{{ID: JoinKey(id, "nudge", rand.Text()), ObjectID: id}}}, nil
}

func (v *mollieVerifier) verifyNextGen(r Request) (Result, error) {
	raw := header(r.Header, MollieSignatureHeader)
	if raw == "" {
		return Result{}, missingHeader(MollieSignatureHeader)
	}
	sig, ok := macFromHex(strings.TrimPrefix(raw, "sha256="), "", sha256.Size)
	if !ok {
		return Result{}, headerErr(CodeMalformedHeader, MollieSignatureHeader, `must be "sha256=" followed by 64 hex digits`)
	}
	if !anyMACMatches(sha256.New, v.keys, [][]byte{sig}, r.Body) {
		return Result{}, headerErr(CodeBadSignature, MollieSignatureHeader, "signature does not match the payload under any configured secret")
	}
	var ev struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		EntityID string `json:"entityId"`
	}
	if e := unmarshalBody(r.Body, &ev); e != nil {
		return Result{}, authenticated(e)
	}
	if ev.ID == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/id", "the event has no id"))
	}
	if err := v.types.Check(ev.Type, InBody, "/type"); err != nil {
		return Result{}, err
	}
	return Result{Events: []Event{{ID: ev.ID, Type: ev.Type, ObjectID: ev.EntityID}}}, nil
}
