package verify

import (
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // Twilio's documented signature is HMAC-SHA1.
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net"
	"net/url"
	"sort"
	"strings"
)

// Twilio webhook headers
// (https://www.twilio.com/docs/usage/webhooks/webhooks-security).
const (
	TwilioSignatureHeader   = "X-Twilio-Signature"
	TwilioIdempotencyHeader = "I-Twilio-Idempotency-Token"
)

// twilioSIDParams are the parameters naming the resource of a Twilio
// callback, in order of preference; twilioStatusParams its status.
var (
	twilioSIDParams    = []string{"CallSid", "MessageSid", "SmsSid", "RecordingSid", "TranscriptionSid", "ConferenceSid", "ParticipantSid"}
	twilioStatusParams = []string{"CallStatus", "MessageStatus", "SmsStatus", "RecordingStatus", "TranscriptionStatus", "StatusCallbackEvent"}
)

// TwilioOptions are the options of the "twilio" provider type, per
// https://www.twilio.com/docs/usage/webhooks/webhooks-security:
//
//   - X-Twilio-Signature is the base64 HMAC-SHA1, keyed with the account's
//     auth token, of the full URL Twilio requested followed, for form
//     bodies, by every POST parameter name and value, sorted by name (and by
//     value for repeated names);
//   - when the URL carries bodySHA256 (JSON bodies), no parameters are
//     appended and the hex SHA-256 of the raw body must equal bodySHA256;
//   - the URL is URL (the public address configured in Twilio, so headers
//     such as Host and X-Forwarded-* are never trusted) plus "?" and the
//     request's raw query; like Twilio's own libraries, it is tried both
//     with and without the scheme's default port.
//
// Twilio signs no timestamp, so there is no replay window.
// The identity, in order:
//   - the I-Twilio-Idempotency-Token header when present: Twilio's token
//     for the webhook request, which the request's retries (connection
//     overrides,
//     https://www.twilio.com/docs/usage/webhooks/webhooks-connection-overrides)
//     repeat;
//   - for messages (MessageSid or SmsSid): JoinKey(sid, MessageStatus or
//     SmsStatus). A message passes through each status once (queued, sent,
//     delivered; received for an inbound one), so sid and status name one
//     event;
//   - for every other resource (CallSid, RecordingSid, TranscriptionSid,
//     ConferenceSid, ParticipantSid): JoinKey(sid, status, "sha256:" and the
//     hex SHA-256 of JoinKey(raw query, name, value, …) over the sorted
//     parameters). A call's sid and status do not name an event: the voice
//     URL and the call's "ringing" status callback, every <Gather> or
//     <Record> action and the "answered" callback (CallStatus in-progress),
//     the call's and its recording's "completed" callbacks, a conference
//     participant muted twice, all share them. The parameters (Digits,
//     RecordingSid, SequenceNumber, StatusCallbackEvent, Timestamp…) and the
//     action URL's query tell them apart; a retry resends the same request;
//   - otherwise "sha256:" and the hex SHA-256 of the sorted parameters (or
//     the bodySHA256 of a JSON body).
//
// Type is the status value, ObjectID the resource sid.
type TwilioOptions struct {
	// URL is the public webhook URL as configured in Twilio, without query:
	// an absolute http or https URL. Required.
	URL string `required:"true" doc:"the public webhook URL as configured in Twilio, without query (Twilio signs it)"`
}

func init() {
	Register(Provider{
		Type: TypeTwilio,
		Name: "Twilio",
		Docs: []string{
			"https://www.twilio.com/docs/usage/webhooks/webhooks-security",
			"https://www.twilio.com/docs/usage/webhooks/webhooks-connection-overrides",
		},
		Options: func() any { return &TwilioOptions{} },
		Build: func(c Core, opts any) (Verifier, error) {
			return opts.(*TwilioOptions).compile(c)
		},
		CredentialHeaders: func(any) []string { return []string{TwilioSignatureHeader} },
		Setup:             Setup{Secrets: "the account's Auth Token (Console → Account Info → Auth Token; a subaccount's own when the number belongs to it)"},
		Redelivery: Redelivery{
			Key:     "`I-Twilio-Idempotency-Token` when sent; else messages: `MessageSid` + status; other resources: sid + status + SHA-256 of the query and the sorted parameters",
			Retries: "only with connection overrides (`#rc=`): the same request, same token and parameters",
			Horizon: "forever",
			Batches: "no",
			Resends: "no",
		},
	})
}

func (c TwilioOptions) compile(core Core) (*twilioVerifier, error) {
	const t = TypeTwilio
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &ConfigError{Type: t, Field: "URL", Reason: "must be an absolute http or https URL"}
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return nil, &ConfigError{Type: t, Field: "URL", Reason: "must not carry a query or fragment: the request's own query is appended"}
	}
	return &twilioVerifier{keys: secretKeys(core.Secrets), bases: portVariants(u), types: newTypeFilter(core.AllowedEventTypes)}, nil
}

