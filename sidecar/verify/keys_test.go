package verify

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Tests of the keys that name an event where the provider's fields alone
// did not: two distinct events about one object at one moment get two keys,
// a redelivery keeps its key. The end-to-end pairs (two records, both
// dispatched; a redelivery, one) are in sidecar/httpapi/ingest_keys_test.go.

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Shopify: one merchant action shares X-Shopify-Event-Id across the topics
// it triggers, so the topic is part of the key.
func TestKeysShopifyTopicScopesTheEventID(t *testing.T) {
	t.Parallel()
	const secret = "shpss_FAKE_keys"
	v := mustNew(t, cfg(TypeShopify, Core{Secrets: []string{secret}}, nil))
	body := []byte(`{"id":820982911946154508,"admin_graphql_api_id":"gid://shopify/Order/820982911946154508","financial_status":"paid"}`)
	key := func(topic, eventID, webhookID string) (string, error) {
		h := hdr(ShopifyHMACHeader, verifytest.Shopify(secret, body), ShopifyTopicHeader, topic,
			ShopifyEventIDHeader, eventID, ShopifyWebhookIDHeader, webhookID)
		res, err := v.Verify(Request{Header: h, Body: body})
		if err != nil {
			return "", err
		}
		require.Len(t, res.Events, 1)
		return res.Events[0].ID, nil
	}
	created, err := key("orders/create", "ev-1", "wh-1")
	require.NoError(t, err)
	require.Equal(t, JoinKey("orders/create", "ev-1"), created)
	paid, err := key("orders/paid", "ev-1", "wh-2")
	require.NoError(t, err)
	require.NotEqual(t, created, paid, "one merchant action, two topics: two events")
	retry, err := key("orders/create", "ev-1", "wh-1")
	require.NoError(t, err)
	require.Equal(t, created, retry, "a retry keeps the key")
	secondSubscription, err := key("orders/create", "ev-1", "wh-9")
	require.NoError(t, err)
	require.Equal(t, created, secondSubscription, "a second subscription to the topic: the same event")
	// Without an event id the per-delivery webhook id stands alone, as before.
	fallback, err := key("orders/create", "", "wh-1")
	require.NoError(t, err)
	require.Equal(t, "wh-1", fallback)
	_, err = key("", "ev-1", "wh-1")
	e := requireCode(t, err, CodeMissingHeader, ShopifyTopicHeader)
	require.True(t, e.Authenticated, "authentic but not storable: 422, never 401 or 2xx")
}

// Zoom: no event id; event, object and millisecond do not tell two
// participants joining one meeting apart, the payload does.
func TestKeysZoomPayloadTellsEventsApart(t *testing.T) {
	t.Parallel()
	const secret = "zoom-FAKE-keys"
	v := mustNew(t, cfg(TypeZoom, Core{Secrets: []string{secret}, Now: fixed(t0)}, nil))
	verifyAt := func(ts int64, body string) (Event, error) {
		h := hdr(ZoomTimestampHeader, strconv.FormatInt(ts, 10), ZoomSignatureHeader, verifytest.Zoom(secret, ts, []byte(body)))
		res, err := v.Verify(Request{Header: h, Body: []byte(body)})
		if err != nil {
			return Event{}, err
		}
		require.Len(t, res.Events, 1)
		return res.Events[0], nil
	}
	joined := func(user string) string {
		return `{"event":"meeting.participant_joined","event_ts":1700000000123,"payload":{"account_id":"A1","object":{"uuid":"m-uuid==","id":"85","participant":{"user_id":"` +
			user + `","user_name":"` + user + `","join_time":"2023-11-14T22:13:20Z"}}}}`
	}
	ann, err := verifyAt(t0.Unix(), joined("ann"))
	require.NoError(t, err)
	bob, err := verifyAt(t0.Unix(), joined("bob"))
	require.NoError(t, err)
	require.NotEqual(t, ann.ID, bob.ID, "two participants, one meeting, one millisecond: two events")
	require.Equal(t, "m-uuid==", ann.ObjectID)
	payload := `{"account_id":"A1","object":{"id":"85","participant":{"join_time":"2023-11-14T22:13:20Z","user_id":"ann","user_name":"ann"},"uuid":"m-uuid=="}}`
	require.Equal(t, JoinKey("meeting.participant_joined", "m-uuid==", "1700000000123", "sha256:"+sha256Hex([]byte(payload))), ann.ID,
		"the digest is of the canonical payload (members sorted, no whitespace)")

	retry, err := verifyAt(t0.Unix()+2, joined("ann"))
	require.NoError(t, err)
	require.Equal(t, ann.ID, retry.ID, "Zoom's retry: new x-zm-request-timestamp and signature, same body")
	reencoded := `{ "payload": {"object": {"participant": {"join_time": "2023-11-14T22:13:20Z", "user_name": "ann", "user_id": "ann"}, "id": "85", "uuid": "m-uuid=="}, "account_id": "A1"}, "event_ts": 1700000000123, "event": "meeting.participant_joined" }`
	same, err := verifyAt(t0.Unix(), reencoded)
	require.NoError(t, err)
	require.Equal(t, ann.ID, same.ID, "the same payload spelled differently is the same event")

	noPayload, err := verifyAt(t0.Unix(), `{"event":"app.tick","event_ts":1700000000000}`)
	require.NoError(t, err)
	require.Equal(t, JoinKey("app.tick", "1700000000000"), noPayload.ID, "no payload: event and event_ts, as before")

	_, err = verifyAt(t0.Unix(), `{"event":"meeting.started","event_ts":1,"payload":{"object":{"uuid":"u","uuid":"v"}}}`)
	e := requireCode(t, err, CodeMalformedBody, "/payload/object/uuid")
	require.True(t, e.Authenticated)
}

