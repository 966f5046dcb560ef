package httpapi_test

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // the B02 sender signs with HMAC-SHA1 (X-Hub-Signature: sha1=…).
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/httpapi"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Tests of the identity rules of POST /ingest/{source} (DESIGN.md,
// "Identity"): every JSON that feeds a key or a payload hash is decoded
// strictly; an authentic delivery that cannot be stored as sent is refused
// with 422 not_stored naming the field, never acknowledged and dropped;
// numbers keep their exact value; sources sharing a dedupe_scope share one
// key space. Same harness as ingest_test.go (real listener, fresh database
// per test, sources through sources.Parse).

// ---------------------------------------------------------------- helpers

// identError is the error object of an answer.
func identError(t *testing.T, a ingestAnswer) httpapi.ErrorDetail {
	t.Helper()
	var b httpapi.ErrorBody
	require.NoError(t, json.Unmarshal(a.body, &b), "answer %d: %s", a.status, a.body)
	return b.Error
}

// identRefused sends d and requires 422 not_stored naming field, with
// nothing stored for source (no claims row, no inbox row, no job).
func identRefused(t *testing.T, e *ingestEnv, source string, d ingestDelivery, field, msg string) {
	t.Helper()
	before := e.counts(t, source)
	ans := e.send(t, source, d)
	require.Equal(t, http.StatusUnprocessableEntity, ans.status, "%s: an authentic but ambiguous delivery is refused, never 2xx: %s", msg, ans.body)
	er := identError(t, ans)
	require.Equal(t, "not_stored", string(er.Code), "%s: %s", msg, ans.body)
	require.Equal(t, field, er.Field, "%s: the answer names the field: %s", msg, ans.body)
	require.Equal(t, before, e.counts(t, source), "%s: nothing stored", msg)
}

// identReceive sends d and requires one receipt of status want
// (accepted, duplicate or conflict) answered with okStatus, and the
// matching change of what source stored.
func identReceive(t *testing.T, e *ingestEnv, source string, d ingestDelivery, okStatus int, want, msg string) ingestReceipt {
	t.Helper()
	before := e.counts(t, source)
	ans := e.send(t, source, d)
	require.Equal(t, okStatus, ans.status, "%s: %s", msg, ans.body)
	rs, rejected := ans.receipts(t)
	require.Zero(t, rejected, msg)
	require.Len(t, rs, 1, "%s: %s", msg, ans.body)
	require.Equal(t, want, rs[0].Status, "%s: %s", msg, ans.body)
	after := before
	switch want {
	case "accepted":
		after = ingestCounts{before.claims + 1, before.inbox + 1, before.jobs + 1, before.conflicts}
	case "conflict":
		after.conflicts++
	}
	require.Equal(t, after, e.counts(t, source), msg)
	return rs[0]
}

func identSHA256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Secrets of this file's sources (test values only).
const (
	identStripeSecret  = "whsec_ident_stripe_0001"
	identGitHubSecret  = "ident-github-secret-0001"
	identShopifySecret = "shpss_ident_0001"
	identToken         = "ident-token-0001"
	identHMACSecret    = "ident-hmac-secret-0001"
	identCEToken       = "ident-ce-token-0001"
)

var identStdSecret = "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{3}, 32))

// identSign builds an authentic delivery of body for one source; id is the
// delivery id for schemes that carry one in a header.
type identSign func(t *testing.T, id string, body []byte) ingestDelivery

func identStripe(_ *testing.T, _ string, body []byte) ingestDelivery {
	return ingestDelivery{header: jsonHeaders("Stripe-Signature", verifytest.StripeHeader(signNow(), body, identStripeSecret)), body: body}
}

func identGitHubWith(secret string) identSign {
	return func(_ *testing.T, id string, body []byte) ingestDelivery {
		return ingestDelivery{header: jsonHeaders("X-GitHub-Delivery", id, "X-GitHub-Event", "issues",
			"X-Hub-Signature-256", verifytest.GitHub(secret, body)), body: body}
	}
}

func identStdWith(secret string) identSign {
	return func(t *testing.T, id string, body []byte) ingestDelivery {
		ts := signNow()
		sig, err := verifytest.StandardWebhooks(secret, id, ts, body)
		require.NoError(t, err)
		return ingestDelivery{header: jsonHeaders("webhook-id", id, "webhook-timestamp", strconv.FormatInt(ts, 10),
			"webhook-signature", sig), body: body}
	}
}

func identShopifyWith(secret, domain string) identSign {
	return func(_ *testing.T, id string, body []byte) ingestDelivery {
		h := jsonHeaders("X-Shopify-Topic", "orders/create", "X-Shopify-Event-Id", id,
			"X-Shopify-Hmac-Sha256", verifytest.Shopify(secret, body))
		if domain != "" {
			h = append(h, [2]string{"X-Shopify-Shop-Domain", domain})
		}
		return ingestDelivery{header: h, body: body}
	}
}

func identTokenDelivery(_ *testing.T, id string, body []byte) ingestDelivery {
	return ingestDelivery{header: jsonHeaders("X-Api-Key", identToken, "X-Event-Id", id), body: body}
}

func identHMACDelivery(_ *testing.T, id string, body []byte) ingestDelivery {
	return ingestDelivery{header: jsonHeaders("X-Signature", hmacHex(identHMACSecret, body), "X-Event-Id", id), body: body}
}

func identCEStructured(_ *testing.T, _ string, body []byte) ingestDelivery {
	return ingestDelivery{header: ingestHeaders{{"Content-Type", "application/cloudevents+json"},
		{"Authorization", "Bearer " + identCEToken}}, body: body}
}

// ---------------------------------------------------------------- strict decoding

var identStrictSources = strings.ReplaceAll(`
sources:
  stripe: {tenant: acme, provider: stripe, secrets: ["`+identStripeSecret+`"], FWD}
  github: {tenant: acme, provider: github, secrets: ["`+identGitHubSecret+`"], FWD}
  gh-keyed: {tenant: acme, provider: github, secrets: ["`+identGitHubSecret+`"], key: {fields: ["/id"]}, FWD}
  std: {tenant: acme, provider: standard-webhooks, secrets: ["`+identStdSecret+`"], FWD}
  std-typed: {tenant: acme, provider: standard-webhooks, secrets: ["`+identStdSecret+`"], allowed_event_types: ["invoice.*"], FWD}
  shopify: {tenant: acme, provider: shopify, secrets: ["`+identShopifySecret+`"], FWD}
  tok-header:
    tenant: acme
    provider: token
    secrets: ["`+identToken+`"]
    options: {header: X-Api-Key, key: {id_header: X-Event-Id}}
    FWD
  tok-pointer:
    tenant: acme
    provider: token
    secrets: ["`+identToken+`"]
    options: {header: X-Api-Key, key: {id_pointers: ["/id"], type_pointer: "/type"}}
    FWD
  hmac:
    tenant: acme
    provider: hmac
    secrets: ["`+identHMACSecret+`"]
    options: {signature: {header: X-Signature}, key: {id_header: X-Event-Id}}
    FWD
  ce: {tenant: acme, provider: cloudevents, secrets: ["`+identCEToken+`"], FWD}
`, "FWD", unusedForward)

// identStrictSigners are the doors of identStrictSources.
var identStrictSigners = map[string]identSign{
	"stripe":      identStripe,
	"github":      identGitHubWith(identGitHubSecret),
	"gh-keyed":    identGitHubWith(identGitHubSecret),
	"std":         identStdWith(identStdSecret),
	"std-typed":   identStdWith(identStdSecret),
	"shopify":     identShopifyWith(identShopifySecret, "shop.example"),
	"tok-header":  identTokenDelivery,
	"tok-pointer": identTokenDelivery,
	"hmac":        identHMACDelivery,
	"ce":          identCEStructured,
}

// identAccept marks a body a source must accept: it reads none of the
// names involved, and distinct names are ordinary JSON.
const identAccept = "(accepted)"

// identStrictCase is one body shape; id makes it unique per source.
type identStrictCase struct {
	name string
	body func(id string) string
	// field is the pointer every source's refusal names; per overrides it
	// for some sources (identAccept: the source must accept the body).
	field string
	per   map[string]string
}

// identEvent is a body every source of identStrictSources reads: a
// CloudEvent that is also a Stripe event and has an id and a type at the top.
func identEvent(id, rest string) string {
	return `{"specversion":"1.0","source":"/ident","id":"` + id + `","type":"invoice.paid"` + rest + `}`
}

