package httpapi_test

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Tests of what each provider's key is made of, through POST
// /ingest/{source} on a real PostgreSQL with the dispatcher running against
// a counting target (require_claim: false). For every provider, and every
// mode where it has several:
//   - distinct: two real events about one object at one moment (and where
//     it matters events that differ only in who or what they concern, or a
//     lifecycle notification repeated on purpose) are two records, each
//     dispatched exactly once;
//   - redelivery: the same event again, with the provider's own retry
//     headers, counters and re-signing, is a duplicate of the first record
//     (same claim id), which is dispatched exactly once.
// The key derivations themselves are unit-tested in sidecar/verify
// (keys_test.go). Same harness as ingest_test.go and ingest_identity_test.go.

const (
	keysStripeSecret  = "whsec_keys_stripe_0001"
	keysGitHubSecret  = "keys-github-secret-0001"
	keysShopifySecret = "shpss_keys_0001"
	keysSlackSecret   = "keys-slack-signing-secret-0001"
	keysGraphState    = "keys-graph-client-state-0001"
	keysCEToken       = "keys-ce-token-0001"
	keysPaddleSecret  = "pdl_ntfset_keys_0001"
	keysZoomSecret    = "keys-zoom-secret-token-0001"
	keysTwilioToken   = "keys-twilio-auth-token-0001"
	keysTwilioURL     = "https://hooks.example.com/ingest/k-twilio"
	keysToken         = "keys-shared-token-0001"
	keysHMACSecret    = "keys-hmac-secret-0001"
)

var keysStdSecret = "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))

const keysForward = `forward: {require_claim: false, url: "${TARGET_URL}", backoff_base_seconds: 1, backoff_cap_seconds: 1}`

var keysSources = strings.ReplaceAll(`
sources:
  k-stripe: {tenant: acme, provider: stripe, secrets: ["`+keysStripeSecret+`"], FWD}
  k-github: {tenant: acme, provider: github, secrets: ["`+keysGitHubSecret+`"], FWD}
  k-std: {tenant: acme, provider: standard-webhooks, secrets: ["`+keysStdSecret+`"], FWD}
  k-shopify: {tenant: acme, provider: shopify, secrets: ["`+keysShopifySecret+`"], FWD}
  k-slack-events: {tenant: acme, provider: slack, secrets: ["`+keysSlackSecret+`"], FWD}
  k-slack-commands: {tenant: acme, provider: slack, secrets: ["`+keysSlackSecret+`"], FWD}
  k-slack-interactivity: {tenant: acme, provider: slack, secrets: ["`+keysSlackSecret+`"], FWD}
  k-graph-change: {tenant: acme, provider: msgraph, secrets: ["`+keysGraphState+`"], FWD}
  k-graph-lifecycle: {tenant: acme, provider: msgraph, secrets: ["`+keysGraphState+`"], FWD}
  k-ce-binary: {tenant: acme, provider: cloudevents, secrets: ["`+keysCEToken+`"], FWD}
  k-ce-structured: {tenant: acme, provider: cloudevents, secrets: ["`+keysCEToken+`"], FWD}
  k-ce-batch: {tenant: acme, provider: cloudevents, secrets: ["`+keysCEToken+`"], FWD}
  k-paddle: {tenant: acme, provider: paddle, secrets: ["`+keysPaddleSecret+`"], volatile_fields: ["/notification_id"], FWD}
  k-zoom: {tenant: acme, provider: zoom, secrets: ["`+keysZoomSecret+`"], FWD}
  k-twilio: {tenant: acme, provider: twilio, secrets: ["`+keysTwilioToken+`"], options: {url: "`+keysTwilioURL+`"}, FWD}
  k-token:
    tenant: acme
    provider: token
    secrets: ["`+keysToken+`"]
    options: {header: X-Api-Key, key: {id_header: X-Event-Id, type_header: X-Event-Type}}
    FWD
  k-token-fields:
    tenant: acme
    provider: token
    secrets: ["`+keysToken+`"]
    options: {header: X-Api-Key, key: {id_pointers: ["/event", "/object/id", "/object/version"], type_pointer: "/event"}}
    FWD
  k-hmac:
    tenant: acme
    provider: hmac
    secrets: ["`+keysHMACSecret+`"]
    options:
      signature: {header: X-Signature, prefix: "sha256="}
      signed_content: "{timestamp}.{body}"
      timestamp_header: X-Timestamp
      key: {id_header: X-Event-Id}
    FWD
`, "FWD", keysForward)

