package verify

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// The provider cases are found by verifytest.CasesDir.

type caseStep struct {
	Name             string             `json:"name"`
	Query            string             `json:"query"`
	Headers          map[string]*string `json:"headers"`
	Body             string             `json:"body"`
	BodyEncoding     string             `json:"body_encoding"`
	BodySHA256       string             `json:"body_sha256"`
	ClockUnix        *int64             `json:"clock_unix"`
	Precondition     string             `json:"precondition"`
	Expected         string             `json:"expected"`
	ExpectedResponse *struct {
		Status      int             `json:"status"`
		ContentType string          `json:"content_type"`
		Body        json.RawMessage `json:"body"`
	} `json:"expected_response"`
}

type providerCase struct {
	ID       string     `json:"id"`
	Provider string     `json:"provider"`
	Secret   *string    `json:"secret"`
	Steps    []caseStep `json:"steps"`
}

var (
	casesOnce sync.Once
	casesList []providerCase
	casesErr  error
)

// loadCases reads cases.json, failing the test with the places it looked.
func loadCases(t testing.TB) []providerCase {
	t.Helper()
	casesOnce.Do(func() {
		dir, err := verifytest.CasesDir()
		if err != nil {
			casesErr = err
			return
		}
		b, err := os.ReadFile(filepath.Join(dir, "cases.json"))
		if err != nil {
			casesErr = err
			return
		}
		casesErr = json.Unmarshal(b, &casesList)
	})
	require.NoError(t, casesErr)
	require.NotEmpty(t, casesList, "cases.json holds no cases")
	return casesList
}

func TestCasesDirOrder(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "nope")
	env := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(env, "cases.json"), []byte("[]"), 0o600))
	dir, err := verifytest.FindCasesDir(env, missing, filepath.Join("testdata", "cases"))
	require.NoError(t, err)
	require.Equal(t, env, dir, "IC_CASES_DIR wins")
	dir, err = verifytest.FindCasesDir("", missing, filepath.Join("testdata", "cases"))
	require.NoError(t, err)
	require.Equal(t, filepath.Join("testdata", "cases"), dir, "the checked-in copy is the last resort")
	_, err = verifytest.FindCasesDir(missing)
	require.ErrorContains(t, err, verifytest.CasesEnv)
	dir, err = verifytest.CasesDir()
	require.NoError(t, err, "a plain checkout finds its cases")
	require.FileExists(t, filepath.Join(dir, "cases.json"))
}

// stepBody returns the exact body bytes of a step and checks body_sha256.
func stepBody(t *testing.T, s caseStep) []byte {
	t.Helper()
	b, err := verifytest.StepBody(s.Body, s.BodyEncoding, s.BodySHA256)
	require.NoError(t, err)
	return b
}

// Header variants: canonical (as net/http builds it) and literal (the
// case's own spelling as map keys, exercising the case-insensitive scan).
func canonicalHeader(h map[string]*string) http.Header {
	out := http.Header{}
	for k, v := range h {
		if v != nil {
			out.Add(k, *v)
		}
	}
	return out
}

func literalHeader(h map[string]*string) http.Header {
	out := http.Header{}
	for k, v := range h {
		if v != nil {
			out[k] = []string{*v}
		}
	}
	return out
}

type outcome int

const (
	accept outcome = iota + 1
	reject
	handshake
	configError
	notApplicable
)

// expectation is what the verifier must do with one step.
type expectation struct {
	outcome outcome
	// config builds the verifier config for this step (nil: the case's).
	config func(secret string, now func() time.Time) config
	// header adjusts the request headers (e.g. adds route auth the case
	// leaves to the deployment).
	header func(h http.Header)
	// accept: the expected single event ID (when set), type, scope, object
	// id; sameAs/distinct name other steps ("C01/1") by their first event ID.
	id, typ, scope, object string
	sameAs                 []string
	distinct               []string
	events, rejected       int
	// reject: the code and (optional) field.
	code  Code
	field string
	// handshake: body and content type ("" = taken from expected_response).
	hsBody, hsType string
	// notApplicable / configError: why.
	why string
	// altConfig verifies the step a second time under another key rule and
	// compares with altSameAs / altDistinct (alternative routes in a case).
	altConfig   func(secret string, now func() time.Time) config
	altSameAs   []string
	altDistinct []string
	// parallel verifies the step this many times concurrently.
	parallel int
	// body generates the step body when body_encoding is "generated".
	body func(t *testing.T, h http.Header, now time.Time) []byte
}

