package httpapi_test

import (
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Discord interactions must be answered within 3 s with an interaction
// response, or Discord shows "This interaction failed"
// (https://docs.discord.com/developers/interactions/receiving-and-responding#responding-to-an-interaction).
// A taken interaction is answered with the verifier's Result.Reply (a
// deferred response); anything not taken keeps claimd's answer.

var discordSources = `
sources:
  dc: {tenant: ` + ingestTenant + `, provider: discord, options: {public_keys: ["` + verifytest.DiscordPublicKey(verifytest.DiscordKey) + `"]}, forward: {url: "http://127.0.0.1:9/never"}}
  t-dc: {tenant: ` + ingestTenant + `, provider: discord, options: {public_keys: ["` + verifytest.DiscordPublicKey(verifytest.DiscordKey) + `"]}}
`

// discordInteraction is an interaction body of type typ (2 command, 3
// component, 4 autocomplete, 5 modal submit) with id and a custom value
// (a different value is another payload under the same id).
func discordInteraction(id string, typ int, value string) []byte {
	return []byte(`{"application_id":"1100000000000000000","channel_id":"1200000000000000000","data":{"name":"refund","custom_id":"` + value + `"},"guild_id":"1400000000000000000","id":"` + id + `","token":"aW50ZXJhY3Rpb24","type":` + strconv.Itoa(typ) + `,"version":1}`)
}

// discordSigned is body signed now with the fixtures' application key, as
// the test harness's delivery.
func discordSigned(body []byte) ingestDelivery {
	d := verifytest.DiscordDelivery(verifytest.DiscordKey, time.Now(), body)
	names := make([]string, 0, len(d.Header))
	for k := range d.Header {
		names = append(names, k)
	}
	sort.Strings(names)
	var h ingestHeaders
	for _, k := range names {
		for _, v := range d.Header[k] {
			h = append(h, [2]string{k, v})
		}
	}
	return ingestDelivery{header: h, body: d.Body}
}

// TestIngestDiscordInteractionReply: through POST /ingest/{source} on
// PostgreSQL, a signed interaction is stored once and answered 200 with
// the deferred interaction response of its type (command and modal
// {"type":5}, component {"type":6}, autocomplete an empty {"type":8});
// the same interaction again is the same answer and still one record; a
// PING is {"type":1} and stores nothing; a tampered interaction and a
// conflict (same id, other body) keep claimd's answers.
func TestIngestDiscordInteractionReply(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, discordSources, ingestOptions{})

	for _, c := range []struct {
		id    string
		typ   int
		reply string
	}{
		{"1700000000000000002", 2, `{"type":5}`},
		{"1700000000000000003", 3, `{"type":6}`},
		{"1700000000000000004", 4, `{"type":8,"data":{"choices":[]}}`},
		{"1700000000000000005", 5, `{"type":5}`},
	} {
		before := e.counts(t, "dc")
		body := discordInteraction(c.id, c.typ, "a")
		for i := range 2 {
			a := e.send(t, "dc", discordSigned(body))
			require.Equal(t, http.StatusOK, a.status, "type %d, delivery %d: %s", c.typ, i, a.body)
			require.Equal(t, "application/json", a.header.Get("Content-Type"), "type %d", c.typ)
			require.Equal(t, c.reply, string(a.body), "type %d, delivery %d: the deferred response", c.typ, i)
			require.Equal(t, ingestCounts{before.claims + 1, before.inbox + 1, before.jobs + 1, before.conflicts}, e.counts(t, "dc"),
				"type %d, delivery %d: one record", c.typ, i)
		}
		require.Equal(t, "1", e.scalar(t, `SELECT count(*)::text FROM claims WHERE source = 'dc' AND event_id = $1`, c.id), "keyed by the interaction id")
	}

	before := e.counts(t, "dc")
	ping := e.send(t, "dc", discordSigned([]byte(`{"application_id":"1100000000000000000","id":"1700000000000000000","token":"aW50ZXJhY3Rpb24","type":1,"version":1}`)))
	require.Equal(t, http.StatusOK, ping.status)
	require.Equal(t, `{"type":1}`, string(ping.body))
	require.Equal(t, before, e.counts(t, "dc"), "a PING stores nothing")

	tampered := discordSigned(discordInteraction("1700000000000000009", 2, "a"))
	tampered.body = discordInteraction("1700000000000000009", 2, "b")
	a := e.send(t, "dc", tampered)
	require.Equal(t, http.StatusUnauthorized, a.status)
	require.Equal(t, "unauthorized", a.errorCode(t), "claimd's own refusal, not an interaction response")
	require.Equal(t, before, e.counts(t, "dc"))

	// The command's id again with another body: a conflict, kept for
	// review and named in claimd's receipt.
	a = e.send(t, "dc", discordSigned(discordInteraction("1700000000000000002", 2, "other")))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	rs, _ := a.receipts(t)
	require.Len(t, rs, 1)
	require.Equal(t, "conflict", rs[0].Status)
	require.Equal(t, before.conflicts+1, e.counts(t, "dc").conflicts)
}