// keysEnv is one sidecar, dispatching every source to one counting target.
type keysEnv struct {
	*ingestEnv
	target *ingestTarget
}

// send posts d to source and returns its receipts (answered okStatus, no
// batch item refused).
func (k keysEnv) send(t *testing.T, source string, okStatus int, d ingestDelivery, msg string) []ingestReceipt {
	t.Helper()
	ans := k.ingestEnv.send(t, source, d)
	require.Equal(t, okStatus, ans.status, "%s: %s", msg, ans.body)
	rs, rejected := ans.receipts(t)
	require.Zero(t, rejected, "%s: %s", msg, ans.body)
	return rs
}

// dispatchedOnce waits until the record's dispatch is settled and requires
// exactly one POST to the target, answered 2xx.
func (k keysEnv) dispatchedOnce(t *testing.T, claimID, msg string) {
	t.Helper()
	k.waitDispatchState(t, claimID, "dispatched")
	got := k.target.forInbox(claimID)
	require.Len(t, got, 1, "%s: record %s is dispatched exactly once", msg, claimID)
	require.Equal(t, 1, successes(got), msg)
}

// distinct sends each delivery and requires that together they make
// events new records (accepted, all claim ids different), each dispatched
// once. A delivery may carry several events (a batch).
func (k keysEnv) distinct(t *testing.T, source string, okStatus, events int, ds ...ingestDelivery) []ingestReceipt {
	t.Helper()
	before := k.counts(t, source)
	var all []ingestReceipt
	for i, d := range ds {
		rs := k.send(t, source, okStatus, d, "delivery "+strconv.Itoa(i+1))
		for _, r := range rs {
			require.Equal(t, "accepted", r.Status, "delivery %d: a distinct event is a new record: %+v", i+1, rs)
		}
		all = append(all, rs...)
	}
	require.Len(t, all, events)
	ids := map[string]bool{}
	keys := map[string]bool{}
	for _, r := range all {
		ids[r.ClaimID], keys[r.EventID] = true, true
	}
	require.Len(t, ids, events, "one record per event: %+v", all)
	require.Len(t, keys, events, "one key per event: %+v", all)
	require.Equal(t, ingestCounts{before.claims + events, before.inbox + events, before.jobs + events, before.conflicts}, k.counts(t, source))
	for _, r := range all {
		k.dispatchedOnce(t, r.ClaimID, "distinct event "+r.EventID)
	}
	return all
}

// redelivered sends first (one new record per event it carries), then each
// copy, and requires every copy to be a duplicate of those records (same
// claim ids and keys, nothing new stored), dispatched once in all.
func (k keysEnv) redelivered(t *testing.T, source string, okStatus int, first ingestDelivery, copies ...ingestDelivery) []ingestReceipt {
	t.Helper()
	orig := k.send(t, source, okStatus, first, "first delivery")
	for _, r := range orig {
		require.Equal(t, "accepted", r.Status, "first delivery: %+v", orig)
	}
	after := k.counts(t, source)
	for i, d := range copies {
		rs := k.send(t, source, okStatus, d, "redelivery "+strconv.Itoa(i+1))
		require.Len(t, rs, len(orig), "redelivery %d", i+1)
		for j, r := range rs {
			require.Equal(t, ingestReceipt{EventID: orig[j].EventID, ClaimID: orig[j].ClaimID, Status: "duplicate"}, r,
				"redelivery %d is the same event: same key, same record", i+1)
		}
	}
	require.Equal(t, after, k.counts(t, source), "a redelivery stores nothing new and enqueues no dispatch")
	for _, r := range orig {
		k.dispatchedOnce(t, r.ClaimID, "redelivered event "+r.EventID)
	}
	return orig
}

// keysAt is the unix second to sign with, off seconds after now (a
// provider's retry is re-signed later).
func keysAt(off int64) int64 { return signNow() + off }