// portVariants returns the URL without and with the scheme's default port
// (or its explicit port), as Twilio's libraries try both.
func portVariants(u *url.URL) []string {
	host := u.Hostname()
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	port := u.Port()
	if port == "" {
		port = "443"
		if u.Scheme == "http" {
			port = "80"
		}
	}
	without, with := *u, *u
	without.Host = host
	with.Host = net.JoinHostPort(u.Hostname(), port)
	a, b := without.String(), with.String()
	if a == b {
		return []string{a}
	}
	return []string{a, b}
}

type twilioVerifier struct {
	keys  [][]byte
	bases []string
	types typeFilter
}

func (*twilioVerifier) Type() Type { return TypeTwilio }

type kv struct{ k, v string }

func (v *twilioVerifier) Verify(r Request) (Result, error) {
	raw := header(r.Header, TwilioSignatureHeader)
	if raw == "" {
		return Result{}, missingHeader(TwilioSignatureHeader)
	}
	sig, err := base64.StdEncoding.DecodeString(raw)
	if err != nil || len(sig) != sha1.Size {
		return Result{}, headerErr(CodeMalformedHeader, TwilioSignatureHeader, "must be the standard base64 of a 20-byte HMAC-SHA1")
	}
	query, err := url.ParseQuery(r.RawQuery)
	if err != nil {
		return Result{}, &Error{Code: CodeMalformedHeader, In: InQuery, Reason: "query string is not validly encoded"}
	}
	var params []kv
	bodyHash := query.Get("bodySHA256")
	if bodyHash == "" {
		form, err := url.ParseQuery(string(r.Body))
		if err != nil {
			return Result{}, bodyErr(CodeMalformedBody, "", "body is not application/x-www-form-urlencoded and the URL has no bodySHA256")
		}
		for k, vs := range form {
			for _, val := range vs {
				params = append(params, kv{k, val})
			}
		}
		sort.Slice(params, func(i, j int) bool {
			if params[i].k != params[j].k {
				return params[i].k < params[j].k
			}
			return params[i].v < params[j].v
		})
	}
	var tail strings.Builder
	for _, p := range params {
		tail.WriteString(p.k)
		tail.WriteString(p.v)
	}
	suffix := ""
	if r.RawQuery != "" {
		suffix = "?" + r.RawQuery
	}
	ok := false
	for _, base := range v.bases {
		if anyMACMatches(sha1.New, v.keys, [][]byte{sig}, []byte(base+suffix), []byte(tail.String())) {
			ok = true
			break
		}
	}
	if !ok {
		return Result{}, headerErr(CodeBadSignature, TwilioSignatureHeader, "signature does not match the URL and parameters under any configured auth token")
	}
	if bodyHash != "" {
		want, err := hex.DecodeString(bodyHash)
		got := sha256.Sum256(r.Body)
		if err != nil || !hmac.Equal(want, got[:]) {
			return Result{}, &Error{Code: CodeBadSignature, In: InQuery, Field: "bodySHA256", Reason: "the body does not match the signed bodySHA256"}
		}
	}

	// get returns the first of names present with a value, and its name.
	get := func(names []string) (string, string, *Error) {
		for _, n := range names {
			found := ""
			for _, p := range params {
				switch {
				case p.k != n && strings.EqualFold(p.k, n):
					return "", "", authenticated(bodyErr(CodeMalformedBody, p.k, "parameter name differs from "+n+" only in letter case"))
				case p.k != n || p.v == "":
				case found == "":
					found = p.v
				case found != p.v:
					return "", "", authenticated(bodyErr(CodeMalformedBody, n, "parameter appears more than once with different values"))
				}
			}
			if found != "" {
				return n, found, nil
			}
		}
		return "", "", nil
	}
	sidName, sid, e := get(twilioSIDParams)
	if e != nil {
		return Result{}, e
	}
	_, status, e := get(twilioStatusParams)
	if e != nil {
		return Result{}, e
	}
	id := header(r.Header, TwilioIdempotencyHeader)
	switch {
	case id != "":
	case sid != "" && (sidName == "MessageSid" || sidName == "SmsSid"):
		id = JoinKey(sid, status)
	case sid != "":
		parts := make([]string, 0, 1+2*len(params))
		parts = append(parts, r.RawQuery)
		for _, p := range params {
			parts = append(parts, p.k, p.v)
		}
		sum := sha256.Sum256([]byte(JoinKey(parts...)))
		id = JoinKey(sid, status, "sha256:"+hex.EncodeToString(sum[:]))
	case bodyHash != "":
		id = "sha256:" + strings.ToLower(bodyHash)
	default:
		parts := make([]string, 0, 2*len(params))
		for _, p := range params {
			parts = append(parts, p.k, p.v)
		}
		sum := sha256.Sum256([]byte(JoinKey(parts...)))
		id = "sha256:" + hex.EncodeToString(sum[:])
	}
	if err := v.types.check(status, InBody, "status"); err != nil {
		return Result{}, err
	}
	return Result{Events: []Event{{ID: id, Type: status, ObjectID: sid, Digest: strings.HasPrefix(id, "sha256:") && header(r.Header, TwilioIdempotencyHeader) == ""}}}, nil
}
