package verify_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// The header layouts the generic "hmac" provider reads. Every signature
// below was computed independently with openssl from the layout's
// construction (HMAC over the signed content with the secret), e.g.
//
//	printf '%s' '1767225600.{"id":"evt_gen_1",…}' | openssl dgst -sha256 -hmac generic-hmac-secret-0001
//	printf '%s' '{"id":"evt_gen_1",…}' | openssl dgst -sha256 -hmac generic-hmac-secret-0001 -binary | base64
//
// and checked again with Python's hmac module; none comes from the code
// under test.
const (
	genSecret = "generic-hmac-secret-0001"
	genOld    = "generic-hmac-secret-0000"
	genBody   = `{"id":"evt_gen_1","type":"order.paid","amount":100}`
	genT      = int64(1767225600) // 2026-01-01T00:00:00Z

	// hex HMAC-SHA256 of "1767225600." + body
	genHexSec = "848104021bc70743d25b710445e471ea1e1f4fd345bc57f3f2cea04c606487e8"
	// the same under genOld
	genHexSecOld = "e1a3d1dbd9398c547464a8beaeaf2860698e1409757ed3df8064fdc0a0c4d90e"
	// hex HMAC-SHA256 of "1767225600000." + body
	genHexMs = "26aff69fa2d6bd491f1eef0bd4896e47d0e03126959da808af68781b23cb331c"
	// hex HMAC-SHA256 of "1767225600:" + body (Paddle-style content)
	genHexColon = "468e7d55c61434c5259df9309bd50ae8796081b1250e1af1bdc39bdee499fbc6"
	// hex HMAC-SHA256 of the body, under genSecret and genOld
	genHexBody    = "6ae354785b52afbcbfde67f4bae1cb85a9256e1669e02c8cf58d00f163adbe6f"
	genHexBodyOld = "0fcea70eb8dee3740d98fd66dad36f7c9140a1e8baeadca988a1e04c7ffec8ae"
	// base64 HMAC-SHA256 of "1767225600." + body, and of the body
	genB64Sec  = "hIEEAhvHB0PSW3EEReRx6h4fT9NFvFfz8s6gTGBkh+g="
	genB64Body = "auNUeFtSr7y/3mf0uuHLhaklbhZp4CyM9Y0A8WOtvm8="
	// base64 HMAC-SHA512 of "1767225600000." + body
	genB64Sha512Ms = "m4/ieJB7gJ7D2ARxp8qYfmfbyNra39Na8QYGS+DHn7j8cDlohF5TzzKfo2icVGhIKXEun4cLIGSQdtEEmDEoBQ=="
)

var genKey = verify.KeyRule{IDPointers: []string{"/id"}, TypePointer: "/type"}

func genBuild(t *testing.T, o verify.HMACOptions, secrets ...string) verify.Verifier {
	t.Helper()
	if len(secrets) == 0 {
		secrets = []string{genSecret}
	}
	if o.Key.IDHeader == "" && len(o.Key.IDPointers) == 0 {
		o.Key = genKey
	}
	v, err := verify.New(verify.TypeHMAC, verify.Core{Secrets: secrets, Now: fixedClock(time.Unix(genT, 0).Add(30 * time.Second))}, &o)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	return v
}

func genDelivery(kv ...string) verifytest.Delivery {
	h := http.Header{"Content-Type": {"application/json"}}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return verifytest.Delivery{Header: h, Body: []byte(genBody)}
}

func genTampered(d verifytest.Delivery) verifytest.Delivery {
	d.Body = []byte(strings.Replace(genBody, `"amount":100`, `"amount":900`, 1))
	return d
}

