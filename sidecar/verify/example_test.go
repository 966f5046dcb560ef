package verify_test

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// A source configured for Stripe, verifying one delivery and then a
// tampered copy of it.
func Example() {
	now := time.Unix(1700000005, 0)
	v, err := verify.New(verify.TypeStripe, verify.Core{
		Secrets: []string{"whsec_test_secret"},
		Now:     func() time.Time { return now },
	}, nil)
	if err != nil {
		panic(err)
	}
	body := []byte(`{"id":"evt_1","object":"event","type":"customer.created","data":{"object":{"id":"cus_1"}}}`)
	h := http.Header{}
	h.Set("Stripe-Signature", verifytest.StripeHeader(1700000000, body, "whsec_test_secret"))

	res, err := v.Verify(verify.Request{Header: h, Body: body})
	if err != nil {
		panic(err)
	}
	ev := res.Events[0]
	fmt.Println(ev.ID, ev.Type, ev.ObjectID)

	_, err = v.Verify(verify.Request{Header: h, Body: append(body, '\n')})
	fmt.Println(errors.Is(err, verify.ErrBadSignature))
	fmt.Println(err)
	// Output:
	// evt_1 customer.created cus_1
	// true
	// verify: bad_signature: header "Stripe-Signature": no v1 signature matches the payload under any configured secret
}

// Microsoft Graph validates a notification URL with a token to echo.
func ExampleResult_IsHandshake() {
	v, err := verify.New(verify.TypeMSGraph, verify.Core{Secrets: []string{"SecretClientState"}}, nil)
	if err != nil {
		panic(err)
	}
	res, err := v.Verify(verify.Request{RawQuery: "validationToken=Validation%3a+Testing+client+application+reachability"})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.IsHandshake(), res.Handshake.Status, res.Handshake.Header.Get("Content-Type"))
	fmt.Println(string(res.Handshake.Body))
	// Output:
	// true 200 text/plain; charset=utf-8
	// Validation: Testing client application reachability
}

func ExampleJoinKey() {
	fmt.Println(verify.JoinKey("abc", "de"))
	fmt.Println(verify.JoinKey("a:b", "c"), verify.JoinKey("a", "b:c"))
	// Output:
	// 3:abc|2:de
	// 3:a:b|1:c 1:a|3:b:c
}
