package verify_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

func mollieClassic(t *testing.T, opts map[string]any, tokens ...string) verify.Verifier {
	t.Helper()
	return payMust(t, verify.TypeMollie, verify.Core{Secrets: tokens}, decodeOptions(t, verify.TypeMollie, opts))
}

func mollieNextGen(t *testing.T, secrets ...string) verify.Verifier {
	t.Helper()
	return payMust(t, verify.TypeMollie, verify.Core{Secrets: secrets}, decodeOptions(t, verify.TypeMollie, map[string]any{"webhooks": "next-gen"}))
}

// TestMollieClassicNudge: Mollie's documented call
// (https://docs.mollie.com/reference/webhooks: POST, form body
// id=tr_d0b0E3EA3v) to a webhookUrl carrying the source's token is one
// event about tr_d0b0E3EA3v; the same nudge again (a retry, or the next
// status change, which Mollie announces with the same body) is a new
// event, never a duplicate: the workflow fetches the payment and claims on
// id + status.
func TestMollieClassicNudge(t *testing.T) {
	v := mollieClassic(t, nil, verifytest.MollieToken)
	d := verifytest.MollieNudge(verifytest.MollieToken, "tr_d0b0E3EA3v")
	if string(d.Body) != "id=tr_d0b0E3EA3v" {
		t.Fatalf("body %q", d.Body)
	}
	a := oneDeliveryEvent(t, v, d)
	b := oneDeliveryEvent(t, v, d)
	if a.ObjectID != "tr_d0b0E3EA3v" || a.Type != "" || a.ID == b.ID || a.ID == "tr_d0b0E3EA3v" ||
		!strings.HasPrefix(a.ID, "13:tr_d0b0E3EA3v|5:nudge|") {
		t.Fatalf("events %+v %+v", a, b)
	}
}

func TestMollieClassicToken(t *testing.T) {
	v := mollieClassic(t, nil, "new-token", verifytest.MollieToken)
	// Rotation: either token verifies.
	oneDeliveryEvent(t, v, verifytest.MollieNudge("new-token", "tr_1"))
	oneDeliveryEvent(t, v, verifytest.MollieNudge(verifytest.MollieToken, "tr_1"))

	d := verifytest.MollieNudge("wrong-token", "tr_1")
	_, err := v.Verify(deliveryRequest(d))
	if ve := requireCode(t, err, verify.CodeBadSignature, "token"); ve.In != verify.InQuery || ve.Authenticated {
		t.Fatalf("%+v", ve)
	}
	d.RawQuery = ""
	_, err = v.Verify(deliveryRequest(d))
	requireCode(t, err, verify.CodeMissingHeader, "token")
	d.RawQuery = "token=a&token=b"
	_, err = v.Verify(deliveryRequest(d))
	requireCode(t, err, verify.CodeMalformedHeader, "token")
	d.RawQuery = "token=%zz"
	_, err = v.Verify(deliveryRequest(d))
	requireCode(t, err, verify.CodeMalformedHeader, "")

	// A parameter of the user's choosing.
	named := mollieClassic(t, map[string]any{"token_parameter": "k"}, verifytest.MollieToken)
	d = verifytest.MollieNudge(verifytest.MollieToken, "tr_1")
	d.RawQuery = strings.Replace(d.RawQuery, "token=", "k=", 1)
	oneDeliveryEvent(t, named, d)
}

func TestMollieClassicBody(t *testing.T) {
	v := mollieClassic(t, nil, verifytest.MollieToken)
	for body, code := range map[string]verify.Code{
		"":                              verify.CodeMissingField,
		"id=":                           verify.CodeMissingField,
		"id=tr_1&id=tr_2":               verify.CodeMalformedBody,
		"id=tr_1&Id=tr_2":               verify.CodeMalformedBody,
		"id=not a mollie id":            verify.CodeMalformedBody,
		`id={"x":1}`:                    verify.CodeMalformedBody,
		"id=%zz":                        verify.CodeMalformedBody,
		"id=" + strings.Repeat("a", 80): verify.CodeMalformedBody,
	} {
		d := verifytest.MollieNudge(verifytest.MollieToken, "tr_1")
		d.Body = []byte(body)
		_, err := v.Verify(deliveryRequest(d))
		if ve := requireCode(t, err, code, ""); !ve.Authenticated {
			t.Fatalf("%q: want authenticated", body)
		}
	}
	for _, id := range []string{"ord_kEn1PlbGa", "sub_rVKGtNd6s3", "re_4qqhO89gsT"} {
		if ev := oneDeliveryEvent(t, v, verifytest.MollieNudge(verifytest.MollieToken, id)); ev.ObjectID != id {
			t.Fatalf("%s: %+v", id, ev)
		}
	}
}

