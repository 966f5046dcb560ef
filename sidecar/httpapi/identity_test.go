package httpapi_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/strictjson"
)

// Every JSON that feeds a key or a hash is decoded strictly on the claims
// API. Each ambiguous body is a 400 naming the member, and nothing is
// written.
func TestClaimsRefuseAmbiguousJSON(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		name, path, body, field string
	}{
		{"duplicate event_id, last would win", "/v1/claims", `{"source":"x","event_id":"dupA","event_id":"dupC"}`, "event_id"},
		{"duplicate source", "/v1/claims", `{"source":"x","source":"y","event_id":"a"}`, "source"},
		{"duplicate inside payload", "/v1/claims", `{"source":"x","event_id":"a","payload":{"k":1,"k":2}}`, "payload/k"},
		{"duplicate deep inside payload", "/v1/claims", `{"source":"x","event_id":"a","payload":{"items":[{"id":1},{"id":2,"id":3}]}}`, "payload/items/1/id"},
		{"duplicate inside key_fields", "/v1/claims", `{"source":"x","key_fields":{"id":"a","id":"b"}}`, "key_fields/id"},
		{"duplicate after an escape", "/v1/claims", `{"source":"x","event_id":"a","event_\u0069d":"b"}`, "event_id"},
		{"case variant of a known field", "/v1/claims", `{"Source":"x","event_id":"a"}`, "Source"},
		{"case variant beside the field", "/v1/claims", `{"source":"x","event_id":"a","Event_ID":"b"}`, "Event_ID"},
		{"invalid UTF-8 0xff", "/v1/claims", "{\"source\":\"x\",\"event_id\":\"inv\xff\"}", "event_id"},
		{"invalid UTF-8 0xfe", "/v1/claims", "{\"source\":\"x\",\"event_id\":\"inv\xfe\"}", "event_id"},
		{"overlong UTF-8", "/v1/claims", "{\"source\":\"x\",\"event_id\":\"\xc0\xaf\"}", "event_id"},
		{"UTF-8 encoded surrogate", "/v1/claims", "{\"source\":\"x\",\"event_id\":\"\xed\xa0\x80\"}", "event_id"},
		{"lone high surrogate", "/v1/claims", `{"source":"x","event_id":"\ud800"}`, "event_id"},
		{"lone low surrogate", "/v1/claims", `{"source":"x","event_id":"\udc00"}`, "event_id"},
		{"high surrogate before text", "/v1/claims", `{"source":"x","event_id":"\ud83dx"}`, "event_id"},
		{"lone surrogate in payload", "/v1/claims", `{"source":"x","event_id":"a","payload":{"t":"\ud83d"}}`, "payload/t"},
		{"lone surrogate in key_fields", "/v1/claims", `{"source":"x","key_fields":{"k":"\udc00"}}`, "key_fields/k"},
		{"invalid UTF-8 in a member name", "/v1/claims", "{\"source\":\"x\",\"event_id\":\"a\",\"payload\":{\"\xff\":1}}", "payload"},
		{"batch item duplicate", "/v1/claims/batch", `{"claims":[{"source":"x","event_id":"a"},{"source":"x","event_id":"b","event_id":"c"}]}`, "claims/1/event_id"},
		{"batch duplicate claims", "/v1/claims/batch", `{"claims":[],"claims":[{"source":"x","event_id":"a"}]}`, "claims"},
	} {
		b.fails(t, call{method: "POST", path: tc.path, key: keyA, body: tc.body}, http.StatusBadRequest, "malformed", tc.field)
	}
	require.Equal(t, 0, b.count(t, "claims"), "nothing is written for an ambiguous body")
}