func keysStripe(at int64, body string) ingestDelivery {
	return ingestDelivery{header: jsonHeaders("Stripe-Signature", verifytest.StripeHeader(at, []byte(body), keysStripeSecret)), body: []byte(body)}
}

func keysGitHub(delivery, event, body string) ingestDelivery {
	return ingestDelivery{header: jsonHeaders("X-GitHub-Delivery", delivery, "X-GitHub-Event", event, "X-GitHub-Hook-ID", "4242",
		"X-Hub-Signature-256", verifytest.GitHub(keysGitHubSecret, []byte(body))), body: []byte(body)}
}

func keysStd(t *testing.T, id string, at int64, body string) ingestDelivery {
	sig, err := verifytest.StandardWebhooks(keysStdSecret, id, at, []byte(body))
	require.NoError(t, err)
	return ingestDelivery{header: jsonHeaders("webhook-id", id, "webhook-timestamp", strconv.FormatInt(at, 10), "webhook-signature", sig), body: []byte(body)}
}

func keysShopify(topic, eventID, webhookID, body string) ingestDelivery {
	return ingestDelivery{header: jsonHeaders("X-Shopify-Topic", topic, "X-Shopify-Event-Id", eventID, "X-Shopify-Webhook-Id", webhookID,
		"X-Shopify-Shop-Domain", "keys.myshopify.com", "X-Shopify-Triggered-At", "2025-04-22T14:30:00.000000Z", "X-Shopify-API-Version", "2025-04",
		"X-Shopify-Hmac-Sha256", verifytest.Shopify(keysShopifySecret, []byte(body))), body: []byte(body)}
}

// keysSlack signs body at at; extra headers follow (X-Slack-Retry-Num…).
func keysSlack(at int64, contentType, body string, extra ...string) ingestDelivery {
	h := ingestHeaders{{"Content-Type", contentType}, {"X-Slack-Request-Timestamp", strconv.FormatInt(at, 10)},
		{"X-Slack-Signature", verifytest.Slack(keysSlackSecret, at, []byte(body))}}
	for i := 0; i+1 < len(extra); i += 2 {
		h = append(h, [2]string{extra[i], extra[i+1]})
	}
	return ingestDelivery{header: h, body: []byte(body)}
}

func keysGraph(items ...string) ingestDelivery {
	return ingestDelivery{header: jsonHeaders(), body: []byte(`{"value":[` + strings.Join(items, ",") + `]}`)}
}

func keysCEBinary(id, source, body string) ingestDelivery {
	return ingestDelivery{header: jsonHeaders("ce-specversion", "1.0", "ce-id", id, "ce-source", source, "ce-type", "com.example.order.updated",
		"ce-subject", "order-1", "ce-time", "2025-04-22T14:30:00Z", "Authorization", "Bearer "+keysCEToken), body: []byte(body)}
}

func keysCEStructured(body string) ingestDelivery {
	return ingestDelivery{header: ingestHeaders{{"Content-Type", "application/cloudevents+json"}, {"Authorization", "Bearer " + keysCEToken}}, body: []byte(body)}
}

func keysCEBatch(items ...string) ingestDelivery {
	return ingestDelivery{header: ingestHeaders{{"Content-Type", "application/cloudevents-batch+json"}, {"Authorization", "Bearer " + keysCEToken}},
		body: []byte("[" + strings.Join(items, ",") + "]")}
}

func keysCEEvent(id, source string) string {
	return `{"specversion":"1.0","id":"` + id + `","source":"` + source + `","type":"com.example.order.updated","subject":"order-1","time":"2025-04-22T14:30:00Z","data":{"status":"paid"}}`
}

func keysPaddle(at int64, body string) ingestDelivery {
	return ingestDelivery{header: jsonHeaders("Paddle-Signature", verifytest.Paddle(at, []byte(body), keysPaddleSecret)), body: []byte(body)}
}

func keysZoom(at int64, body string) ingestDelivery {
	return ingestDelivery{header: jsonHeaders("x-zm-request-timestamp", strconv.FormatInt(at, 10), "x-zm-signature", verifytest.Zoom(keysZoomSecret, at, []byte(body)),
		"x-zm-trackingid", "v=2.0;clid=us06;rid=KEYS"), body: []byte(body)}
}