var identStrictCases = []identStrictCase{
	{name: "duplicate id, last one differs", field: "/id",
		body: func(id string) string { return identEvent(id, `,"id":"`+id+`-other"`) }},
	{name: "duplicate name nested", field: "/data/object/amount",
		body: func(id string) string { return identEvent(id, `,"data":{"object":{"id":"o1","amount":1,"amount":2}}`) }},
	{name: "duplicate name in an array item", field: "/items/1/sku",
		body: func(id string) string { return identEvent(id, `,"items":[{"sku":"a"},{"sku":"b","sku":"c"}]`) }},
	{name: "duplicate name spelled with an escape", field: "/note",
		body: func(id string) string { return identEvent(id, `,"note":1,"not\u0065":2`) }},
	{name: "invalid UTF-8 in a string", field: "/note",
		body: func(id string) string { return identEvent(id, `,"note":"caf`+"\xe9"+`"`) }},
	{name: "unpaired high surrogate", field: "/note",
		body: func(id string) string { return identEvent(id, `,"note":"\ud800"`) }},
	{name: "unpaired low surrogate", field: "/note",
		body: func(id string) string { return identEvent(id, `,"note":"x\udc00"`) }},
	{name: "case variant beside id",
		body: func(id string) string { return identEvent(id, `,"Id":"`+id+`-other"`) },
		per: map[string]string{"stripe": "/Id", "ce": "/Id", "shopify": "/Id", "tok-pointer": "/id", "gh-keyed": "/id",
			"github": identAccept, "std": identAccept, "std-typed": identAccept, "tok-header": identAccept, "hmac": identAccept}},
	{name: "case variant instead of id",
		body: func(id string) string {
			return `{"specversion":"1.0","source":"/ident","ID":"` + id + `","type":"invoice.paid"}`
		},
		per: map[string]string{"stripe": "/ID", "ce": "/ID", "shopify": "/ID", "tok-pointer": "/id", "gh-keyed": "/id",
			"github": identAccept, "std": identAccept, "std-typed": identAccept, "tok-header": identAccept, "hmac": identAccept}},
	{name: "case variant beside type",
		body: func(id string) string { return identEvent(id, `,"Type":"other.event"`) },
		per: map[string]string{"stripe": "/Type", "ce": "/Type", "std": "/Type", "std-typed": "/Type", "tok-pointer": "/type",
			"github": identAccept, "gh-keyed": identAccept, "shopify": identAccept, "tok-header": identAccept, "hmac": identAccept}},
}

// TestIngestIdentityAmbiguousJSONIsRefused: on every kind of source, an
// authentic body with a duplicate member name (anywhere), invalid UTF-8,
// an unpaired surrogate escape, or a member name that differs only in
// letter case from a field the verifier reads is answered 422 not_stored
// naming the JSON pointer, and nothing is stored. Distinct names the
// verifier does not read are ordinary JSON and accepted.
func TestIngestIdentityAmbiguousJSONIsRefused(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, identStrictSources, ingestOptions{})
	for source, sign := range identStrictSigners {
		t.Run(source, func(t *testing.T) {
			t.Parallel()
			for i, c := range identStrictCases {
				t.Run(c.name, func(t *testing.T) { // in order: counts are per source
					id := fmt.Sprintf("%s-amb-%d", source, i)
					d := sign(t, id, []byte(c.body(id)))
					msg := fmt.Sprintf("%s: %s", source, c.name)
					field, ok := c.per[source]
					if !ok {
						field = c.field
					}
					if field == identAccept {
						identReceive(t, e, source, d, http.StatusOK, "accepted", msg)
						return
					}
					identRefused(t, e, source, d, field, msg)
				})
			}
			// Control: the same shape without ambiguity is stored.
			id := source + "-clean"
			identReceive(t, e, source, sign(t, id, []byte(identEvent(id, `,"note":"caf`+"\u00e9"+`"`))), http.StatusOK, "accepted", source+": clean body")
		})
	}
}

// TestIngestIdentityStripeLastWinsIsRefused: the Stripe bodies that a
// last-wins or case-insensitive decoder would read as another event are
// refused; none of the ids they carry is stored, so the real evt_B is new.
func TestIngestIdentityStripeLastWinsIsRefused(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, identStrictSources, ingestOptions{})
	for _, c := range []struct{ body, field string }{
		{`{"id":"evt_A","type":"t","id":"evt_B"}`, "/id"},
		{`{"id":"evt_C","Id":"evt_D","type":"t"}`, "/Id"},
		{`{"ID":"evt_C","type":"t"}`, "/ID"},
		{`{"id":"evt_C","type":"t","data":{"object":{"id":"in_1","id":"in_2"}}}`, "/data/object/id"},
	} {
		identRefused(t, e, "stripe", identStripe(t, "", []byte(c.body)), c.field, c.body)
	}
	require.Equal(t, "0", e.scalar(t, `SELECT count(*)::text FROM claims WHERE event_id IN ('evt_A', 'evt_B', 'evt_C', 'evt_D')`))
	r := identReceive(t, e, "stripe", identStripe(t, "", []byte(`{"id":"evt_B","type":"t"}`)), http.StatusOK, "accepted", "the real evt_B")
	require.Equal(t, "evt_B", r.EventID)
}

// ---------------------------------------------------------------- BOM

// The B02 bodies (shared/cases/public-bugs/B02-…), without their BOM.
const (
	identJellyfin = `{"NotificationType":"ItemAdded","ItemId":"item-0001","Name":"Test Movie","ServerName":"test-server","UtcTimestamp":"2026-01-01T10:00:00Z"}`
	identIntercom = `{"type":"notification_event","app_id":"testapp","id":"notif_0001","topic":"contact.user.created","delivery_attempts":1,"first_sent_at":1767261600,"created_at":1767261600,"data":{"type":"notification_event_data","item":{"type":"contact","id":"contact-0001","email":"user@example.test"}}}`
	identGraph    = `{"value":[{"subscriptionId":"sub-0001","clientState":"test-client-state","changeType":"updated","resource":"sites/test/lists/list-0001","tenantId":"tenant-0001","subscriptionExpirationDateTime":"2026-02-01T00:00:00Z","id":"notif-0001","resourceData":{"id":"list-0001"}}]}`
	identBOM      = "\xef\xbb\xbf"

	identJellyfinToken  = "jellyfin-token-0001"
	identIntercomSecret = "intercom-secret-0001"
)

func identSHA1Hex(secret string, body []byte) string {
	m := hmac.New(sha1.New, []byte(secret))
	m.Write(body)
	return "sha1=" + hex.EncodeToString(m.Sum(nil))
}

// TestIngestIdentityBOMPrefixedBodiesAreStored is B02: a verified body that
// starts with a UTF-8 BOM is stored (never 2xx-and-drop), the signature
// being over the bytes as sent, BOM included; its redelivery is a
// duplicate, and so is the copy without the BOM (one event, one payload).
func TestIngestIdentityBOMPrefixedBodiesAreStored(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, strings.ReplaceAll(`
sources:
  jellyfin:
    tenant: acme
    provider: token
    secrets: ["`+identJellyfinToken+`"]
    options: {key: {id_pointers: ["/NotificationType", "/ItemId"]}}
    FWD
  intercom:
    tenant: acme
    provider: hmac
    secrets: ["`+identIntercomSecret+`"]
    options:
      signature: {header: X-Hub-Signature, algorithm: sha1, prefix: "sha1="}
      key: {id_pointers: ["/id"], type_pointer: "/topic"}
    volatile_fields: ["/delivery_attempts", "/first_sent_at"]
    FWD
  graph: {tenant: acme, provider: msgraph, secrets: ["test-client-state"], FWD}
  stripe: {tenant: acme, provider: stripe, secrets: ["`+identStripeSecret+`"], FWD}
  github: {tenant: acme, provider: github, secrets: ["`+identGitHubSecret+`"], FWD}
`, "FWD", unusedForward), ingestOptions{})

	for _, tc := range []struct {
		source  string
		body    string
		sign    identSign
		eventID string
		status  int
		// retried is another authentic copy of the event (a volatile
		// field changed), nil when the provider has none.
		retried string
	}{
		{source: "jellyfin", body: identJellyfin, eventID: verify.JoinKey("ItemAdded", "item-0001"),
			sign: func(_ *testing.T, _ string, b []byte) ingestDelivery {
				return ingestDelivery{header: jsonHeaders("Authorization", "Bearer "+identJellyfinToken), body: b}
			}},
		{source: "intercom", body: identIntercom, eventID: "notif_0001",
			retried: strings.Replace(identIntercom, `"delivery_attempts":1`, `"delivery_attempts":2`, 1),
			sign: func(_ *testing.T, _ string, b []byte) ingestDelivery {
				return ingestDelivery{header: jsonHeaders("X-Hub-Signature", identSHA1Hex(identIntercomSecret, b)), body: b}
			}},
		{source: "graph", body: identGraph, eventID: verify.JoinKey("sub-0001", "notif-0001"), status: http.StatusAccepted,
			sign: func(_ *testing.T, _ string, b []byte) ingestDelivery {
				return ingestDelivery{header: jsonHeaders(), body: b}
			}},
		{source: "stripe", body: `{"id":"evt_bom_1","object":"event","type":"invoice.paid"}`, eventID: "evt_bom_1", sign: identStripe},
		{source: "github", body: `{"action":"opened","issue":{"number":1}}`, eventID: "gh-bom-1", sign: identGitHubWith(identGitHubSecret)},
	} {
		t.Run(tc.source, func(t *testing.T) {
			t.Parallel()
			ok := tc.status
			if ok == 0 {
				ok = http.StatusOK
			}
			bom := []byte(identBOM + tc.body)
			first := identReceive(t, e, tc.source, tc.sign(t, "gh-bom-1", bom), ok, "accepted", "BOM-prefixed body")
			require.Equal(t, tc.eventID, first.EventID)
			stored := e.scalar(t, `SELECT encode(body, 'hex') FROM inbox_events WHERE claim_id = $1`, first.ClaimID)
			if tc.source == "graph" {
				var batch struct {
					Value []json.RawMessage `json:"value"`
				}
				require.NoError(t, json.Unmarshal([]byte(tc.body), &batch))
				raw, err := hex.DecodeString(stored)
				require.NoError(t, err)
				require.JSONEq(t, withoutClientState(t, batch.Value[0]), string(raw), "the notification is stored, less its clientState")
			} else {
				require.Equal(t, hex.EncodeToString(bom), stored, "stored as received, BOM included")
			}
			again := identReceive(t, e, tc.source, tc.sign(t, "gh-bom-1", bom), ok, "duplicate", "the same bytes again")
			require.Equal(t, first.ClaimID, again.ClaimID)
			plain := identReceive(t, e, tc.source, tc.sign(t, "gh-bom-1", []byte(tc.body)), ok, "duplicate", "the copy without the BOM")
			require.Equal(t, first.ClaimID, plain.ClaimID)
			if tc.retried != "" {
				r := identReceive(t, e, tc.source, tc.sign(t, "", []byte(identBOM+tc.retried)), ok, "duplicate", "a BOM-prefixed retry differing in a volatile field")
				require.Equal(t, first.ClaimID, r.ClaimID)
			}
			require.Equal(t, ingestCounts{1, 1, 1, 0}, e.counts(t, tc.source))
		})
	}
}

