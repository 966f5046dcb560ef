package verify

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/idempotent-claim/idempotent-claim/sidecar/strictjson"
)

// Meta webhook headers and verification-request parameters
// (https://developers.facebook.com/docs/graph-api/webhooks/getting-started/).
const (
	MetaSignatureHeader       = "X-Hub-Signature-256"
	MetaLegacySignatureHeader = "X-Hub-Signature"
	MetaModeParam             = "hub.mode"
	MetaVerifyTokenParam      = "hub.verify_token"
	MetaChallengeParam        = "hub.challenge"
)

// TypeMeta is the "meta" provider: Meta webhooks of one app — WhatsApp
// Cloud API, Messenger, Instagram and the other Graph API webhook objects
// (page, user…), which share the verification request, the signature and
// the {"object","entry":[…]} body.
//
// Handshake, per
// https://developers.facebook.com/docs/graph-api/webhooks/getting-started/#verification-requests:
// when the callback URL is configured Meta sends
// GET ?hub.mode=subscribe&hub.challenge=<int>&hub.verify_token=<token>;
// when hub.verify_token equals options.verify_token (constant time) the
// answer is 200 text/plain with hub.challenge as the body, and no event.
// A wrong or missing token, a source without verify_token, a mode other
// than subscribe or a challenge that is not 1 to 64 letters, digits, '-',
// '_' or '.' is refused and nothing is echoed.
//
// Verification, per
// https://developers.facebook.com/docs/graph-api/webhooks/getting-started/#event-notifications:
// X-Hub-Signature-256 is "sha256=" and the hex HMAC-SHA256 of the raw body
// keyed with the app secret (several may be configured while the secret is
// reset). The legacy SHA-1 X-Hub-Signature is never accepted. Nothing is
// timestamped, so there is no replay window.
//
// Batches: one request holds entries, each with changes (WhatsApp, page and
// most objects) or messaging/standby items (Messenger, Instagram
// messaging); Meta may batch many updates into one request. Every item is
// its own event, whose Payload is the body's shape reduced to that item:
// {"object":…,"entry":[{"id":…,"time":…,"changes"|"messaging"|"standby":[item]}]}.
// Identity of an item (Scope is the entry id):
//   - a WhatsApp change (field "messages") with messages or statuses:
//     JoinKey("whatsapp", "message", <id>…, "status", <id>, <status>…), the
//     message ids (wamid) and each status's message id and status;
//   - a Messenger or Instagram message: JoinKey(<messaging|standby>,
//     "mid", message.mid);
//   - any other item: "sha256:" and the hex SHA-256 of JoinKey(object,
//     entry id, the list it is in, the item's canonical JSON) (Digest is
//     set); the item's own fields (timestamps, ids, verbs) tell two events
//     apart, and entry.time, which may differ between deliveries, is left
//     out.
//
// Type is the change's field ("messages", "feed") or the messaging item's
// kind ("message", "postback", "reaction", "read"…, "messaging" when none
// is known).
//
// Redelivery: Meta retries an unacknowledged notification immediately and
// then with decreasing frequency for up to 36 hours, and asks receivers to
// deduplicate (Graph API webhooks); the WhatsApp Cloud API retries for up
// to 7 days
// (https://developers.facebook.com/docs/whatsapp/cloud-api/guides/set-up-webhooks/).
// A retry may group items into requests differently; the keys above are
// per item.
const TypeMeta Type = "meta"

// MetaOptions are the meta provider's options.
type MetaOptions struct {
	// VerifyToken is the Verify Token entered in the App Dashboard's
	// webhook configuration, compared with hub.verify_token. Without it
	// the verification request (GET) is refused; events are still
	// verified.
	VerifyToken string `recommended:"true" doc:"the Verify Token entered in the App Dashboard; without it the GET handshake is refused"`
}

