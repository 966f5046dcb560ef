package verify

import "crypto/sha256"

// Jira Cloud webhook headers
// (https://developer.atlassian.com/cloud/jira/platform/webhooks/).
const (
	JiraSignatureHeader  = "X-Hub-Signature"
	JiraIdentifierHeader = "X-Atlassian-Webhook-Identifier"
	JiraRetryHeader      = "X-Atlassian-Webhook-Retry"
)

// TypeJira is the "jira" provider: Jira Cloud admin webhooks registered
// with a secret (in Jira's webhook settings or the REST API).
//
// Verification, per
// https://developer.atlassian.com/cloud/jira/platform/webhooks/#secure-admin-webhooks:
// X-Hub-Signature is "method=signature", where method names the HMAC
// algorithm ("sha256") and signature is the hex HMAC of the raw body keyed
// with the webhook's secret; only sha256 is accepted and anything else
// fails closed. A webhook registered without a secret sends no signature
// and is refused. Jira signs no timestamp (the body's "timestamp" is not a
// replay guard: it is not compared to the clock). Several secrets may be
// configured while one is changed. Webhooks of Connect and OAuth 2.0 apps,
// which authenticate with a JWT instead, are not this provider.
//
// Identity: ID is X-Atlassian-Webhook-Identifier, unique within the site
// and unchanged across retries; X-Atlassian-Webhook-Retry counts the
// retries. Type is the body's webhookEvent ("jira:issue_updated"),
// ObjectID the issue id (or the comment id, for comment events).
//
// Redelivery: a delivery answered 408, 409, 425, 429 or 5xx, or whose
// connection fails or times out, is retried, up to about 30 minutes after
// the event
// (https://developer.atlassian.com/cloud/jira/platform/webhooks/#retry-policy).
const TypeJira Type = "jira"

func init() {
	Register(Provider{
		Type: TypeJira,
		Name: "Jira Cloud",
		Docs: []string{
			"https://developer.atlassian.com/cloud/jira/platform/webhooks/",
			"https://developer.atlassian.com/cloud/jira/platform/webhooks/#secure-admin-webhooks",
			"https://developer.atlassian.com/cloud/jira/platform/webhooks/#retry-policy",
		},
		Build: func(core Core, _ any) (Verifier, error) {
			return &jiraVerifier{keys: secretKeys(core.Secrets), types: core.Types()}, nil
		},
		CredentialHeaders: func(any) []string { return []string{JiraSignatureHeader} },
		Setup:             Setup{Secrets: "the webhook's secret (Jira settings → System → WebHooks → the webhook → Secret, or the REST API's `secret`)"},
		Redelivery: Redelivery{
			Key:     "`X-Atlassian-Webhook-Identifier` header (unchanged across retries)",
			Retries: "on 408, 409, 425, 429, 5xx, connection failure or timeout; up to about 30 minutes; `X-Atlassian-Webhook-Retry` counts",
			Horizon: "unique within the site",
			Batches: "no",
			Resends: "no",
		},
	})
}

type jiraVerifier struct {
	keys  [][]byte
	types TypeFilter
}

func (*jiraVerifier) Type() Type { return TypeJira }

// jiraMAC is Jira's signature: X-Hub-Signature holds "sha256=" (either
// letter case) and the hex HMAC-SHA256 of the body under the webhook's
// secret.
var jiraMAC = macHeader{
	Name:       JiraSignatureHeader,
	Prefix:     "sha256=",
	FoldPrefix: true,
	Hash:       sha256.New,
	Malformed:  "must be sha256= followed by 64 hex digits",
	Mismatch:   "signature does not match the payload under any configured secret",
}

func (v *jiraVerifier) Verify(r Request) (Result, error) {
	if e := jiraMAC.check(r.Header, v.keys, r.Body); e != nil {
		return Result{}, e
	}
	var body struct {
		WebhookEvent string `json:"webhookEvent"`
		Issue        struct {
			ID flexString `json:"id"`
		} `json:"issue"`
		Comment struct {
			ID flexString `json:"id"`
		} `json:"comment"`
	}
	if e := unmarshalBody(r.Body, &body); e != nil {
		return Result{}, authenticated(e)
	}
	id := header(r.Header, JiraIdentifierHeader)
	if id == "" {
		return Result{}, authenticated(missingHeader(JiraIdentifierHeader))
	}
	if body.WebhookEvent == "" {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/webhookEvent", "the delivery has no webhookEvent"))
	}
	if err := v.types.Check(body.WebhookEvent, InBody, "/webhookEvent"); err != nil {
		return Result{}, err
	}
	obj := string(body.Issue.ID)
	if body.Comment.ID != "" {
		obj = string(body.Comment.ID)
	}
	return Result{Events: []Event{{ID: id, Type: body.WebhookEvent, ObjectID: obj}}}, nil
}