const (
	testBearer      = "route-token-FAKE-0001"
	linearSecret    = "lin_wh_FAKE_signing_secret_000000"
	documensoSecret = "documenso-shared-secret-FAKE"
)

func stdCfg(secret string, now func() time.Time) config {
	return cfg(TypeStandardWebhooks, Core{Secrets: []string{secret}, Now: now}, nil)
}

func stripeCfg(secret string, now func() time.Time) config {
	return cfg(TypeStripe, Core{Secrets: []string{secret}, Now: now}, nil)
}

func githubCfg(secret string, _ func() time.Time) config {
	return cfg(TypeGitHub, Core{Secrets: []string{secret}}, nil)
}

func slackCfg(secret string, now func() time.Time) config {
	return cfg(TypeSlack, Core{Secrets: []string{secret}, Now: now}, nil)
}

func bearer(h http.Header) {
	h.Set("Authorization", "Bearer "+testBearer)
}

// caseTable maps every step of cases.json ("C01/1") to its expectation.
// TestCasesCoverEveryStep fails when a case gains a step not listed here.
var caseTable = map[string]expectation{
	// C01 Standard Webhooks published vector.
	"C01/1": {outcome: accept, config: stdCfg, id: "msg_p5jXN8AQM9LWM0D4loKWxJek"},
	"C01/2": {outcome: accept, config: stdCfg, sameAs: []string{"C01/1"}},
	"C01/3": {outcome: accept, config: stdCfg, sameAs: []string{"C01/1"}},
	"C01/4": {outcome: reject, config: stdCfg, code: CodeBadSignature, field: "webhook-signature"},
	"C01/5": {outcome: reject, config: stdCfg, code: CodeTimestampOutsideTolerance, field: "webhook-timestamp"},
	"C01/6": {outcome: reject, config: stdCfg, code: CodeTimestampOutsideTolerance, field: "webhook-timestamp"},
	"C01/7": {outcome: accept, config: stdCfg, sameAs: []string{"C01/1"}},
	"C01/8": {outcome: reject, config: stdCfg, code: CodeMissingHeader, field: "webhook-id"},
	"C01/9": {outcome: reject, config: stdCfg, code: CodeMalformedHeader, field: "webhook-timestamp"},

	// C02 whsec_ secret handling.
	"C02/1": {outcome: reject, config: stdCfg, code: CodeBadSignature, field: "webhook-signature"},
	"C02/2": {outcome: configError, why: "secrets 'whsec_' and 'whsec_!!!!' are refused by New; the request is never verified"},
	"C02/3": {outcome: accept, config: stdCfg, id: "msg_p5jXN8AQM9LWM0D4loKWxJek"},

	// C03 Stripe-Signature.
	"C03/1": {outcome: accept, config: stripeCfg, id: "evt_1TestCustomerCreated01", typ: "customer.created", object: "cus_TestCustomer0001"},
	"C03/2": {outcome: accept, config: func(_ string, now func() time.Time) config {
		return cfg(TypeStripe, Core{Secrets: []string{"whsec_test_secret_rolled_key"}, Now: now}, nil)
	}, sameAs: []string{"C03/1"}},
	"C03/3": {outcome: reject, config: stripeCfg, code: CodeBadSignature, field: StripeSignatureHeader},
	"C03/4": {outcome: reject, config: stripeCfg, code: CodeMalformedHeader, field: StripeSignatureHeader},
	"C03/5": {outcome: accept, config: stripeCfg, sameAs: []string{"C03/1"}},
	"C03/6": {outcome: accept, config: stripeCfg, sameAs: []string{"C03/1"}},
	"C03/7": {outcome: reject, config: stripeCfg, code: CodeBadSignature, field: StripeSignatureHeader},

	// C04 replay window vs re-signed retries.
	"C04/1": {outcome: reject, config: stripeCfg, code: CodeTimestampOutsideTolerance, field: StripeSignatureHeader},
	"C04/2": {outcome: accept, config: stripeCfg, id: "evt_1TestCustomerCreated01"},
	"C04/3": {outcome: accept, config: stripeCfg, sameAs: []string{"C04/2"}},
	"C04/4": {outcome: accept, config: stripeCfg, sameAs: []string{"C04/2"}},
	"C04/5": {outcome: accept, config: stripeCfg, sameAs: []string{"C04/2"}},

	// C05 concurrent duplicates: the verifier gives every copy the same key;
	// exactly-once is the claim ledger's job.
	"C05/1": {outcome: accept, config: stripeCfg, id: "evt_1TestCustomerCreated01", parallel: 20},
	"C05/2": {outcome: accept, config: stripeCfg, sameAs: []string{"C05/1"}},
	"C05/3": {outcome: accept, config: stripeCfg, sameAs: []string{"C05/1"}},

	// C06 out-of-order events: distinct ids, same object.
	"C06/1": {outcome: accept, config: stripeCfg, id: "evt_1TestCustomerUpdated02", typ: "customer.updated", object: "cus_TestCustomer0001"},
	"C06/2": {outcome: accept, config: stripeCfg, id: "evt_1TestCustomerCreated01", object: "cus_TestCustomer0001", distinct: []string{"C06/1"}},

	// C08 GitHub published vector.
	"C08/1": {outcome: accept, config: githubCfg, id: "72d3162e-cc78-11e3-81ab-4c9367dc0958", typ: "ping", scope: "123456789"},
	"C08/2": {outcome: accept, config: githubCfg, sameAs: []string{"C08/1"}},
	"C08/3": {outcome: accept, config: githubCfg, id: "72d3162e-cc78-11e3-81ab-4c9367dc0959"},
	"C08/4": {outcome: reject, config: githubCfg, code: CodeMissingHeader, field: GitHubSignatureHeader},
	"C08/5": {outcome: reject, config: githubCfg, code: CodeMissingHeader, field: GitHubSignatureHeader},

	// C09 form-encoded GitHub deliveries.
	"C09/1": {outcome: accept, config: githubCfg, id: "0b4f2e10-0000-4000-8000-000000000009"},
	"C09/2": {outcome: reject, config: githubCfg, code: CodeBadSignature, field: GitHubSignatureHeader},
	"C09/3": {outcome: accept, config: githubCfg, id: "0b4f2e10-0000-4000-8000-00000000000b"},

	// C11 Slack published vector (slash command).
	"C11/1": {outcome: accept, config: slackCfg, id: "398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c", typ: "/webhook-collect", scope: "T1DC2JH3J"},
	"C11/2": {outcome: reject, config: slackCfg, code: CodeTimestampOutsideTolerance, field: SlackTimestampHeader},
	"C11/3": {outcome: reject, config: slackCfg, code: CodeBadSignature, field: SlackSignatureHeader},

	// C12 Slack Events API retry and url_verification.
	"C12/1": {outcome: accept, config: slackCfg, id: "Ev0TESTEVENT01", typ: "app_mention", scope: "T1DC2JH3J"},
	"C12/2": {outcome: accept, config: slackCfg, sameAs: []string{"C12/1"}},
	"C12/3": {outcome: handshake, config: slackCfg, hsType: "application/json"},

	// C13 Twilio vectors. The URL is configured without query; the
	// request's raw query is appended (Host and X-Forwarded-* are ignored).
	// A call's sid names the call, not the request: the key adds the
	// digest of the query and the sorted parameters (python3: sha256 of
	// JoinKey("foo=1&bar=2", "CallSid", "CA1234567890ABCDE", "Caller", …)),
	// so step 2 (another Caller) is another event and steps 3 and 4 (the
	// same request signed over other URL spellings) are step 1 again.
	"C13/1": {outcome: accept, config: twilioCfg, id: JoinKey("CA1234567890ABCDE", "", "sha256:8f667fa156643afe018eb3981a0899f105336603b56a35f28be565eaefeadb99"), object: "CA1234567890ABCDE"},
	"C13/2": {outcome: accept, config: twilioCfg, id: JoinKey("CA1234567890ABCDE", "", "sha256:ce253fc8527ed35bd1a6450773594a9f0c50c11b558a3a3b119480bb0495b5be"), distinct: []string{"C13/1"}},
	"C13/3": {outcome: accept, config: twilioCfg, sameAs: []string{"C13/1"}},
	"C13/4": {outcome: accept, config: twilioCfg, sameAs: []string{"C13/1"}},
	"C13/5": {outcome: accept, config: twilioCfg, distinct: []string{"C13/1"}},
	"C13/6": {outcome: accept, config: twilioCfg, id: "sha256:0a1ff7634d9ab3b95db5c9a2dfe9416e41502b283a80c7cf19632632f96e6620"},
	"C13/7": {outcome: reject, config: twilioCfg, code: CodeBadSignature, field: "bodySHA256"},
	"C13/8": {outcome: reject, config: twilioCfg, code: CodeBadSignature, field: TwilioSignatureHeader},

	// C14 Shopify.
	"C14/1": {outcome: accept, config: shopifyCfg, id: JoinKey("products/update", "7b8c9d0a-1234-5678-90ab-cdef12345678"), typ: "products/update", scope: "example-store.myshopify.com", object: "gid://shopify/Product/820982911946154508"},
	"C14/2": {outcome: reject, config: shopifyCfg, code: CodeBadSignature, field: ShopifyHMACHeader},
	"C14/3": {outcome: accept, config: shopifyCfg, sameAs: []string{"C14/1"}},
	"C14/4": {outcome: accept, config: shopifyCfg, sameAs: []string{"C14/1"}},
	"C14/5": {outcome: accept, config: shopifyCfg, id: JoinKey("products/update", "8c8c8c8c-0000-4000-8000-000000000002"), distinct: []string{"C14/1"}},

	// C15 Graph validation handshakes.
	"C15/1": {outcome: handshake, config: graphCfg},
	"C15/2": {outcome: handshake, config: graphCfg},
	"C15/3": {outcome: handshake, config: graphCfg, hsBody: "<script>alert(1)</script>", hsType: "text/plain; charset=utf-8"},

	// C16 Graph notifications, clientState per item.
	"C16/1": {outcome: accept, config: graphCfg, events: 1, rejected: 1, id: JoinKey("d29fa5a4-0000-4000-8000-00000000aaaa", "lsgTZMr9KwAAA"), typ: "created", scope: "84bd8158-6d4d-4958-8b9f-9d6445542f95", object: "AAMkAGTEST1"},
	"C16/2": {outcome: accept, config: graphCfg, events: 1, sameAs: []string{"C16/1"}},

	// C17 Pub/Sub push. Google's OIDC JWT is not verified by this package
	// (no network, no JWKS); the steps run under a static bearer token to
	// check the key rules: (subscription, messageId), and the composite
	// (subscription, attributes.eventId) as the alternative route.
	"C17/1": {outcome: accept, config: pubsubCfg, header: bearer, id: JoinKey("projects/myproject/subscriptions/mysubscription", "2070443601311540")},
	"C17/2": {outcome: accept, config: pubsubCfg, header: bearer, sameAs: []string{"C17/1"}, altConfig: pubsubEventIDCfg},
	"C17/3": {outcome: accept, config: pubsubCfg, header: bearer, distinct: []string{"C17/2"}, altConfig: pubsubEventIDCfg, altSameAs: []string{"C17/2"}},
	"C17/4": {outcome: accept, config: pubsubCfg, header: bearer, distinct: []string{"C17/1"}, altConfig: pubsubEventIDCfg, altDistinct: []string{"C17/2"}},

	// C18 CloudEvents binary and structured modes (route auth: bearer).
	"C18/1": {outcome: accept, config: ceCfg, header: bearer, id: JoinKey("/mycontext/subcontext", "1234-1234-1234"), typ: "com.example.someevent"},
	"C18/2": {outcome: accept, config: ceCfg, header: bearer, sameAs: []string{"C18/1"}},
	"C18/3": {outcome: accept, config: ceCfg, header: bearer, distinct: []string{"C18/1"}},
	"C18/4": {outcome: accept, config: ceCfg, header: bearer, id: JoinKey("/my context", "9999")},
	"C18/5": {outcome: accept, config: ceCfg, header: bearer, sameAs: []string{"C18/4"}},

	// C19 Zoom.
	"C19/1": {outcome: handshake, config: zoomCfg},
	// The payload digest: python3, sha256 of json.dumps(payload,
	// sort_keys=True, separators=(",", ":"), ensure_ascii=False).
	"C19/2": {outcome: accept, config: zoomCfg, id: JoinKey("meeting.started", "4444AAAiAAAAAiAiAiiAii==", "1654503900000",
		"sha256:3b51e62eb4d579f1610e058142c73d59338cac407f70ff829fcc0cc32cf9d745"), typ: "meeting.started", scope: "AAAAAAAAAAAAAAAAAAAAAA"},
	"C19/3": {outcome: reject, config: zoomCfg, code: CodeBadSignature, field: ZoomSignatureHeader},

	// C20 (a) same key, different payload: both verify with one key; the
	// conflict is the ledger's (payload hash). (b) Documenso shared secret,
	// composite key from body fields.
	"C20/1": {outcome: accept, config: stdCfg, id: "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", typ: "invoice.paid"},
	"C20/2": {outcome: accept, config: stdCfg, sameAs: []string{"C20/1"}},
	"C20/3": {outcome: accept, config: documensoCfg, id: JoinKey("DOCUMENT_COMPLETED", "42", "COMPLETED"), typ: "DOCUMENT_COMPLETED"},
	"C20/4": {outcome: accept, config: documensoCfg, sameAs: []string{"C20/3"}},

	// C23 RFC 8785 canonical JSON: key derivation belongs to the claim
	// ledger (key_fields, claim.Canonical); nothing to verify.
	"C23/1": {outcome: notApplicable, why: "canonical-JSON keys are derived by the claim ledger, not by a verifier"},
	"C23/2": {outcome: notApplicable, why: "canonical-JSON keys are derived by the claim ledger, not by a verifier"},
	"C23/3": {outcome: notApplicable, why: "canonical-JSON keys are derived by the claim ledger, not by a verifier"},
	"C23/4": {outcome: notApplicable, why: "canonical-JSON keys are derived by the claim ledger, not by a verifier"},
	"C23/5": {outcome: notApplicable, why: "canonical-JSON keys are derived by the claim ledger, not by a verifier"},

	// C25 huge payloads: the limit is the transport's; a 15 MiB body still
	// verifies.
	"C25/1": {outcome: accept, config: stdCfg, id: "msg_big_15mib", body: bigStandardBody},
	"C25/2": {outcome: notApplicable, why: "body size limits are enforced by the HTTP transport before verification"},
	"C25/3": {outcome: notApplicable, why: "body size limits are enforced by the HTTP transport before verification"},

	// C27 Paddle and Linear.
	"C27/1": {outcome: accept, config: paddleCfg, id: "evt_01hv8x2acma2gz3he4ggs0r1ij", typ: "transaction.completed", object: "txn_01hv8wptq8987qeep44cyrewp9"},
	"C27/2": {outcome: accept, config: paddleCfg, sameAs: []string{"C27/1"}},
	"C27/3": {outcome: accept, config: linearCfg, id: "0f0f0f0f-0000-4000-8000-000000000001", typ: "Issue"},
	"C27/4": {outcome: reject, config: linearCfg, code: CodeTimestampOutsideTolerance, field: "/webhookTimestamp"},
}

