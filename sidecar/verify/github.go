package verify

import (
	"crypto/sha256"
)

// GitHub delivery headers
// (https://docs.github.com/en/webhooks/webhook-events-and-payloads#delivery-headers).
const (
	GitHubSignatureHeader       = "X-Hub-Signature-256"
	GitHubLegacySignatureHeader = "X-Hub-Signature"
	GitHubDeliveryHeader        = "X-GitHub-Delivery"
	GitHubEventHeader           = "X-GitHub-Event"
	GitHubHookIDHeader          = "X-GitHub-Hook-ID"
)

// The "github" provider type, per
// https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries:
//
//   - X-Hub-Signature-256 is "sha256=" followed by the hex HMAC-SHA256 of the
//     raw body, keyed with the webhook secret string;
//   - the legacy X-Hub-Signature (HMAC-SHA1) is never accepted: a delivery
//     carrying only it is rejected as missing X-Hub-Signature-256;
//   - the body is opaque: application/x-www-form-urlencoded deliveries
//     (payload=<urlencoded JSON>) verify over the form bytes as sent.
//
// GitHub signs no timestamp, so there is no replay window: a captured
// delivery is caught by its delivery id in the claim ledger. Note that the
// X-GitHub-* headers are not covered by the signature; a replay under a forged
// delivery id verifies, and only the payload hash can tell it apart.
// The identity: ID is X-GitHub-Delivery (a GUID that redeliveries keep,
// https://docs.github.com/en/webhooks/testing-and-troubleshooting-webhooks/redelivering-webhooks),
// Type is X-GitHub-Event, Scope is X-GitHub-Hook-ID.
func init() {
	Register(Provider{
		Type: TypeGitHub,
		Name: "GitHub",
		Docs: []string{
			"https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries",
			"https://docs.github.com/en/webhooks/webhook-events-and-payloads#delivery-headers",
			"https://docs.github.com/en/webhooks/testing-and-troubleshooting-webhooks/redelivering-webhooks",
		},
		Build:             buildGitHub,
		CredentialHeaders: func(any) []string { return []string{GitHubSignatureHeader, GitHubLegacySignatureHeader} },
		Setup:             Setup{Secrets: "the webhook's secret (repository, organization or app settings → Webhooks → Secret)"},
		Redelivery: Redelivery{
			Key:     "`X-GitHub-Delivery`",
			Retries: "none by itself; a redelivery from the UI or the API keeps the GUID",
			Horizon: "forever: one GUID per delivery",
			Batches: "no",
			Resends: "no",
		},
	})
}

func buildGitHub(c Core, _ any) (Verifier, error) {
	return &githubVerifier{keys: secretKeys(c.Secrets), types: newTypeFilter(c.AllowedEventTypes)}, nil
}

type githubVerifier struct {
	keys  [][]byte
	types typeFilter
}

func (*githubVerifier) Type() Type { return TypeGitHub }

// githubMAC is GitHub's signature: X-Hub-Signature-256 holds "sha256="
// (lower case) and the hex HMAC-SHA256 of the body under the webhook's
// secret.
var githubMAC = macHeader{
	Name:      GitHubSignatureHeader,
	Prefix:    "sha256=",
	Hash:      sha256.New,
	Malformed: "must be sha256= followed by 64 hex digits",
	Mismatch:  "signature does not match the payload under any configured secret",
}

func (v *githubVerifier) Verify(r Request) (Result, error) {
	if header(r.Header, GitHubSignatureHeader) == "" && header(r.Header, GitHubLegacySignatureHeader) != "" {
		return Result{}, headerErr(CodeMissingHeader, GitHubSignatureHeader, "only the legacy SHA-1 X-Hub-Signature is present; X-Hub-Signature-256 is required")
	}
	if e := githubMAC.check(r.Header, v.keys, r.Body); e != nil {
		return Result{}, e
	}
	return v.Identify(r.Header, r.Body)
}

// Identify implements [Identifier]: the identity from the delivery
// headers, which GitHub's delivery log returns as they were sent
// (GET …/hooks/{id}/deliveries/{delivery_id}: request.headers,
// https://docs.github.com/rest/webhooks/repo-deliveries). The body is not
// read.
func (v *githubVerifier) Identify(h Header, _ []byte) (Result, error) {
	r := Request{Header: h}
	delivery := header(r.Header, GitHubDeliveryHeader)
	if delivery == "" {
		return Result{}, authenticated(missingHeader(GitHubDeliveryHeader))
	}
	event := header(r.Header, GitHubEventHeader)
	if event == "" {
		return Result{}, authenticated(missingHeader(GitHubEventHeader))
	}
	if err := v.types.check(event, InHeader, GitHubEventHeader); err != nil {
		return Result{}, err
	}
	return Result{Events: []Event{{ID: delivery, Type: event, Scope: header(r.Header, GitHubHookIDHeader)}}}, nil
}
