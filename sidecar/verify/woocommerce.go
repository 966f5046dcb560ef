package verify

import (
	"crypto/sha256"
	"net/http"
	"regexp"
)

// WooCommerce webhook headers (WC_Webhook::deliver,
// https://github.com/woocommerce/woocommerce/blob/trunk/plugins/woocommerce/includes/class-wc-webhook.php).
const (
	WooCommerceSignatureHeader  = "X-WC-Webhook-Signature"
	WooCommerceSourceHeader     = "X-WC-Webhook-Source"
	WooCommerceTopicHeader      = "X-WC-Webhook-Topic"
	WooCommerceWebhookIDHeader  = "X-WC-Webhook-ID"
	WooCommerceDeliveryIDHeader = "X-WC-Webhook-Delivery-ID"
)

// TypeWooCommerce is WooCommerce's webhooks.
const TypeWooCommerce Type = "woocommerce"

// wooPing is the body of the ping WooCommerce sends when a webhook is
// created or activated (WC_Webhook::deliver_ping): "webhook_id=" and the
// webhook's numeric id.
var wooPing = regexp.MustCompile(`^webhook_id=[0-9]{1,20}$`)

// The "woocommerce" provider verifies WooCommerce webhooks, per
// https://woocommerce.github.io/woocommerce-rest-api-docs/#webhooks and
// WC_Webhook (class-wc-webhook.php, linked above):
//
//   - X-WC-Webhook-Signature is the base64 HMAC-SHA256 of the raw body
//     (the JSON payload), keyed with the webhook's secret as entered in
//     WooCommerce (WC_Webhook::generate_signature). A store may change the
//     hash with the woocommerce_webhook_hash_algorithm filter; only the
//     default SHA-256 is accepted;
//   - WooCommerce signs no timestamp, so there is no replay window;
//   - several secrets may be configured while a webhook's secret is
//     changed.
//
// Handshake: when a webhook is saved active, WooCommerce POSTs a ping whose
// body is "webhook_id=<id>", form-encoded and unsigned, and refuses to
// activate the webhook unless the answer is exactly 200
// (WC_Webhook::deliver_ping). Such a request, with no signature header and
// exactly that body, is answered 200 with an empty body and no event;
// anything else unsigned is refused. Anyone may send it: it gets a 200 and
// nothing more.
//
// Key rule: X-WC-Webhook-Delivery-ID is not an event id: WooCommerce makes
// it a hash of the webhook id and the current second
// (WC_Webhook::get_new_delivery_id), so two deliveries of one webhook in one
// second share it and the same change delivered again gets another. ID is
// therefore JoinKey(X-WC-Webhook-Source, X-WC-Webhook-Topic, the body's id,
// its date_modified_gmt): the store, the topic, the resource and the
// moment it last changed. A resource without date_modified_gmt (the body
// of a *.deleted topic is only {"id": …}) is keyed JoinKey(source, topic,
// id, "delivery", delivery id), and a body without id (custom action.*
// topics) JoinKey(source, topic, delivery id). Type is the topic
// ("order.updated"), Scope the source (the store's URL), ObjectID the
// resource id. The X-WC-Webhook-* headers are not signed.
//
// Redelivery: WooCommerce core does not retry. A delivery is sent once; a
// non-2xx answer adds to the webhook's failure count and after 5
// consecutive failures the webhook is disabled
// (WC_Webhook::failed_delivery; "disabled (delivery paused by failure)",
// REST API docs). The same change can still arrive twice (the hooks of one
// topic firing in two requests): the key above makes those one event.
type wooCommerceVerifier struct {
	keys  [][]byte
	types TypeFilter
}

func init() {
	Register(Provider{
		Type: TypeWooCommerce,
		Name: "WooCommerce",
		Docs: []string{
			"https://woocommerce.github.io/woocommerce-rest-api-docs/#webhooks",
			"https://github.com/woocommerce/woocommerce/blob/trunk/plugins/woocommerce/includes/class-wc-webhook.php",
			"https://woocommerce.com/document/webhooks/",
		},
		Build: func(core Core, _ any) (Verifier, error) {
			return &wooCommerceVerifier{keys: secretKeys(core.Secrets), types: core.Types()}, nil
		},
		CredentialHeaders: func(any) []string { return []string{WooCommerceSignatureHeader} },
		AcceptedStatus:    200,
		Setup:             Setup{Secrets: "the webhook's secret (WooCommerce → Settings → Advanced → Webhooks → the webhook → Secret)"},
		Redelivery: Redelivery{
			Key:     "`X-WC-Webhook-Source` + topic + body `id` + `date_modified_gmt` (the delivery id is a hash of webhook id and second, not an event id); without `date_modified_gmt` the delivery id stands in",
			Retries: "none: delivered once; 5 consecutive failures disable the webhook",
			Horizon: "forever (a resource's date_modified_gmt names one change, to the second)",
			Batches: "no",
			Resends: "the same change may be delivered twice under new delivery ids: the key above makes it one event",
		},
	})
}

func (*wooCommerceVerifier) Type() Type { return TypeWooCommerce }

// wooCommerceMAC is WooCommerce's signature: X-WC-Webhook-Signature holds
// the base64 HMAC-SHA256 of the body under the webhook's secret.
var wooCommerceMAC = macHeader{
	Name:      WooCommerceSignatureHeader,
	Hash:      sha256.New,
	Base64:    true,
	Malformed: "must be the base64 of a 32-byte HMAC-SHA256",
	Mismatch:  "signature does not match the payload under any configured secret",
}

func (v *wooCommerceVerifier) Verify(r Request) (Result, error) {
	if header(r.Header, WooCommerceSignatureHeader) == "" && wooPing.Match(r.Body) {
		return Result{Handshake: &Handshake{Status: http.StatusOK, Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, Body: []byte{}}}, nil
	}
	if e := wooCommerceMAC.check(r.Header, v.keys, r.Body); e != nil {
		return Result{}, e
	}
	source := header(r.Header, WooCommerceSourceHeader)
	if source == "" {
		return Result{}, authenticated(missingHeader(WooCommerceSourceHeader))
	}
	topic := header(r.Header, WooCommerceTopicHeader)
	if topic == "" {
		return Result{}, authenticated(missingHeader(WooCommerceTopicHeader))
	}
	if err := v.types.Check(topic, InHeader, WooCommerceTopicHeader); err != nil {
		return Result{}, err
	}
	var res struct {
		ID       flexString `json:"id"`
		Modified flexString `json:"date_modified_gmt"`
	}
	if e := unmarshalBody(r.Body, &res); e != nil {
		return Result{}, authenticated(e)
	}
	id := string(res.ID)
	var key string
	switch {
	case id != "" && res.Modified != "":
		key = JoinKey(source, topic, id, string(res.Modified))
	default:
		delivery := header(r.Header, WooCommerceDeliveryIDHeader)
		if delivery == "" {
			return Result{}, authenticated(headerErr(CodeMissingHeader, WooCommerceDeliveryIDHeader, "required when the body has no id and date_modified_gmt"))
		}
		if id != "" {
			key = JoinKey(source, topic, id, "delivery", delivery)
		} else {
			key = JoinKey(source, topic, delivery)
		}
	}
	return Result{Events: []Event{{ID: key, Type: topic, Scope: source, ObjectID: id}}}, nil
}