// ---------------------------------------------------------------- key rules

// TestIngestIdentityKeyFieldsMustBePresent: a source keyed by fields
// (key.fields, or a generic scheme's key pointers) refuses an authentic
// event that lacks one, or holds null, "" or a non-scalar there: 422
// not_stored naming the field, nothing stored. A key header that is absent
// or blank is refused the same way, naming the header.
func TestIngestIdentityKeyFieldsMustBePresent(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, strings.ReplaceAll(`
sources:
  gh-order: {tenant: acme, provider: github, secrets: ["`+identGitHubSecret+`"], key: {fields: ["/order/id", "/event"]}, FWD}
  hmac-order:
    tenant: acme
    provider: hmac
    secrets: ["`+identHMACSecret+`"]
    options: {signature: {header: X-Signature}, key: {id_pointers: ["/order/id", "/event"]}}
    FWD
  tok-shop:
    tenant: acme
    provider: token
    secrets: ["`+identToken+`"]
    options: {header: X-Api-Key, key: {id_header: X-Event-Id}}
    key: {headers: ["X-Shop-Domain"], fields: ["/order/id"]}
    FWD
`, "FWD", unusedForward), ingestOptions{})
	// A real GitHub issues event: no order in it.
	issues := `{"action":"opened","issue":{"id":1,"number":7,"title":"Bug","user":{"login":"octocat"}},` +
		`"repository":{"id":1296269,"full_name":"octocat/Hello-World"},"sender":{"login":"octocat"}}`
	cases := []struct{ body, field string }{
		{issues, "/order/id"},
		{`{"order":{"id":null},"event":"order.paid"}`, "/order/id"},
		{`{"order":{"id":""},"event":"order.paid"}`, "/order/id"},
		{`{"order":{"id":true},"event":"order.paid"}`, "/order/id"},
		{`{"order":{"id":{"v":1}},"event":"order.paid"}`, "/order/id"},
		{`{"order":{"id":"o-1"}}`, "/event"},
		{`{"order":{"id":"o-1"},"event":null}`, "/event"},
		{`{"order":{"id":"o-1"},"event":""}`, "/event"},
		{`{"order":"o-1","event":"order.paid"}`, "/order/id"},
	}
	for _, src := range []struct {
		name string
		sign identSign
	}{{"gh-order", identGitHubWith(identGitHubSecret)}, {"hmac-order", identHMACDelivery}} {
		t.Run(src.name, func(t *testing.T) {
			t.Parallel()
			for i, c := range cases {
				identRefused(t, e, src.name, src.sign(t, fmt.Sprintf("%s-%d", src.name, i), []byte(c.body)), c.field, c.body)
			}
			r := identReceive(t, e, src.name, src.sign(t, src.name+"-ok", []byte(`{"order":{"id":"o-1"},"event":"order.paid"}`)),
				http.StatusOK, "accepted", "complete key")
			require.Equal(t, verify.JoinKey("o-1", "order.paid"), r.EventID)
		})
	}
	t.Run("tok-shop", func(t *testing.T) {
		t.Parallel()
		body := []byte(`{"order":{"id":"o-1"}}`)
		d := identTokenDelivery(t, "t-1", body)
		identRefused(t, e, "tok-shop", d, "X-Shop-Domain", "key header absent")
		d.header = append(d.header, [2]string{"X-Shop-Domain", "   "})
		identRefused(t, e, "tok-shop", d, "X-Shop-Domain", "key header blank")
		d = identTokenDelivery(t, "t-1", []byte(`{"order":{"id":null}}`))
		d.header = append(d.header, [2]string{"X-Shop-Domain", "a.example"})
		identRefused(t, e, "tok-shop", d, "/order/id", "key field null, header present")
		d = identTokenDelivery(t, "t-1", body)
		d.header = append(d.header, [2]string{"X-Shop-Domain", "a.example"})
		r := identReceive(t, e, "tok-shop", d, http.StatusOK, "accepted", "header and field present")
		require.Equal(t, verify.JoinKey("a.example", "o-1"), r.EventID)
	})
}

// ---------------------------------------------------------------- Content-Encoding

// TestIngestIdentityContentEncodingIsRefused: a delivery with a
// Content-Encoding other than identity is refused with 415
// unsupported_encoding naming the header, whatever the signature covers,
// and nothing is stored; an unknown coding's text is never echoed.
func TestIngestIdentityContentEncodingIsRefused(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, `
sources:
  enc: {tenant: acme, provider: github, secrets: ["`+identGitHubSecret+`"], `+unusedForward+`}
`, ingestOptions{})
	body := []byte(`{"action":"opened","issue":{"number":1}}`)
	compress := func(coding string) []byte {
		var b bytes.Buffer
		var w io.WriteCloser
		switch coding {
		case "gzip":
			w = gzip.NewWriter(&b)
		case "deflate":
			w = zlib.NewWriter(&b)
		case "br":
			w = brotli.NewWriter(&b)
		}
		_, err := w.Write(body)
		require.NoError(t, err)
		require.NoError(t, w.Close())
		return b.Bytes()
	}
	const marker = "x-evil-coding-MARKER-4471"
	signed := func(id, coding string, sent, signedOver []byte) ingestDelivery {
		return ingestDelivery{header: jsonHeaders("X-GitHub-Delivery", id, "X-GitHub-Event", "issues",
			"Content-Encoding", coding, "X-Hub-Signature-256", verifytest.GitHub(identGitHubSecret, signedOver)), body: sent}
	}
	for i, c := range []struct {
		name string
		d    func(id string) ingestDelivery
	}{
		{"gzip, signed over the uncompressed JSON", func(id string) ingestDelivery { return signed(id, "gzip", compress("gzip"), body) }},
		{"gzip, signed over the compressed bytes", func(id string) ingestDelivery {
			z := compress("gzip")
			return signed(id, "gzip", z, z)
		}},
		{"x-gzip", func(id string) ingestDelivery {
			z := compress("gzip")
			return signed(id, "x-gzip", z, z)
		}},
		{"GZIP in capitals", func(id string) ingestDelivery {
			z := compress("gzip")
			return signed(id, "GZIP", z, z)
		}},
		{"deflate", func(id string) ingestDelivery {
			z := compress("deflate")
			return signed(id, "deflate", z, z)
		}},
		{"br", func(id string) ingestDelivery {
			z := compress("br")
			return signed(id, "br", z, z)
		}},
		{"stacked codings", func(id string) ingestDelivery {
			z := compress("gzip")
			return signed(id, "identity, gzip", z, z)
		}},
		{"unknown coding", func(id string) ingestDelivery { return signed(id, marker, body, body) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := c.d(fmt.Sprintf("enc-%d", i))
			before := e.counts(t, "enc")
			ans := e.send(t, "enc", d)
			require.Equal(t, http.StatusUnsupportedMediaType, ans.status, "%s: %s", c.name, ans.body)
			er := identError(t, ans)
			require.Equal(t, "unsupported_encoding", string(er.Code), c.name)
			require.Equal(t, "Content-Encoding", er.Field, c.name)
			require.NotContains(t, strings.ToLower(string(ans.body)), strings.ToLower(marker), "%s: the coding's text is never echoed", c.name)
			require.NotContains(t, strings.ToLower(string(ans.body)), "marker", c.name)
			require.Equal(t, before, e.counts(t, "enc"), "%s: nothing stored", c.name)
		})
	}
	// identity, and no header at all, are fine.
	r := identReceive(t, e, "enc", signed("enc-identity", "identity", body, body), http.StatusOK, "accepted", "Content-Encoding: identity")
	require.Equal(t, "enc-identity", r.EventID)
	identReceive(t, e, "enc", githubDelivery(identGitHubSecret, "enc-none", body), http.StatusOK, "accepted", "no Content-Encoding")
}

