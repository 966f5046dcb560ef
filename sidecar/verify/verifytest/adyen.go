package verifytest

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// AdyenKey is the "adyen" fixture's HMAC key, hex as Adyen's Customer Area
// shows it (generated per process).
var AdyenKey = func() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return strings.ToUpper(hex.EncodeToString(b))
}()

// AdyenItem is what Adyen signs of a NotificationRequestItem.
type AdyenItem struct {
	PSPReference, OriginalReference, MerchantAccountCode, MerchantReference string
	Value                                                                   int64
	Currency, EventCode, Success                                            string
}

// Adyen returns the item's hmacSignature: the base64 HMAC-SHA256, keyed
// with hexKey decoded, of the eight fields joined with ':'
// (https://docs.adyen.com/development-resources/webhooks/secure-webhooks/verify-hmac-signatures).
func Adyen(hexKey string, it AdyenItem) string {
	k, err := hex.DecodeString(hexKey)
	if err != nil {
		panic(err)
	}
	m := hmac.New(sha256.New, k)
	m.Write([]byte(strings.Join([]string{it.PSPReference, it.OriginalReference, it.MerchantAccountCode, it.MerchantReference,
		strconv.FormatInt(it.Value, 10), it.Currency, it.EventCode, it.Success}, ":")))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// AdyenItemJSON returns the NotificationRequestItem object of it with
// signature sig.
func AdyenItemJSON(it AdyenItem, sig string) string {
	orig := ""
	if it.OriginalReference != "" {
		orig = fmt.Sprintf(`"originalReference":%q,`, it.OriginalReference)
	}
	return fmt.Sprintf(`{"NotificationRequestItem":{"additionalData":{"hmacSignature":%q,"recurring.recurringDetailReference":"8315535421567231"},"amount":{"currency":%q,"value":%d},"eventCode":%q,"eventDate":"2026-03-01T12:00:00+01:00","merchantAccountCode":%q,"merchantReference":%q,%s"paymentMethod":"visa","pspReference":%q,"reason":"033899:1111:03/2030","success":%q}}`,
		sig, it.Currency, it.Value, it.EventCode, it.MerchantAccountCode, it.MerchantReference, orig, it.PSPReference, it.Success)
}

// AdyenDelivery returns a standard webhook carrying the items, each signed
// with hexKey.
func AdyenDelivery(hexKey string, items ...AdyenItem) Delivery {
	parts := make([]string, len(items))
	for i, it := range items {
		parts[i] = AdyenItemJSON(it, Adyen(hexKey, it))
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Authorization", "Basic d2ViaG9vazpwYXNzd29yZA==")
	return Delivery{Header: h, Body: []byte(`{"live":"false","notificationItems":[` + strings.Join(parts, ",") + `]}`)}
}

// AdyenAuthorisation returns an AUTHORISATION item for psp.
func AdyenAuthorisation(psp, success string) AdyenItem {
	return AdyenItem{PSPReference: psp, MerchantAccountCode: "TestMerchant", MerchantReference: "order-" + psp, Value: 1130, Currency: "EUR", EventCode: "AUTHORISATION", Success: success}
}

func init() {
	RegisterFixture(Fixture{
		Type:    "adyen",
		Secrets: []string{AdyenKey},
		Cases: func(time.Time) Cases {
			tampered := AdyenDelivery(AdyenKey, AdyenAuthorisation("7914073381340009", "true"))
			tampered.Body = []byte(strings.Replace(string(tampered.Body), `"value":1130`, `"value":11300`, 1))
			return Cases{
				Distinct: []Delivery{
					AdyenDelivery(AdyenKey, AdyenAuthorisation("7914073381340001", "true")),
					// The capture of that payment: same moment, other event.
					AdyenDelivery(AdyenKey, AdyenItem{PSPReference: "8825408195409505", OriginalReference: "7914073381340001", MerchantAccountCode: "TestMerchant", MerchantReference: "order-7914073381340001", Value: 1130, Currency: "EUR", EventCode: "CAPTURE", Success: "true"}),
				},
				// Adyen's retry queue sends the same item again.
				Redelivery: []Delivery{
					AdyenDelivery(AdyenKey, AdyenAuthorisation("7914073381340002", "true")),
					AdyenDelivery(AdyenKey, AdyenAuthorisation("7914073381340002", "true")),
				},
				Tampered: tampered,
			}
		},
	})
}
