package verify_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Adyen's published example
// (https://docs.adyen.com/development-resources/webhooks/secure-webhooks/verify-hmac-signatures):
// HMAC key 44782DEF…A056 and the AUTHORISATION item of pspReference
// 7914073381342284 signed coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo0=.
const (
	adyenDocKey = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
	adyenDocSig = "coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo0="
)

var adyenDocItem = verifytest.AdyenItem{PSPReference: "7914073381342284", MerchantAccountCode: "TestMerchant", MerchantReference: "TestPayment-1407325143704", Value: 1130, Currency: "EUR", EventCode: "AUTHORISATION", Success: "true"}

func TestAdyenPublishedVector(t *testing.T) {
	t.Parallel()
	if got := verifytest.Adyen(adyenDocKey, adyenDocItem); got != adyenDocSig {
		t.Fatalf("fixture signer: %s", got)
	}
	body := `{"live":"false","notificationItems":[{"NotificationRequestItem":{"additionalData":{"hmacSignature":"` + adyenDocSig + `"},"amount":{"currency":"EUR","value":1130},"eventCode":"AUTHORISATION","eventDate":"2019-05-06T17:15:34.121+02:00","merchantAccountCode":"TestMerchant","merchantReference":"TestPayment-1407325143704","pspReference":"7914073381342284","success":"true"}}]}`
	v := mustBuild(t, verify.TypeAdyen, verify.Core{Secrets: []string{adyenDocKey}}, nil)
	evs := verifyEvents(t, v, verifytest.Delivery{Body: []byte(body)})
	if len(evs) != 1 || evs[0].ID != verify.JoinKey("7914073381342284", "AUTHORISATION", "true") || evs[0].Type != "AUTHORISATION" || evs[0].Scope != "TestMerchant" || evs[0].ObjectID != "7914073381342284" {
		t.Fatalf("got %+v", evs)
	}
	if !strings.HasPrefix(string(evs[0].Payload), `{"additionalData"`) {
		t.Fatalf("payload %s", evs[0].Payload)
	}
	// Lower-case hex is the same key.
	verifyEvents(t, mustBuild(t, verify.TypeAdyen, verify.Core{Secrets: []string{strings.ToLower(adyenDocKey)}}, nil), verifytest.Delivery{Body: []byte(body)})
}

