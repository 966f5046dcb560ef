package verify_test

import (
	"net/http"
	"testing"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Airtable publishes no example MAC, so this vector was computed
// independently (Python's hmac and base64 modules) from
// https://airtable.com/developers/web/api/webhooks-overview:
// "hmac-sha256=" and the hex HMAC-SHA256 of the body keyed with the
// base64-decoded macSecretBase64 (the body is the notification of
// Airtable's example).
func TestAirtableVector(t *testing.T) {
	t.Parallel()
	body := []byte(`{"base":{"id":"appA6OKQ1Jd4hEMrl"},"webhook":{"id":"achW8hEz8rN3XAgNU"},"timestamp":"2022-02-01T21:25:05.663Z"}`)
	v := mustBuild(t, verify.TypeAirtable, verify.Core{Secrets: []string{verifytest.AirtableMACSecret}}, nil)
	h := http.Header{}
	h.Set(verify.AirtableMACHeader, "hmac-sha256=851f27d7aae865fec3098f273af40f0fcae8ce4e2a74ee4317f9fd2ef9e7e076")
	evs := verifyEvents(t, v, verifytest.Delivery{Header: h, Body: body})
	if len(evs) != 1 || evs[0].ID != verify.JoinKey("appA6OKQ1Jd4hEMrl", "achW8hEz8rN3XAgNU", "2022-02-01T21:25:05.663Z") || evs[0].Type != "notification" {
		t.Fatalf("got %+v", evs)
	}
}

func TestAirtable(t *testing.T) {
	t.Parallel()
	v := mustBuild(t, verify.TypeAirtable, verify.Core{Secrets: []string{verifytest.AirtableMACSecret}}, nil)
	good := func() verifytest.Delivery {
		return verifytest.AirtableDelivery(verifytest.AirtableMACSecret, "app1", "ach1", "2026-03-01T12:00:00.000Z")
	}

	t.Run("fixture", func(t *testing.T) { replayFixture(t, "airtable") })

	t.Run("configuration", func(t *testing.T) {
		_, err := tryBuild(t, verify.TypeAirtable, verify.Core{Secrets: []string{verifytest.AirtableMACSecret, "not base64!"}}, nil)
		requireConfigField(t, err, "Secrets[1]")
		_, err = tryBuild(t, verify.TypeAirtable, verify.Core{}, nil)
		requireConfigField(t, err, "Secrets")
	})

	t.Run("header", func(t *testing.T) {
		d := good()
		d.Header.Del(verify.AirtableMACHeader)
		requireRefused(t, v, d, verify.CodeMissingHeader, verify.InHeader, verify.AirtableMACHeader)
		for _, bad := range []string{"sha256=851f27d7aae865fec3098f273af40f0fcae8ce4e2a74ee4317f9fd2ef9e7e076", "851f27d7aae865fec3098f273af40f0fcae8ce4e2a74ee4317f9fd2ef9e7e076", "hmac-sha256=851f"} {
			d = good()
			d.Header.Set(verify.AirtableMACHeader, bad)
			requireRefused(t, v, d, verify.CodeMalformedHeader, verify.InHeader, verify.AirtableMACHeader)
		}
	})

	t.Run("key is decoded, rotation", func(t *testing.T) {
		// Keyed with the base64 text instead of its bytes: refused.
		h := http.Header{}
		body := good().Body
		h.Set(verify.AirtableMACHeader, verifytest.Notion(verifytest.AirtableMACSecret, body)[len("sha256="):])
		h.Set(verify.AirtableMACHeader, "hmac-sha256="+h.Get(verify.AirtableMACHeader))
		requireRefused(t, v, verifytest.Delivery{Header: h, Body: body}, verify.CodeBadSignature, verify.InHeader, verify.AirtableMACHeader)
		const other = "c2Vjb25kLXdlYmhvb2stbWFjLXNlY3JldA=="
		d := verifytest.AirtableDelivery(other, "app1", "ach2", "2026-03-01T12:00:00.000Z")
		requireRefused(t, v, d, verify.CodeBadSignature, verify.InHeader, verify.AirtableMACHeader)
		both := mustBuild(t, verify.TypeAirtable, verify.Core{Secrets: []string{other, verifytest.AirtableMACSecret}}, nil)
		verifyEvents(t, both, d)
		verifyEvents(t, both, good())
	})

	t.Run("nudge key", func(t *testing.T) {
		a := verifyEvents(t, v, good())[0]
		again := verifyEvents(t, v, good())[0]
		later := verifyEvents(t, v, verifytest.AirtableDelivery(verifytest.AirtableMACSecret, "app1", "ach1", "2026-03-01T12:00:01.000Z"))[0]
		other := verifyEvents(t, v, verifytest.AirtableDelivery(verifytest.AirtableMACSecret, "app1", "ach2", "2026-03-01T12:00:00.000Z"))[0]
		if again.ID != a.ID || later.ID == a.ID || other.ID == a.ID || a.Scope != "app1" || a.ObjectID != "ach1" {
			t.Fatalf("a %+v again %+v later %+v other %+v", a, again, later, other)
		}
		for _, c := range []struct {
			body  string
			code  verify.Code
			field string
		}{
			{`{"webhook":{"id":"a"},"timestamp":"2026-03-01T12:00:00Z"}`, verify.CodeMissingField, "/base/id"},
			{`{"base":{"id":"a"},"timestamp":"2026-03-01T12:00:00Z"}`, verify.CodeMissingField, "/webhook/id"},
			{`{"base":{"id":"a"},"webhook":{"id":"a"}}`, verify.CodeMissingField, "/timestamp"},
			{`{"base":{"id":"a"},"webhook":{"id":"a"},"timestamp":"yesterday"}`, verify.CodeMalformedBody, "/timestamp"},
		} {
			h := http.Header{}
			h.Set(verify.AirtableMACHeader, verifytest.Airtable(verifytest.AirtableMACSecret, []byte(c.body)))
			if e := requireRefused(t, v, verifytest.Delivery{Header: h, Body: []byte(c.body)}, c.code, verify.InBody, c.field); !e.Authenticated {
				t.Errorf("%s: not authenticated", c.body)
			}
		}
	})
}