// ---------------------------------------------------------------- numbers

// identNumberPairs are two bodies under one delivery id: the second is a
// conflict when the values differ (however close as doubles) and a
// duplicate when they are equal (however spelled).
var identNumberPairs = []struct{ first, second, want string }{
	{`{"id":9007199254740993}`, `{"id":9007199254740992}`, "conflict"},       // 2^53+1, 2^53
	{`{"id":9223372036854775809}`, `{"id":9223372036854775808}`, "conflict"}, // 2^63+1, 2^63
	{`{"id":1e30}`, `{"id":1000000000000000000000000000001}`, "conflict"},
	{`{"amount":0.1}`, `{"amount":0.10000000000000001}`, "conflict"},
	{`{"n":1.0}`, `{"n":1}`, "duplicate"},
	{`{"n":1e2}`, `{"n":100}`, "duplicate"},
	{`{"n":-0}`, `{"n":0}`, "duplicate"},
	{`{"n":1E+2,"m":[2.50]}`, `{"m":[25e-1],"n":100.000}`, "duplicate"},
}

// TestIngestIdentityNumbersKeepTheirExactValue: the payload hash compares
// numbers by their exact value, on sources keyed by a header (Standard
// Webhooks' webhook-id, a token or generic HMAC source's id header).
func TestIngestIdentityNumbersKeepTheirExactValue(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, identStrictSources, ingestOptions{})
	for _, src := range []struct {
		name string
		sign identSign
	}{{"std", identStdWith(identStdSecret)}, {"tok-header", identTokenDelivery}, {"hmac", identHMACDelivery}, {"github", identGitHubWith(identGitHubSecret)}} {
		t.Run(src.name, func(t *testing.T) {
			t.Parallel()
			for i, p := range identNumberPairs {
				id := fmt.Sprintf("msg_num_%d", i)
				msg := fmt.Sprintf("%s: %s then %s", src.name, p.first, p.second)
				first := identReceive(t, e, src.name, src.sign(t, id, []byte(p.first)), http.StatusOK, "accepted", msg)
				second := identReceive(t, e, src.name, src.sign(t, id, []byte(p.second)), http.StatusOK, p.want, msg)
				require.Equal(t, first.ClaimID, second.ClaimID, msg)
			}
		})
	}
}

// TestIngestIdentityNumericKeysKeepTheirExactValue: a source keyed by a
// JSON pointer to a number derives the key from the number's exact value:
// 2^53+1 and 2^53 are two events, 100 and 1e2 one.
func TestIngestIdentityNumericKeysKeepTheirExactValue(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, identStrictSources, ingestOptions{})
	for _, src := range []struct {
		name string
		sign identSign
	}{{"tok-pointer", identTokenDelivery}, {"gh-keyed", identGitHubWith(identGitHubSecret)}} {
		t.Run(src.name, func(t *testing.T) {
			t.Parallel()
			n := 0
			send := func(body, want, msg string) ingestReceipt {
				n++
				return identReceive(t, e, src.name, src.sign(t, fmt.Sprintf("%s-%d", src.name, n), []byte(body)), http.StatusOK, want, msg)
			}
			a := send(`{"id":9007199254740993,"type":"order.paid"}`, "accepted", "2^53+1")
			b := send(`{"id":9007199254740992,"type":"order.paid"}`, "accepted", "2^53: another event")
			require.Equal(t, "9007199254740993", a.EventID)
			require.Equal(t, "9007199254740992", b.EventID)
			require.NotEqual(t, a.ClaimID, b.ClaimID)
			c := send(`{"id":9223372036854775809,"type":"order.paid"}`, "accepted", "2^63+1")
			d := send(`{"id":9223372036854775808,"type":"order.paid"}`, "accepted", "2^63: another event")
			require.Equal(t, "9223372036854775809", c.EventID)
			require.Equal(t, "9223372036854775808", d.EventID)
			f := send(`{"id":1e30,"type":"order.paid"}`, "accepted", "1e30")
			g := send(`{"id":1000000000000000000000000000001,"type":"order.paid"}`, "accepted", "10^30+1: another event")
			require.NotEqual(t, f.EventID, g.EventID)
			f2 := send(`{"id":1000000000000000000000000000000,"type":"order.paid"}`, "duplicate", "10^30 in digits: the same event as 1e30")
			require.Equal(t, []string{f.EventID, f.ClaimID}, []string{f2.EventID, f2.ClaimID})
			h := send(`{"id":100,"type":"order.paid"}`, "accepted", "100")
			i := send(`{"id":1e2,"type":"order.paid"}`, "duplicate", "1e2: the same event")
			j := send(`{"id":100.0,"type":"order.paid"}`, "duplicate", "100.0: the same event")
			require.Equal(t, "100", h.EventID)
			require.Equal(t, []string{h.EventID, h.ClaimID}, []string{i.EventID, i.ClaimID})
			require.Equal(t, []string{h.EventID, h.ClaimID}, []string{j.EventID, j.ClaimID})
			require.Equal(t, ingestCounts{7, 7, 7, 0}, e.counts(t, src.name))
		})
	}
}

// ---------------------------------------------------------------- non-JSON

// TestIngestIdentityNonJSONBodiesAreHashedByTheirBytes: an authentic body
// that is not JSON (GitHub's published test vector "Hello, World!" sent as
// application/json, a form body) is stored, its payload hash being the
// SHA-256 of its bytes; the same bytes again are a duplicate, other bytes
// under the same id a conflict.
func TestIngestIdentityNonJSONBodiesAreHashedByTheirBytes(t *testing.T) {
	t.Parallel()
	const vectorSecret = "It's a Secret to Everybody"
	e := setupIngest(t, `
sources:
  gh-vector: {tenant: acme, provider: github, secrets: ["`+vectorSecret+`"], `+unusedForward+`}
  tok-form:
    tenant: acme
    provider: token
    secrets: ["`+identToken+`"]
    options: {header: X-Api-Key, key: {id_header: X-Event-Id}}
    `+unusedForward+`
`, ingestOptions{})
	hello := []byte("Hello, World!")
	// https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries#testing-the-webhook-payload-validation
	require.Equal(t, "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17", verifytest.GitHub(vectorSecret, hello))
	vec := func(body []byte, ct string) ingestDelivery {
		return ingestDelivery{header: ingestHeaders{{"Content-Type", ct}, {"X-GitHub-Delivery", "vec-1"}, {"X-GitHub-Event", "ping"},
			{"X-Hub-Signature-256", verifytest.GitHub(vectorSecret, body)}}, body: body}
	}
	r := identReceive(t, e, "gh-vector", vec(hello, "application/json"), http.StatusOK, "accepted", "Hello, World! as application/json")
	require.Equal(t, identSHA256(hello), e.scalar(t, `SELECT receipt_hash FROM claims WHERE id = $1`, r.ClaimID))
	require.Equal(t, string(hello), e.scalar(t, `SELECT convert_from(body, 'UTF8') FROM inbox_events WHERE claim_id = $1`, r.ClaimID))
	identReceive(t, e, "gh-vector", vec(hello, "application/json"), http.StatusOK, "duplicate", "the same bytes again")
	identReceive(t, e, "gh-vector", vec([]byte("Hello, World?"), "application/json"), http.StatusOK, "conflict", "other text, same delivery")

	form := []byte("payload=%7B%22action%22%3A%22opened%22%7D")
	ans := e.send(t, "gh-vector", ingestDelivery{header: ingestHeaders{{"Content-Type", "application/x-www-form-urlencoded"},
		{"X-GitHub-Delivery", "vec-form"}, {"X-GitHub-Event", "issues"}, {"X-Hub-Signature-256", verifytest.GitHub(vectorSecret, form)}}, body: form})
	require.Equal(t, http.StatusOK, ans.status, "%s", ans.body)
	rs, _ := ans.receipts(t)
	require.Equal(t, "accepted", rs[0].Status)
	require.Equal(t, identSHA256(form), e.scalar(t, `SELECT receipt_hash FROM claims WHERE id = $1`, rs[0].ClaimID))

	fd := func(body string) ingestDelivery {
		return ingestDelivery{header: ingestHeaders{{"Content-Type", "application/x-www-form-urlencoded"},
			{"X-Api-Key", identToken}, {"X-Event-Id", "form-1"}}, body: []byte(body)}
	}
	r = identReceive(t, e, "tok-form", fd("a=1&b=2"), http.StatusOK, "accepted", "form body")
	require.Equal(t, identSHA256([]byte("a=1&b=2")), e.scalar(t, `SELECT receipt_hash FROM claims WHERE id = $1`, r.ClaimID))
	identReceive(t, e, "tok-form", fd("a=1&b=2"), http.StatusOK, "duplicate", "the same form again")
	identReceive(t, e, "tok-form", fd("a=1&b=3"), http.StatusOK, "conflict", "another form, same id")
}

