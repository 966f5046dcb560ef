package verify

import (
	"crypto/rand"
	"crypto/sha256"
	"net/http"
	"net/url"

	"github.com/idempotent-claim/idempotent-claim/sidecar/strictjson"
)

// DropboxSignatureHeader carries Dropbox's notification signature
// (https://www.dropbox.com/developers/reference/webhooks#notifications).
const DropboxSignatureHeader = "X-Dropbox-Signature"

// DropboxChallengeParam is the query parameter of Dropbox's verification
// request (https://www.dropbox.com/developers/reference/webhooks#verification-request).
const DropboxChallengeParam = "challenge"

// TypeDropbox is Dropbox app webhooks.
const TypeDropbox Type = "dropbox"

// maxDropboxChallenge bounds the challenge echoed back.
const maxDropboxChallenge = 1024

// The "dropbox" provider takes Dropbox app webhooks, per
// https://www.dropbox.com/developers/reference/webhooks:
//
//   - the verification request: when the webhook URI is added in the App
//     Console, Dropbox sends GET ?challenge=<random string> and expects the
//     challenge back as the body. It is answered 200 with the challenge as
//     text/plain and X-Content-Type-Options: nosniff, as Dropbox asks (a
//     challenge of up to 1024 printable ASCII characters only), with nothing
//     stored. It is not authenticated: it proves only that the URL expects
//     Dropbox webhooks;
//   - notifications: POST, X-Dropbox-Signature is the lower-case hex
//     HMAC-SHA256 of the raw body keyed with the app secret; several app
//     secrets may be configured while one is rotated. Dropbox signs no
//     timestamp: no replay window.
//
// A notification is a nudge: {"list_folder": {"accounts": [...]}, "delta":
// {"users": [...]}} lists the accounts that have changes, not the changes,
// and is the same body every time one account changes. The workflow calls
// files/list_folder/continue with the cursor it kept for each account and
// claims per change it finds (the entry's id + rev), which is what makes
// side effects exactly once. Key rule for the nudge itself: every
// notification is a new event, ID JoinKey("sha256:" and the digest of the
// body's canonical JSON, "delivery", 130 random bits): keyed on the body
// alone, a later change of the same account would be taken for a duplicate
// of the first nudge and the workflow would not run for it. A Dropbox retry
// of an unanswered nudge is therefore a new event too, which costs one
// listing that finds nothing new. Type is "notification", ObjectID the
// account when the nudge names exactly one.
//
// Redelivery: a notification not answered 200 in 10 seconds is retried
// with exponential backoff for about ten minutes, then reported as failed
// in the App Console; the verification request is not retried.
type dropboxVerifier struct {
	keys  [][]byte
	types TypeFilter
}

func init() {
	Register(Provider{
		Type: TypeDropbox,
		Name: "Dropbox",
		Docs: []string{
			"https://www.dropbox.com/developers/reference/webhooks",
		},
		Build: func(core Core, _ any) (Verifier, error) {
			return &dropboxVerifier{keys: secretKeys(core.Secrets), types: core.Types()}, nil
		},
		CredentialHeaders: func(any) []string { return []string{DropboxSignatureHeader} },
		Methods:           []string{http.MethodGet},
		Setup:             Setup{Secrets: "the app secret (App Console → the app → Settings → App secret)"},
		Redelivery: Redelivery{
			Key:     "none: every nudge is its own event (body digest + random); the workflow lists changes by cursor and claims per entry (id + rev)",
			Retries: "exponential backoff for about ten minutes when not answered 200 within 10 s",
			Horizon: "forever (random part)",
			Batches: "no (one nudge may name several accounts and many changes, listed by the workflow)",
			Resends: "identical nudges for every change of an account: never key side effects on the nudge",
		},
	})
}

func (*dropboxVerifier) Type() Type { return TypeDropbox }

func dropboxChallengeOK(s string) bool {
	if s == "" || len(s) > maxDropboxChallenge {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// dropboxMAC is Dropbox's signature: X-Dropbox-Signature holds the hex
// HMAC-SHA256 of the body under the app secret.
var dropboxMAC = macHeader{
	Name:      DropboxSignatureHeader,
	Hash:      sha256.New,
	Malformed: "must be 64 hex digits",
	Mismatch:  "signature does not match the body under any configured app secret",
}

func (v *dropboxVerifier) Verify(r Request) (Result, error) {
	if r.Method == http.MethodGet {
		q, err := url.ParseQuery(r.RawQuery)
		if err != nil {
			return Result{}, &Error{Code: CodeMalformedHeader, In: InQuery, Reason: "query string is not validly encoded"}
		}
		c, e := formValue(q, DropboxChallengeParam)
		if e != nil {
			e.Code, e.In, e.Authenticated = CodeMalformedHeader, InQuery, false
			return Result{}, e
		}
		if c == "" {
			return Result{}, &Error{Code: CodeMissingHeader, In: InQuery, Field: DropboxChallengeParam, Reason: "a GET is Dropbox's verification request and needs a challenge"}
		}
		if !dropboxChallengeOK(c) {
			return Result{}, &Error{Code: CodeMalformedHeader, In: InQuery, Field: DropboxChallengeParam, Reason: "must be 1 to 1024 printable ASCII characters"}
		}
		return Result{Handshake: &Handshake{
			Status: http.StatusOK,
			Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}, "X-Content-Type-Options": {"nosniff"}},
			Body:   []byte(c),
		}}, nil
	}
	if e := dropboxMAC.check(r.Header, v.keys, r.Body); e != nil {
		return Result{}, e
	}
	var n struct {
		ListFolder *struct {
			Accounts []string `json:"accounts"`
		} `json:"list_folder"`
	}
	if e := unmarshalBody(r.Body, &n); e != nil {
		return Result{}, authenticated(e)
	}
	const typ = "notification"
	if err := v.types.Check(typ, InBody, ""); err != nil {
		return Result{}, err
	}
	sum, err := strictjson.Hash(strictjson.TrimBOM(r.Body))
	if err != nil {
		return Result{}, authenticated(bodyErr(CodeMalformedBody, "", "body is not strict JSON"))
	}
	obj := ""
	if n.ListFolder != nil && len(n.ListFolder.Accounts) == 1 {
		obj = n.ListFolder.Accounts[0]
	}
	return Result{Events: []Event{{ID: JoinKey("sha256:"+sum, "delivery", rand.Text()), Type: typ, ObjectID: obj}}}, nil
}