func twilioCfg(secret string, _ func() time.Time) config {
	return cfg(TypeTwilio, Core{Secrets: []string{secret}}, &TwilioOptions{URL: "https://mycompany.com/myapp.php"})
}

func shopifyCfg(secret string, _ func() time.Time) config {
	return cfg(TypeShopify, Core{Secrets: []string{secret}}, nil)
}

func graphCfg(string, func() time.Time) config {
	return cfg(TypeMSGraph, Core{Secrets: []string{"SecretClientState"}}, nil)
}

func pubsubCfg(string, func() time.Time) config {
	return cfg(TypeToken, Core{Secrets: []string{testBearer}}, &TokenOptions{Key: KeyRule{IDPointers: []string{"/subscription", "/message/messageId"}}})
}

func pubsubEventIDCfg(string, func() time.Time) config {
	return cfg(TypeToken, Core{Secrets: []string{testBearer}}, &TokenOptions{Key: KeyRule{IDPointers: []string{"/subscription", "/message/attributes/eventId"}}})
}

func ceCfg(string, func() time.Time) config {
	return cfg(TypeCloudEvents, Core{Secrets: []string{testBearer}}, nil)
}

func zoomCfg(secret string, now func() time.Time) config {
	return cfg(TypeZoom, Core{Secrets: []string{secret}, Now: now}, nil)
}