// Literal U+FFFD and paired surrogates are ordinary text: each is its own
// key, distinct from the others (no substitution ever makes two equal).
func TestClaimsKeepUnicodeDistinct(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := map[string]string{}
	for _, body := range []string{
		`{"source":"x","event_id":"inv\ufffd"}`,
		"{\"source\":\"x\",\"event_id\":\"inv\xef\xbf\xbd\"}", // the same text, raw
		`{"source":"x","event_id":"inv\ud83d\ude00"}`,
		`{"source":"x","event_id":"inv\u00e9"}`,
		`{"source":"x","event_id":"inve\u0301"}`, // decomposed: not normalised
	} {
		a := b.rawClaim(t, (body))
		ids[body] = a.ClaimID
	}
	distinct := map[string]bool{}
	for _, id := range ids {
		distinct[id] = true
	}
	require.Len(t, distinct, 4, "U+FFFD written two ways is one key; the others are their own")
}

// Numbers keep their exact value in key_fields and payload hashes. Values
// that differ anywhere are different keys (or a conflict); spellings of one
// value (1.0 and 1, 1e2 and 100, -0 and 0) are one.
func TestClaimsKeepNumbersExact(t *testing.T) {
	t.Parallel()
	b := setup(t)
	eventID := func(fields string) string {
		a := b.rawClaim(t, (`{"source":"orders","key_fields":` + fields + `}`))
		require.Contains(t, []string{"won", "in_progress"}, a.Outcome)
		return a.EventID
	}
	differ := [][2]string{
		{`{"order_id":9007199254740993,"status":"paid"}`, `{"order_id":9007199254740992,"status":"paid"}`},
		{`{"n":9007199254740991}`, `{"n":9007199254740992}`},
		{`{"n":9223372036854775807}`, `{"n":9223372036854775808}`},
		{`{"n":9223372036854775809}`, `{"n":9223372036854775808}`},
		{`{"n":-9223372036854775809}`, `{"n":-9223372036854775808}`},
		{`{"n":1000000000000000000000000000001}`, `{"n":1e30}`},
		{`{"n":0.1}`, `{"n":0.1000000000000000055511151231257827}`},
		{`{"n":1.5}`, `{"n":"1.5"}`},
	}
	for _, d := range differ {
		require.NotEqual(t, eventID(d[0]), eventID(d[1]), "%s vs %s", d[0], d[1])
	}
	same := [][2]string{
		{`{"n":1.0}`, `{"n":1}`},
		{`{"n":1e2}`, `{"n":100}`},
		{`{"n":1E2}`, `{"n":100.000}`},
		{`{"n":-0}`, `{"n":0}`},
		{`{"n":1e30}`, `{"n":1000000000000000000000000000000}`},
		{`{"n":0.5e1}`, `{"n":5}`},
	}
	for _, d := range same {
		require.Equal(t, eventID(d[0]), eventID(d[1]), "%s vs %s", d[0], d[1])
	}

	// The payload hash: the same key with another exact number is a
	// conflict, never a duplicate.
	w := b.rawWon(t, (`{"source":"s","event_id":"e1","payload":{"id":9007199254740993}}`))
	b.ok(t, call{method: "POST", path: "/v1/claims/" + w.ClaimID + "/complete", key: keyA,
		body: map[string]any{"claim_token": w.ClaimToken, "result_ref": "r1"}})
	c := b.rawClaim(t, (`{"source":"s","event_id":"e1","payload":{"id":9007199254740992}}`))
	require.Equal(t, "conflict", c.Outcome)
	d := b.rawClaim(t, (`{"source":"s","event_id":"e1","payload":{"id":9007199254740993.0}}`))
	require.Equal(t, "duplicate", d.Outcome, "the same value spelled otherwise is the same payload")
	require.Equal(t, "r1", d.ResultRef)

	huge := b.fails(t, call{method: "POST", path: "/v1/claims", key: keyA,
		body: `{"source":"s","event_id":"e2","payload":{"n":1e99999999999999999999}}`}, http.StatusBadRequest, "malformed", "payload/n")
	require.Contains(t, huge.Error.Message, "out of range")
}