func init() {
	Register(Provider{
		Type: TypeMeta,
		Name: "Meta (WhatsApp, Messenger, Instagram, Graph API webhooks)",
		Docs: []string{
			"https://developers.facebook.com/docs/graph-api/webhooks/getting-started/",
			"https://developers.facebook.com/docs/whatsapp/cloud-api/guides/set-up-webhooks/",
			"https://developers.facebook.com/docs/messenger-platform/webhooks/",
			"https://developers.facebook.com/docs/instagram-platform/webhooks/",
		},
		Options: func() any { return &MetaOptions{} },
		Build: func(core Core, opts any) (Verifier, error) {
			o, _ := opts.(*MetaOptions)
			if o == nil {
				o = &MetaOptions{}
			}
			if strings.TrimSpace(o.VerifyToken) != o.VerifyToken {
				return nil, &ConfigError{Type: TypeMeta, Field: "VerifyToken", Reason: "has leading or trailing whitespace"}
			}
			return &metaVerifier{keys: secretKeys(core.Secrets), verifyToken: o.VerifyToken, types: core.Types()}, nil
		},
		CredentialHeaders: func(any) []string { return []string{MetaSignatureHeader, MetaLegacySignatureHeader} },
		// hub.verify_token, in the verification GET's query.
		CredentialQueryParams: func(any) []string { return []string{MetaVerifyTokenParam} },
		Methods:               []string{http.MethodGet},
		Setup:                 Setup{Secrets: "the App Secret (App Dashboard → App settings → Basic → App secret); the GET handshake's Verify Token goes in `options.verify_token`"},
		Redelivery: Redelivery{
			Key:     "WhatsApp: message `id`, status `id` + `status`; Messenger/Instagram: `message.mid`; else a digest of the item",
			Retries: "decreasing frequency for up to 36 hours (Graph API webhooks); up to 7 days (WhatsApp Cloud API)",
			Horizon: "forever (message ids; item digests)",
			Batches: "yes: entries × changes/messaging items; one event per item",
			Resends: "no; a retry may batch items differently (keys are per item)",
		},
	})
}

type metaVerifier struct {
	keys        [][]byte
	verifyToken string
	types       TypeFilter
}

func (*metaVerifier) Type() Type { return TypeMeta }

// metaMAC is Meta's signature: X-Hub-Signature-256 holds "sha256=" (either
// letter case) and the hex HMAC-SHA256 of the body under the app secret.
var metaMAC = macHeader{
	Name:       MetaSignatureHeader,
	Prefix:     "sha256=",
	FoldPrefix: true,
	Hash:       sha256.New,
	Malformed:  "must be sha256= followed by 64 hex digits",
	Mismatch:   "signature does not match the payload under any configured secret",
}

func (v *metaVerifier) Verify(r Request) (Result, error) {
	if r.Method == http.MethodGet {
		return v.handshake(r)
	}
	if e := metaMAC.check(r.Header, v.keys, r.Body); e != nil {
		if e.Code == CodeMissingHeader && header(r.Header, MetaLegacySignatureHeader) != "" {
			e.Reason = "only the legacy SHA-1 X-Hub-Signature is present; X-Hub-Signature-256 is required"
		}
		return Result{}, e
	}
	var body struct {
		Object string `json:"object"`
		Entry  []struct {
			ID        jsontext.Value   `json:"id"`
			Time      jsontext.Value   `json:"time"`
			Changes   []jsontext.Value `json:"changes"`
			Messaging []jsontext.Value `json:"messaging"`
			Standby   []jsontext.Value `json:"standby"`
		} `json:"entry"`
	}
	if e := unmarshalBody(r.Body, &body); e != nil {
		return Result{}, authenticated(e)
	}
	// Every changes, messaging and standby item of every entry is one
	// item of the batch, numbered in that order (Result.Rejected's Index).
	type metaItem struct {
		entry, j int
		list     string
		raw      jsontext.Value
	}
	var items []metaItem
	for i, en := range body.Entry {
		for _, list := range []struct {
			name  string
			items []jsontext.Value
		}{{"changes", en.Changes}, {"messaging", en.Messaging}, {"standby", en.Standby}} {
			for j, raw := range list.items {
				items = append(items, metaItem{entry: i, j: j, list: list.name, raw: raw})
			}
		}
	}
	if len(items) == 0 {
		return Result{}, authenticated(bodyErr(CodeMissingField, "/entry", "the notification has no changes or messaging items"))
	}
	return splitBatch(items, func(_ int, it metaItem) (Event, error) {
		en := body.Entry[it.entry]
		at := "/entry/" + strconv.Itoa(it.entry) + "/" + it.list + "/" + strconv.Itoa(it.j)
		ev, err := v.item(body.Object, jsonText(en.ID), it.list, at, it.raw)
		if err != nil {
			return Event{}, err
		}
		ev.Payload = metaPayload(body.Object, en.ID, en.Time, it.list, it.raw)
		return ev, nil
	})
}