// ---------------------------------------------------------------- dedupe scope

// identScopeCounts is what the doors of one scope stored: claims rows keyed
// in the scope, inbox rows and dispatch jobs of the doors, conflict rows.
func (e *ingestEnv) identScopeCounts(t *testing.T, scope string, doors ...string) ingestCounts {
	t.Helper()
	var c ingestCounts
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT
		(SELECT count(*) FROM claims WHERE source = $1),
		(SELECT count(*) FROM inbox_events WHERE source = ANY($2)),
		(SELECT count(*) FROM river_job WHERE kind = 'claimd_inbox_dispatch' AND args->>'source' = ANY($2)),
		(SELECT count(*) FROM inbox_conflicts f JOIN claims c ON c.id = f.claim_id WHERE c.source = $1)`, scope, doors).
		Scan(&c.claims, &c.inbox, &c.jobs, &c.conflicts))
	return c
}

// identReceipt sends d and returns its one receipt (answered 200).
func identReceipt(t *testing.T, e *ingestEnv, source string, d ingestDelivery, msg string) ingestReceipt {
	t.Helper()
	ans := e.send(t, source, d)
	require.Equal(t, http.StatusOK, ans.status, "%s: %s", msg, ans.body)
	rs, rejected := ans.receipts(t)
	require.Zero(t, rejected, msg)
	require.Len(t, rs, 1, msg)
	return rs[0]
}

// waitDispatchDone waits until the inbox event's dispatch is settled
// (dispatched or dead-lettered, no open job) and returns its state.
func (e *ingestEnv) waitDispatchDone(t *testing.T, claimID string) string {
	t.Helper()
	var st string
	e.eventually(t, "inbox event "+claimID+" dispatched or dead-lettered", func() bool {
		var open int
		require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT e.dispatch_state,
			(SELECT count(*) FROM river_job j WHERE j.args->>'claim_id' = $2
				AND j.state NOT IN ('completed', 'cancelled', 'discarded'))
			FROM inbox_events e WHERE e.claim_id = $1`, claimID, claimID).Scan(&st, &open))
		return (st == "dispatched" || st == "dead_lettered") && open == 0
	})
	return st
}