func TestHMACLayouts(t *testing.T) {
	t.Parallel()
	elements := verify.SignatureSpec{Header: "X-Signature", Layout: verify.LayoutElements}
	for _, c := range []struct {
		name   string
		opts   verify.HMACOptions
		header []string
		at     time.Time // the signed timestamp; zero when none is signed
	}{
		{"t=seconds,v1=hex (Stripe-style)", verify.HMACOptions{Signature: elements},
			[]string{"X-Signature", "t=1767225600,v1=" + genHexSec}, time.Unix(genT, 0)},
		{"t=milliseconds,v1=hex", verify.HMACOptions{Signature: elements, TimestampUnit: verify.UnitMilliseconds},
			[]string{"X-Signature", "t=1767225600000,v1=" + genHexMs}, time.UnixMilli(genT * 1000)},
		{"t=seconds,v1=base64", verify.HMACOptions{Signature: verify.SignatureSpec{Header: "X-Signature", Layout: verify.LayoutElements, Encoding: verify.EncodingBase64}},
			[]string{"X-Signature", "t=1767225600,v1=" + genB64Sec}, time.Unix(genT, 0)},
		{"t=milliseconds,v1=base64 sha512", verify.HMACOptions{Signature: verify.SignatureSpec{Header: "X-Signature", Layout: verify.LayoutElements,
			Encoding: verify.EncodingBase64, Algorithm: "sha512"}, TimestampUnit: verify.UnitMilliseconds},
			[]string{"X-Signature", "t=1767225600000,v1=" + genB64Sha512Ms}, time.UnixMilli(genT * 1000)},
		{"several v1 for rotation, old one first", verify.HMACOptions{Signature: elements},
			[]string{"X-Signature", "t=1767225600,v1=" + genHexSecOld + ",v1=" + genHexSec}, time.Unix(genT, 0)},
		{"other elements ignored, spaces trimmed", verify.HMACOptions{Signature: elements},
			[]string{"X-Signature", "t=1767225600, v0=deadbeef, v1=" + genHexSec}, time.Unix(genT, 0)},
		{"ts=…;h1=… with ts:body (Paddle-style keys and separator)", verify.HMACOptions{Signature: verify.SignatureSpec{Header: "X-Signature",
			Layout: verify.LayoutElements, TimestampElement: "ts", SignatureElement: "h1", Separator: ";"}, SignedContent: "{timestamp}:{body}"},
			[]string{"X-Signature", "ts=1767225600;h1=" + genHexColon}, time.Unix(genT, 0)},
		{"sha256=hex (GitHub-style)", verify.HMACOptions{Signature: verify.SignatureSpec{Header: "X-Hub-Signature-256", Prefix: "sha256="}},
			[]string{"X-Hub-Signature-256", "sha256=" + genHexBody}, time.Time{}},
		{"sha256=hex twice for rotation", verify.HMACOptions{Signature: verify.SignatureSpec{Header: "X-Hub-Signature-256", Prefix: "sha256=", Separator: ","}},
			[]string{"X-Hub-Signature-256", "sha256=" + genHexBodyOld + ",sha256=" + genHexBody}, time.Time{}},
		{"bare base64", verify.HMACOptions{Signature: verify.SignatureSpec{Header: "X-Signature", Encoding: verify.EncodingBase64}},
			[]string{"X-Signature", genB64Body}, time.Time{}},
		{"bare hex, timestamp header", verify.HMACOptions{Signature: verify.SignatureSpec{Header: "X-Signature"}, TimestampHeader: "X-Timestamp", SignedContent: "{timestamp}.{body}"},
			[]string{"X-Signature", genHexSec, "X-Timestamp", "1767225600"}, time.Unix(genT, 0)},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := genBuild(t, c.opts)
			evs := verifyEvents(t, v, genDelivery(c.header...))
			if len(evs) != 1 || evs[0].ID != "evt_gen_1" || evs[0].Type != "order.paid" || !evs[0].Timestamp.Equal(c.at) {
				t.Fatalf("got %+v, want evt_gen_1 order.paid at %v", evs, c.at)
			}
			requireRefused(t, v, genTampered(genDelivery(c.header...)), verify.CodeBadSignature, verify.InHeader, c.header[0])
			requireRefused(t, genBuild(t, c.opts, "another-secret"), genDelivery(c.header...), verify.CodeBadSignature, verify.InHeader, c.header[0])
		})
	}

	t.Run("rotation: the old secret alone verifies the old signature", func(t *testing.T) {
		d := genDelivery("X-Signature", "t=1767225600,v1="+genHexSecOld+",v1="+genHexSec)
		verifyEvents(t, genBuild(t, verify.HMACOptions{Signature: elements}, genOld), d)
		verifyEvents(t, genBuild(t, verify.HMACOptions{Signature: elements}, "another-secret", genSecret), d)
	})

	t.Run("the timestamp element is signed", func(t *testing.T) {
		v := genBuild(t, verify.HMACOptions{Signature: elements})
		requireRefused(t, v, genDelivery("X-Signature", "t=1767225601,v1="+genHexSec), verify.CodeBadSignature, verify.InHeader, "X-Signature")
	})

	t.Run("a wrong timestamp unit is refused by the tolerance", func(t *testing.T) {
		// Milliseconds read as seconds: ~56,000 years ahead.
		asSeconds := genBuild(t, verify.HMACOptions{Signature: elements})
		requireRefused(t, asSeconds, genDelivery("X-Signature", "t=1767225600000,v1="+genHexMs), verify.CodeTimestampOutsideTolerance, verify.InHeader, "X-Signature")
		// Seconds read as milliseconds: January 1970.
		asMillis := genBuild(t, verify.HMACOptions{Signature: elements, TimestampUnit: verify.UnitMilliseconds})
		requireRefused(t, asMillis, genDelivery("X-Signature", "t=1767225600,v1="+genHexSec), verify.CodeTimestampOutsideTolerance, verify.InHeader, "X-Signature")
	})

	t.Run("outside the tolerance", func(t *testing.T) {
		o := verify.HMACOptions{Signature: elements, Key: genKey}
		v, err := verify.New(verify.TypeHMAC, verify.Core{Secrets: []string{genSecret}, Now: fixedClock(time.Unix(genT+301, 0))}, &o)
		if err != nil {
			t.Fatal(err)
		}
		requireRefused(t, v, genDelivery("X-Signature", "t=1767225600,v1="+genHexSec), verify.CodeTimestampOutsideTolerance, verify.InHeader, "X-Signature")
	})

	t.Run("unreadable element headers", func(t *testing.T) {
		v := genBuild(t, verify.HMACOptions{Signature: elements})
		for _, h := range []string{
			"v1=" + genHexSec, // no t
			"t=1767225600,t=1767225600,v1=" + genHexSec,          // two t
			"t=1767225600,v1" + genHexSec,                        // not key=value
			"t=2026-01-01T00:00:00Z,v1=" + genHexSec,             // t not digits
			"t=1767225600",                                       // no v1
			"t=1767225600,v1=" + genB64Sec,                       // base64 where hex is configured
			"t=1767225600,v1=" + genHexSec[:40],                  // short
			"t=1767225600,v1=" + strings.ToUpper(genHexSec)[:63], // odd length
		} {
			e := requireRefused(t, v, genDelivery("X-Signature", h), verify.CodeMalformedHeader, verify.InHeader, "X-Signature")
			if strings.Contains(e.Error(), genHexSec[:16]) {
				t.Errorf("the error echoes the signature: %v", e)
			}
		}
		requireRefused(t, v, genDelivery(), verify.CodeMissingHeader, verify.InHeader, "X-Signature")
	})
}