func documensoCfg(string, func() time.Time) config {
	return cfg(TypeToken, Core{Secrets: []string{documensoSecret}}, &TokenOptions{Header: "X-Documenso-Secret", Key: KeyRule{IDPointers: []string{"/event", "/payload/id", "/payload/status"}, TypePointer: "/event"}})
}

func paddleCfg(secret string, now func() time.Time) config {
	return cfg(TypePaddle, Core{Secrets: []string{secret}, Now: now}, nil)
}

func linearCfg(_ string, now func() time.Time) config {
	return cfg(TypeHMAC, Core{Secrets: []string{linearSecret}, Now: now}, &HMACOptions{Signature: SignatureSpec{Header: "Linear-Signature"}, TimestampPointer: "/webhookTimestamp", TimestampUnit: UnitMilliseconds, Key: KeyRule{IDHeader: "Linear-Delivery", TypeHeader: "Linear-Event"}})
}

// bigStandardBody builds C25's 15 MiB body the way tools/resign.py does and
// signs it at the pinned clock.
func bigStandardBody(t *testing.T, h http.Header, now time.Time) []byte {
	const size = 15 << 20
	body := append(append([]byte(`{"pad":"`), bytes.Repeat([]byte("A"), size-10)...), `"}`...)
	sig, err := verifytest.StandardWebhooks("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", h.Get("webhook-id"), now.Unix(), body)
	require.NoError(t, err)
	h.Set("webhook-timestamp", fmt.Sprint(now.Unix()))
	h.Set("webhook-signature", sig)
	return body
}