// Twilio without I-Twilio-Idempotency-Token: a call's sid and status are
// shared by many requests; the request's parameters and query tell them
// apart. Messages keep (sid, status).
func TestKeysTwilioCallRequestsAreToldApart(t *testing.T) {
	t.Parallel()
	const token, base = "12345", "https://example.com/twilio"
	v := mustNew(t, cfg(TypeTwilio, Core{Secrets: []string{token}}, &TwilioOptions{URL: base}))
	verify := func(query string, params url.Values, extra ...string) Event {
		t.Helper()
		signed := base
		if query != "" {
			signed += "?" + query
		}
		h := hdr(append([]string{TwilioSignatureHeader, verifytest.Twilio(token, signed, params)}, extra...)...)
		return one(t)(v.Verify(Request{Header: h, RawQuery: query, Body: []byte(params.Encode())}))
	}
	call := url.Values{"CallSid": {"CA1"}, "CallStatus": {"completed"}, "CallDuration": {"42"}, "SequenceNumber": {"3"}}
	recording := url.Values{"CallSid": {"CA1"}, "RecordingSid": {"RE1"}, "RecordingStatus": {"completed"}, "RecordingDuration": {"40"}}
	callEv, recEv := verify("", call), verify("", recording)
	require.NotEqual(t, callEv.ID, recEv.ID, "the call's and its recording's completed callbacks: two events")
	require.Equal(t, "completed", callEv.Type)
	require.Equal(t, "CA1", recEv.ObjectID)
	require.True(t, strings.HasPrefix(callEv.ID, JoinKey("CA1", "completed")+"|"), callEv.ID)
	require.False(t, callEv.Digest, "a composite, not a bare digest")

	gather := func(digits string) url.Values {
		return url.Values{"CallSid": {"CA1"}, "CallStatus": {"in-progress"}, "Digits": {digits}}
	}
	first, second := verify("step=1", gather("1")), verify("step=2", gather("1"))
	require.NotEqual(t, first.ID, second.ID, "two <Gather> actions of one call with the same digits, other action URLs")
	require.NotEqual(t, first.ID, verify("step=1", gather("2")).ID, "other digits")
	require.Equal(t, first.ID, verify("step=1", gather("1")).ID, "a retry resends the same request")

	msg := func(status string) url.Values {
		return url.Values{"MessageSid": {"SM1"}, "SmsSid": {"SM1"}, "MessageStatus": {status}, "SmsStatus": {status}}
	}
	require.Equal(t, JoinKey("SM1", "sent"), verify("", msg("sent")).ID, "messages keep (sid, status)")
	require.Equal(t, JoinKey("SM1", "delivered"), verify("", msg("delivered")).ID)
	require.Equal(t, "idem-7", verify("", call, TwilioIdempotencyHeader, "idem-7").ID, "Twilio's own token first")
}

// Graph: reauthorizationRequired and missed are sent again on purpose with
// the same body; each one received is an event. subscriptionRemoved happens
// once; change notifications are keyed by id or by the resource's etag.
func TestKeysGraphRepeatedLifecycleNotifications(t *testing.T) {
	t.Parallel()
	v := mustNew(t, cfg(TypeMSGraph, Core{Secrets: []string{"state"}}, nil))
	keys := func(items ...string) []string {
		t.Helper()
		res, err := v.Verify(Request{Body: []byte(`{"value":[` + strings.Join(items, ",") + `]}`)})
		require.NoError(t, err)
		require.Empty(t, res.Rejected)
		out := make([]string, len(res.Events))
		for i, ev := range res.Events {
			out[i] = ev.ID
		}
		return out
	}
	lifecycle := func(event string) string {
		return `{"subscriptionId":"sub-1","subscriptionExpirationDateTime":"2030-01-01T00:00:00Z","tenantId":"t1","clientState":"state","lifecycleEvent":"` + event + `"}`
	}
	for _, event := range []string{"reauthorizationRequired", "missed"} {
		a, b := keys(lifecycle(event))[0], keys(lifecycle(event))[0]
		require.NotEqual(t, a, b, "%s sent again: another event", event)
		require.True(t, strings.HasPrefix(a, JoinKey("sub-1", event, "2030-01-01T00:00:00Z", "delivery")+"|"), a)
		twice := keys(lifecycle(event), lifecycle(event))
		require.NotEqual(t, twice[0], twice[1], "%s twice in one batch: two events", event)
	}
	removed := keys(lifecycle("subscriptionRemoved"))[0]
	require.Equal(t, JoinKey("sub-1", "subscriptionRemoved", "2030-01-01T00:00:00Z"), removed, "unchanged")
	require.Equal(t, removed, keys(lifecycle("subscriptionRemoved"))[0], "a subscription is removed once: a redelivery is a duplicate")
	withID := `{"id":"lc-1","subscriptionId":"sub-1","clientState":"state","lifecycleEvent":"reauthorizationRequired"}`
	require.Equal(t, []string{JoinKey("sub-1", "lc-1")}, keys(withID), "Graph's notification id, when it sends one, names the notification")

	change := func(etag string) string {
		return `{"subscriptionId":"sub-1","clientState":"state","changeType":"updated","resource":"users/u1/messages/m1","resourceData":{"id":"m1","@odata.etag":"` + etag + `"}}`
	}
	two := keys(change(`W/\"v1\"`), change(`W/\"v2\"`))
	require.NotEqual(t, two[0], two[1], "two versions of one message: two events")
	require.Equal(t, two[0], keys(change(`W/\"v1\"`))[0], "a redelivery keeps the key")
}
