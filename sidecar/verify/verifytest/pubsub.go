package verifytest

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The "pubsub" fixture's subscription settings.
const (
	PubSubAudience       = "https://claimd.example/ingest/pubsub"
	PubSubServiceAccount = "push-invoker@myproject.iam.gserviceaccount.com"
	PubSubSubscription   = "projects/myproject/subscriptions/mysubscription"
)

// JWKSKey is an RSA signing key and its kid.
type JWKSKey struct {
	KID string
	Key *rsa.PrivateKey
}

// NewJWKSKey generates a 2048-bit RSA key named kid.
func NewJWKSKey(kid string) JWKSKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return JWKSKey{KID: kid, Key: k}
}

var pubsubKey = sync.OnceValue(func() JWKSKey { return NewJWKSKey("fixture-key-1") })

// PubSubKey is the key the "pubsub" fixture signs its tokens with.
func PubSubKey() JWKSKey { return pubsubKey() }

// JWKSServer is a local HTTP server publishing a JSON Web Key Set (the
// public halves of its keys, RS256, use "sig"), as Google's certs endpoint
// does.
type JWKSServer struct {
	URL string

	mu      sync.Mutex
	keys    []JWKSKey
	fetches int
	status  int
}

// NewJWKSServer starts a key set server holding keys; it is closed by
// t.Cleanup.
func NewJWKSServer(t TB, keys ...JWKSKey) *JWKSServer {
	t.Helper()
	s := &JWKSServer{keys: keys, status: http.StatusOK}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.fetches++
		keys, status := append([]JWKSKey(nil), s.keys...), s.status
		s.mu.Unlock()
		if status != http.StatusOK {
			w.WriteHeader(status)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(JWKS(keys...))
	}))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// SetKeys replaces the published keys (a rotation).
func (s *JWKSServer) SetKeys(keys ...JWKSKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = keys
}

// SetStatus makes the server answer status (200 publishes the keys).
func (s *JWKSServer) SetStatus(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status = status
}

// Fetches returns how many requests the server answered.
func (s *JWKSServer) Fetches() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fetches
}

// JWKS returns the JSON Web Key Set (RFC 7517 §5) of the keys' public
// halves.
func JWKS(keys ...JWKSKey) []byte {
	type jwk struct {
		KTY string `json:"kty"`
		ALG string `json:"alg"`
		USE string `json:"use"`
		KID string `json:"kid"`
		N   string `json:"n"`
		E   string `json:"e"`
	}
	set := struct {
		Keys []jwk `json:"keys"`
	}{Keys: []jwk{}}
	for _, k := range keys {
		pub := k.Key.PublicKey
		set.Keys = append(set.Keys, jwk{KTY: "RSA", ALG: "RS256", USE: "sig", KID: k.KID,
			N: base64.RawURLEncoding.EncodeToString(pub.N.Bytes()),
			E: base64.RawURLEncoding.EncodeToString(big.NewInt(int64(pub.E)).Bytes())})
	}
	b, _ := json.Marshal(set)
	return b
}

// GoogleOIDCToken returns an RS256 JWT signed with key (kid in its header)
// carrying claims, shaped as the token Pub/Sub sends
// (https://cloud.google.com/pubsub/docs/authenticate-push-subscriptions#jwt_format).
func GoogleOIDCToken(key JWKSKey, claims jwt.MapClaims) string {
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	tok.Header["kid"] = key.KID
	s, err := tok.SignedString(key.Key)
	if err != nil {
		panic(err)
	}
	return s
}

// PubSubClaims returns the claims of a push token for the fixture's
// audience and service account, issued at iat, valid one hour.
func PubSubClaims(iat time.Time) jwt.MapClaims {
	return jwt.MapClaims{
		"aud":            PubSubAudience,
		"azp":            "113774264463038321964",
		"email":          PubSubServiceAccount,
		"email_verified": true,
		"exp":            iat.Add(time.Hour).Unix(),
		"iat":            iat.Unix(),
		"iss":            "https://accounts.google.com",
		"sub":            "113774264463038321964",
	}
}

// PubSubBody returns a wrapped push body for message id with attributes
// and, when attempt > 0, a deliveryAttempt.
func PubSubBody(subscription, messageID string, attributes map[string]string, attempt int) []byte {
	msg := map[string]any{
		"data":         "eyJvcmRlcklkIjoiQS0xMDAxIiwic3RhdHVzIjoicGFpZCJ9",
		"messageId":    messageID,
		"message_id":   messageID,
		"publishTime":  "2021-02-26T19:13:55.749Z",
		"publish_time": "2021-02-26T19:13:55.749Z",
	}
	if attributes != nil {
		msg["attributes"] = attributes
	}
	body := map[string]any{"message": msg, "subscription": subscription}
	if attempt > 0 {
		body["deliveryAttempt"] = attempt
	}
	b, _ := json.Marshal(body)
	return b
}

// PubSubDelivery returns a push request carrying token and body.
func PubSubDelivery(token string, body []byte) Delivery {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "APIs-Google; (+https://developers.google.com/webmasters/APIs-Google.html)")
	h.Set("Authorization", "Bearer "+token)
	return Delivery{Header: h, Body: body}
}

func init() {
	RegisterFixture(Fixture{
		Type: "pubsub",
		Setup: func(t TB) map[string]any {
			srv := NewJWKSServer(t, PubSubKey())
			return map[string]any{
				"audience":              PubSubAudience,
				"service_account_email": PubSubServiceAccount,
				"jwks_url":              srv.URL,
			}
		},
		Cases: func(now time.Time) Cases {
			key := PubSubKey()
			tok := func(at time.Time) string { return GoogleOIDCToken(key, PubSubClaims(at)) }
			attrs := map[string]string{"eventId": "order-A-1001-paid"}
			// A token signed for another audience, its claims then
			// rewritten: the signature no longer verifies.
			other := PubSubClaims(now)
			other["aud"] = "https://elsewhere.example/"
			forged := GoogleOIDCToken(key, other)
			forged = forged[:len(forged)-4] + "AAAA"
			return Cases{
				Distinct: []Delivery{
					PubSubDelivery(tok(now), PubSubBody(PubSubSubscription, "2070443601311540", attrs, 0)),
					PubSubDelivery(tok(now), PubSubBody(PubSubSubscription, "2070443601311541", attrs, 0)),
				},
				Redelivery: []Delivery{
					PubSubDelivery(tok(now.Add(-time.Minute)), PubSubBody(PubSubSubscription, "2070443601311542", attrs, 1)),
					PubSubDelivery(tok(now), PubSubBody(PubSubSubscription, "2070443601311542", attrs, 2)),
				},
				Tampered: PubSubDelivery(forged, PubSubBody(PubSubSubscription, "2070443601311543", attrs, 0)),
			}
		},
	})
}