// expectedClass classifies a step's expected text into the verifier-level
// outcome it implies, so the table cannot silently drift from cases.json.
func expectedClass(s string) outcome {
	switch {
	case strings.HasPrefix(s, "reject"):
		return reject
	case strings.HasPrefix(s, "handshake"), strings.HasPrefix(s, "respond text/plain only"):
		return handshake
	case strings.HasPrefix(s, "sidecar must refuse"):
		return configError
	case strings.HasPrefix(s, "413"), strings.HasPrefix(s, "400/413"):
		return notApplicable
	}
	// accept, duplicate, in-progress duplicate, conflict, re-claim, batch
	// 202, route-dependent duplicate: all verify and yield a key.
	return accept
}

func TestCasesCoverEveryStep(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, c := range loadCases(t) {
		for i := range c.Steps {
			k := fmt.Sprintf("%s/%d", c.ID, i+1)
			seen[k] = true
			e, ok := caseTable[k]
			if !assert(t, ok, "step %s of cases.json has no expectation in caseTable", k) {
				continue
			}
			want := expectedClass(c.Steps[i].Expected)
			if e.outcome == notApplicable && e.why == "" {
				t.Errorf("%s: not-applicable steps must say why", k)
			}
			if e.outcome != notApplicable && c.ID != "C23" {
				require.Equal(t, want, e.outcome, "%s: table outcome disagrees with expected %q", k, c.Steps[i].Expected)
			}
		}
	}
	for k := range caseTable {
		require.True(t, seen[k], "caseTable lists %s, which cases.json does not have", k)
	}
}

