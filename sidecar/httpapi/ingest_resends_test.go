package httpapi_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Providers' retries and resends through POST /ingest/{source} on a real
// PostgreSQL: a provider sending one event again with a changed field,
// under other header names, or under a new id must store it once.

// TestIngestStripePendingWebhooksIsDuplicate: Stripe retries one event
// re-signed with pending_webhooks counting down the endpoints still to be
// reached (https://docs.stripe.com/api/events/object#event_object-pending_webhooks);
// /pending_webhooks is Stripe's default volatile field, so the retry is a
// duplicate of the stored event, never a conflict.
func TestIngestStripePendingWebhooksIsDuplicate(t *testing.T) {
	t.Parallel()
	const secret = "whsec_pending_webhooks_test_0001"
	e := setupIngest(t, `
sources:
  stripe: {tenant: acme, provider: stripe, secrets: ["`+secret+`"], `+unusedForward+`}
`, ingestOptions{})
	body := func(pending int) []byte {
		return []byte(`{"id":"evt_1PendingWebhooks01","object":"event","api_version":"2024-06-20","created":1767225600,` +
			`"data":{"object":{"id":"cus_PendingWebhooks01","object":"customer","email":"jane.doe@example.com"}},` +
			`"livemode":false,"pending_webhooks":` + strconv.Itoa(pending) + `,"request":{"id":null,"idempotency_key":null},"type":"customer.created"}`)
	}
	send := func(pending int, ts int64) ingestReceipt {
		t.Helper()
		b := body(pending)
		ans := e.send(t, "stripe", ingestDelivery{header: jsonHeaders("Stripe-Signature", verifytest.StripeHeader(ts, b, secret)), body: b})
		require.Equal(t, http.StatusOK, ans.status, "%s", ans.body)
		rs, rejected := ans.receipts(t)
		require.Zero(t, rejected)
		require.Len(t, rs, 1)
		return rs[0]
	}
	now := signNow()
	first := send(1, now)
	require.Equal(t, "accepted", first.Status)
	require.Equal(t, "evt_1PendingWebhooks01", first.EventID)
	second := send(2, now+1)
	require.Equal(t, ingestReceipt{EventID: "evt_1PendingWebhooks01", ClaimID: first.ClaimID, Status: "duplicate"}, second)
	require.Equal(t, ingestCounts{1, 1, 1, 0}, e.counts(t, "stripe"), "one record, no conflict")
	require.Equal(t, "0", e.scalar(t, `SELECT conflict_count::text FROM claims WHERE id = $1`, first.ClaimID))
	require.Contains(t, e.scalar(t, `SELECT convert_from(body, 'UTF8') FROM inbox_events WHERE claim_id = $1`, first.ClaimID),
		`"pending_webhooks":1`, "the first delivery's bytes are kept")

	// Anything else changed is still a conflict.
	other := []byte(strings.Replace(string(body(2)), "jane.doe@example.com", "john.doe@example.com", 1))
	ans := e.send(t, "stripe", ingestDelivery{header: jsonHeaders("Stripe-Signature", verifytest.StripeHeader(now+2, other, secret)), body: other})
	require.Equal(t, http.StatusOK, ans.status, "%s", ans.body)
	rs, _ := ans.receipts(t)
	require.Equal(t, "conflict", rs[0].Status)
}