// TestTriggerDiscordInteractionReply: through POST /v1/trigger/{source}
// the interaction response is the trigger's `response` (status, headers,
// body) for the n8n node to send, when the event is won, a duplicate, or
// a test; while the first delivery's claim is held, a second delivery of
// it keeps claimd's 503 (the event is not done).
func TestTriggerDiscordInteractionReply(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, discordSources, ingestOptions{maxConns: 12})
	body := discordInteraction("1700000000000000102", 2, "a")
	deferred := func(r trigReply, what string) {
		t.Helper()
		require.Equal(t, http.StatusOK, r.Response.Status, what)
		require.Equal(t, map[string]string{"Content-Type": "application/json"}, r.Response.Headers, what)
		require.NotNil(t, r.Response.Body, what)
		require.Equal(t, `{"type":5}`, *r.Response.Body, what)
	}

	test := trigCall(discordSigned(body), "dc-test")
	test["test"] = true
	tr := e.decided(t, "t-dc", test)
	require.Equal(t, "test", tr.Decision)
	deferred(tr, "test")

	won := e.decided(t, "t-dc", trigCall(discordSigned(body), "dc-1"))
	require.Equal(t, "won", won.Decision)
	require.Len(t, won.Events, 1)
	require.Equal(t, "APPLICATION_COMMAND", won.Events[0].EventType)
	deferred(won, "won")

	busy := e.decided(t, "t-dc", trigCall(discordSigned(body), "dc-2"))
	require.Equal(t, "in_progress", busy.Decision)
	require.Equal(t, http.StatusServiceUnavailable, busy.Response.Status, "not done: claimd's answer")
	require.NotEmpty(t, busy.Response.Headers["Retry-After"])

	c := e.apiPost(t, "/v1/claims/"+won.Events[0].ClaimID+"/complete", `{"claim_token":"`+won.Events[0].ClaimToken+`","result_ref":"followed-up"}`)
	require.Equal(t, http.StatusOK, c.status, "%s", c.body)
	dup := e.decided(t, "t-dc", trigCall(discordSigned(body), "dc-3"))
	require.Equal(t, "duplicate", dup.Decision)
	deferred(dup, "duplicate")

	// A refusal keeps claimd's answer.
	bad := discordSigned(body)
	bad.body = discordInteraction("1700000000000000102", 2, "b")
	ref := e.decided(t, "t-dc", trigCall(bad, "dc-4"))
	require.Equal(t, "unauthenticated", ref.Decision)
	require.Equal(t, http.StatusUnauthorized, ref.Response.Status)
	var eb struct {
		Error struct{ Code string } `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(*ref.Response.Body), &eb))
	require.Equal(t, "unauthorized", eb.Error.Code)
	require.Equal(t, [3]int{1, 0, 0}, e.trigCounts(t), "one claim; nothing in the inbox")
}
