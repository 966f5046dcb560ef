package verify_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// The push body example of https://cloud.google.com/pubsub/docs/push
// ("Example of a request with minimum values").
const pubsubDocBody = `{
    "message": {
        "data": "SGVsbG8gQ2xvdWQgUHViL1N1YiEgSGVyZSBpcyBteSBtZXNzYWdlIQ==",
        "messageId": "2070443601311540",
        "message_id": "2070443601311540",
        "publishTime": "2021-02-26T19:13:55.749Z",
        "publish_time": "2021-02-26T19:13:55.749Z"
    },
    "subscription": "projects/myproject/subscriptions/mysubscription"
}`

// pubsubSetup starts a local key set server holding key and builds an
// oidc source against it with the fixture's audience and service account;
// the clock is *now.
func pubsubSetup(t *testing.T, now *time.Time, extra map[string]any, keys ...verifytest.JWKSKey) (verify.Verifier, *verifytest.JWKSServer) {
	t.Helper()
	srv := verifytest.NewJWKSServer(t, keys...)
	opts := map[string]any{
		"audience":              verifytest.PubSubAudience,
		"service_account_email": verifytest.PubSubServiceAccount,
		"jwks_url":              srv.URL,
	}
	for k, v := range extra {
		opts[k] = v
	}
	v := mustBuild(t, verify.TypePubSub, verify.Core{Now: func() time.Time { return *now }}, opts)
	return v, srv
}

func TestPubSubOIDC(t *testing.T) {
	t.Parallel()
	key := verifytest.PubSubKey()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	v, srv := pubsubSetup(t, &now, nil, key)
	body := []byte(pubsubDocBody)
	tok := func(mod func(jwt.MapClaims)) string {
		c := verifytest.PubSubClaims(now.Add(-time.Minute))
		if mod != nil {
			mod(c)
		}
		return verifytest.GoogleOIDCToken(key, c)
	}
	const authz = verify.PubSubAuthorizationHeader

	t.Run("fixture", func(t *testing.T) { replayFixture(t, "pubsub") })

	t.Run("doc example body under a token from the local key set", func(t *testing.T) {
		evs := verifyEvents(t, v, verifytest.PubSubDelivery(tok(nil), body))
		want := verify.JoinKey("projects/myproject/subscriptions/mysubscription", "2070443601311540")
		if len(evs) != 1 || evs[0].ID != want || evs[0].Scope != "projects/myproject/subscriptions/mysubscription" || !evs[0].Timestamp.Equal(now.Add(-time.Minute)) {
			t.Fatalf("got %+v", evs)
		}
		if srv.Fetches() < 1 {
			t.Fatal("the key set was never fetched")
		}
	})

	t.Run("claims", func(t *testing.T) {
		cases := []struct {
			name string
			mod  func(jwt.MapClaims)
			code verify.Code
		}{
			{"expired", func(c jwt.MapClaims) {
				c["iat"] = now.Add(-2 * time.Hour).Unix()
				c["exp"] = now.Add(-time.Hour).Unix()
			}, verify.CodeTimestampOutsideTolerance},
			{"issued in the future", func(c jwt.MapClaims) { c["iat"] = now.Add(time.Hour).Unix(); c["exp"] = now.Add(2 * time.Hour).Unix() }, verify.CodeTimestampOutsideTolerance},
			{"no exp", func(c jwt.MapClaims) { delete(c, "exp") }, verify.CodeBadSignature},
			{"wrong audience", func(c jwt.MapClaims) { c["aud"] = "https://elsewhere.example/" }, verify.CodeBadSignature},
			{"no audience", func(c jwt.MapClaims) { delete(c, "aud") }, verify.CodeBadSignature},
			{"wrong issuer", func(c jwt.MapClaims) { c["iss"] = "https://accounts.example.com" }, verify.CodeBadSignature},
			{"other service account", func(c jwt.MapClaims) { c["email"] = "intruder@other.iam.gserviceaccount.com" }, verify.CodeBadSignature},
			{"email not verified", func(c jwt.MapClaims) { c["email_verified"] = false }, verify.CodeBadSignature},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				requireRefused(t, v, verifytest.PubSubDelivery(tok(tc.mod), body), tc.code, verify.InHeader, authz)
			})
		}
		// Expired, but within the tolerance used as leeway: accepted.
		verifyEvents(t, v, verifytest.PubSubDelivery(tok(func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Minute).Unix() }), body))
		// The short issuer spelling is Google's too.
		verifyEvents(t, v, verifytest.PubSubDelivery(tok(func(c jwt.MapClaims) { c["iss"] = "accounts.google.com" }), body))
	})

	t.Run("signatures", func(t *testing.T) {
		// Another key under the trusted kid.
		impostor := verifytest.NewJWKSKey(key.KID)
		d := verifytest.PubSubDelivery(verifytest.GoogleOIDCToken(impostor, verifytest.PubSubClaims(now)), body)
		requireRefused(t, v, d, verify.CodeBadSignature, verify.InHeader, authz)
		// HS256 keyed with the public modulus (algorithm confusion) and
		// alg none are refused: RS256 only.
		hs := jwt.NewWithClaims(jwt.SigningMethodHS256, verifytest.PubSubClaims(now))
		hs.Header["kid"] = key.KID
		hsTok, _ := hs.SignedString(key.Key.PublicKey.N.Bytes())
		requireRefused(t, v, verifytest.PubSubDelivery(hsTok, body), verify.CodeBadSignature, verify.InHeader, authz)
		none := jwt.NewWithClaims(jwt.SigningMethodNone, verifytest.PubSubClaims(now))
		noneTok, _ := none.SignedString(jwt.UnsafeAllowNoneSignatureType)
		requireRefused(t, v, verifytest.PubSubDelivery(noneTok, body), verify.CodeBadSignature, verify.InHeader, authz)
	})

	t.Run("headers", func(t *testing.T) {
		d := verifytest.PubSubDelivery(tok(nil), body)
		d.Header.Del(authz)
		requireRefused(t, v, d, verify.CodeMissingHeader, verify.InHeader, authz)
		for _, bad := range []string{"Basic abc", "Bearer", "Bearer not.a.jwt", "Bearer " + strings.Repeat("a", 9000)} {
			d.Header.Set(authz, bad)
			requireRefused(t, v, d, verify.CodeMalformedHeader, verify.InHeader, authz)
		}
		d.Header.Set(authz, "bearer "+tok(nil))
		verifyEvents(t, v, d)
	})

	t.Run("body", func(t *testing.T) {
		requireRefused(t, v, verifytest.PubSubDelivery(tok(nil), []byte(`{"subscription":"s"}`)), verify.CodeMissingField, verify.InBody, "/message")
		requireRefused(t, v, verifytest.PubSubDelivery(tok(nil), []byte(`{"message":{"messageId":"1"}}`)), verify.CodeMissingField, verify.InBody, "/subscription")
		requireRefused(t, v, verifytest.PubSubDelivery(tok(nil), []byte(`{"message":{"data":"eA=="},"subscription":"s"}`)), verify.CodeMissingField, verify.InBody, "/message/messageId")
		requireRefused(t, v, verifytest.PubSubDelivery(tok(nil), []byte(`{"message":{"messageId":"1","message_id":"2"},"subscription":"s"}`)), verify.CodeMalformedBody, verify.InBody, "/message/message_id")
	})
}