// TestIngestShopifyEventsHeaders: Shopify's Events deliveries name the
// webhook headers without X- (https://shopify.dev/docs/apps/build/events/delivery-structure#headers);
// the same event under either spelling is one record, and a delivery
// naming two different signatures is refused.
func TestIngestShopifyEventsHeaders(t *testing.T) {
	t.Parallel()
	const secret = "shopify-client-secret-0001"
	e := setupIngest(t, `
sources:
  shop: {tenant: acme, provider: shopify, secrets: ["`+secret+`"], `+unusedForward+`}
`, ingestOptions{})
	body := []byte(`{"id":820982911946154508,"admin_graphql_api_id":"gid://shopify/Order/820982911946154508","total_price":"10.00"}`)
	sig := verifytest.Shopify(secret, body)
	delivery := func(prefix string) ingestDelivery {
		return ingestDelivery{body: body, header: jsonHeaders(
			prefix+"Shopify-Hmac-Sha256", sig,
			prefix+"Shopify-Topic", "orders/create",
			prefix+"Shopify-Event-Id", "98880550-7158-44d4-b7cd-2c97c8a091b5",
			prefix+"Shopify-Webhook-Id", "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
			prefix+"Shopify-Shop-Domain", "example.myshopify.com")}
	}
	const key = "13:orders/create|36:98880550-7158-44d4-b7cd-2c97c8a091b5"

	ans := e.send(t, "shop", delivery(""))
	require.Equal(t, http.StatusOK, ans.status, "%s", ans.body)
	rs, _ := ans.receipts(t)
	require.Len(t, rs, 1)
	require.Equal(t, "accepted", rs[0].Status)
	require.Equal(t, key, rs[0].EventID)
	stored := e.scalar(t, `SELECT headers::text FROM inbox_events WHERE claim_id = $1`, rs[0].ClaimID)
	require.NotContains(t, stored, sig, "the Events signature header is a credential: never stored")
	require.Contains(t, stored, "orders/create")

	ans = e.send(t, "shop", delivery("X-"))
	require.Equal(t, http.StatusOK, ans.status, "%s", ans.body)
	again, _ := ans.receipts(t)
	require.Equal(t, []ingestReceipt{{EventID: key, ClaimID: rs[0].ClaimID, Status: "duplicate"}}, again)
	require.Equal(t, ingestCounts{1, 1, 1, 0}, e.counts(t, "shop"))

	both := delivery("X-")
	both.header = append(both.header, [2]string{"Shopify-Hmac-Sha256", verifytest.Shopify("another-secret", body)})
	ans = e.send(t, "shop", both)
	require.Equal(t, http.StatusUnauthorized, ans.status, "%s", ans.body)
	require.Contains(t, e.logs.String(), `"code":"malformed_header","in":"header","field":"Shopify-Hmac-Sha256"`, "the log names the header")
	require.Equal(t, ingestCounts{1, 1, 1, 0}, e.counts(t, "shop"))

	// Authentic, but two topics at once: refused naming the header, nothing stored.
	topics := delivery("X-")
	topics.header = append(topics.header, [2]string{"Shopify-Topic", "orders/paid"})
	ans = e.send(t, "shop", topics)
	require.Equal(t, http.StatusUnprocessableEntity, ans.status, "%s", ans.body)
	require.Contains(t, string(ans.body), "Shopify-Topic")
	require.Equal(t, ingestCounts{1, 1, 1, 0}, e.counts(t, "shop"))
}