func TestMollieConfig(t *testing.T) {
	_, err := payBuild(verify.TypeMollie, verify.Core{Secrets: []string{"t"}, AllowedEventTypes: []string{"paid"}}, decodeOptions(t, verify.TypeMollie, nil))
	requireConfigField(t, err, "AllowedEventTypes")
	_, err = payBuild(verify.TypeMollie, verify.Core{Secrets: []string{"t"}}, decodeOptions(t, verify.TypeMollie, map[string]any{"webhooks": "v3"}))
	requireConfigField(t, err, "Webhooks")
	_, err = payBuild(verify.TypeMollie, verify.Core{Secrets: []string{"t"}}, decodeOptions(t, verify.TypeMollie, map[string]any{"token_parameter": "a b"}))
	requireConfigField(t, err, "TokenParameter")
	_, err = payBuild(verify.TypeMollie, verify.Core{Secrets: []string{"t"}}, decodeOptions(t, verify.TypeMollie, map[string]any{"webhooks": "next-gen", "token_parameter": "k"}))
	requireConfigField(t, err, "TokenParameter")
	_, err = payBuild(verify.TypeMollie, verify.Core{}, nil)
	requireConfigField(t, err, "Secrets")
	p, _ := verify.Lookup(verify.TypeMollie)
	if hs := p.CredentialHeaders(decodeOptions(t, verify.TypeMollie, map[string]any{"webhooks": "next-gen"})); len(hs) != 1 || hs[0] != verify.MollieSignatureHeader {
		t.Fatalf("credential headers %v", hs)
	}
}

// mollieVectorBody and mollieVectorSig are a next-gen vector computed from
// the documented algorithm
// (https://docs.mollie.com/reference/webhooks-best-practices: hex
// HMAC-SHA256 of the raw body keyed with the signing secret) by an
// independent computation, `printf '%s' "$body" | openssl dgst -sha256
// -hmac mollie-vector-secret`; Mollie publishes no example signature.
const (
	mollieVectorBody = `{"resource":"event","id":"event_GvJ8WHrp5isUdRub9CJyH","type":"payment-link.paid","entityId":"pl_qng5gbbv8NAZ5gpM5","createdAt":"2024-12-19T13:59:56.0Z"}`
	mollieVectorSig  = "ab31687e510aa0158fa8396c03a1cbc4326a943bba72c39dd002c3b193cb4d06"
)

func TestMollieNextGenVector(t *testing.T) {
	v := mollieNextGen(t, "mollie-vector-secret")
	for _, sig := range []string{"sha256=" + mollieVectorSig, mollieVectorSig} {
		h := http.Header{}
		h.Set("X-Mollie-Signature", sig)
		ev := oneDeliveryEvent(t, v, verifytest.Delivery{Header: h, Body: []byte(mollieVectorBody)})
		if ev.ID != "event_GvJ8WHrp5isUdRub9CJyH" || ev.Type != "payment-link.paid" || ev.ObjectID != "pl_qng5gbbv8NAZ5gpM5" {
			t.Fatalf("event %+v", ev)
		}
	}
	if got := verifytest.Mollie("mollie-vector-secret", []byte(mollieVectorBody)); got != "sha256="+mollieVectorSig {
		t.Fatalf("verifytest.Mollie = %s", got)
	}
}

func TestMollieNextGenRefusals(t *testing.T) {
	v := mollieNextGen(t, "mollie-vector-secret")
	body := []byte(mollieVectorBody)

	_, err := v.Verify(verify.Request{Header: http.Header{}, Body: body})
	requireCode(t, err, verify.CodeMissingHeader, verify.MollieSignatureHeader)

	// A classic nudge sent to a next-gen source is unsigned: refused.
	_, err = v.Verify(deliveryRequest(verifytest.MollieNudge("x", "tr_1")))
	requireCode(t, err, verify.CodeMissingHeader, verify.MollieSignatureHeader)

	h := http.Header{}
	h.Set("X-Mollie-Signature", "sha1="+mollieVectorSig)
	_, err = v.Verify(verify.Request{Header: h, Body: body})
	requireCode(t, err, verify.CodeMalformedHeader, verify.MollieSignatureHeader)

	_, err = mollieNextGen(t, "other").Verify(deliveryRequest(verifytest.MollieNextGenDelivery("mollie-vector-secret", body)))
	requireCode(t, err, verify.CodeBadSignature, verify.MollieSignatureHeader)

	_, err = v.Verify(deliveryRequest(verifytest.MollieNextGenDelivery("mollie-vector-secret", []byte(`{"type":"payment-link.paid"}`))))
	requireCode(t, err, verify.CodeMissingField, "/id")

	only := payMust(t, verify.TypeMollie, verify.Core{Secrets: []string{"mollie-vector-secret"}, AllowedEventTypes: []string{"sales-invoice.*"}},
		decodeOptions(t, verify.TypeMollie, map[string]any{"webhooks": "next-gen"}))
	_, err = only.Verify(deliveryRequest(verifytest.MollieNextGenDelivery("mollie-vector-secret", body)))
	requireCode(t, err, verify.CodeEventTypeNotAllowed, "/type")

	// Rotation.
	both := mollieNextGen(t, "new", "mollie-vector-secret")
	oneDeliveryEvent(t, both, verifytest.MollieNextGenDelivery("new", body))
	oneDeliveryEvent(t, both, verifytest.MollieNextGenDelivery("mollie-vector-secret", body))
}

// TestMollieNextGenKey: two events about one invoice are two ids; the
// event delivered again is one.
func TestMollieNextGenKey(t *testing.T) {
	replayFixture(t, string(verify.TypeMollie))
}