// keysTwilio is a form callback to the configured URL plus query; extra
// headers follow (I-Twilio-Idempotency-Token).
func keysTwilio(query string, form url.Values, extra ...string) ingestDelivery {
	signed := keysTwilioURL
	if query != "" {
		signed += "?" + query
	}
	h := ingestHeaders{{"Content-Type", "application/x-www-form-urlencoded"}, {"X-Twilio-Signature", verifytest.Twilio(keysTwilioToken, signed, form)}}
	for i := 0; i+1 < len(extra); i += 2 {
		h = append(h, [2]string{extra[i], extra[i+1]})
	}
	return ingestDelivery{header: h, query: query, body: []byte(form.Encode())}
}

func keysTokenDelivery(id, typ, body string) ingestDelivery {
	return ingestDelivery{header: jsonHeaders("X-Api-Key", keysToken, "X-Event-Id", id, "X-Event-Type", typ), body: []byte(body)}
}

func keysHMAC(id string, at int64, body string) ingestDelivery {
	ts := strconv.FormatInt(at, 10)
	return ingestDelivery{header: jsonHeaders("X-Event-Id", id, "X-Timestamp", ts,
		"X-Signature", "sha256="+verifytest.HexHMACSHA256(keysHMACSecret, []byte(ts+"."), []byte(body))), body: []byte(body)}
}