// metaMessagingKinds are the Messenger and Instagram messaging item kinds,
// in the order they are looked for
// (https://developers.facebook.com/docs/messenger-platform/webhooks/#event-notifications).
var metaMessagingKinds = []string{
	"message", "message_edit", "reaction", "postback", "read", "delivery",
	"referral", "optin", "account_linking", "pass_thread_control",
	"take_thread_control", "request_thread_control", "policy_enforcement",
	"message_reactions", "messaging_seen",
}

func (v *metaVerifier) item(object, entryID, list, at string, raw jsontext.Value) (Event, error) {
	var ev Event
	ev.Scope = entryID
	typField := at
	var parts []string
	if list == "changes" {
		var c struct {
			Field string `json:"field"`
			Value struct {
				Messages []struct {
					ID string `json:"id"`
				} `json:"messages"`
				Statuses []struct {
					ID     string `json:"id"`
					Status string `json:"status"`
				} `json:"statuses"`
			} `json:"value"`
		}
		if e := unmarshalBody(raw, &c); e != nil {
			e.Field = at + e.Field
			return Event{}, authenticated(e)
		}
		if c.Field == "" {
			return Event{}, authenticated(bodyErr(CodeMissingField, at+"/field", "the change has no field"))
		}
		ev.Type, typField = c.Field, at+"/field"
		if c.Field == "messages" && (len(c.Value.Messages) > 0 || len(c.Value.Statuses) > 0) {
			parts = []string{"whatsapp"}
			for k, m := range c.Value.Messages {
				if m.ID == "" {
					return Event{}, authenticated(bodyErr(CodeMissingField, at+"/value/messages/"+strconv.Itoa(k)+"/id", "the message has no id"))
				}
				parts = append(parts, "message", m.ID)
				ev.ObjectID = m.ID
			}
			for k, s := range c.Value.Statuses {
				if s.ID == "" || s.Status == "" {
					return Event{}, authenticated(bodyErr(CodeMissingField, at+"/value/statuses/"+strconv.Itoa(k), "the status has no id or status"))
				}
				parts = append(parts, "status", s.ID, s.Status)
				ev.ObjectID = s.ID
			}
		}
	} else {
		var m map[string]jsontext.Value
		if e := unmarshalBody(raw, &m); e != nil {
			e.Field = at + e.Field
			return Event{}, authenticated(e)
		}
		ev.Type = "messaging"
		for _, k := range metaMessagingKinds {
			if _, ok := m[k]; ok {
				ev.Type = k
				break
			}
		}
		if msg, ok := m["message"]; ok && ev.Type == "message" {
			var mm struct {
				MID string `json:"mid"`
			}
			if e := unmarshalBody(msg, &mm); e != nil {
				e.Field = at + "/message" + e.Field
				return Event{}, authenticated(e)
			}
			if mm.MID != "" {
				parts = []string{list, "mid", mm.MID}
				ev.ObjectID = mm.MID
			}
		}
	}
	if parts != nil {
		ev.ID = JoinKey(parts...)
	} else {
		canon, err := strictjson.Canonical(raw)
		if err != nil {
			e := strictErr(err)
			e.Field = at + e.Field
			return Event{}, authenticated(e)
		}
		sum := sha256.Sum256([]byte(JoinKey(object, entryID, list, string(canon))))
		ev.ID, ev.Digest = "sha256:"+hex.EncodeToString(sum[:]), true
	}
	if err := v.types.Check(ev.Type, InBody, typField); err != nil {
		return Event{}, err
	}
	return ev, nil
}

