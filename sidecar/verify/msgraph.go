package verify

import (
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"
)

// MSGraphValidationTokenParam is the query parameter of Microsoft Graph's
// endpoint validation request
// (https://learn.microsoft.com/en-us/graph/change-notifications-delivery-webhooks#notificationurl-validation).
const MSGraphValidationTokenParam = "validationToken"

// The "msgraph" provider type (Microsoft Graph change and
// lifecycle notifications over webhooks), per
// https://learn.microsoft.com/en-us/graph/change-notifications-delivery-webhooks:
//
//   - a request whose query has validationToken is the endpoint validation:
//     a [Handshake] answering 200 text/plain with the URL-decoded token as
//     the body (X-Content-Type-Options: nosniff, so the echo can never be
//     rendered as HTML); nothing else is looked at;
//   - otherwise the body is {"value": [notification, …]}; each notification's
//     clientState must equal one of Secrets (constant-time). A notification
//     without a matching clientState is reported in Result.Rejected, the
//     others are accepted; when none matches, Verify fails.
//
// Graph signs nothing else (rich notifications' validationTokens JWTs are not
// checked here), so clientState is the only proof of origin, and there is no
// replay window.
//
// The identity of each notification
// (https://learn.microsoft.com/en-us/graph/api/resources/changenotification:
// id is "Unique ID for the notification. Optional."):
//   - with an id: JoinKey(subscriptionId, id);
//   - a change notification without one: JoinKey(subscriptionId,
//     changeType, resource, resourceData["@odata.etag"]). The etag is the
//     resource's version: two changes to one resource in one millisecond
//     carry two etags, and a notification repeating one version says
//     nothing new;
//   - a subscriptionRemoved lifecycle notification without an id:
//     JoinKey(subscriptionId, lifecycleEvent, subscriptionExpirationDateTime).
//     A subscription is removed once; a redelivery keeps the key;
//   - a reauthorizationRequired or missed lifecycle notification without an
//     id: JoinKey(subscriptionId, lifecycleEvent,
//     subscriptionExpirationDateTime, "delivery", a random token), a key of
//     its own for every notification received. Graph sends these again on
//     purpose ("from once every few minutes for every subscription", each
//     time an access token nears expiry, each time notifications were
//     dropped:
//     https://learn.microsoft.com/en-us/graph/change-notifications-lifecycle-events),
//     with the same body, no id and no timestamp; a content key would make
//     every repeat a duplicate, so the app would reauthorize once and then
//     lose the subscription. Nothing in the request tells a repeat from
//     Graph's redelivery of the same notification (sent only when the 2xx
//     did not reach Graph within its timeout), so such a redelivery is a
//     second event: the actions these notifications ask for (reauthorize,
//     renew, resync) may be repeated
//     (https://learn.microsoft.com/en-us/graph/change-notifications-lifecycle-events#responding-to-reauthorizationrequired-notifications).
//     Any other lifecycle event is keyed as subscriptionRemoved.
//
// Type is changeType (or lifecycleEvent), Scope is tenantId, ObjectID is
// resourceData.id (or resource), Payload is the notification's own JSON.
func init() {
	Register(Provider{
		Type: TypeMSGraph,
		Name: "Microsoft Graph change notifications",
		Docs: []string{
			"https://learn.microsoft.com/en-us/graph/change-notifications-delivery-webhooks",
			"https://learn.microsoft.com/en-us/graph/api/resources/changenotification",
			"https://learn.microsoft.com/en-us/graph/change-notifications-lifecycle-events",
		},
		Build:          buildMSGraph,
		AcceptedStatus: http.StatusAccepted,
		Setup:          Setup{Secrets: "the `clientState` values given when the subscriptions were created (Graph API `POST /subscriptions`)"},
		Redelivery: Redelivery{
			Key:     "`subscriptionId` + notification `id`; without one, `subscriptionId` + `changeType` + `resource` + `resourceData.@odata.etag` (lifecycle: `lifecycleEvent` + `subscriptionExpirationDateTime`)",
			Retries: "up to 4 hours when the 202 did not reach Graph within 3 s; id and etag kept",
			Horizon: "forever",
			Batches: "yes: one record per item of `value`, each checked by its `clientState`",
			Resends: "`reauthorizationRequired` and `missed` without an id are sent again on purpose: each one received is its own record",
		},
	})
}

func buildMSGraph(c Core, _ any) (Verifier, error) {
	for i, s := range c.Secrets {
		if len(s) > 255 {
			return nil, &ConfigError{Type: TypeMSGraph, Field: "Secrets[" + strconv.Itoa(i) + "]", Reason: "Graph limits clientState to 255 characters"}
		}
	}
	return &msgraphVerifier{states: append([]string(nil), c.Secrets...), types: newTypeFilter(c.AllowedEventTypes)}, nil
}