func TestAdyen(t *testing.T) {
	t.Parallel()
	v := mustBuild(t, verify.TypeAdyen, verify.Core{Secrets: []string{verifytest.AdyenKey}}, nil)
	auth := verifytest.AdyenAuthorisation

	t.Run("fixture", func(t *testing.T) { replayFixture(t, "adyen") })

	t.Run("batch split, items verified alone", func(t *testing.T) {
		good := verifytest.AdyenDelivery(verifytest.AdyenKey, auth("1001", "true"), auth("1002", "true"), auth("1003", "false"))
		evs := verifyEvents(t, v, good)
		if len(evs) != 3 || evs[0].ID == evs[1].ID {
			t.Fatalf("got %+v", evs)
		}
		// One item signed with another key, one changed after signing.
		other := verifytest.AdyenDelivery("00112233445566778899AABBCCDDEEFF00112233445566778899AABBCCDDEEFF", auth("2002", "true"))
		otherItem := string(other.Body[strings.Index(string(other.Body), "[")+1 : len(other.Body)-2])
		body := strings.Replace(string(good.Body), `[`, `[`+otherItem+`,`, 1)
		body = strings.Replace(body, `"merchantReference":"order-1002"`, `"merchantReference":"order-9999"`, 1)
		res, err := v.Verify(deliveryRequest(verifytest.Delivery{Body: []byte(body)}))
		if err != nil || len(res.Events) != 2 || len(res.Rejected) != 2 {
			t.Fatalf("got %+v %v", res, err)
		}
		for j, want := range []int{0, 2} {
			var e *verify.Error
			if !errors.As(res.Rejected[j].Err, &e) || res.Rejected[j].Index != want || e.Code != verify.CodeBadSignature ||
				e.Field != "/notificationItems/"+string(rune('0'+want))+"/NotificationRequestItem/additionalData/hmacSignature" || e.Authenticated {
				t.Fatalf("rejected %d: %+v", j, res.Rejected[j])
			}
		}
		// Every item failing is an error.
		requireRefused(t, v, other, verify.CodeBadSignature, verify.InBody, "/notificationItems/0/NotificationRequestItem/additionalData/hmacSignature")
	})

	t.Run("key rule", func(t *testing.T) {
		id := func(it verifytest.AdyenItem) string {
			return verifyEvents(t, v, verifytest.AdyenDelivery(verifytest.AdyenKey, it))[0].ID
		}
		failed, succeeded, again := id(auth("3001", "false")), id(auth("3001", "true")), id(auth("3001", "true"))
		refund := id(verifytest.AdyenItem{PSPReference: "3001", MerchantAccountCode: "TestMerchant", EventCode: "REFUND", Success: "true", Currency: "EUR", Value: 1130})
		if failed == succeeded || succeeded != again || refund == succeeded {
			t.Fatalf("ids %q %q %q %q", failed, succeeded, again, refund)
		}
	})

	t.Run("rotation", func(t *testing.T) {
		both := mustBuild(t, verify.TypeAdyen, verify.Core{Secrets: []string{adyenDocKey, verifytest.AdyenKey}}, nil)
		verifyEvents(t, both, verifytest.AdyenDelivery(verifytest.AdyenKey, auth("4001", "true")))
		verifyEvents(t, both, verifytest.AdyenDelivery(adyenDocKey, auth("4001", "true")))
	})

	t.Run("body", func(t *testing.T) {
		requireRefused(t, v, verifytest.Delivery{Body: []byte(`{"live":"false","notificationItems":[]}`)}, verify.CodeMalformedBody, verify.InBody, "/notificationItems")
		requireRefused(t, v, verifytest.Delivery{Body: []byte(`{"live":"false","notificationItems":[{}]}`)}, verify.CodeMissingField, verify.InBody, "/notificationItems/0/NotificationRequestItem")
		unsigned := strings.Replace(string(verifytest.AdyenDelivery(verifytest.AdyenKey, auth("5001", "true")).Body), `"hmacSignature"`, `"hmacSignatureX"`, 1)
		requireRefused(t, v, verifytest.Delivery{Body: []byte(unsigned)}, verify.CodeMissingField, verify.InBody, "/notificationItems/0/NotificationRequestItem/additionalData/hmacSignature")
		noPSP := verifytest.AdyenItem{EventCode: "REPORT_AVAILABLE", Success: "true", MerchantAccountCode: "TestMerchant"}
		e := requireRefused(t, v, verifytest.AdyenDelivery(verifytest.AdyenKey, noPSP), verify.CodeMissingField, verify.InBody, "/notificationItems/0/NotificationRequestItem/pspReference")
		if !e.Authenticated {
			t.Error("not authenticated")
		}
		only := mustBuild(t, verify.TypeAdyen, verify.Core{Secrets: []string{verifytest.AdyenKey}, AllowedEventTypes: []string{"CAPTURE"}}, nil)
		requireRefused(t, only, verifytest.AdyenDelivery(verifytest.AdyenKey, auth("6001", "true")), verify.CodeEventTypeNotAllowed, verify.InBody, "/notificationItems/0/NotificationRequestItem/eventCode")
	})

	t.Run("config", func(t *testing.T) {
		_, err := tryBuild(t, verify.TypeAdyen, verify.Core{}, nil)
		requireConfigField(t, err, "Secrets")
		_, err = tryBuild(t, verify.TypeAdyen, verify.Core{Secrets: []string{verifytest.AdyenKey, "not-hex"}}, nil)
		requireConfigField(t, err, "Secrets[1]")
	})
}
