// Package verifytest signs webhook requests the way each provider does, so
// tests (unit, ingest, end-to-end) can build authentic deliveries for the
// schemes of package verify. Each function returns the exact header value
// the provider would send. Test secrets only: nothing here is meant for
// production signing.
package verifytest

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // Twilio signs with HMAC-SHA1.
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

func mac(key []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// StripeV1 returns the hex v1 signature of body at unix time t
// (https://docs.stripe.com/webhooks#verify-manually): HMAC-SHA256 of
// "<t>.<body>" keyed with the secret string as is.
func StripeV1(secret string, t int64, body []byte) string {
	return hex.EncodeToString(mac([]byte(secret), []byte(strconv.FormatInt(t, 10)+"."), body))
}

// StripeHeader returns a Stripe-Signature value "t=<t>,v1=<sig>[,v1=<sig>…]"
// with one v1 per secret.
func StripeHeader(t int64, body []byte, secrets ...string) string {
	parts := []string{"t=" + strconv.FormatInt(t, 10)}
	for _, s := range secrets {
		parts = append(parts, "v1="+StripeV1(s, t, body))
	}
	return strings.Join(parts, ",")
}

// GitHub returns an X-Hub-Signature-256 value, "sha256=" and the hex
// HMAC-SHA256 of body
// (https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries).
func GitHub(secret string, body []byte) string {
	return "sha256=" + hex.EncodeToString(mac([]byte(secret), body))
}

// StandardWebhooksKey decodes a whsec_ (or bare base64) secret into its HMAC
// key.
func StandardWebhooksKey(secret string) ([]byte, error) {
	return base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
}

// StandardWebhooks returns one "v1,<base64>" webhook-signature entry
// (https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md#signature-scheme).
// It fails when secret is not base64 after the whsec_ prefix.
func StandardWebhooks(secret, id string, ts int64, body []byte) (string, error) {
	key, err := StandardWebhooksKey(secret)
	if err != nil {
		return "", fmt.Errorf("verifytest: secret is not base64: %w", err)
	}
	return "v1," + base64.StdEncoding.EncodeToString(mac(key, []byte(id+"."+strconv.FormatInt(ts, 10)+"."), body)), nil
}

// StandardWebhooksEd25519 returns one "v1a,<base64>" entry signed with priv.
func StandardWebhooksEd25519(priv ed25519.PrivateKey, id string, ts int64, body []byte) string {
	msg := append([]byte(id+"."+strconv.FormatInt(ts, 10)+"."), body...)
	return "v1a," + base64.StdEncoding.EncodeToString(ed25519.Sign(priv, msg))
}

// StandardWebhooksPublicKey returns the "whpk_" form of pub.
func StandardWebhooksPublicKey(pub ed25519.PublicKey) string {
	return "whpk_" + base64.StdEncoding.EncodeToString(pub)
}

// Shopify returns an X-Shopify-Hmac-Sha256 value: base64 HMAC-SHA256 of body
// (https://shopify.dev/docs/apps/build/webhooks/subscribe/https).
func Shopify(secret string, body []byte) string {
	return base64.StdEncoding.EncodeToString(mac([]byte(secret), body))
}

// Slack returns an X-Slack-Signature value: "v0=" and the hex HMAC-SHA256 of
// "v0:<ts>:<body>" (https://api.slack.com/authentication/verifying-requests-from-slack).
func Slack(secret string, ts int64, body []byte) string {
	return "v0=" + hex.EncodeToString(mac([]byte(secret), []byte("v0:"+strconv.FormatInt(ts, 10)+":"), body))
}

// Zoom returns an x-zm-signature value; the construction is Slack's
// (https://developers.zoom.us/docs/api/webhooks/#verify-webhook-events).
func Zoom(secret string, ts int64, body []byte) string { return Slack(secret, ts, body) }

// Paddle returns a Paddle-Signature value "ts=<ts>;h1=<sig>[;h1=<sig>…]"
// with one h1 per secret: hex HMAC-SHA256 of "<ts>:<body>"
// (https://developer.paddle.com/webhooks/signature-verification).
func Paddle(ts int64, body []byte, secrets ...string) string {
	parts := []string{"ts=" + strconv.FormatInt(ts, 10)}
	for _, s := range secrets {
		parts = append(parts, "h1="+hex.EncodeToString(mac([]byte(s), []byte(strconv.FormatInt(ts, 10)+":"), body)))
	}
	return strings.Join(parts, ";")
}

// HexHMACSHA256 returns the hex HMAC-SHA256 of the concatenated parts (the
// generic scheme's default, Linear's Linear-Signature).
func HexHMACSHA256(secret string, parts ...[]byte) string {
	return hex.EncodeToString(mac([]byte(secret), parts...))
}

// Twilio returns an X-Twilio-Signature value: base64 HMAC-SHA1 of fullURL
// followed by the form parameters sorted by name, then value
// (https://www.twilio.com/docs/usage/webhooks/webhooks-security).
func Twilio(token, fullURL string, params url.Values) string {
	var pairs [][2]string
	for k, vs := range params {
		for _, v := range vs {
			pairs = append(pairs, [2]string{k, v})
		}
	}
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i][0] != pairs[j][0] {
			return pairs[i][0] < pairs[j][0]
		}
		return pairs[i][1] < pairs[j][1]
	})
	m := hmac.New(sha1.New, []byte(token))
	m.Write([]byte(fullURL))
	for _, p := range pairs {
		m.Write([]byte(p[0] + p[1]))
	}
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}