func TestPubSubKeySetCache(t *testing.T) {
	t.Parallel()
	k1, k2 := verifytest.PubSubKey(), verifytest.NewJWKSKey("rotated-key-2")
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	v, srv := pubsubSetup(t, &now, nil, k1)
	body := []byte(pubsubDocBody)
	with := func(k verifytest.JWKSKey) verifytest.Delivery {
		return verifytest.PubSubDelivery(verifytest.GoogleOIDCToken(k, verifytest.PubSubClaims(now)), body)
	}
	const authz = verify.PubSubAuthorizationHeader

	for range 3 {
		verifyEvents(t, v, with(k1))
	}
	if got := srv.Fetches(); got != 1 {
		t.Fatalf("fetched %d times for three tokens, want once (cached)", got)
	}
	// Google rotates a key in: the unknown kid fetches the set once.
	srv.SetKeys(k1, k2)
	verifyEvents(t, v, with(k2))
	if got := srv.Fetches(); got != 2 {
		t.Fatalf("fetches %d, want 2", got)
	}
	// Random kids fetch nothing more within JWKSUnknownKIDEvery.
	for i := range 20 {
		requireRefused(t, v, with(verifytest.JWKSKey{KID: "random-" + string(rune('a'+i)), Key: k2.Key}), verify.CodeBadSignature, verify.InHeader, authz)
	}
	if got := srv.Fetches(); got != 2 {
		t.Fatalf("unknown kids made %d fetches, want none past the rate", got-2)
	}
	now = now.Add(verify.JWKSUnknownKIDEvery)
	requireRefused(t, v, with(verifytest.JWKSKey{KID: "random-z", Key: k2.Key}), verify.CodeBadSignature, verify.InHeader, authz)
	if got := srv.Fetches(); got != 3 {
		t.Fatalf("fetches %d, want 3 (one unknown-kid fetch per interval)", got)
	}
	// A key removed from the set stops verifying once the set is old
	// enough to be fetched again.
	srv.SetKeys(k2)
	verifyEvents(t, v, with(k1))
	now = now.Add(verify.JWKSMaxAge)
	requireRefused(t, v, with(k1), verify.CodeBadSignature, verify.InHeader, authz)
	verifyEvents(t, v, with(k2))
	if got := srv.Fetches(); got != 4 {
		t.Fatalf("fetches %d, want 4", got)
	}
	// The set cannot be fetched: the last good one stays in use, and the
	// fetch is not retried before JWKSRetryEvery.
	srv.SetStatus(http.StatusInternalServerError)
	now = now.Add(verify.JWKSMaxAge)
	verifyEvents(t, v, with(k2))
	verifyEvents(t, v, with(k2))
	if got := srv.Fetches(); got != 5 {
		t.Fatalf("fetches %d, want 5", got)
	}
	now = now.Add(verify.JWKSRetryEvery)
	srv.SetStatus(http.StatusOK)
	verifyEvents(t, v, with(k2))
	if got := srv.Fetches(); got != 6 {
		t.Fatalf("fetches %d, want 6", got)
	}
}