// TestIngestSlackMessageResentUnderNewEventID: Slack has resent one
// message as several events with new event_ids and no retry headers. A
// source with options.key "message" stores it once (team + channel + ts);
// one without stores each copy; two messages are two records either way.
func TestIngestSlackMessageResentUnderNewEventID(t *testing.T) {
	t.Parallel()
	const secret = "slack-signing-secret-0001"
	e := setupIngest(t, `
sources:
  slack-messages: {tenant: acme, provider: slack, secrets: ["`+secret+`"], options: {key: message}, `+unusedForward+`}
  slack-events: {tenant: acme, provider: slack, secrets: ["`+secret+`"], `+unusedForward+`}
`, ingestOptions{})
	// A resent copy differs from the first in its envelope only: event_id,
	// event_time and event_context (Slack's default volatile fields).
	msg := func(eventID, ts string, eventTime int) []byte {
		return []byte(`{"token":"XXYYZZ","team_id":"T123ABC456","api_app_id":"A123ABC456","event":{"type":"message","channel":"C123ABC456",` +
			`"user":"U123ABC456","text":"Live long and prospect.","ts":"` + ts + `","event_ts":"` + ts + `","channel_type":"channel"},` +
			`"type":"event_callback","event_id":"` + eventID + `","event_time":` + strconv.Itoa(eventTime) +
			`,"event_context":"4-` + eventID + `"}`)
	}
	send := func(source string, body []byte) ingestReceipt {
		t.Helper()
		ts := signNow()
		ans := e.send(t, source, ingestDelivery{body: body, header: jsonHeaders(
			"X-Slack-Request-Timestamp", strconv.FormatInt(ts, 10), "X-Slack-Signature", verifytest.Slack(secret, ts, body))})
		require.Equal(t, http.StatusOK, ans.status, "%s", ans.body)
		rs, _ := ans.receipts(t)
		require.Len(t, rs, 1)
		return rs[0]
	}
	first := msg("Ev0A1B2C3D4E", "1767225599.000100", 1767225599)
	resent := msg("Ev0F5G6H7I8J", "1767225599.000100", 1767225642)
	other := msg("Ev0K9L0M1N2O", "1767225599.000200", 1767225599)

	a := send("slack-messages", first)
	require.Equal(t, "accepted", a.Status)
	require.Equal(t, "10:T123ABC456|10:C123ABC456|17:1767225599.000100", a.EventID)
	b := send("slack-messages", resent)
	require.Equal(t, ingestReceipt{EventID: a.EventID, ClaimID: a.ClaimID, Status: "duplicate"}, b, "the resent copy is the stored message")
	c := send("slack-messages", other)
	require.Equal(t, "accepted", c.Status)
	require.Equal(t, "10:T123ABC456|10:C123ABC456|17:1767225599.000200", c.EventID)
	require.Equal(t, ingestCounts{2, 2, 2, 0}, e.counts(t, "slack-messages"))

	for i, body := range [][]byte{first, resent, other} {
		r := send("slack-events", body)
		require.Equal(t, "accepted", r.Status, "delivery %d", i)
		require.Equal(t, []string{"Ev0A1B2C3D4E", "Ev0F5G6H7I8J", "Ev0K9L0M1N2O"}[i], r.EventID)
	}
	require.Equal(t, ingestCounts{3, 3, 3, 0}, e.counts(t, "slack-events"))
}

// TestIngestPubSubPublisherRetryIsDuplicate: a publisher that retries a
// publish gets a new messageId (and publish time) for the same fact
// (https://cloud.google.com/pubsub/docs/publisher#retry); with
// key_attribute the fact is keyed by its attribute, and the message's id
// and publish time are Pub/Sub's default volatile fields, so the retry is
// a duplicate of the stored event, not a conflict (CASES.md C17, the
// attribute route). Another fact under that attribute is a new record.
func TestIngestPubSubPublisherRetryIsDuplicate(t *testing.T) {
	t.Parallel()
	const token = "pubsub-publisher-retry-token-0001"
	e := setupIngest(t, `
sources:
  ps: {tenant: acme, provider: pubsub, secrets: ["`+token+`"], options: {auth: query_token, key_attribute: eventId}, `+unusedForward+`}
`, ingestOptions{})
	const sub = "projects/myproject/subscriptions/mysubscription"
	send := func(messageID, eventID string) ingestReceipt {
		t.Helper()
		d := verifytest.Delivery{Header: http.Header{"Content-Type": {"application/json"}}, RawQuery: "token=" + token,
			Body: verifytest.PubSubBody(sub, messageID, map[string]string{"eventId": eventID}, 0)}
		ans := e.sendFixture(t, "ps", d)
		require.Equal(t, http.StatusOK, ans.status, "%s", ans.body)
		rs, rejected := ans.receipts(t)
		require.Zero(t, rejected)
		require.Len(t, rs, 1)
		return rs[0]
	}
	first := send("2070443601311540", "order-A-1001-paid")
	require.Equal(t, "accepted", first.Status)
	retry := send("2070443601311999", "order-A-1001-paid")
	require.Equal(t, ingestReceipt{EventID: first.EventID, ClaimID: first.ClaimID, Status: "duplicate"}, retry)
	require.Equal(t, ingestCounts{1, 1, 1, 0}, e.counts(t, "ps"), "one record, no conflict")
	other := send("2070443601312000", "order-A-1001-refunded")
	require.Equal(t, "accepted", other.Status)
	require.NotEqual(t, first.ClaimID, other.ClaimID)
}