// TestIngestIdentityDedupeScopeSharesKeysAcrossDoors: two GitHub endpoints
// of one account (two secrets) share dedupe_scope shop and the key rule
// (/order/id, /event). One event delivered through both, under different
// delivery ids, is one claim in scope shop: accepted once, duplicate the
// second time with the same claim id, dispatched once, and claimable by
// the workflow under the key it is forwarded with.
func TestIngestIdentityDedupeScopeSharesKeysAcrossDoors(t *testing.T) {
	t.Parallel()
	var base atomic.Value // the sidecar's URL, known after setup
	target := newIngestTarget(t, nil)
	target.mu.Lock()
	target.before = func(_ int, r *http.Request) { // the workflow's Idempotent Claim node
		body, _ := json.Marshal(map[string]string{"source": r.Header.Get(inbox.HeaderSource), "event_id": r.Header.Get(inbox.HeaderEventID)})
		req, _ := http.NewRequest(http.MethodPost, base.Load().(string)+"/v1/claims", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+ingestAPIKey)
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	target.mu.Unlock()
	const secretA, secretB = "shop-door-a-secret-0001", "shop-door-b-secret-0002"
	e := setupIngest(t, `
sources:
  door-a:
    tenant: acme
    provider: github
    secrets: ["`+secretA+`"]
    dedupe_scope: shop
    key: {fields: ["/order/id", "/event"]}
    forward: {url: "${TARGET_URL}", max_attempts: 2, backoff_base_seconds: 1, backoff_cap_seconds: 1}
  door-b:
    tenant: acme
    provider: github
    secrets: ["`+secretB+`"]
    dedupe_scope: shop
    key: {fields: ["/order/id", "/event"]}
    forward: {url: "${TARGET_URL}", max_attempts: 2, backoff_base_seconds: 1, backoff_cap_seconds: 1}
`, ingestOptions{dispatch: true, env: map[string]string{"TARGET_URL": target.srv.URL}})
	base.Store(e.base)
	doorA, doorB := identGitHubWith(secretA), identGitHubWith(secretB)
	body := []byte(`{"event":"order.paid","order":{"id":"o-1001","total":"9.99"}}`)
	eventID := verify.JoinKey("o-1001", "order.paid")

	first := identReceipt(t, e, "door-a", doorA(t, "a-delivery-1", body), "through door a")
	require.Equal(t, ingestReceipt{EventID: eventID, ClaimID: first.ClaimID, Status: "accepted"}, first)
	second := identReceipt(t, e, "door-b", doorB(t, "b-delivery-7", body), "through door b")
	require.Equal(t, ingestReceipt{EventID: eventID, ClaimID: first.ClaimID, Status: "duplicate"}, second)
	require.Equal(t, "shop", e.scalar(t, `SELECT source FROM claims WHERE id = $1`, first.ClaimID))
	require.Equal(t, ingestCounts{1, 1, 1, 0}, e.identScopeCounts(t, "shop", "door-a", "door-b"))
	require.Equal(t, "0", e.scalar(t, `SELECT count(*)::text FROM claims WHERE source IN ('door-a', 'door-b')`))

	require.Equal(t, "dispatched", e.waitDispatchDone(t, first.ClaimID),
		"the workflow claims with the forwarded source and event id, and that must be this record; log:\n%s", e.logs.String())
	reqs := target.forInbox(first.ClaimID)
	require.Len(t, reqs, 1, "exactly one dispatch")
	require.Len(t, target.requests(), 1)
	require.Equal(t, "shop", reqs[0].header.Get(inbox.HeaderSource), "the forwarded source is the scope the claim is keyed in")
	require.Equal(t, eventID, reqs[0].header.Get(inbox.HeaderEventID))
	require.Equal(t, claim.IdempotencyKey(ingestTenant, claim.Key{Source: "shop", EventID: eventID}), reqs[0].header.Get(inbox.HeaderIdempotencyKey))
	require.Equal(t, "processing", e.scalar(t, `SELECT state FROM claims WHERE id = $1`, first.ClaimID), "the workflow's claim is this record")
	require.Equal(t, "1", e.scalar(t, `SELECT count(*)::text FROM claims WHERE tenant = $1`, ingestTenant), "the workflow's claim made no second record")

	// Another event, first through door b: door a's copy is its duplicate.
	other := []byte(`{"event":"order.paid","order":{"id":"o-1002","total":"1.00"}}`)
	b := identReceipt(t, e, "door-b", doorB(t, "b-delivery-8", other), "other event through door b")
	require.Equal(t, "accepted", b.Status)
	a := identReceipt(t, e, "door-a", doorA(t, "a-delivery-2", other), "other event through door a")
	require.Equal(t, ingestReceipt{EventID: b.EventID, ClaimID: b.ClaimID, Status: "duplicate"}, a)
	require.Equal(t, "door-b", e.scalar(t, `SELECT source FROM inbox_events WHERE claim_id = $1`, b.ClaimID))
	require.Equal(t, ingestCounts{2, 2, 2, 0}, e.identScopeCounts(t, "shop", "door-a", "door-b"))
	// A copy of the first event with another total is the same key, another payload.
	changed := []byte(`{"event":"order.paid","order":{"id":"o-1001","total":"19.99"}}`)
	c := identReceipt(t, e, "door-b", doorB(t, "b-delivery-9", changed), "changed copy through door b")
	require.Equal(t, ingestReceipt{EventID: eventID, ClaimID: first.ClaimID, Status: "conflict"}, c)
	require.Equal(t, "dispatched", e.waitDispatchDone(t, b.ClaimID))
	require.Len(t, target.requests(), 2, "one dispatch per event")
}

// TestIngestIdentityDedupeScopeSharesVolatileFields: two Standard Webhooks
// endpoints in one scope share volatile_fields, so a copy that differs
// only in a volatile field is a duplicate through either door, and one that
// differs elsewhere is a conflict.
func TestIngestIdentityDedupeScopeSharesVolatileFields(t *testing.T) {
	t.Parallel()
	secretA := "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{4}, 32))
	secretB := "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{5}, 32))
	e := setupIngest(t, strings.ReplaceAll(`
sources:
  bill-a: {tenant: acme, provider: standard-webhooks, secrets: ["`+secretA+`"], dedupe_scope: billing, key: {fields: ["/data/invoice_id", "/type"]}, volatile_fields: ["/sent_at", "/attempt"], FWD}
  bill-b: {tenant: acme, provider: standard-webhooks, secrets: ["`+secretB+`"], dedupe_scope: billing, key: {fields: ["/data/invoice_id", "/type"]}, volatile_fields: ["/sent_at", "/attempt"], FWD}
`, "FWD", unusedForward), ingestOptions{})
	doorA, doorB := identStdWith(secretA), identStdWith(secretB)
	ev := func(sentAt string, attempt int, amount int) []byte {
		return []byte(fmt.Sprintf(`{"type":"invoice.paid","data":{"invoice_id":"in_1","amount":%d},"sent_at":"%s","attempt":%d}`, amount, sentAt, attempt))
	}
	first := identReceipt(t, e, "bill-a", doorA(t, "msg_a_1", ev("2026-01-01T00:00:00Z", 1, 100)), "door a")
	require.Equal(t, "accepted", first.Status)
	require.Equal(t, verify.JoinKey("in_1", "invoice.paid"), first.EventID)
	dup := identReceipt(t, e, "bill-b", doorB(t, "msg_b_1", ev("2026-01-01T00:05:00Z", 2, 100)), "door b, volatile fields changed")
	require.Equal(t, ingestReceipt{EventID: first.EventID, ClaimID: first.ClaimID, Status: "duplicate"}, dup)
	dup = identReceipt(t, e, "bill-a", doorA(t, "msg_a_2", ev("2026-01-01T00:09:00Z", 3, 100)), "door a again, volatile fields changed")
	require.Equal(t, "duplicate", dup.Status)
	conflict := identReceipt(t, e, "bill-b", doorB(t, "msg_b_2", ev("2026-01-01T00:05:00Z", 2, 200)), "door b, amount changed")
	require.Equal(t, ingestReceipt{EventID: first.EventID, ClaimID: first.ClaimID, Status: "conflict"}, conflict)
	require.Equal(t, ingestCounts{1, 1, 1, 1}, e.identScopeCounts(t, "billing", "bill-a", "bill-b"))
	require.Equal(t, "billing", e.scalar(t, `SELECT source FROM claims WHERE id = $1`, first.ClaimID))
}

// TestIngestIdentityDedupeScopeKeyHeaders: a key made of a header and a
// field (key.headers + key.fields) on two Shopify apps of one scope: the
// same order of the same shop through both doors is one event, the same
// order id of another shop another event, and a delivery without the
// header is refused naming it.
func TestIngestIdentityDedupeScopeKeyHeaders(t *testing.T) {
	t.Parallel()
	const secretA, secretB = "shpss_app_a_0001", "shpss_app_b_0002"
	e := setupIngest(t, strings.ReplaceAll(`
sources:
  app-a: {tenant: acme, provider: shopify, secrets: ["`+secretA+`"], dedupe_scope: orders, key: {headers: ["X-Shopify-Shop-Domain"], fields: ["/id"]}, FWD}
  app-b: {tenant: acme, provider: shopify, secrets: ["`+secretB+`"], dedupe_scope: orders, key: {headers: ["x-shopify-shop-domain"], fields: ["/id"]}, FWD}
`, "FWD", unusedForward), ingestOptions{})
	body := []byte(`{"id":820982911946154508,"admin_graphql_api_id":"gid://shopify/Order/820982911946154508","total_price":"10.00"}`)
	first := identReceipt(t, e, "app-a", identShopifyWith(secretA, "a.myshopify.com")(t, "ev-a-1", body), "app a")
	require.Equal(t, "accepted", first.Status)
	require.Equal(t, verify.JoinKey("a.myshopify.com", "820982911946154508"), first.EventID, "the id's exact digits, not a rounded double")
	dup := identReceipt(t, e, "app-b", identShopifyWith(secretB, "a.myshopify.com")(t, "ev-b-1", body), "app b, same shop")
	require.Equal(t, ingestReceipt{EventID: first.EventID, ClaimID: first.ClaimID, Status: "duplicate"}, dup)
	other := identReceipt(t, e, "app-b", identShopifyWith(secretB, "b.myshopify.com")(t, "ev-b-2", body), "app b, another shop")
	require.Equal(t, "accepted", other.Status)
	require.Equal(t, verify.JoinKey("b.myshopify.com", "820982911946154508"), other.EventID)
	require.Equal(t, ingestCounts{2, 2, 2, 0}, e.identScopeCounts(t, "orders", "app-a", "app-b"))

	ans := e.send(t, "app-a", identShopifyWith(secretA, "")(t, "ev-a-3", body))
	require.Equal(t, http.StatusUnprocessableEntity, ans.status, "%s", ans.body)
	er := identError(t, ans)
	require.Equal(t, "not_stored", string(er.Code))
	require.Equal(t, "X-Shopify-Shop-Domain", er.Field)
	require.Equal(t, ingestCounts{2, 2, 2, 0}, e.identScopeCounts(t, "orders", "app-a", "app-b"), "nothing stored")
}

// TestIngestIdentityDedupeScopeMembersMustAgree: sources of one scope that
// would derive other keys or hashes from one event, or keep it under
// another tenant or claim policy, are a configuration error naming both.
func TestIngestIdentityDedupeScopeMembersMustAgree(t *testing.T) {
	t.Parallel()
	const a = `  a: {tenant: acme, provider: github, secrets: ["s-a"], dedupe_scope: shop, key: {headers: ["X-Shop"], fields: ["/order/id", "/event"]}, volatile_fields: ["/sent_at"], ` + unusedForward + "}\n"
	b := func(fields string) string {
		return `  b: {tenant: acme, provider: github, secrets: ["s-b"], dedupe_scope: shop, ` + fields + `, ` + unusedForward + "}\n"
	}
	const same = `key: {headers: ["X-Shop"], fields: ["/order/id", "/event"]}, volatile_fields: ["/sent_at"]`
	parse := func(srcs string) (sources.Config, error) {
		return sources.Parse([]byte("sources:\n"+srcs), func(string) string { return "" })
	}

	cfg, err := parse(a + b(same))
	require.NoError(t, err)
	require.Equal(t, "shop", cfg.Sources["a"].Scope)
	require.Equal(t, "shop", cfg.Sources["b"].Scope)
	require.Contains(t, cfg.Policies, "shop", "the scope has its members' claim policy")
	_, err = parse(a + b(`key: {headers: ["x-shop"], fields: ["/order/id", "/event"]}, volatile_fields: ["/sent_at"]`))
	require.NoError(t, err, "header names are case-insensitive")

	for _, c := range []struct{ name, b, why string }{
		{"key fields", b(`key: {headers: ["X-Shop"], fields: ["/order/id"]}, volatile_fields: ["/sent_at"]`), "key"},
		{"key field order", b(`key: {headers: ["X-Shop"], fields: ["/event", "/order/id"]}, volatile_fields: ["/sent_at"]`), "key"},
		{"key headers", b(`key: {headers: ["X-Other"], fields: ["/order/id", "/event"]}, volatile_fields: ["/sent_at"]`), "key"},
		{"no key", b(`volatile_fields: ["/sent_at"]`), "key"},
		{"provider", strings.Replace(b(same), "provider: github", "provider: stripe", 1), "provider"},
		{"tenant", strings.Replace(b(same), "tenant: acme", "tenant: other", 1), "tenant"},
		{"volatile_fields", b(`key: {headers: ["X-Shop"], fields: ["/order/id", "/event"]}, volatile_fields: ["/sent_at", "/attempt"]`), "volatile_fields"},
		{"no volatile_fields", b(`key: {headers: ["X-Shop"], fields: ["/order/id", "/event"]}`), "volatile_fields"},
		{"lease_policy", b(same + `, lease_policy: review`), "lease_policy"},
		{"retention_days", b(same + `, retention_days: 7`), "retention_days"},
	} {
		_, err := parse(a + c.b)
		require.Error(t, err, c.name)
		msg := err.Error()
		require.Contains(t, msg, `"a"`, "%s: names both sources: %s", c.name, msg)
		require.Contains(t, msg, `"b"`, "%s: names both sources: %s", c.name, msg)
		require.Contains(t, msg, `"shop"`, "%s: names the scope: %s", c.name, msg)
		require.Contains(t, msg, c.why, "%s: says what differs: %s", c.name, msg)
	}
	// A claim-only source of the scope's name with another policy.
	_, err = parse(a + b(same) + "  shop: {lease_policy: review}\n")
	require.Error(t, err)
	require.Contains(t, err.Error(), `"shop"`)
}

// ---------------------------------------------------------------- batches

// TestIngestIdentityBatchWithAnAmbiguousItem: a CloudEvents batch or a
// Microsoft Graph value[] whose items are fine but one, authentic, is
// ambiguous (or has an empty id) is never answered 2xx with that item
// dropped: it is refused with 422 not_stored naming the item's field, and
// nothing is stored. A Graph source answering unauthenticated deliveries
// with a silent 2xx must not treat such an authentic batch as one.
func TestIngestIdentityBatchWithAnAmbiguousItem(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, strings.ReplaceAll(`
sources:
  ce: {tenant: acme, provider: cloudevents, secrets: ["`+identCEToken+`"], FWD}
  graph: {tenant: acme, provider: msgraph, secrets: ["graph-state-0001"], FWD}
  graph-quiet: {tenant: acme, provider: msgraph, secrets: ["graph-state-0001"], unauthenticated_status: 202, FWD}
`, "FWD", unusedForward), ingestOptions{})
	ceItem := func(id, rest string) string {
		return `{"specversion":"1.0","id":"` + id + `","source":"/batch","type":"com.example.order"` + rest + `}`
	}
	graphItem := func(id, rest string) string {
		return `{"id":"` + id + `","subscriptionId":"sub-1","clientState":"graph-state-0001","changeType":"created","resource":"me/messages/` + id + `"` + rest + `}`
	}
	ceBatch := func(items ...string) ingestDelivery {
		return ingestDelivery{header: ingestHeaders{{"Content-Type", "application/cloudevents-batch+json"},
			{"Authorization", "Bearer " + identCEToken}}, body: []byte("[" + strings.Join(items, ",") + "]")}
	}
	graphBatch := func(items ...string) ingestDelivery {
		return ingestDelivery{header: jsonHeaders(), body: []byte(`{"value":[` + strings.Join(items, ",") + `]}`)}
	}
	// A Microsoft Graph notification carries its authentication (the
	// clientState) inside the body, so a body that is not strict JSON cannot
	// be authenticated: it is answered as failed verification (401, or the
	// source's unauthenticated_status), nothing stored. A CloudEvents batch
	// is authenticated by its header, so an ambiguous item is an authentic
	// event that cannot be stored: 422 for the whole batch.
	const unauth = http.StatusUnauthorized
	for i, c := range []struct {
		name, source, field string
		d                   ingestDelivery
		status              int // 0: 422 not_stored
	}{
		{"CloudEvents: duplicate attribute in item 1", "ce", "/1/id",
			ceBatch(ceItem("b1", `,"data":{"n":1}`), ceItem("b2", `,"data":{"n":2},"id":"b2x"`), ceItem("b3", `,"data":{"n":3}`)), 0},
		{"CloudEvents: duplicate name in item 1's data", "ce", "/1/data/n",
			ceBatch(ceItem("c1", `,"data":{"n":1}`), ceItem("c2", `,"data":{"n":2,"n":3}`), ceItem("c3", `,"data":{"n":3}`)), 0},
		{"CloudEvents: case variant of id in item 1", "ce", "/1/ID",
			ceBatch(ceItem("d1", `,"data":{"n":1}`), ceItem("d2", `,"ID":"d2x","data":{"n":2}`), ceItem("d3", `,"data":{"n":3}`)), 0},
		{"CloudEvents: unpaired surrogate in item 1", "ce", "/1/data/s",
			ceBatch(ceItem("e1", `,"data":{"n":1}`), ceItem("e2", `,"data":{"s":"\udc00"}`), ceItem("e3", `,"data":{"n":3}`)), 0},
		{"CloudEvents: empty id in item 1", "ce", "/1/id",
			ceBatch(ceItem("f1", `,"data":{"n":1}`), strings.Replace(ceItem("f2", `,"data":{"n":2}`), `"f2"`, `""`, 1), ceItem("f3", `,"data":{"n":3}`)), 0},
		{"Graph: duplicate member in item 1", "graph", "/value/1/id",
			graphBatch(graphItem("n1", ""), graphItem("n2", `,"id":"n2x"`), graphItem("n3", "")), unauth},
		{"Graph: duplicate name in item 1's resourceData", "graph", "/value/1/resourceData/id",
			graphBatch(graphItem("m1", ""), graphItem("m2", `,"resourceData":{"id":"r1","id":"r2"}`), graphItem("m3", "")), unauth},
		{"Graph: case variant of id in item 1", "graph", "/value/1/Id",
			graphBatch(graphItem("k1", ""), graphItem("k2", `,"Id":"k2x"`), graphItem("k3", "")), unauth},
		{"Graph: empty id in item 1, nothing to derive a key from", "graph", "/value/1/id",
			graphBatch(graphItem("j1", ""), graphItem("", ""), graphItem("j3", "")), 0},
		{"Graph (unauthenticated_status 202): duplicate member in item 1", "graph-quiet", "/value/1/id",
			graphBatch(graphItem("q1", ""), graphItem("q2", `,"id":"q2x"`), graphItem("q3", "")), http.StatusAccepted},
	} {
		t.Run(c.name, func(t *testing.T) { // in order: counts are per source
			msg := fmt.Sprintf("%d %s", i, c.name)
			before := e.counts(t, c.source)
			ans := e.send(t, c.source, c.d)
			after := e.counts(t, c.source)
			require.Equal(t, before, after, "%s: a refused batch stores nothing (%d %s)", msg, ans.status, ans.body)
			if c.status == http.StatusAccepted {
				// The operator chose to answer failed verification with a
				// 2xx (unauthenticated_status); this body failed it.
				require.Equal(t, c.status, ans.status, "%s: %s", msg, ans.body)
				require.Equal(t, "Accepted", string(ans.body), "the status text, no receipts")
				return
			}
			if ans.status >= 200 && ans.status < 300 {
				var r struct {
					Received      []ingestReceipt `json:"received"`
					RejectedItems int             `json:"rejected_items"`
				}
				_ = json.Unmarshal(ans.body, &r)
				require.Failf(t, "2xx for a batch with an ambiguous authentic item",
					"%s: answered %d %s; %d item(s) stored, rejected_items %d: the ambiguous item is acknowledged and dropped",
					msg, ans.status, ans.body, after.inbox-before.inbox, r.RejectedItems)
			}
			er := identError(t, ans)
			if c.status == unauth {
				require.Equal(t, unauth, ans.status, "%s: %s", msg, ans.body)
				require.Equal(t, "unauthorized", string(er.Code), "%s: %s", msg, ans.body)
				// An unauthenticated answer names nothing (no field, no
				// reason): the reason is in the log only.
				require.Empty(t, er.Field, "%s: %s", msg, ans.body)
				return
			}
			require.Equal(t, http.StatusUnprocessableEntity, ans.status, "%s: %s", msg, ans.body)
			require.Equal(t, "not_stored", string(er.Code), "%s: %s", msg, ans.body)
			require.Equal(t, c.field, er.Field, "%s: %s", msg, ans.body)
		})
	}
}