// No empty identities. A null, "", {} or [] anywhere in key_fields, an
// empty key part, an empty key_parts list: 422 naming it, nothing written —
// on the single route and on each batch item.
func TestClaimsRefuseEmptyIdentities(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct{ body, field string }{
		{`{"source":"s","key_fields":{"id":null}}`, "key_fields/id"},
		{`{"source":"s","key_fields":{"id":""}}`, "key_fields/id"},
		{`{"source":"s","key_fields":{"order":{"ref":null,"shop":"x"}}}`, "key_fields/order/ref"},
		{`{"source":"s","key_fields":{"ids":[]}}`, "key_fields/ids"},
		{`{"source":"s","key_fields":{"ids":["a",null]}}`, "key_fields/ids/1"},
		{`{"source":"s","key_fields":{"o":{}}}`, "key_fields/o"},
		{`{"source":"s","key_fields":{}}`, "key_fields"},
		{`{"source":"s","key_fields":""}`, "key_fields"},
		{`{"source":"s","key_fields":[]}`, "key_fields"},
		{`{"source":"s","key_fields":"abc"}`, "key_fields"},
		{`{"source":"s","key_fields":7}`, "key_fields"},
		{`{"source":"s","key_parts":["",""]}`, "key_parts[0]"},
		{`{"source":"s","key_parts":["a",""]}`, "key_parts[1]"},
		{`{"source":"s","key_parts":[]}`, "key_parts"},
		{`{"source":"s","key_parts":["a\u0000"]}`, "key_parts[0]"},
		{`{"source":"s","event_id":""}`, "event_id"},
		{`{"source":"s"}`, "event_id"},
	} {
		b.fails(t, call{method: "POST", path: "/v1/claims", key: keyA, body: tc.body}, http.StatusUnprocessableEntity, "invalid", tc.field)
	}
	require.Equal(t, 0, b.count(t, "claims"))

	res := b.ok(t, call{method: "POST", path: "/v1/claims/batch", key: keyA, lax: true,
		body: `{"claims":[{"source":"s","key_fields":{"id":"a"}},{"source":"s","key_fields":{"id":null}},{"source":"s","key_parts":["x",""]}]}`})
	require.Len(t, res.Results, 3)
	require.Equal(t, "won", res.Results[0].Outcome)
	require.Equal(t, "claims[1].key_fields/id", res.Results[1].Error.Field, "named within its item")
	require.Equal(t, "claims[2].key_parts[1]", res.Results[2].Error.Field)
	require.Equal(t, 1, b.count(t, "claims"))

	// Valid values that look empty are not: 0, false, "0", " ".
	for _, fields := range []string{`{"n":0}`, `{"b":false}`, `{"s":"0"}`, `{"s":" "}`} {
		a := b.rawClaim(t, (`{"source":"s","key_fields":` + fields + `}`))
		require.Equal(t, "won", a.Outcome, fields)
	}
}

