package verify

import (
	"crypto/sha256"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"
)

// HubSpot request headers
// (https://developers.hubspot.com/docs/apps/legacy-apps/authentication/validating-requests).
const (
	HubSpotSignatureV3Header      = "X-HubSpot-Signature-v3"
	HubSpotTimestampHeader        = "X-HubSpot-Request-Timestamp"
	HubSpotLegacySignatureHeader  = "X-HubSpot-Signature"
	HubSpotSignatureVersionHeader = "X-HubSpot-Signature-Version"
)

// TypeHubSpot is HubSpot's webhooks API (app subscriptions).
const TypeHubSpot Type = "hubspot"

// The "hubspot" provider verifies HubSpot webhook notifications by their v3
// signature, per
// https://developers.hubspot.com/docs/apps/legacy-apps/authentication/validating-requests#validate-the-v3-request-signature
// (and https://developers.hubspot.com/changelog/introducing-version-3-of-webhook-signatures):
//
//   - X-HubSpot-Signature-v3 is the standard base64 of the HMAC-SHA256,
//     keyed with the app's client secret, of the UTF-8 string
//     method + URI + raw body + X-HubSpot-Request-Timestamp, concatenated
//     without separators;
//   - the URI is the full URL HubSpot called (scheme, host, path, query),
//     which claimd cannot see behind proxies: it is options.url, written as
//     configured in HubSpot, with the percent-escapes HubSpot's page lists
//     decoded before signing (%3A ":", %2F "/", %3F "?", %40 "@", %21 "!",
//     %24 "$", %27 "'", %28 "(", %29 ")", %2A "*", %2C ",", %3B ";");
//   - X-HubSpot-Request-Timestamp is Unix milliseconds; HubSpot says to
//     reject a request whose timestamp is older than 5 minutes: the
//     tolerance defaults to 300 s (either direction);
//   - the v1 and v2 signatures (X-HubSpot-Signature with
//     X-HubSpot-Signature-Version) sign no timestamp and are never accepted:
//     a request carrying only them is missing X-HubSpot-Signature-v3;
//   - several client secrets may be configured during rotation.
//
// The body is a JSON array of up to 100 notifications
// (https://developers.hubspot.com/docs/api/webhooks):
// each becomes one Event whose Payload is the item. Key rule: ID is
// JoinKey(portalId, subscriptionId, eventId): eventId names the change,
// scoped by the account (portalId) and by the subscription the
// notification is for, so one change notified to two subscriptions is two
// events. Type is subscriptionType, Scope portalId, ObjectID objectId.
// attemptNumber, which HubSpot increments on every retry, is volatile.
//
// Redelivery: HubSpot retries a batch that failed (connection error,
// timeout, 5xx or 429) up to 10 times with backoff spread over 24 hours
// (https://developers.hubspot.com/docs/api/webhooks);
// 4xx other than 429 is not retried.
type hubspotVerifier struct {
	keys  [][]byte
	uri   string
	tol   time.Duration
	now   func() time.Time
	types TypeFilter
}

// HubSpotOptions are the hubspot provider's options.
type HubSpotOptions struct {
	// URL is the target URL exactly as configured in the HubSpot app's
	// webhook settings (https, with any query string), which HubSpot signs.
	// Required.
	URL string `required:"true" doc:"the target URL exactly as configured in the app's webhook settings (HubSpot signs it)"`
}

func init() {
	Register(Provider{
		Type: TypeHubSpot,
		Name: "HubSpot",
		Docs: []string{
			"https://developers.hubspot.com/docs/apps/legacy-apps/authentication/validating-requests",
			"https://developers.hubspot.com/changelog/introducing-version-3-of-webhook-signatures",
			"https://developers.hubspot.com/docs/api/webhooks",
		},
		Options:        func() any { return &HubSpotOptions{} },
		Build:          buildHubSpot,
		SignsTimestamp: true,
		CredentialHeaders: func(any) []string {
			return []string{HubSpotSignatureV3Header, HubSpotLegacySignatureHeader}
		},
		VolatileFields: []string{"/attemptNumber"},
		Setup:          Setup{Secrets: "the app's client secret (developer account → the app → Auth → Client secret)"},
		Redelivery: Redelivery{
			Key:     "per item: `portalId` + `subscriptionId` + `eventId`",
			Retries: "up to 10 retries spread over 24 hours (connection error, timeout, 5xx, 429); `attemptNumber` counts them",
			Horizon: "forever within the account and subscription",
			Batches: "yes: a JSON array of up to 100 notifications, one record per item",
			Resends: "no",
		},
	})
}

