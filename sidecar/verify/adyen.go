package verify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// TypeAdyen is Adyen's standard (payments) webhooks.
const TypeAdyen Type = "adyen"

// The "adyen" provider verifies Adyen's standard webhooks (JSON), per
// https://docs.adyen.com/development-resources/webhooks/secure-webhooks/verify-hmac-signatures:
//
//   - the body is {"live","notificationItems":[{"NotificationRequestItem":
//     {…,"additionalData":{"hmacSignature"}}}]}; every item carries its own
//     signature and is verified on its own;
//   - hmacSignature is the base64 HMAC-SHA256, keyed with the webhook's
//     HMAC key decoded from hex (a source's secrets: the hex keys as the
//     Customer Area shows them; several while a key is replaced), of
//     pspReference:originalReference:merchantAccountCode:
//     merchantReference:amount.value:amount.currency:eventCode:success,
//     the values as sent (an absent one is empty) joined with ':' and not
//     escaped;
//   - Adyen signs no timestamp: a replayed item is caught by its key in the
//     claim ledger.
//
// Each item is one Event with its NotificationRequestItem as Payload; an
// item whose signature fails, or that lacks its key fields, is rejected
// alone (Result.Rejected) while the others are taken. Key rule:
// JoinKey(pspReference, eventCode, success): pspReference names the payment
// or modification, eventCode what happened to it, and success tells an
// AUTHORISATION that failed from a later one that succeeded on the same
// reference. Adyen re-sends a webhook it could not deliver from its retry
// queue at growing intervals, the same item each time; a duplicate must
// still be acknowledged 2xx (claimd answers duplicates with the accepted
// status) or Adyen keeps it queued and flags the endpoint
// (https://docs.adyen.com/development-resources/webhooks/handle-webhook-events).
// Any 2xx accepts (the legacy "[accepted]" body is no longer required).
// Type is eventCode, Scope merchantAccountCode, ObjectID
// originalReference (the payment a modification is about) or pspReference.
type adyenVerifier struct {
	keys  [][]byte
	types TypeFilter
}

func init() {
	Register(Provider{
		Type: TypeAdyen,
		Name: "Adyen standard webhooks",
		Docs: []string{
			"https://docs.adyen.com/development-resources/webhooks/secure-webhooks/verify-hmac-signatures",
			"https://docs.adyen.com/development-resources/webhooks/handle-webhook-events",
			"https://docs.adyen.com/development-resources/webhooks/webhook-types",
		},
		Build: buildAdyen,
		Setup: Setup{Secrets: "the HMAC keys (hex) of the webhook, as the Customer Area shows them (Developers → Webhooks → the webhook → HMAC key)"},
		Redelivery: Redelivery{
			Key:     "each item's `pspReference` + `eventCode` + `success`",
			Retries: "from Adyen's retry queue at growing intervals until accepted with a 2xx (duplicates too)",
			Horizon: "forever (pspReference is unique per payment or modification)",
			Batches: "yes: `notificationItems`, one record per item, each verified by its own hmacSignature",
			Resends: "no",
		},
	})
}

func buildAdyen(core Core, _ any) (Verifier, error) {
	v := &adyenVerifier{types: core.Types()}
	for i, s := range core.Secrets {
		k, err := hex.DecodeString(s)
		if err != nil || len(k) == 0 {
			return nil, &ConfigError{Type: TypeAdyen, Field: "Secrets[" + strconv.Itoa(i) + "]", Reason: "must be the HMAC key in hex, as the Customer Area shows it"}
		}
		v.keys = append(v.keys, k)
	}
	return v, nil
}

func (*adyenVerifier) Type() Type { return TypeAdyen }

type adyenItem struct {
	PSPReference        string `json:"pspReference"`
	OriginalReference   string `json:"originalReference"`
	MerchantAccountCode string `json:"merchantAccountCode"`
	MerchantReference   string `json:"merchantReference"`
	Amount              struct {
		Value    flexString `json:"value"`
		Currency string     `json:"currency"`
	} `json:"amount"`
	EventCode      string `json:"eventCode"`
	Success        string `json:"success"`
	AdditionalData struct {
		HMACSignature string `json:"hmacSignature"`
	} `json:"additionalData"`
}

// adyenSigningString is the content Adyen signs for a standard webhook item.
func adyenSigningString(it *adyenItem) string {
	return strings.Join([]string{it.PSPReference, it.OriginalReference, it.MerchantAccountCode, it.MerchantReference,
		string(it.Amount.Value), it.Amount.Currency, it.EventCode, it.Success}, ":")
}

// adyenNotification is one entry of notificationItems.
type adyenNotification struct {
	Item jsontext.Value `json:"NotificationRequestItem"`
}

func (v *adyenVerifier) Verify(r Request) (Result, error) {
	var body struct {
		NotificationItems []adyenNotification `json:"notificationItems"`
	}
	if e := unmarshalBody(r.Body, &body); e != nil {
		return Result{}, e
	}
	if len(body.NotificationItems) == 0 {
		return Result{}, bodyErr(CodeMalformedBody, "/notificationItems", "no notification items")
	}
	return splitSelfAuthBatch(body.NotificationItems, func(i int, n adyenNotification) (Event, error) { return v.item(i, n.Item) })
}

func (v *adyenVerifier) item(i int, raw jsontext.Value) (Event, error) {
	base := "/notificationItems/" + strconv.Itoa(i) + "/NotificationRequestItem"
	if len(raw) == 0 {
		return Event{}, bodyErr(CodeMissingField, base, "the item has no NotificationRequestItem")
	}
	var it adyenItem
	if e := unmarshalBody(raw, &it); e != nil {
		e.Field = base + e.Field
		return Event{}, e
	}
	sigField := base + "/additionalData/hmacSignature"
	if it.AdditionalData.HMACSignature == "" {
		return Event{}, bodyErr(CodeMissingField, sigField, "the item is not signed")
	}
	sig, err := base64.StdEncoding.DecodeString(it.AdditionalData.HMACSignature)
	if err != nil || len(sig) != sha256.Size {
		return Event{}, bodyErr(CodeMalformedBody, sigField, "is not a base64 HMAC-SHA256")
	}
	content := []byte(adyenSigningString(&it))
	ok := false
	for _, k := range v.keys {
		if hmac.Equal(macOf(sha256.New, k, content), sig) {
			ok = true
		}
	}
	if !ok {
		return Event{}, bodyErr(CodeBadSignature, sigField, "signature does not match the item under any configured HMAC key")
	}
	switch {
	case it.PSPReference == "":
		return Event{}, authenticated(bodyErr(CodeMissingField, base+"/pspReference", "the item has no pspReference"))
	case it.EventCode == "":
		return Event{}, authenticated(bodyErr(CodeMissingField, base+"/eventCode", "the item has no eventCode"))
	}
	if err := v.types.Check(it.EventCode, InBody, base+"/eventCode"); err != nil {
		return Event{}, err
	}
	obj := it.OriginalReference
	if obj == "" {
		obj = it.PSPReference
	}
	return Event{
		ID:       JoinKey(it.PSPReference, it.EventCode, it.Success),
		Type:     it.EventCode,
		Scope:    it.MerchantAccountCode,
		ObjectID: obj,
		Payload:  append([]byte(nil), raw...),
	}, nil
}
