package verify

import (
	"crypto/sha256"
)

// Bitbucket Cloud delivery headers
// (https://support.atlassian.com/bitbucket-cloud/docs/event-payloads/#HTTP-headers).
const (
	BitbucketSignatureHeader = "X-Hub-Signature"
	BitbucketEventKeyHeader  = "X-Event-Key"
	BitbucketRequestUUID     = "X-Request-UUID"
	BitbucketHookUUIDHeader  = "X-Hook-UUID"
	BitbucketAttemptHeader   = "X-Attempt-Number"
)

// TypeBitbucket is the "bitbucket" provider: Bitbucket Cloud repository and
// workspace webhooks.
//
// Verification, per
// https://support.atlassian.com/bitbucket-cloud/docs/manage-webhooks/#Secure-webhooks:
// a webhook with a secret sends X-Hub-Signature "sha256=" and the hex
// HMAC-SHA256 of the raw body keyed with the secret (the prefix names the
// algorithm; only sha256 is accepted, anything else fails closed). A
// webhook without a secret sends no signature and is refused. Nothing is
// timestamped, so there is no replay window. Several secrets may be
// configured while one is changed.
//
// Identity: ID is X-Request-UUID, "the UUID of the request"; a request's
// automatic attempts are counted by X-Attempt-Number and listed under the
// one request in the webhook's request log
// (https://support.atlassian.com/bitbucket-cloud/docs/troubleshoot-webhooks/),
// which is what makes it the retry-stable key (the docs do not say in so
// many words that every attempt repeats it). X-Hook-UUID names the webhook,
// the same for all its events, and is the Scope; it is never a key. Type is
// X-Event-Key ("repo:push", "pullrequest:created").
//
// Redelivery: a response in the 500–599 range is retried up to two more
// times, and a request not answered within 10 s times out
// (https://support.atlassian.com/bitbucket-cloud/docs/troubleshoot-webhooks/);
// every attempt carries X-Attempt-Number.
const TypeBitbucket Type = "bitbucket"

func init() {
	Register(Provider{
		Type: TypeBitbucket,
		Name: "Bitbucket Cloud",
		Docs: []string{
			"https://support.atlassian.com/bitbucket-cloud/docs/manage-webhooks/",
			"https://support.atlassian.com/bitbucket-cloud/docs/event-payloads/",
			"https://support.atlassian.com/bitbucket-cloud/docs/troubleshoot-webhooks/",
		},
		Build: func(core Core, _ any) (Verifier, error) {
			return &bitbucketVerifier{keys: secretKeys(core.Secrets), types: core.Types()}, nil
		},
		CredentialHeaders: func(any) []string { return []string{BitbucketSignatureHeader} },
		Setup:             Setup{Secrets: "the webhook's secret (repository or workspace settings → Webhooks → the webhook → Secret)"},
		Redelivery: Redelivery{
			Key:     "`X-Request-UUID` header (kept by the attempts `X-Attempt-Number` counts)",
			Retries: "on 5xx, up to 2 more attempts; 10 s timeout",
			Horizon: "forever (UUIDs)",
			Batches: "no",
			Resends: "no",
		},
	})
}

type bitbucketVerifier struct {
	keys  [][]byte
	types TypeFilter
}

func (*bitbucketVerifier) Type() Type { return TypeBitbucket }

// bitbucketMAC is Bitbucket's signature: X-Hub-Signature holds "sha256="
// (either letter case) and the hex HMAC-SHA256 of the body under the
// webhook's secret.
var bitbucketMAC = macHeader{
	Name:       BitbucketSignatureHeader,
	Prefix:     "sha256=",
	FoldPrefix: true,
	Hash:       sha256.New,
	Malformed:  "must be sha256= followed by 64 hex digits",
	Mismatch:   "signature does not match the payload under any configured secret",
}

func (v *bitbucketVerifier) Verify(r Request) (Result, error) {
	if e := bitbucketMAC.check(r.Header, v.keys, r.Body); e != nil {
		return Result{}, e
	}
	id := header(r.Header, BitbucketRequestUUID)
	if id == "" {
		return Result{}, authenticated(missingHeader(BitbucketRequestUUID))
	}
	event := header(r.Header, BitbucketEventKeyHeader)
	if event == "" {
		return Result{}, authenticated(missingHeader(BitbucketEventKeyHeader))
	}
	if err := v.types.Check(event, InHeader, BitbucketEventKeyHeader); err != nil {
		return Result{}, err
	}
	return Result{Events: []Event{{ID: id, Type: event, Scope: header(r.Header, BitbucketHookUUIDHeader)}}}, nil
}