func TestPubSubKeySetBounds(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	key := verifytest.PubSubKey()
	d := verifytest.PubSubDelivery(verifytest.GoogleOIDCToken(key, verifytest.PubSubClaims(now)), []byte(pubsubDocBody))
	serve := func(t *testing.T, body []byte) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body) }))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	build := func(t *testing.T, url string) verify.Verifier {
		return mustBuild(t, verify.TypePubSub, verify.Core{Now: fixedClock(now)}, map[string]any{"audience": verifytest.PubSubAudience, "jwks_url": url})
	}
	// The real set padded past the bound is refused whole.
	set := verifytest.JWKS(key)
	padded := append(append([]byte(`{"pad":"`), []byte(strings.Repeat("x", verify.JWKSMaxBytes))...), append([]byte(`",`), set[1:]...)...)
	requireRefused(t, build(t, serve(t, padded)), d, verify.CodeBadSignature, verify.InHeader, verify.PubSubAuthorizationHeader)
	verifyEvents(t, build(t, serve(t, set)), d)
	// Not a key set, or no usable key.
	requireRefused(t, build(t, serve(t, []byte(`<html>`))), d, verify.CodeBadSignature, verify.InHeader, verify.PubSubAuthorizationHeader)
	requireRefused(t, build(t, serve(t, []byte(`{"keys":[{"kty":"XX","kid":"k"}]}`))), d, verify.CodeBadSignature, verify.InHeader, verify.PubSubAuthorizationHeader)
}

func TestPubSubKeyAttribute(t *testing.T) {
	t.Parallel()
	key := verifytest.PubSubKey()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	plain, _ := pubsubSetup(t, &now, nil, key)
	byAttr, _ := pubsubSetup(t, &now, map[string]any{"key_attribute": "eventId"}, key)
	tok := verifytest.GoogleOIDCToken(key, verifytest.PubSubClaims(now))
	attrs := map[string]string{"eventId": "order-A-1001-paid"}
	first := verifytest.PubSubDelivery(tok, verifytest.PubSubBody(verifytest.PubSubSubscription, "2070443601311540", attrs, 0))
	// A publisher retry: the same fact published again, new messageId.
	again := verifytest.PubSubDelivery(tok, verifytest.PubSubBody(verifytest.PubSubSubscription, "2070443601399999", attrs, 0))
	// Pub/Sub's own redelivery: same messageId.
	redelivered := verifytest.PubSubDelivery(tok, verifytest.PubSubBody(verifytest.PubSubSubscription, "2070443601311540", attrs, 3))
	other := verifytest.PubSubDelivery(tok, verifytest.PubSubBody("projects/myproject/subscriptions/other", "2070443601311540", attrs, 0))

	a, b, r, o := verifyEvents(t, plain, first)[0].ID, verifyEvents(t, plain, again)[0].ID, verifyEvents(t, plain, redelivered)[0].ID, verifyEvents(t, plain, other)[0].ID
	if a == b || a != r || a == o {
		t.Fatalf("messageId key: %q %q %q %q", a, b, r, o)
	}
	a, b = verifyEvents(t, byAttr, first)[0].ID, verifyEvents(t, byAttr, again)[0].ID
	if a != b || a != verify.JoinKey(verifytest.PubSubSubscription, "order-A-1001-paid") {
		t.Fatalf("key_attribute key: %q %q", a, b)
	}
	requireRefused(t, byAttr, verifytest.PubSubDelivery(tok, []byte(pubsubDocBody)), verify.CodeMissingField, verify.InBody, "/message/attributes/eventId")

	_, srv := pubsubSetup(t, &now, nil, key)
	typed := mustBuild(t, verify.TypePubSub, verify.Core{AllowedEventTypes: []string{"order.*"}, Now: fixedClock(now)},
		map[string]any{"audience": verifytest.PubSubAudience, "type_attribute": "type", "jwks_url": srv.URL})
	ev := verifyEvents(t, typed, verifytest.PubSubDelivery(tok, verifytest.PubSubBody("s", "1", map[string]string{"type": "order.paid"}, 0)))
	if ev[0].Type != "order.paid" {
		t.Fatalf("type %q", ev[0].Type)
	}
	e := requireRefused(t, typed, verifytest.PubSubDelivery(tok, verifytest.PubSubBody("s", "2", map[string]string{"type": "invoice.sent"}, 0)),
		verify.CodeEventTypeNotAllowed, verify.InBody, "/message/attributes/type")
	if !e.Authenticated {
		t.Error("not authenticated")
	}
}