// apiPost posts a JSON body to the authenticated /v1 API.
func (e *ingestEnv) apiPost(t *testing.T, path, body string) ingestAnswer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.base+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+ingestAPIKey)
	req.Header.Set("Content-Type", "application/json")
	return e.do(t, req)
}

// Case B01: retries of an event with volatile fields stay retries. Ingest
// hashes the body without /createdAt; the workflow claims with the whole
// stored body as its payload, fails retryably, and claims again after the
// backoff: won, attempt 2, never a conflict. A provider retry whose
// createdAt moved is a duplicate at ingest, before and after the workflow's
// claims.
func TestIngestClaimFailReclaimComparesLikeWithLike(t *testing.T) {
	t.Parallel()
	const token = "documenso-token-0123456789"
	e := setupIngest(t, `
sources:
  documenso:
    tenant: acme
    provider: token
    secrets: ["`+token+`"]
    options: {header: X-Documenso-Secret, key: {id_pointers: ["/event", "/payload/id", "/payload/status"]}}
    volatile_fields: ["/createdAt"]
    `+unusedForward+`
`, ingestOptions{})
	body := func(at string) []byte {
		return []byte(`{"event":"DOCUMENT_SIGNED","payload":{"id":42,"status":"COMPLETED"},"createdAt":"` + at + `"}`)
	}
	deliver := func(at string) ingestReceipt {
		ans := e.send(t, "documenso", ingestDelivery{header: ingestHeaders{{"Content-Type", "application/json"}, {"X-Documenso-Secret", token}}, body: body(at)})
		require.Equal(t, http.StatusOK, ans.status, "%s", ans.body)
		rs, _ := ans.receipts(t)
		require.Len(t, rs, 1)
		return rs[0]
	}
	first := deliver("2026-12-01T10:00:00.000Z")
	require.Equal(t, "accepted", first.Status)
	require.Equal(t, "duplicate", deliver("2026-12-01T10:00:03.512Z").Status, "a provider retry with a new createdAt")

	claimBody := `{"source":"documenso","event_id":` + strconv.Quote(first.EventID) + `,"payload":` + string(body("2026-12-01T10:00:00.000Z")) + `}`
	var won struct {
		Outcome    string `json:"outcome"`
		ClaimID    string `json:"claim_id"`
		ClaimToken string `json:"claim_token"`
		Attempt    int    `json:"attempt"`
	}
	ans := e.apiPost(t, "/v1/claims", claimBody)
	require.Equal(t, http.StatusOK, ans.status, "%s", ans.body)
	require.NoError(t, json.Unmarshal(ans.body, &won))
	require.Equal(t, "won", won.Outcome)
	require.Equal(t, first.ClaimID, won.ClaimID, "the workflow claims the ingested record")

	ans = e.apiPost(t, "/v1/claims/"+won.ClaimID+"/fail", `{"claim_token":"`+won.ClaimToken+`","error":"smtp 451","retry":"retryable"}`)
	require.Equal(t, http.StatusOK, ans.status, "%s", ans.body)
	require.Equal(t, "duplicate", deliver("2026-12-01T10:00:09.000Z").Status, "a provider retry between the attempts")
	_, err := e.pool.Exec(e.ctx, `UPDATE claims SET next_attempt_at = now() - interval '1 second' WHERE id = $1`, won.ClaimID)
	require.NoError(t, err)

	ans = e.apiPost(t, "/v1/claims", claimBody)
	require.Equal(t, http.StatusOK, ans.status, "%s", ans.body)
	require.NoError(t, json.Unmarshal(ans.body, &won))
	require.Equal(t, "won", won.Outcome, "the retry of one event is a retry, not a conflict: %s", ans.body)
	require.Equal(t, 2, won.Attempt)
	require.Equal(t, "0", e.scalar(t, `SELECT conflict_count::text FROM claims WHERE id = $1`, won.ClaimID))
	ans = e.apiPost(t, "/v1/claims/"+won.ClaimID+"/complete", `{"claim_token":"`+won.ClaimToken+`","result_ref":"mail-1"}`)
	require.Equal(t, http.StatusOK, ans.status, "%s", ans.body)
	require.Equal(t, "duplicate", deliver("2026-12-01T10:09:00.000Z").Status, "and after completion")
}