// graphRepeatedLifecycle are the lifecycle events Microsoft Graph sends
// again on purpose, identical, while the condition lasts: without a
// notification id each one received is its own event.
var graphRepeatedLifecycle = map[string]bool{"reauthorizationRequired": true, "missed": true}

type msgraphVerifier struct {
	states []string
	types  typeFilter
}

func (*msgraphVerifier) Type() Type { return TypeMSGraph }

type graphNotification struct {
	ID                             string  `json:"id"`
	SubscriptionID                 string  `json:"subscriptionId"`
	SubscriptionExpirationDateTime string  `json:"subscriptionExpirationDateTime"`
	ClientState                    *string `json:"clientState"`
	ChangeType                     string  `json:"changeType"`
	LifecycleEvent                 string  `json:"lifecycleEvent"`
	Resource                       string  `json:"resource"`
	TenantID                       string  `json:"tenantId"`
	ResourceData                   struct {
		ID   string `json:"id"`
		ETag string `json:"@odata.etag"`
	} `json:"resourceData"`
}

func (v *msgraphVerifier) Verify(r Request) (Result, error) {
	q, err := url.ParseQuery(r.RawQuery)
	if err != nil {
		return Result{}, &Error{Code: CodeMalformedHeader, In: InQuery, Reason: "query string is not validly encoded"}
	}
	if q.Has(MSGraphValidationTokenParam) {
		return Result{Handshake: &Handshake{
			Status: http.StatusOK,
			Header: http.Header{
				"Content-Type":           {"text/plain; charset=utf-8"},
				"X-Content-Type-Options": {"nosniff"},
			},
			Body: []byte(q.Get(MSGraphValidationTokenParam)),
		}}, nil
	}

	var body struct {
		Value []jsontext.Value `json:"value"`
	}
	if e := unmarshalBody(r.Body, &body); e != nil {
		return Result{}, e
	}
	if len(body.Value) == 0 {
		return Result{}, bodyErr(CodeMalformedBody, "/value", "no notifications in value")
	}
	// An item that decoders read differently has a clientState that
	// cannot be read unambiguously: the delivery as a whole fails
	// verification (never acknowledged with an item that may be authentic
	// dropped).
	return splitSelfAuthBatch(body.Value, v.item)
}

func (v *msgraphVerifier) item(i int, raw jsontext.Value) (Event, error) {
	base := "/value/" + strconv.Itoa(i)
	var n graphNotification
	if e := unmarshalBody(raw, &n); e != nil {
		e.Field = base + e.Field
		return Event{}, e
	}
	if n.ClientState == nil {
		return Event{}, bodyErr(CodeMissingField, base+"/clientState", "notification has no clientState")
	}
	ok := false
	for _, s := range v.states {
		if equalSecret(*n.ClientState, s) {
			ok = true
		}
	}
	if !ok {
		return Event{}, bodyErr(CodeBadSignature, base+"/clientState", "clientState does not match any configured value")
	}
	if n.SubscriptionID == "" {
		return Event{}, authenticated(bodyErr(CodeMissingField, base+"/subscriptionId", "notification has no subscriptionId"))
	}
	typ, typField := n.ChangeType, base+"/changeType"
	if typ == "" {
		typ, typField = n.LifecycleEvent, base+"/lifecycleEvent"
	}
	var id string
	switch {
	case n.ID != "":
		id = JoinKey(n.SubscriptionID, n.ID)
	case graphRepeatedLifecycle[n.LifecycleEvent]:
		// Sent again on purpose with the same body: every notification
		// is an event (see the provider type's doc above).
		id = JoinKey(n.SubscriptionID, n.LifecycleEvent, n.SubscriptionExpirationDateTime, "delivery", rand.Text())
	case n.LifecycleEvent != "":
		id = JoinKey(n.SubscriptionID, n.LifecycleEvent, n.SubscriptionExpirationDateTime)
	case n.ChangeType != "" && n.Resource != "" && n.ResourceData.ETag != "":
		id = JoinKey(n.SubscriptionID, n.ChangeType, n.Resource, n.ResourceData.ETag)
	default:
		return Event{}, authenticated(bodyErr(CodeMissingField, base+"/id", "notification has neither an id nor changeType, resource and resourceData/@odata.etag to derive a stable key from"))
	}
	if err := v.types.check(typ, InBody, typField); err != nil {
		return Event{}, err
	}
	obj := n.ResourceData.ID
	if obj == "" {
		obj = n.Resource
	}
	return Event{ID: id, Type: typ, Scope: n.TenantID, ObjectID: obj, Payload: withoutClientState(raw)}, nil
}

// withoutClientState returns the notification JSON without its clientState:
// the value is the subscription's shared secret, proven above, and must not
// be stored or forwarded with the event.
func withoutClientState(raw []byte) []byte {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return raw
	}
	delete(m, "clientState")
	out, err := json.Marshal(m)
	if err != nil {
		return raw
	}
	return out
}
