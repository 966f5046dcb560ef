package verify

import (
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

// seedHeaderValues adds every value of the named headers found in cases.json
// to the fuzz corpus.
func seedHeaderValues(f *testing.F, names ...string) {
	for _, c := range loadCases(f) {
		for _, s := range c.Steps {
			for k, v := range s.Headers {
				for _, n := range names {
					if v != nil && strings.EqualFold(k, n) {
						f.Add(*v)
					}
				}
			}
		}
	}
}

func FuzzParseStripeHeader(f *testing.F) {
	seedHeaderValues(f, StripeSignatureHeader)
	for _, s := range []string{"", "t=", "t=1", "v1,t=1", "t=1,v1=", "t=1,t=1", "t=99999999999999999999,v1=00", " t=1 , v1=" + strings.Repeat("a", 64), "t=1,v0=x,v2=y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		s, err := parseStripeSignature(h)
		if err != nil {
			return
		}
		if s.ts < 0 || s.t == "" {
			t.Fatalf("accepted header %q with timestamp %q", h, s.t)
		}
		for _, v := range s.v1 {
			if len(v) != sha256.Size {
				t.Fatalf("v1 of %d bytes from %q", len(v), h)
			}
		}
	})
}

func FuzzParsePaddleHeader(f *testing.F) {
	seedHeaderValues(f, PaddleSignatureHeader)
	for _, s := range []string{"", "ts=1", "ts=1;h1=", "ts=1,h1=00", "h1=00;ts=1;ts=2", "ts=1;h1=" + strings.Repeat("f", 64) + ";h1=zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		s, err := parsePaddleSignature(h)
		if err != nil {
			return
		}
		if s.n < 0 || s.ts == "" {
			t.Fatalf("accepted header %q with ts %q", h, s.ts)
		}
		for _, v := range s.h1 {
			if len(v) != sha256.Size {
				t.Fatalf("h1 of %d bytes from %q", len(v), h)
			}
		}
	})
}

func FuzzParseStandardSignatures(f *testing.F) {
	seedHeaderValues(f, StandardWebhookSignatureHeader, SvixSignatureHeader)
	for _, s := range []string{"", "v1", "v1,", ",", "v1a,AAAA", "  v1,x  v2,y ", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=\tv1a,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		s := parseStandardSignatures(h)
		for _, v := range s.v1 {
			if len(v) != sha256.Size {
				t.Fatalf("v1 of %d bytes from %q", len(v), h)
			}
		}
		for _, v := range s.v1a {
			if len(v) != ed25519.SignatureSize {
				t.Fatalf("v1a of %d bytes from %q", len(v), h)
			}
		}
		if len(s.v1)+len(s.v1a) > len(strings.Fields(h)) {
			t.Fatalf("more signatures than entries in %q", h)
		}
	})
}

func FuzzParsePointer(f *testing.F) {
	for _, s := range []string{"", "/", "/a~1b", "/m~0n", "/foo/0", "/~", "/~2", "a", "/foo/01", "/value/1/clientState", "/payload/id"} {
		f.Add(s)
	}
	doc, derr := decodeJSON([]byte(`{"foo":["bar",{"":1}],"a/b":{"m~n":[null,true,2.5]},"":{"":""}}`))
	if derr != nil {
		f.Fatal(derr)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := parsePointer(s)
		if err != nil {
			return
		}
		// Re-escaping the tokens gives the pointer back (RFC 6901 §3/§4).
		var b strings.Builder
		for _, tok := range p.p.Tokens() {
			b.WriteByte('/')
			b.WriteString(strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1"))
		}
		if b.String() != s {
			t.Fatalf("pointer %q re-escapes to %q", s, b.String())
		}
		_, _, _ = p.get(doc)
		_, _ = p.scalar(doc)
	})
}

func FuzzJoinKey(f *testing.F) {
	f.Add("abc", "de", "")
	f.Add("a:b", "c", "|")
	f.Add("1:a", "|0:", "3:abc|2:de")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		for _, parts := range [][]string{{a}, {a, b}, {a, b, c}} {
			got, ok := splitKey(JoinKey(parts...))
			if !ok || !reflect.DeepEqual(got, parts) {
				t.Fatalf("JoinKey(%q) does not split back: %q, %v", parts, got, ok)
			}
		}
		if JoinKey(a, b) == JoinKey(b, c) && (a != b || b != c) {
			t.Fatalf("collision: (%q,%q) and (%q,%q)", a, b, b, c)
		}
	})
}

