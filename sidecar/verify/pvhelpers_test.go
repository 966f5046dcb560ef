package verify_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Helpers for the registry providers' tests (gitlab, bitbucket, linear,
// sentry, pagerduty, jira, meta, trello).

// pvNow is the clock reading the providers' tests sign for.
var pvNow = time.Unix(1_780_000_000, 0)

func pvClock() time.Time { return pvNow }

// pvOptions decodes opts (snake_case keys, as in a sources file) into the
// options struct of provider typ, the way the sources file is read.
func pvOptions(t *testing.T, p *verify.Provider, opts map[string]any) any {
	t.Helper()
	if p.Options == nil {
		require.Empty(t, opts, "provider %s takes no options", p.Type)
		return nil
	}
	camel := make(map[string]any, len(opts))
	for k, v := range opts {
		parts := strings.Split(k, "_")
		for i, s := range parts {
			parts[i] = strings.ToUpper(s[:1]) + s[1:]
		}
		camel[strings.Join(parts, "")] = v
	}
	raw, err := json.Marshal(camel)
	require.NoError(t, err)
	o := p.Options()
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(o))
	return o
}

// pvBuild returns the verifier of provider typ for secrets and opts, with
// the clock at pvNow unless core sets one.
func pvBuild(t *testing.T, typ verify.Type, core verify.Core, opts map[string]any) verify.Verifier {
	t.Helper()
	v, err := pvTryBuild(t, typ, core, opts)
	require.NoError(t, err)
	require.Equal(t, typ, v.Type())
	return v
}

func pvTryBuild(t *testing.T, typ verify.Type, core verify.Core, opts map[string]any) (verify.Verifier, error) {
	t.Helper()
	p, ok := verify.Lookup(typ)
	require.True(t, ok, "provider %s is registered", typ)
	if core.Now == nil {
		core.Now = pvClock
	}
	return verify.New(typ, core, pvOptions(t, p, opts))
}

// pvCode asserts err is a *verify.Error with code and field.
func pvCode(t *testing.T, err error, code verify.Code, field string) *verify.Error {
	t.Helper()
	var e *verify.Error
	require.True(t, errors.As(err, &e), "want *verify.Error, got %v", err)
	require.Equal(t, code, e.Code, "code of %v", err)
	require.Equal(t, field, e.Field, "field of %v", err)
	return e
}

// pvConfigField asserts err is a *verify.ConfigError naming field.
func pvConfigField(t *testing.T, err error, field string) {
	t.Helper()
	var ce *verify.ConfigError
	require.True(t, errors.As(err, &ce), "want *verify.ConfigError, got %v", err)
	require.Equal(t, field, ce.Field, "field of %v", err)
}

// pvOne verifies r and returns its only event.
func pvOne(t *testing.T, v verify.Verifier, r verify.Request) verify.Event {
	t.Helper()
	res, err := v.Verify(r)
	require.NoError(t, err)
	require.Nil(t, res.Handshake)
	require.Len(t, res.Events, 1)
	require.NotEmpty(t, res.Events[0].ID)
	return res.Events[0]
}

func pvRequest(d verifytest.Delivery) verify.Request {
	return verify.Request{Method: d.Method, Header: d.Header, RawQuery: d.RawQuery, Body: d.Body}
}

func pvFixture(t *testing.T, typ string) verifytest.Fixture {
	t.Helper()
	for _, f := range verifytest.Fixtures() {
		if f.Type == typ {
			return f
		}
	}
	t.Fatalf("no fixture for %s", typ)
	return verifytest.Fixture{}
}

// pvReplay replays provider typ's fixture through its verifier: distinct
// deliveries give distinct ids, redeliveries one id, the tampered body is
// refused with bad_signature, handshakes are answered as the fixture says.
func pvReplay(t *testing.T, typ string) {
	t.Helper()
	f := pvFixture(t, typ)
	opts := f.Options
	if f.Setup != nil {
		opts = f.Setup(t)
	}
	v := pvBuild(t, verify.Type(typ), verify.Core{Secrets: f.Secrets}, opts)
	c := f.Cases(pvNow)
	per := max(c.EventsPerDelivery, 1)
	seen := map[string]bool{}
	for i, d := range c.Distinct {
		res, err := v.Verify(pvRequest(d))
		require.NoError(t, err, "distinct %d", i)
		require.Len(t, res.Events, per, "distinct %d", i)
		for _, ev := range res.Events {
			require.NotEmpty(t, ev.ID)
			require.False(t, seen[ev.ID], "distinct %d repeats id %q", i, ev.ID)
			seen[ev.ID] = true
		}
	}
	require.GreaterOrEqual(t, len(c.Redelivery), 2)
	var first []string
	for i, d := range c.Redelivery {
		res, err := v.Verify(pvRequest(d))
		require.NoError(t, err, "redelivery %d", i)
		var ids []string
		for _, ev := range res.Events {
			ids = append(ids, ev.ID)
		}
		if i == 0 {
			first = ids
			continue
		}
		require.Equal(t, first, ids, "redelivery %d", i)
	}
	_, err := v.Verify(pvRequest(c.Tampered))
	var e *verify.Error
	require.True(t, errors.As(err, &e), "tampered: %v", err)
	require.Equal(t, verify.CodeBadSignature, e.Code)
	for i, h := range c.Handshakes {
		res, err := v.Verify(pvRequest(h.Delivery))
		require.NoError(t, err, "handshake %d", i)
		require.NotNil(t, res.Handshake, "handshake %d", i)
		require.Empty(t, res.Events)
		require.Equal(t, h.Status, res.Handshake.Status)
		if h.Body != nil {
			require.Equal(t, string(h.Body), string(res.Handshake.Body))
		}
	}
}

// pvHeader clones h and sets or deletes (empty value) name.
func pvHeader(h http.Header, kv ...string) http.Header {
	c := h.Clone()
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			c.Del(kv[i])
		} else {
			c.Set(kv[i], kv[i+1])
		}
	}
	return c
}

// hmacHex is the hex HMAC-SHA256 of body under secret, computed here
// independently of package verifytest.
func hmacHex(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