// jsonText returns a JSON string's value or a number's text ("" for
// anything else or nothing).
func jsonText(v jsontext.Value) string {
	var f flexString
	if len(v) == 0 || f.UnmarshalJSON(v) != nil {
		return ""
	}
	return string(f)
}

// metaPayload is the notification reduced to one item, in Meta's own
// shape.
func metaPayload(object string, id, ts jsontext.Value, list string, item jsontext.Value) []byte {
	entry := map[string]json.RawMessage{list: json.RawMessage("[" + string(item) + "]")}
	if len(id) > 0 {
		entry["id"] = json.RawMessage(id)
	}
	if len(ts) > 0 {
		entry["time"] = json.RawMessage(ts)
	}
	out, err := json.Marshal(struct {
		Object string                       `json:"object"`
		Entry  []map[string]json.RawMessage `json:"entry"`
	}{object, []map[string]json.RawMessage{entry}})
	if err != nil {
		return []byte(item)
	}
	return out
}

// metaChallengeOK reports whether c may be echoed: 1 to 64 ASCII letters,
// digits, '-', '_' or '.' (Meta sends an integer).
func metaChallengeOK(c string) bool {
	if len(c) == 0 || len(c) > 64 {
		return false
	}
	for i := 0; i < len(c); i++ {
		b := c[i]
		if !(b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b == '-' || b == '_' || b == '.') {
			return false
		}
	}
	return true
}

func (v *metaVerifier) handshake(r Request) (Result, error) {
	q, err := url.ParseQuery(r.RawQuery)
	if err != nil {
		return Result{}, &Error{Code: CodeMalformedHeader, In: InQuery, Reason: "query string is not validly encoded"}
	}
	for _, name := range []string{MetaModeParam, MetaVerifyTokenParam, MetaChallengeParam} {
		if len(q[name]) > 1 {
			return Result{}, &Error{Code: CodeMalformedHeader, In: InQuery, Field: name, Reason: "parameter appears more than once"}
		}
	}
	if q.Get(MetaModeParam) != "subscribe" {
		return Result{}, &Error{Code: CodeMalformedHeader, In: InQuery, Field: MetaModeParam, Reason: "a GET is answered only as Meta's verification request (hub.mode=subscribe)"}
	}
	if v.verifyToken == "" {
		return Result{}, &Error{Code: CodeBadSignature, In: InQuery, Field: MetaVerifyTokenParam, Reason: "no verify_token is configured for this source"}
	}
	token := q.Get(MetaVerifyTokenParam)
	if token == "" {
		return Result{}, &Error{Code: CodeMissingHeader, In: InQuery, Field: MetaVerifyTokenParam, Reason: "required parameter is absent"}
	}
	if !equalSecret(token, v.verifyToken) {
		return Result{}, &Error{Code: CodeBadSignature, In: InQuery, Field: MetaVerifyTokenParam, Reason: "does not match the configured verify_token"}
	}
	challenge := q.Get(MetaChallengeParam)
	if !metaChallengeOK(challenge) {
		return Result{}, &Error{Code: CodeMalformedHeader, In: InQuery, Field: MetaChallengeParam, Reason: "must be 1 to 64 letters, digits, '-', '_' or '.'"}
	}
	return Result{Handshake: &Handshake{
		Status: http.StatusOK,
		Header: http.Header{
			"Content-Type":           {"text/plain; charset=utf-8"},
			"X-Content-Type-Options": {"nosniff"},
		},
		Body: []byte(challenge),
	}}, nil
}