func buildHubSpot(core Core, opts any) (Verifier, error) {
	o, _ := opts.(*HubSpotOptions)
	if o == nil || o.URL == "" {
		return nil, &ConfigError{Type: TypeHubSpot, Field: "URL", Reason: "the webhook target URL as configured in HubSpot is required (HubSpot signs it)"}
	}
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Fragment != "" {
		return nil, &ConfigError{Type: TypeHubSpot, Field: "URL", Reason: "must be an absolute http(s) URL without a fragment"}
	}
	return &hubspotVerifier{keys: secretKeys(core.Secrets), uri: hubspotDecodeURI(o.URL), tol: core.Tolerance, now: core.Now, types: core.Types()}, nil
}

// hubspotEscapes are the percent-escapes HubSpot decodes in the URI before
// signing (the table of the v3 section of its validation page).
var hubspotEscapes = map[string]byte{
	"3A": ':', "2F": '/', "3F": '?', "40": '@', "21": '!', "24": '$',
	"27": '\'', "28": '(', "29": ')', "2A": '*', "2C": ',', "3B": ';',
}

// hubspotDecodeURI decodes the escapes of hubspotEscapes (hex digits in
// either case) and leaves every other byte as it is.
func hubspotDecodeURI(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if c, ok := hubspotEscapes[strings.ToUpper(s[i+1:i+3])]; ok {
				b.WriteByte(c)
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func (*hubspotVerifier) Type() Type { return TypeHubSpot }

type hubspotNotification struct {
	EventID          flexString `json:"eventId"`
	SubscriptionID   flexString `json:"subscriptionId"`
	PortalID         flexString `json:"portalId"`
	SubscriptionType string     `json:"subscriptionType"`
	ObjectID         flexString `json:"objectId"`
}

func (v *hubspotVerifier) Verify(r Request) (Result, error) {
	raw := header(r.Header, HubSpotSignatureV3Header)
	if raw == "" {
		if header(r.Header, HubSpotLegacySignatureHeader) != "" {
			return Result{}, headerErr(CodeMissingHeader, HubSpotSignatureV3Header, "only a v1/v2 X-HubSpot-Signature is present; the timestamped v3 signature is required")
		}
		return Result{}, missingHeader(HubSpotSignatureV3Header)
	}
	sig, ok := macFromBase64(raw, "", sha256.Size)
	if !ok {
		return Result{}, headerErr(CodeMalformedHeader, HubSpotSignatureV3Header, "must be the base64 of a 32-byte HMAC-SHA256")
	}
	rawTS := header(r.Header, HubSpotTimestampHeader)
	if rawTS == "" {
		return Result{}, missingHeader(HubSpotTimestampHeader)
	}
	ms, ok := parseUnix(rawTS)
	if !ok {
		return Result{}, headerErr(CodeMalformedHeader, HubSpotTimestampHeader, "is not a Unix timestamp in milliseconds")
	}
	method := r.Method
	if method == "" {
		method = "POST"
	}
	if !anyMACMatches(sha256.New, v.keys, [][]byte{sig}, []byte(method), []byte(v.uri), r.Body, []byte(rawTS)) {
		return Result{}, headerErr(CodeBadSignature, HubSpotSignatureV3Header, "signature does not match method, URL, body and timestamp under any configured client secret")
	}
	ts := time.UnixMilli(ms)
	if now := v.now(); !within(now, ts, v.tol) {
		return Result{}, windowErr(InHeader, HubSpotTimestampHeader, now, ts, v.tol)
	}
	var items []jsontext.Value
	if e := unmarshalBody(r.Body, &items); e != nil {
		return Result{}, authenticated(e)
	}
	if len(items) == 0 {
		return Result{}, authenticated(bodyErr(CodeMalformedBody, "", "the notification array is empty"))
	}
	return splitBatch(items, func(i int, raw jsontext.Value) (Event, error) { return v.item(i, raw, ts) })
}

func (v *hubspotVerifier) item(i int, raw jsontext.Value, ts time.Time) (Event, error) {
	base := "/" + strconv.Itoa(i)
	var n hubspotNotification
	if e := unmarshalBody(raw, &n); e != nil {
		e.Field = base + e.Field
		return Event{}, authenticated(e)
	}
	for _, f := range []struct {
		v    flexString
		name string
	}{{n.EventID, "eventId"}, {n.SubscriptionID, "subscriptionId"}, {n.PortalID, "portalId"}} {
		if f.v == "" {
			return Event{}, authenticated(bodyErr(CodeMissingField, base+"/"+f.name, "notification has no "+f.name))
		}
	}
	if err := v.types.Check(n.SubscriptionType, InBody, base+"/subscriptionType"); err != nil {
		return Event{}, err
	}
	return Event{
		ID:        JoinKey(string(n.PortalID), string(n.SubscriptionID), string(n.EventID)),
		Type:      n.SubscriptionType,
		Scope:     string(n.PortalID),
		ObjectID:  string(n.ObjectID),
		Timestamp: ts,
		Payload:   append([]byte(nil), raw...),
	}, nil
}