func assert(t *testing.T, ok bool, format string, args ...any) bool {
	t.Helper()
	if !ok {
		t.Errorf(format, args...)
	}
	return ok
}

func TestCases(t *testing.T) {
	t.Parallel()
	for _, c := range loadCases(t) {
		t.Run(c.ID, func(t *testing.T) {
			t.Parallel()
			ids := map[string]string{}    // "C01/1" → first event ID
			altIDs := map[string]string{} // under altConfig
			secret := ""
			if c.Secret != nil {
				secret = *c.Secret
			}
			for i, s := range c.Steps {
				key := fmt.Sprintf("%s/%d", c.ID, i+1)
				e := caseTable[key]
				t.Run(fmt.Sprintf("%d_%s", i+1, s.Name), func(t *testing.T) {
					switch e.outcome {
					case notApplicable:
						t.Skipf("not applicable to verifiers: %s", e.why)
					case configError:
						runConfigErrorStep(t, key)
						return
					}
					clock := time.Unix(1700000000, 0)
					if s.ClockUnix != nil {
						clock = time.Unix(*s.ClockUnix, 0)
					}
					now := func() time.Time { return clock }
					for variant, h := range map[string]http.Header{"canonical": canonicalHeader(s.Headers), "literal": literalHeader(s.Headers)} {
						if e.header != nil {
							e.header(h)
						}
						var body []byte
						if e.body != nil {
							if variant == "literal" {
								continue // the generated body is signed into canonical headers only
							}
							body = e.body(t, h, clock)
						} else {
							body = stepBody(t, s)
						}
						v, err := newFrom(e.config(secret, now))
						require.NoError(t, err)
						req := Request{Header: h, RawQuery: s.Query, Body: body}
						res, err := v.Verify(req)
						checkStep(t, key, variant, e, s, res, err, ids)
						if e.parallel > 0 {
							verifyConcurrently(t, v, req, e.parallel, res)
						}
						if e.altConfig != nil {
							av, err := newFrom(e.altConfig(secret, now))
							require.NoError(t, err)
							ares, err := av.Verify(req)
							if err == nil && len(ares.Events) > 0 {
								altIDs[key] = ares.Events[0].ID
							}
							for _, o := range e.altSameAs {
								require.NoError(t, err)
								require.Equal(t, altIDs[o], ares.Events[0].ID, "alternative route: %s must share %s's key", key, o)
							}
							for _, o := range e.altDistinct {
								require.NoError(t, err)
								require.NotEqual(t, altIDs[o], ares.Events[0].ID, "alternative route: %s must not share %s's key", key, o)
							}
						}
					}
				})
			}
		})
	}
}