// fuzzVerifiers builds one verifier per scheme, with the case secrets.
func fuzzVerifiers(f *testing.F) []Verifier {
	now := fixed(time.Unix(1700000000, 0))
	cfgs := []config{
		cfg(TypeStripe, Core{Secrets: []string{"whsec_test_secret"}, Now: now}, nil),
		cfg(TypeGitHub, Core{Secrets: []string{"It's a Secret to Everybody"}}, nil),
		cfg(TypeStandardWebhooks, Core{Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whpk_" + strings.Repeat("A", 43) + "="}, Now: now}, nil),
		cfg(TypeShopify, Core{Secrets: []string{"shpss_FAKE_test_client_secret_0000"}}, nil),
		cfg(TypeSlack, Core{Secrets: []string{"8f742231b10e8888abcd99yyyzzz85a5"}, Now: now}, nil),
		cfg(TypeMSGraph, Core{Secrets: []string{"SecretClientState"}}, nil),
		cfg(TypeCloudEvents, Core{Secrets: []string{testBearer}}, nil),
		cfg(TypeCloudEvents, Core{Secrets: []string{"k"}}, &CloudEventsOptions{Auth: CloudEventsAuthHMAC, Signature: SignatureSpec{Header: "X-Sig", Separator: ","}}),
		linearCfg("", now),
		cfg(TypeHMAC, Core{Secrets: []string{"s"}, Now: now}, &HMACOptions{Signature: SignatureSpec{Header: "X-Sig", Encoding: EncodingBase64, Prefix: "v1="}, SignedContent: "{id}.{timestamp}.{body}", TimestampHeader: "X-Ts", Key: KeyRule{IDHeader: "X-Id", ObjectVersionPointer: "/v"}}),
		pubsubCfg("", now),
		documensoCfg("", now),
		cfg(TypePaddle, Core{Secrets: []string{"pdl_ntfset_FAKE_0000000000000000000000000000_secret"}, Now: now}, nil),
		cfg(TypeZoom, Core{Secrets: []string{"secretValueTest"}, Now: now}, nil),
		cfg(TypeTwilio, Core{Secrets: []string{"12345"}}, &TwilioOptions{URL: "https://mycompany.com/myapp.php"}),
	}
	vs := make([]Verifier, len(cfgs))
	for i, c := range cfgs {
		v, err := newFrom(c)
		if err != nil {
			f.Fatal(err)
		}
		vs[i] = v
	}
	return vs
}

// FuzzVerify feeds arbitrary headers, queries and bodies to every verifier:
// none may panic, and every failure must be a *Error.
func FuzzVerify(f *testing.F) {
	vs := fuzzVerifiers(f)
	for _, c := range loadCases(f) {
		for _, s := range c.Steps {
			var hb strings.Builder
			for k, v := range s.Headers {
				if v != nil {
					hb.WriteString(k + ": " + *v + "\n")
				}
			}
			body := s.Body
			if s.BodyEncoding != "utf8" {
				body = ""
			}
			f.Add(hb.String(), s.Query, []byte(body))
		}
	}
	f.Add("Content-Type: application/cloudevents-batch+json\nAuthorization: Bearer "+testBearer+"\n", "", []byte(`[{"specversion":"1.0","id":"1","source":"/s","type":"t"},7,null]`))
	f.Add("", "validationToken=%", []byte(nil))
	f.Fuzz(func(t *testing.T, headers, query string, body []byte) {
		h := http.Header{}
		for _, line := range strings.Split(headers, "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
			}
		}
		req := Request{Header: h, RawQuery: query, Body: body}
		for _, v := range vs {
			res, err := v.Verify(req)
			if err != nil {
				var e *Error
				if !errors.As(err, &e) {
					t.Fatalf("%s: error %T %v is not a *verify.Error", v.Type(), err, err)
				}
				continue
			}
			if (res.Handshake == nil) == (len(res.Events) == 0) {
				t.Fatalf("%s: result has neither or both of handshake and events", v.Type())
			}
			for _, ev := range res.Events {
				if ev.ID == "" {
					t.Fatalf("%s: event without an ID", v.Type())
				}
			}
		}
	})
}