// TestIngestKeys runs, per provider and mode, the two pairs described at
// the top of this file on one sidecar.
func TestIngestKeys(t *testing.T) {
	t.Parallel()
	target := newIngestTarget(t, nil)
	k := keysEnv{ingestEnv: setupIngest(t, keysSources, ingestOptions{dispatch: true, maxConns: 12, env: map[string]string{"TARGET_URL": target.srv.URL}}), target: target}
	ok, accepted := http.StatusOK, http.StatusAccepted

	t.Run("stripe", func(t *testing.T) {
		t.Parallel()
		event := func(id, typ, status string) string {
			return `{"id":"` + id + `","object":"event","type":"` + typ + `","created":1745332200,"data":{"object":{"id":"in_1","object":"invoice","status":"` + status + `"}}}`
		}
		at := keysAt(0)
		// invoice.updated and invoice.paid about one invoice in one second:
		// Stripe gives each event its own id.
		k.distinct(t, "k-stripe", ok, 2, keysStripe(at, event("evt_k1", "invoice.updated", "open")), keysStripe(at, event("evt_k2", "invoice.paid", "paid")))
		// Stripe retries the event with the same id and body, signed anew.
		body := event("evt_k3", "invoice.finalized", "open")
		k.redelivered(t, "k-stripe", ok, keysStripe(at, body), keysStripe(keysAt(1), body), keysStripe(keysAt(2), body))
	})

	t.Run("github", func(t *testing.T) {
		t.Parallel()
		labeled := func(label string) string {
			return `{"action":"labeled","issue":{"number":7,"updated_at":"2025-04-22T14:30:00Z"},"label":{"name":"` + label + `"},"sender":{"login":"octocat"}}`
		}
		// Two labels added to one issue in one second: two deliveries, two GUIDs.
		k.distinct(t, "k-github", ok, 2, keysGitHub("9a1b0c00-0000-4000-8000-000000000001", "issues", labeled("bug")),
			keysGitHub("9a1b0c00-0000-4000-8000-000000000002", "issues", labeled("p1")))
		// A redelivery (the UI's Redeliver, or the API) keeps X-GitHub-Delivery.
		d := keysGitHub("9a1b0c00-0000-4000-8000-000000000003", "issues", labeled("docs"))
		k.redelivered(t, "k-github", ok, d, d)
	})

	t.Run("standard-webhooks", func(t *testing.T) {
		t.Parallel()
		at := keysAt(0)
		invited := func(user string) string {
			return `{"type":"team.member_added","timestamp":"2025-04-22T14:30:00Z","data":{"team":"t-1","user":"` + user + `"}}`
		}
		// Same team, same moment, different member: two messages.
		k.distinct(t, "k-std", ok, 2, keysStd(t, "msg_k1", at, invited("ann")), keysStd(t, "msg_k2", at, invited("bob")))
		// A retry keeps webhook-id and is signed with a new webhook-timestamp.
		body := invited("cid")
		k.redelivered(t, "k-std", ok, keysStd(t, "msg_k3", at, body), keysStd(t, "msg_k3", keysAt(1), body), keysStd(t, "msg_k3", keysAt(2), body))
	})

	t.Run("shopify", func(t *testing.T) {
		t.Parallel()
		order := `{"id":820982911946154508,"admin_graphql_api_id":"gid://shopify/Order/820982911946154508","updated_at":"2025-04-22T14:30:00-05:00","financial_status":"paid"}`
		// One merchant action, two topics, one X-Shopify-Event-Id, one body:
		// orders/paid would have been a duplicate of orders/create before the
		// topic was part of the key.
		k.distinct(t, "k-shopify", ok, 2, keysShopify("orders/create", "ev-k1", "wh-k1", order), keysShopify("orders/paid", "ev-k1", "wh-k2", order))
		// Two updates of one order at one moment: two events.
		k.distinct(t, "k-shopify", ok, 2, keysShopify("orders/updated", "ev-k2", "wh-k3", order), keysShopify("orders/updated", "ev-k3", "wh-k4", order))
		// A retry keeps both ids; a second subscription to the topic gets a
		// new X-Shopify-Webhook-Id for the same event.
		k.redelivered(t, "k-shopify", ok, keysShopify("orders/fulfilled", "ev-k4", "wh-k5", order),
			keysShopify("orders/fulfilled", "ev-k4", "wh-k5", order), keysShopify("orders/fulfilled", "ev-k4", "wh-k6", order))
	})

	t.Run("slack", func(t *testing.T) {
		t.Parallel()
		t.Run("events", func(t *testing.T) {
			t.Parallel()
			reaction := func(eventID, user string) string {
				return `{"type":"event_callback","team_id":"T1","api_app_id":"A1","event_id":"` + eventID + `","event_time":1745332200,` +
					`"event":{"type":"reaction_added","user":"` + user + `","reaction":"eyes","item":{"type":"message","channel":"C1","ts":"1745332100.000100"},"event_ts":"1745332200.000200"}}`
			}
			at := keysAt(0)
			// Two users react to one message in one second: same item, same
			// event_ts, two event_ids.
			k.distinct(t, "k-slack-events", ok, 2, keysSlack(at, "application/json", reaction("Ev0K1", "U1")), keysSlack(at, "application/json", reaction("Ev0K2", "U2")))
			// Slack retries after 3 s with X-Slack-Retry-Num and a new
			// timestamp and signature; the body and event_id are the same.
			body := reaction("Ev0K3", "U3")
			k.redelivered(t, "k-slack-events", ok, keysSlack(at, "application/json", body),
				keysSlack(keysAt(3), "application/json", body, "X-Slack-Retry-Num", "1", "X-Slack-Retry-Reason", "http_timeout"),
				keysSlack(keysAt(4), "application/json", body, "X-Slack-Retry-Num", "2", "X-Slack-Retry-Reason", "http_timeout"))
		})
		t.Run("commands", func(t *testing.T) {
			t.Parallel()
			command := func(user, trigger string) string {
				return url.Values{"token": {"x"}, "team_id": {"T1"}, "channel_id": {"C1"}, "user_id": {user}, "command": {"/deploy"},
					"text": {"api"}, "response_url": {"https://hooks.slack.com/commands/T1/1/x"}, "trigger_id": {trigger}}.Encode()
			}
			at := keysAt(0)
			// Two users run /deploy api in one second: one trigger_id each.
			k.distinct(t, "k-slack-commands", ok, 2, keysSlack(at, "application/x-www-form-urlencoded", command("U1", "111.222.k1")),
				keysSlack(at, "application/x-www-form-urlencoded", command("U2", "111.222.k2")))
			// Slack does not retry commands; a resend of the request (a proxy's
			// retry, re-signed) keeps trigger_id.
			body := command("U3", "111.222.k3")
			k.redelivered(t, "k-slack-commands", ok, keysSlack(at, "application/x-www-form-urlencoded", body), keysSlack(keysAt(1), "application/x-www-form-urlencoded", body))
		})
		t.Run("interactivity", func(t *testing.T) {
			t.Parallel()
			click := func(user, trigger string) string {
				p := `{"type":"block_actions","team":{"id":"T1"},"user":{"id":"` + user + `"},"trigger_id":"` + trigger +
					`","container":{"type":"message","message_ts":"1745332100.000100"},"actions":[{"action_id":"approve","block_id":"b1","value":"order-1","action_ts":"1745332200.000300"}]}`
				return url.Values{"payload": {p}}.Encode()
			}
			at := keysAt(0)
			// Two users click one button on one message at one action_ts.
			k.distinct(t, "k-slack-interactivity", ok, 2, keysSlack(at, "application/x-www-form-urlencoded", click("U1", "333.444.k1")),
				keysSlack(at, "application/x-www-form-urlencoded", click("U2", "333.444.k2")))
			body := click("U3", "333.444.k3")
			k.redelivered(t, "k-slack-interactivity", ok, keysSlack(at, "application/x-www-form-urlencoded", body), keysSlack(keysAt(1), "application/x-www-form-urlencoded", body))
		})
	})

	t.Run("msgraph", func(t *testing.T) {
		t.Parallel()
		t.Run("change", func(t *testing.T) {
			t.Parallel()
			change := func(id, etag string) string {
				idPart := ""
				if id != "" {
					idPart = `"id":"` + id + `",`
				}
				return `{` + idPart + `"subscriptionId":"sub-k1","subscriptionExpirationDateTime":"2030-01-01T00:00:00Z","clientState":"` + keysGraphState +
					`","changeType":"updated","resource":"users/u1/messages/m1","tenantId":"t1","resourceData":{"id":"m1","@odata.etag":"W/\"` + etag + `\""}}`
			}
			// Two edits of one message in one batch: without a notification
			// id the etag (the message's version) tells them apart; with ids,
			// the ids do.
			k.distinct(t, "k-graph-change", accepted, 2, keysGraph(change("", "CQAAAB1"), change("", "CQAAAB2")))
			k.distinct(t, "k-graph-change", accepted, 2, keysGraph(change("n-k1", "CQAAAB3"), change("n-k2", "CQAAAB3")))
			// Graph resends the batch when the 202 did not reach it in time.
			batch := keysGraph(change("", "CQAAAB4"), change("n-k3", "CQAAAB5"))
			k.redelivered(t, "k-graph-change", accepted, batch, batch)
		})
		t.Run("lifecycle", func(t *testing.T) {
			t.Parallel()
			lifecycle := func(id, event string) string {
				idPart := ""
				if id != "" {
					idPart = `"id":"` + id + `",`
				}
				return `{` + idPart + `"subscriptionId":"sub-k2","subscriptionExpirationDateTime":"2030-01-01T00:00:00Z","tenantId":"t1","clientState":"` +
					keysGraphState + `","lifecycleEvent":"` + event + `"}`
			}
			// Sent again on purpose, byte for byte, while the condition lasts:
			// every one is a challenge the workflow must answer.
			k.distinct(t, "k-graph-lifecycle", accepted, 3, keysGraph(lifecycle("", "reauthorizationRequired")), keysGraph(lifecycle("", "reauthorizationRequired")),
				keysGraph(lifecycle("", "reauthorizationRequired")))
			k.distinct(t, "k-graph-lifecycle", accepted, 2, keysGraph(lifecycle("", "missed")), keysGraph(lifecycle("", "missed")))
			// A subscription is removed once: its redelivery is a duplicate.
			removed := keysGraph(lifecycle("", "subscriptionRemoved"))
			k.redelivered(t, "k-graph-lifecycle", accepted, removed, removed)
			// Where Graph sends a notification id, a redelivery keeps it.
			withID := keysGraph(lifecycle("lc-k1", "reauthorizationRequired"))
			k.redelivered(t, "k-graph-lifecycle", accepted, withID, withID)
		})
	})

	t.Run("cloudevents", func(t *testing.T) {
		t.Parallel()
		t.Run("binary", func(t *testing.T) {
			t.Parallel()
			data := `{"status":"paid"}`
			// One subject, one time: other id, or the same id from another
			// producer (source), is another event.
			k.distinct(t, "k-ce-binary", ok, 3, keysCEBinary("k-b1", "/orders", data), keysCEBinary("k-b2", "/orders", data), keysCEBinary("k-b1", "/billing", data))
			d := keysCEBinary("k-b3", "/orders", data)
			k.redelivered(t, "k-ce-binary", ok, d, d)
		})
		t.Run("structured", func(t *testing.T) {
			t.Parallel()
			k.distinct(t, "k-ce-structured", ok, 3, keysCEStructured(keysCEEvent("k-s1", "/orders")), keysCEStructured(keysCEEvent("k-s2", "/orders")),
				keysCEStructured(keysCEEvent("k-s1", "/billing")))
			d := keysCEStructured(keysCEEvent("k-s3", "/orders"))
			k.redelivered(t, "k-ce-structured", ok, d, d)
		})
		t.Run("batch", func(t *testing.T) {
			t.Parallel()
			k.distinct(t, "k-ce-batch", ok, 2, keysCEBatch(keysCEEvent("k-t1", "/orders"), keysCEEvent("k-t2", "/orders")))
			d := keysCEBatch(keysCEEvent("k-t3", "/orders"), keysCEEvent("k-t3", "/billing"))
			k.redelivered(t, "k-ce-batch", ok, d, d)
		})
	})

	t.Run("paddle", func(t *testing.T) {
		t.Parallel()
		event := func(eventID, typ, notificationID string) string {
			return `{"event_id":"` + eventID + `","event_type":"` + typ + `","occurred_at":"2025-04-22T14:30:00.000000Z","notification_id":"` + notificationID +
				`","data":{"id":"txn_k1","status":"completed"}}`
		}
		at := keysAt(0)
		// transaction.updated and transaction.completed about one
		// transaction at one occurred_at: two event_ids.
		k.distinct(t, "k-paddle", ok, 2, keysPaddle(at, event("evt_k1", "transaction.updated", "ntf_k1")), keysPaddle(at, event("evt_k2", "transaction.completed", "ntf_k2")))
		// A retry is the same notification, signed anew; a replay is a new
		// notification (new notification_id) of the same event_id, a
		// duplicate once /notification_id is a volatile field.
		body := event("evt_k3", "transaction.paid", "ntf_k3")
		k.redelivered(t, "k-paddle", ok, keysPaddle(at, body), keysPaddle(keysAt(1), body), keysPaddle(keysAt(2), event("evt_k3", "transaction.paid", "ntf_k3_replay")))
	})

	t.Run("zoom", func(t *testing.T) {
		t.Parallel()
		joined := func(user string) string {
			return `{"event":"meeting.participant_joined","event_ts":1745332200123,"payload":{"account_id":"A1","object":{"uuid":"4444AAAiAAAAAiAiAiiAii==","id":"85746065",` +
				`"participant":{"user_id":"` + user + `","user_name":"` + user + `","join_time":"2025-04-22T14:30:00Z"}}}}`
		}
		at := keysAt(0)
		// Two participants join one meeting in one millisecond: same event,
		// same meeting uuid, same event_ts; only the participant differs.
		k.distinct(t, "k-zoom", ok, 2, keysZoom(at, joined("ann")), keysZoom(at, joined("bob")))
		// Zoom retries the same notification with a new timestamp and
		// signature.
		body := joined("cid")
		k.redelivered(t, "k-zoom", ok, keysZoom(at, body), keysZoom(keysAt(1), body), keysZoom(keysAt(2), body))
	})

	t.Run("twilio", func(t *testing.T) {
		t.Parallel()
		callDone := url.Values{"AccountSid": {"AC1"}, "CallSid": {"CA-k1"}, "CallStatus": {"completed"}, "CallDuration": {"42"},
			"CallbackSource": {"call-progress-events"}, "SequenceNumber": {"3"}, "Timestamp": {"Tue, 22 Apr 2025 14:30:00 +0000"}}
		recordingDone := url.Values{"AccountSid": {"AC1"}, "CallSid": {"CA-k1"}, "RecordingSid": {"RE-k1"}, "RecordingStatus": {"completed"},
			"RecordingDuration": {"40"}, "RecordingUrl": {"https://api.twilio.com/2010-04-01/Accounts/AC1/Recordings/RE-k1"}}
		gather := func(digits string) url.Values {
			return url.Values{"AccountSid": {"AC1"}, "CallSid": {"CA-k1"}, "CallStatus": {"in-progress"}, "Digits": {digits}}
		}
		// One call, no idempotency token: its completed status callback and
		// its recording's completed callback (same CallSid, status
		// "completed"), two <Gather> answers (CallStatus in-progress), and
		// the same answer to two menus (other action URL).
		k.distinct(t, "k-twilio", ok, 5, keysTwilio("", callDone), keysTwilio("", recordingDone),
			keysTwilio("menu=1", gather("1")), keysTwilio("menu=1", gather("2")), keysTwilio("menu=2", gather("1")))
		// Two status changes of one message.
		message := func(status string) url.Values {
			return url.Values{"AccountSid": {"AC1"}, "MessageSid": {"SM-k1"}, "SmsSid": {"SM-k1"}, "MessageStatus": {status}, "SmsStatus": {status}}
		}
		k.distinct(t, "k-twilio", ok, 2, keysTwilio("", message("sent")), keysTwilio("", message("delivered")))
		// Twilio's retry resends the request with the same
		// I-Twilio-Idempotency-Token; without it, the same parameters.
		k.redelivered(t, "k-twilio", ok, keysTwilio("menu=3", gather("9"), "I-Twilio-Idempotency-Token", "idem-k1"),
			keysTwilio("menu=3", gather("9"), "I-Twilio-Idempotency-Token", "idem-k1"))
		k.redelivered(t, "k-twilio", ok, keysTwilio("menu=4", gather("9")), keysTwilio("menu=4", gather("9")))
		k.redelivered(t, "k-twilio", ok, keysTwilio("", message("read")), keysTwilio("", message("read")))
	})

	t.Run("token", func(t *testing.T) {
		t.Parallel()
		doc := func(version int, signer string) string {
			return `{"event":"DOCUMENT_SIGNED","createdAt":"2025-04-22T14:30:00Z","object":{"id":"doc-1","version":` + strconv.Itoa(version) + `,"signer":"` + signer + `"}}`
		}
		// Key from the sender's event-id header: two signers of one
		// document at one moment are two events.
		k.distinct(t, "k-token", ok, 2, keysTokenDelivery("e-k1", "DOCUMENT_SIGNED", doc(3, "ann")), keysTokenDelivery("e-k2", "DOCUMENT_SIGNED", doc(3, "bob")))
		d := keysTokenDelivery("e-k3", "DOCUMENT_SIGNED", doc(4, "cid"))
		k.redelivered(t, "k-token", ok, d, d)
		// Key from fields: the object's version tells two events about one
		// object at one moment apart.
		k.distinct(t, "k-token-fields", ok, 2, keysTokenDelivery("unused-1", "", doc(5, "ann")), keysTokenDelivery("unused-2", "", doc(6, "bob")))
		k.redelivered(t, "k-token-fields", ok, keysTokenDelivery("unused-3", "", doc(7, "ann")), keysTokenDelivery("unused-4", "", doc(7, "ann")))
	})

	t.Run("hmac", func(t *testing.T) {
		t.Parallel()
		body := func(user string) string {
			return `{"type":"member.added","at":"2025-04-22T14:30:00Z","team":"t-1","user":"` + user + `"}`
		}
		at := keysAt(0)
		k.distinct(t, "k-hmac", ok, 2, keysHMAC("h-k1", at, body("ann")), keysHMAC("h-k2", at, body("bob")))
		// The sender retries with the same id, signed at a new timestamp.
		k.redelivered(t, "k-hmac", ok, keysHMAC("h-k3", at, body("cid")), keysHMAC("h-k3", keysAt(1), body("cid")))
	})
}