func TestPubSubQueryToken(t *testing.T) {
	t.Parallel()
	v := mustBuild(t, verify.TypePubSub, verify.Core{Secrets: []string{"old-token-123", "new-token-456"}}, map[string]any{"auth": "query_token"})
	body := []byte(pubsubDocBody)
	d := verifytest.Delivery{Header: http.Header{}, Body: body}
	for _, q := range []string{"token=old-token-123", "token=new-token-456", "a=1&token=new-token-456"} {
		d.RawQuery = q
		verifyEvents(t, v, d)
	}
	d.RawQuery = "token=guess"
	requireRefused(t, v, d, verify.CodeBadSignature, verify.InQuery, "token")
	d.RawQuery = "tok=old-token-123"
	requireRefused(t, v, d, verify.CodeMissingHeader, verify.InQuery, "token")
	d.RawQuery = "token=%zz"
	requireRefused(t, v, d, verify.CodeMalformedHeader, verify.InQuery, "")
	d.RawQuery = "token=old-token-123&token=other"
	requireRefused(t, v, d, verify.CodeMalformedBody, verify.InQuery, "token")
	custom := mustBuild(t, verify.TypePubSub, verify.Core{Secrets: []string{"old-token-123"}}, map[string]any{"auth": "query_token", "token_param": "k"})
	d.RawQuery = "k=old-token-123"
	verifyEvents(t, custom, d)
	if h := mustProvider(t, verify.TypePubSub).CredentialHeaders(&verify.PubSubOptions{Auth: "query_token"}); h != nil {
		t.Fatalf("query_token credential headers %v", h)
	}
}

func TestPubSubConfig(t *testing.T) {
	t.Parallel()
	cases := []struct {
		core  verify.Core
		opts  map[string]any
		field string
	}{
		{verify.Core{}, nil, "Audience"},
		{verify.Core{}, map[string]any{"auth": "basic"}, "Auth"},
		{verify.Core{Secrets: []string{"t"}}, map[string]any{"audience": "a"}, "Secrets"},
		{verify.Core{}, map[string]any{"audience": "a", "jwks_url": "ftp://x/certs"}, "JWKSURL"},
		{verify.Core{}, map[string]any{"audience": "a", "token_param": "t"}, "TokenParam"},
		{verify.Core{}, map[string]any{"auth": "query_token"}, "Secrets"},
		{verify.Core{Secrets: []string{"t"}}, map[string]any{"auth": "query_token", "audience": "a"}, "Audience"},
		{verify.Core{AllowedEventTypes: []string{"x"}}, map[string]any{"audience": "a"}, "AllowedEventTypes"},
	}
	for _, tc := range cases {
		_, err := tryBuild(t, verify.TypePubSub, tc.core, tc.opts)
		requireConfigField(t, err, tc.field)
	}
	// Building does not fetch anything: Google's URL is the default and
	// nothing is reached until a token arrives.
	mustBuild(t, verify.TypePubSub, verify.Core{}, map[string]any{"audience": "a"})
}
