package verify

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// GitLab delivery headers
// (https://docs.gitlab.com/user/project/integrations/webhooks/#delivery-headers).
const (
	GitLabTokenHeader          = "X-Gitlab-Token"
	GitLabEventHeader          = "X-Gitlab-Event"
	GitLabEventUUIDHeader      = "X-Gitlab-Event-UUID"
	GitLabInstanceHeader       = "X-Gitlab-Instance"
	GitLabIdempotencyKeyHeader = "Idempotency-Key"
	// The signing-token headers follow the Standard Webhooks layout
	// (https://gitlab.com/gitlab-org/gitlab/-/merge_requests/230944).
	GitLabWebhookIDHeader        = "webhook-id"
	GitLabWebhookTimestampHeader = "webhook-timestamp"
	GitLabWebhookSignatureHeader = "webhook-signature"
)

// TypeGitLab is the "gitlab" provider: GitLab project, group and system
// hooks.
//
// Verification, per https://docs.gitlab.com/user/project/integrations/webhooks/:
//
//   - the hook's secret token arrives verbatim in X-Gitlab-Token; it is
//     compared in constant time with each of the source's secrets (several
//     during rotation). A token proves origin, not integrity, and GitLab
//     signs no timestamp with it;
//   - newer GitLab also signs, with a signing token
//     (https://docs.gitlab.com/user/project/integrations/webhooks/#signing-tokens,
//     the Standard Webhooks layout: "whsec_" and the base64 of the key,
//     https://gitlab.com/gitlab-org/gitlab/-/merge_requests/230944):
//     webhook-signature holds space-separated "v1,<base64 HMAC-SHA256>"
//     entries over "<webhook-id>.<webhook-timestamp>.<raw body>";
//     webhook-timestamp is unix seconds and must be within Tolerance of the
//     clock (default [DefaultTolerance], the Standard Webhooks value).
//     GitLab recommends signing tokens over secret tokens for new hooks.
//     Configure them in options.signing_tokens (several while one is
//     changed); when any is configured every delivery must carry a valid
//     signature, and when secrets are configured too, the X-Gitlab-Token
//     as well.
//
// Identity: ID is the Idempotency-Key header (GitLab 17.4 and later,
// "unique ID consistent across webhook retries",
// https://docs.gitlab.com/user/project/integrations/webhooks/#delivery-headers;
// webhook-id, which carries the same value on signed deliveries, when
// Idempotency-Key is absent). Older GitLab sends none:
// then ID is JoinKey(X-Gitlab-Event-UUID, "sha256:" and the hex SHA-256 of
// the body), because X-Gitlab-Event-UUID is shared by the recursive hooks
// one event triggers (a different body under one UUID is a different
// event). Type is X-Gitlab-Event ("Push Hook"), Scope X-Gitlab-Instance.
//
// Redelivery: GitLab documents no automatic retry of a failed delivery
// (it is dropped; retry policies are an open proposal,
// https://gitlab.com/gitlab-org/gitlab/-/issues/355721); a hook failing 4
// times in a row is disabled for a while (1 minute, backing off to 24
// hours), after 40 for good
// (https://docs.gitlab.com/user/project/integrations/webhooks/#auto-disabled-webhooks);
// a request can be resent by hand from the hook's recent events, with the
// same Idempotency-Key.
const TypeGitLab Type = "gitlab"

// GitLabOptions are the gitlab provider's options.
type GitLabOptions struct {
	// SigningTokens are the hook's signing tokens ("whsec_" and base64 of
	// 24 to 64 bytes); several may be active during rotation. Optional:
	// without them only X-Gitlab-Token is checked.
	SigningTokens []string `doc:"the hook's signing tokens (whsec_…); without them only X-Gitlab-Token is checked"`
}

func init() {
	Register(Provider{
		Type: TypeGitLab,
		Name: "GitLab",
		Docs: []string{
			"https://docs.gitlab.com/user/project/integrations/webhooks/",
			"https://docs.gitlab.com/user/project/integrations/webhook_events/",
			"https://gitlab.com/gitlab-org/gitlab/-/issues/355721",
			"https://gitlab.com/gitlab-org/gitlab/-/merge_requests/230944",
		},
		Options:         func() any { return &GitLabOptions{} },
		Build:           buildGitLab,
		SecretsOptional: true,
		SignsTimestamp:  true,
		CredentialHeaders: func(any) []string {
			return []string{GitLabTokenHeader, GitLabWebhookSignatureHeader}
		},
		Setup: Setup{Secrets: "the webhook's secret token, checked in `X-Gitlab-Token` (project or group → Settings → Webhooks → Secret token); may be left out when `options.signing_tokens` are set"},
		Redelivery: Redelivery{
			Key:     "`Idempotency-Key` header (17.4+) or `webhook-id`; before: `X-Gitlab-Event-UUID` + body digest",
			Retries: "none automatic (dropped); hooks failing 4 times are disabled for a while, 40 for good; a manual resend keeps `Idempotency-Key`",
			Horizon: "forever (UUIDs)",
			Batches: "no",
			Resends: "no",
		},
	})
}