// On the claims route too, a source's volatile_fields are left out of the
// claim's payload hash as ingest leaves them out of its receipt hash, so a
// retry whose timestamp moved stays a retry, on every attempt.
func TestClaimsLeaveVolatileFieldsOutOfTheHash(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *options) {
		o.policies = claim.Policies{BySource: map[string]claim.Policy{"documenso": {VolatileFields: []string{"/createdAt"}}}}
	})
	first := b.rawWon(t, (`{"source":"documenso","event_id":"doc-1","payload":{"event":"DOCUMENT_SIGNED","createdAt":"2026-12-01T10:00:00Z"}}`))
	b.ok(t, call{method: "POST", path: "/v1/claims/" + first.ClaimID + "/fail", key: keyA,
		body: map[string]any{"claim_token": first.ClaimToken, "error": "smtp 451", "retry": "retryable"}})
	b.dueNow(t, first.ClaimID)
	again := b.rawClaim(t, (`{"source":"documenso","event_id":"doc-1","payload":{"event":"DOCUMENT_SIGNED","createdAt":"2026-12-01T10:05:00Z"}}`))
	require.Equal(t, "won", again.Outcome, "only the volatile field changed: a retry")
	require.Equal(t, 2, again.Attempt)
	b.ok(t, call{method: "POST", path: "/v1/claims/" + again.ClaimID + "/complete", key: keyA,
		body: map[string]any{"claim_token": again.ClaimToken}})
	changed := b.rawClaim(t, (`{"source":"documenso","event_id":"doc-1","payload":{"event":"DOCUMENT_REJECTED","createdAt":"2026-12-01T10:05:00Z"}}`))
	require.Equal(t, "conflict", changed.Outcome, "other fields still count")
	// Another source has no volatile fields: the timestamp counts there.
	o := b.rawWon(t, (`{"source":"other","event_id":"doc-1","payload":{"createdAt":"1"}}`))
	b.ok(t, call{method: "POST", path: "/v1/claims/" + o.ClaimID + "/complete", key: keyA,
		body: map[string]any{"claim_token": o.ClaimToken}})
	require.Equal(t, "conflict", b.rawClaim(t, (`{"source":"other","event_id":"doc-1","payload":{"createdAt":"2"}}`)).Outcome)
}

// rawClaim posts body to /v1/claims byte for byte and requires a 200.
func (b *bundle) rawClaim(t *testing.T, body string) answer {
	t.Helper()
	return b.ok(t, call{method: "POST", path: "/v1/claims", key: keyA, body: body})
}

// rawWon is rawClaim requiring the outcome won.
func (b *bundle) rawWon(t *testing.T, body string) answer {
	t.Helper()
	a := b.rawClaim(t, body)
	require.Equal(t, "won", a.Outcome)
	return a
}

// The claims route hashes the payload from the body it decoded
// (claim.PayloadHashAt); that is the hash claim.PayloadHash, ingest's,
// gives the payload's bytes: one view of a payload on both paths, single
// claims and batch items, with and without volatile fields.
func TestClaimsPayloadHashIsPayloadHash(t *testing.T) {
	t.Parallel()
	volatile := []string{"/meta/at", "/items/1", "/b"}
	b := setup(t, func(o *options) {
		o.policies = claim.Policies{BySource: map[string]claim.Policy{"vol": {VolatileFields: volatile}}}
	})
	var ptrs []strictjson.Pointer
	for _, s := range volatile {
		p, err := strictjson.ParsePointer(s)
		require.NoError(t, err)
		ptrs = append(ptrs, p)
	}
	payloads := []string{
		`{"b":1.50,"a":[1, 2e0 ,"x\u0041",-0.0,{"z":null,"y":1E30}],"meta":{"at":"10:00","n":9007199254740993}}`,
		`{"items":[0.12345678901234567,1e-7,100,{"k":"v"}],"b":true,"c":"\u00e9"}`,
		`[1,2,{"b":3}]`,
		`"just a string"`,
	}
	for i, payload := range payloads {
		for _, source := range []string{"vol", "plain"} {
			want, err := claim.PayloadHash([]byte(payload))
			if source == "vol" {
				want, err = claim.PayloadHash([]byte(payload), ptrs...)
			}
			require.NoError(t, err)
			id := fmt.Sprintf("hash-%d", i)
			one := b.rawWon(t, `{"source":"`+source+`","event_id":"`+id+`","payload":`+payload+`}`)
			require.Equal(t, want, one.PayloadHash, "%s %s", source, payload)
			res := b.ok(t, call{method: "POST", path: "/v1/claims/batch", key: keyA, lax: true,
				body: `{"claims":[{"source":"` + source + `","event_id":"` + id + `-batch","payload":` + payload + `}]}`})
			require.Len(t, res.Results, 1)
			require.Equal(t, want, res.Results[0].PayloadHash, "batch %s %s", source, payload)
		}
	}
}