func checkStep(t *testing.T, key, variant string, e expectation, s caseStep, res Result, err error, ids map[string]string) {
	t.Helper()
	switch e.outcome {
	case reject:
		require.Error(t, err, "%s (%s headers) must be rejected", key, variant)
		var ve *Error
		require.True(t, errors.As(err, &ve), "%s: error %v is not a *verify.Error", key, err)
		require.Equal(t, e.code, ve.Code, "%s: %v", key, err)
		if e.field != "" {
			require.True(t, strings.EqualFold(e.field, ve.Field), "%s: error names %q, want %q", key, ve.Field, e.field)
		}
		require.False(t, ve.Authenticated && (e.code == CodeBadSignature || e.code == CodeTimestampOutsideTolerance))
		require.Empty(t, res.Events)
		require.Nil(t, res.Handshake)
		assertNoSecretsIn(t, err.Error(), s)
	case handshake:
		require.NoError(t, err, key)
		require.NotNil(t, res.Handshake, "%s must be a handshake", key)
		require.Empty(t, res.Events)
		hs := res.Handshake
		require.Equal(t, http.StatusOK, hs.Status)
		wantType, wantBody := e.hsType, []byte(e.hsBody)
		if er := s.ExpectedResponse; er != nil {
			require.Equal(t, er.Status, hs.Status)
			if er.ContentType != "" {
				wantType = er.ContentType
			}
			var str string
			if json.Unmarshal(er.Body, &str) == nil {
				wantBody = []byte(str)
			} else {
				require.JSONEq(t, string(er.Body), string(hs.Body), key)
				wantBody = nil
			}
		}
		require.True(t, strings.HasPrefix(hs.Header.Get("Content-Type"), wantType), "%s: content type %q, want %q", key, hs.Header.Get("Content-Type"), wantType)
		if wantBody != nil {
			require.Equal(t, string(wantBody), string(hs.Body), key)
		}
		if strings.HasPrefix(hs.Header.Get("Content-Type"), "text/plain") {
			require.Equal(t, "nosniff", hs.Header.Get("X-Content-Type-Options"), "%s: a text echo must not be sniffed as HTML", key)
		}
	case accept:
		require.NoError(t, err, "%s (%s headers) must verify", key, variant)
		require.Nil(t, res.Handshake)
		n := e.events
		if n == 0 {
			n = 1
		}
		require.Len(t, res.Events, n, key)
		require.Len(t, res.Rejected, e.rejected, key)
		ev := res.Events[0]
		require.NotEmpty(t, ev.ID)
		if prev, ok := ids[key]; ok {
			require.Equal(t, prev, ev.ID, "%s: header spelling changed the key", key)
		}
		ids[key] = ev.ID
		if e.id != "" {
			require.Equal(t, e.id, ev.ID, key)
		}
		if e.typ != "" {
			require.Equal(t, e.typ, ev.Type, key)
		}
		if e.scope != "" {
			require.Equal(t, e.scope, ev.Scope, key)
		}
		if e.object != "" {
			require.Equal(t, e.object, ev.ObjectID, key)
		}
		for _, o := range e.sameAs {
			require.Contains(t, ids, o, "%s compares with %s, which has not run", key, o)
			require.Equal(t, ids[o], ev.ID, "%s must have %s's key", key, o)
		}
		for _, o := range e.distinct {
			require.Contains(t, ids, o, "%s compares with %s, which has not run", key, o)
			require.NotEqual(t, ids[o], ev.ID, "%s must not have %s's key", key, o)
		}
		for _, r := range res.Rejected {
			var ve *Error
			require.True(t, errors.As(r.Err, &ve))
			assertNoSecretsIn(t, r.Err.Error(), s)
		}
	}
}