func buildGitLab(core Core, opts any) (Verifier, error) {
	o, _ := opts.(*GitLabOptions)
	if o == nil {
		o = &GitLabOptions{}
	}
	if len(core.Secrets) == 0 && len(o.SigningTokens) == 0 {
		return nil, &ConfigError{Type: TypeGitLab, Field: "Secrets", Reason: "a secret token (X-Gitlab-Token) or options.signing_tokens is required"}
	}
	v := &gitlabVerifier{tokens: append([]string(nil), core.Secrets...), tol: core.Tolerance, now: core.Now, types: core.Types()}
	for i, s := range o.SigningTokens {
		field := "SigningTokens[" + strconv.Itoa(i) + "]"
		if !strings.HasPrefix(s, StandardWebhooksSecretPrefix) {
			return nil, &ConfigError{Type: TypeGitLab, Field: field, Reason: "must be the whsec_ signing token GitLab shows"}
		}
		b, err := base64.StdEncoding.DecodeString(s[len(StandardWebhooksSecretPrefix):])
		if err != nil {
			return nil, &ConfigError{Type: TypeGitLab, Field: field, Reason: "is not valid standard base64 after the whsec_ prefix"}
		}
		if len(b) < StandardWebhooksMinSecretBytes || len(b) > StandardWebhooksMaxSecretBytes {
			return nil, &ConfigError{Type: TypeGitLab, Field: field, Reason: "decodes to " + strconv.Itoa(len(b)) + " bytes; a signing token is 24 to 64"}
		}
		v.signKeys = append(v.signKeys, b)
	}
	return v, nil
}

type gitlabVerifier struct {
	tokens   []string
	signKeys [][]byte
	tol      time.Duration
	now      func() time.Time
	types    TypeFilter
}

func (*gitlabVerifier) Type() Type { return TypeGitLab }

func (v *gitlabVerifier) Verify(r Request) (Result, error) {
	if len(v.tokens) > 0 {
		got := header(r.Header, GitLabTokenHeader)
		if got == "" {
			return Result{}, missingHeader(GitLabTokenHeader)
		}
		ok := false
		for _, want := range v.tokens {
			if equalSecret(got, want) {
				ok = true
			}
		}
		if !ok {
			return Result{}, headerErr(CodeBadSignature, GitLabTokenHeader, "token does not match any configured secret")
		}
	}
	var ts time.Time
	if len(v.signKeys) > 0 {
		var err error
		if ts, err = v.checkSignature(r); err != nil {
			return Result{}, err
		}
	}
	event := header(r.Header, GitLabEventHeader)
	if event == "" {
		return Result{}, authenticated(missingHeader(GitLabEventHeader))
	}
	id := header(r.Header, GitLabIdempotencyKeyHeader)
	if id == "" {
		id = header(r.Header, GitLabWebhookIDHeader)
	}
	if id == "" {
		uuid := header(r.Header, GitLabEventUUIDHeader)
		if uuid == "" {
			return Result{}, authenticated(headerErr(CodeMissingHeader, GitLabIdempotencyKeyHeader, "neither Idempotency-Key nor X-Gitlab-Event-UUID is present"))
		}
		sum := sha256.Sum256(r.Body)
		id = JoinKey(uuid, "sha256:"+hex.EncodeToString(sum[:]))
	}
	if err := v.types.Check(event, InHeader, GitLabEventHeader); err != nil {
		return Result{}, err
	}
	return Result{Events: []Event{{ID: id, Type: event, Scope: header(r.Header, GitLabInstanceHeader), Timestamp: ts}}}, nil
}

// checkSignature verifies the signing-token headers and returns the signed
// timestamp.
func (v *gitlabVerifier) checkSignature(r Request) (time.Time, error) {
	id := header(r.Header, GitLabWebhookIDHeader)
	if id == "" {
		return time.Time{}, missingHeader(GitLabWebhookIDHeader)
	}
	tsRaw := header(r.Header, GitLabWebhookTimestampHeader)
	if tsRaw == "" {
		return time.Time{}, missingHeader(GitLabWebhookTimestampHeader)
	}
	sigRaw := header(r.Header, GitLabWebhookSignatureHeader)
	if sigRaw == "" {
		return time.Time{}, missingHeader(GitLabWebhookSignatureHeader)
	}
	n, ok := parseUnix(tsRaw)
	if !ok {
		return time.Time{}, headerErr(CodeMalformedHeader, GitLabWebhookTimestampHeader, "must be a unix timestamp in seconds")
	}
	var sigs [][]byte
	for _, entry := range strings.Fields(sigRaw) {
		ver, sig, ok := strings.Cut(entry, ",")
		if !ok || ver != "v1" {
			continue
		}
		if b, err := base64.StdEncoding.DecodeString(sig); err == nil && len(b) == sha256.Size {
			sigs = append(sigs, b)
		}
	}
	if len(sigs) == 0 {
		return time.Time{}, headerErr(CodeBadSignature, GitLabWebhookSignatureHeader, "no readable v1 signature")
	}
	if !anyMACMatches(sha256.New, v.signKeys, sigs, []byte(id), []byte{'.'}, []byte(tsRaw), []byte{'.'}, r.Body) {
		return time.Time{}, headerErr(CodeBadSignature, GitLabWebhookSignatureHeader, "no signature matches the payload under any configured signing token")
	}
	ts := time.Unix(n, 0)
	if now := v.now(); !within(now, ts, v.tol) {
		return time.Time{}, windowErr(InHeader, GitLabWebhookTimestampHeader, now, ts, v.tol)
	}
	return ts, nil
}