func TestHMACLayoutConfigErrors(t *testing.T) {
	t.Parallel()
	el := func(mod func(*verify.SignatureSpec)) verify.SignatureSpec {
		s := verify.SignatureSpec{Header: "X-Signature", Layout: verify.LayoutElements}
		if mod != nil {
			mod(&s)
		}
		return s
	}
	for _, c := range []struct {
		name  string
		opts  verify.HMACOptions
		field string
	}{
		{"unknown layout", verify.HMACOptions{Signature: verify.SignatureSpec{Header: "X-Signature", Layout: "stripe"}}, "Signature.Layout"},
		{"prefix with elements", verify.HMACOptions{Signature: el(func(s *verify.SignatureSpec) { s.Prefix = "v1=" })}, "Signature.Prefix"},
		{"timestamp header with elements", verify.HMACOptions{Signature: el(nil), TimestampHeader: "X-Timestamp"}, "TimestampHeader"},
		{"timestamp pointer with elements", verify.HMACOptions{Signature: el(nil), TimestampPointer: "/ts"}, "TimestampPointer"},
		{"unsigned timestamp element", verify.HMACOptions{Signature: el(nil), SignedContent: "{body}"}, "SignedContent"},
		{"element keys with plain", verify.HMACOptions{Signature: verify.SignatureSpec{Header: "X-Signature", TimestampElement: "t"}}, "Signature.TimestampElement"},
		{"same element keys", verify.HMACOptions{Signature: el(func(s *verify.SignatureSpec) { s.TimestampElement, s.SignatureElement = "s", "s" })}, "Signature.SignatureElement"},
		{"element key with '='", verify.HMACOptions{Signature: el(func(s *verify.SignatureSpec) { s.SignatureElement = "v=1" })}, "Signature.SignatureElement"},
		{"separator '='", verify.HMACOptions{Signature: el(func(s *verify.SignatureSpec) { s.Separator = "=" })}, "Signature.Separator"},
		{"bad unit", verify.HMACOptions{Signature: el(nil), TimestampUnit: "us"}, "TimestampUnit"},
	} {
		o := c.opts
		o.Key = genKey
		_, err := verify.New(verify.TypeHMAC, verify.Core{Secrets: []string{genSecret}}, &o)
		requireConfigField(t, err, c.field)
	}

	// CloudEvents shares SignatureSpec but reads the plain layout only.
	_, err := verify.New(verify.TypeCloudEvents, verify.Core{Secrets: []string{genSecret}},
		&verify.CloudEventsOptions{Auth: verify.CloudEventsAuthHMAC, Signature: verify.SignatureSpec{Header: "X-Signature", Layout: verify.LayoutElements}})
	requireConfigField(t, err, "Signature.Layout")
	var ce *verify.ConfigError
	if !errors.As(err, &ce) || !strings.Contains(ce.Reason, "plain") {
		t.Fatalf("got %v", err)
	}
}