// verifyConcurrently runs the same request n times at once: all must yield
// the same result (run with -race).
func verifyConcurrently(t *testing.T, v Verifier, req Request, n int, want Result) {
	t.Helper()
	var wg sync.WaitGroup
	results := make([]Result, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = v.Verify(req)
		}()
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, want, results[i])
	}
}

// runConfigErrorStep covers C02 step 2: the secrets must be refused.
func runConfigErrorStep(t *testing.T, key string) {
	t.Helper()
	require.Equal(t, "C02/2", key)
	for _, secret := range []string{"whsec_", "whsec_!!!!", "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 23))} {
		_, err := newFrom(cfg(TypeStandardWebhooks, Core{Secrets: []string{secret}}, nil))
		require.Error(t, err, "secret %q must be refused", secret)
		var ce *ConfigError
		require.True(t, errors.As(err, &ce))
		require.Equal(t, "Secrets[0]", ce.Field)
		if rest := secret[len("whsec_"):]; rest != "" {
			require.NotContains(t, err.Error(), rest, "config errors must not echo the secret")
		}
	}
}

// assertNoSecretsIn checks that an error message carries none of the
// step's signature header values or test secrets.
func assertNoSecretsIn(t *testing.T, msg string, s caseStep) {
	t.Helper()
	for k, v := range s.Headers {
		if v == nil || len(*v) < 8 {
			continue
		}
		lk := strings.ToLower(k)
		if strings.Contains(lk, "signature") || strings.Contains(lk, "hmac") || lk == "authorization" || strings.Contains(lk, "secret") {
			require.NotContains(t, msg, *v, "error message leaks header %s", k)
		}
	}
	for _, sec := range []string{"whsec_test_secret", "It's a Secret to Everybody", "SecretClientState", testBearer, linearSecret} {
		require.NotContains(t, msg, sec)
	}
}