// A batch item whose type the source filters out is left out by
// configuration: the batch's other items are stored and acknowledged (the
// refusal of a whole batch is only for authentic items that cannot be
// stored).
func TestIngestBatchKeepsItemsBesideAFilteredType(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, `
sources:
  graph: {tenant: acme, provider: msgraph, secrets: ["graph-state-0001"], allowed_event_types: [created], `+unusedForward+`}
`, ingestOptions{})
	item := func(id, change string) string {
		return `{"id":"` + id + `","subscriptionId":"sub-1","clientState":"graph-state-0001","changeType":"` + change + `","resource":"me/messages/` + id + `"}`
	}
	ans := e.send(t, "graph", ingestDelivery{header: jsonHeaders(), body: []byte(`{"value":[` + item("f1", "created") + "," + item("f2", "deleted") + "," + item("f3", "created") + `]}`)})
	require.Equal(t, http.StatusAccepted, ans.status, "%s", ans.body)
	rs, rejected := ans.receipts(t)
	require.Len(t, rs, 2)
	require.Equal(t, 1, rejected)
	require.Equal(t, 2, e.counts(t, "graph").inbox)
}

// An authentic delivery with an empty body (a CloudEvent without data, a
// Standard Webhooks ping) is stored on a header-keyed source, hashed by its
// (empty) bytes: never a 503 that the provider retries forever.
func TestIngestIdentityEmptyBodyIsStored(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, identStrictSources, ingestOptions{})
	for source, sign := range map[string]identSign{"std": identStdWith(identStdSecret), "tok-header": identTokenDelivery, "hmac": identHMACDelivery} {
		d := sign(t, "empty-"+source, []byte{})
		first := identReceive(t, e, source, d, http.StatusOK, "accepted", source+": empty body")
		require.Equal(t, identSHA256(nil), e.scalar(t, `SELECT receipt_hash FROM claims WHERE id = $1`, first.ClaimID), source)
		again := identReceive(t, e, source, sign(t, "empty-"+source, []byte{}), http.StatusOK, "duplicate", source+": the same empty body again")
		require.Equal(t, first.ClaimID, again.ClaimID)
	}
	ce := ingestDelivery{header: ingestHeaders{{"Authorization", "Bearer " + identCEToken}, {"ce-specversion", "1.0"},
		{"ce-id", "no-data-1"}, {"ce-source", "/sensors/1"}, {"ce-type", "com.example.ping"}}, body: nil}
	identReceive(t, e, "ce", ce, http.StatusOK, "accepted", "CloudEvents binary mode without data")
}

// A header the key is read from, sent twice with different values, names
// two events at once: refused naming the header, never keyed by the first
// value. The same value twice is one value.
func TestIngestIdentityRepeatedKeyHeaderIsRefused(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, identStrictSources, ingestOptions{})
	body := []byte(`{"id":"r1","type":"invoice.paid"}`)
	for source, sign := range map[string]identSign{"tok-header": identTokenDelivery, "hmac": identHMACDelivery, "github": identGitHubWith(identGitHubSecret)} {
		idHeader := "X-Event-Id"
		if source == "github" {
			idHeader = "X-GitHub-Delivery"
		}
		d := sign(t, "m1-"+source, body)
		d.header = append(d.header, [2]string{idHeader, "m2-" + source})
		identRefused(t, e, source, d, idHeader, source+": two different ids")
		same := sign(t, "m3-"+source, body)
		same.header = append(same.header, [2]string{idHeader, "m3-" + source})
		identReceive(t, e, source, same, http.StatusOK, "accepted", source+": one id sent twice")
	}
	// A repeated signature header fails verification: 401, nothing stored.
	d := identGitHubWith(identGitHubSecret)(t, "m4", body)
	d.header = append(d.header, [2]string{"X-Hub-Signature-256", "sha256=" + strings.Repeat("0", 64)})
	before := e.counts(t, "github")
	ans := e.send(t, "github", d)
	require.Equal(t, http.StatusUnauthorized, ans.status, "%s", ans.body)
	require.Empty(t, identError(t, ans).Field, "an unauthenticated answer names no header")
	require.Equal(t, before, e.counts(t, "github"))
}

// A provider id that spells a stand-in hash ("sha256:" and hex) is its own
// event: it never meets the stand-in of an id the ledger could not keep.
func TestIngestIdentityStandInHashesNeverMeetLiteralIDs(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, identStrictSources, ingestOptions{})
	body := []byte(`{"n":1}`)
	first := identReceive(t, e, "tok-header", identTokenDelivery(t, "inv\xff", body), http.StatusOK, "accepted", "an id that is not UTF-8")
	require.True(t, strings.HasPrefix(first.EventID, "sha256:"), first.EventID)
	literal := identReceive(t, e, "tok-header", identTokenDelivery(t, first.EventID, []byte(`{"n":2}`)), http.StatusOK, "accepted", "its stand-in, sent literally")
	require.NotEqual(t, first.ClaimID, literal.ClaimID)
	identReceive(t, e, "tok-header", identTokenDelivery(t, "inv\xff", body), http.StatusOK, "duplicate", "the first again")
	long := strings.Repeat("L", 2000)
	l1 := identReceive(t, e, "tok-header", identTokenDelivery(t, long, body), http.StatusOK, "accepted", "an id longer than the ledger keeps")
	require.NotEqual(t, l1.ClaimID, identReceive(t, e, "tok-header", identTokenDelivery(t, long+"M", body), http.StatusOK, "accepted", "another long id").ClaimID)
}

// Slack's form bodies: a field the key or type is read from, sent twice
// with different values or beside a case variant, is refused.
func TestIngestIdentitySlackFormFieldsAreUnambiguous(t *testing.T) {
	t.Parallel()
	const secret = "ident-slack-secret-0001"
	e := setupIngest(t, `
sources:
  slack: {tenant: acme, provider: slack, secrets: ["`+secret+`"], `+unusedForward+`}
`, ingestOptions{})
	send := func(form string) ingestAnswer {
		ts := time.Now().Unix()
		return e.send(t, "slack", ingestDelivery{header: ingestHeaders{{"Content-Type", "application/x-www-form-urlencoded"},
			{"X-Slack-Request-Timestamp", strconv.FormatInt(ts, 10)}, {"X-Slack-Signature", verifytest.Slack(secret, ts, []byte(form))}}, body: []byte(form)})
	}
	for form, field := range map[string]string{
		"command=%2Fdeploy&trigger_id=tr2&trigger_id=tr3&team_id=T1":                     "trigger_id",
		"command=%2Fdeploy&Trigger_id=tr4&trigger_id=tr5&team_id=T1":                     "Trigger_id",
		"command=%2Fdeploy&command=%2Fother&trigger_id=tr6":                              "command",
		"payload=%7B%22type%22%3A%22a%22%2C%22trigger_id%22%3A%22x%22%7D&payload=%7B%7D": "payload",
	} {
		ans := send(form)
		require.Equal(t, http.StatusUnprocessableEntity, ans.status, "%s: %s", form, ans.body)
		require.Equal(t, field, identError(t, ans).Field, form)
	}
	require.Equal(t, 0, e.counts(t, "slack").claims)
	ans := send("command=%2Fdeploy&trigger_id=tr7&trigger_id=tr7&team_id=T1")
	require.Equal(t, http.StatusOK, ans.status, "the same value twice is one value: %s", ans.body)
}
