package verify_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// p26Build builds a source of the registered provider typ from core and
// options given as a sources file would (snake_case keys), decoded through
// their JSON tags into the provider's options struct.
func p26Build(t *testing.T, typ verify.Type, core verify.Core, opts map[string]any) (verify.Verifier, error) {
	t.Helper()
	p, ok := verify.Lookup(typ)
	if !ok {
		t.Fatalf("provider %q is not registered", typ)
	}
	var o any
	if p.Options != nil {
		o = p.Options()
		if opts != nil {
			b, err := json.Marshal(opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, o); err != nil {
				t.Fatalf("options: %v", err)
			}
		}
	} else if len(opts) > 0 {
		t.Fatalf("provider %q takes no options", typ)
	}
	return p.New(core, o)
}

func p26MustBuild(t *testing.T, typ verify.Type, core verify.Core, opts map[string]any) verify.Verifier {
	t.Helper()
	v, err := p26Build(t, typ, core, opts)
	if err != nil {
		t.Fatalf("build %s: %v", typ, err)
	}
	return v
}

func p26Req(d verifytest.Delivery) verify.Request {
	h := d.Header
	if h == nil {
		h = http.Header{}
	}
	return verify.Request{Method: d.Method, Header: h, RawQuery: d.RawQuery, Body: d.Body}
}

func p26Clock(now time.Time) func() time.Time { return func() time.Time { return now } }

// p26Events verifies d and returns its events, failing on an error or a
// handshake.
func p26Events(t *testing.T, v verify.Verifier, d verifytest.Delivery) []verify.Event {
	t.Helper()
	res, err := v.Verify(p26Req(d))
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if res.IsHandshake() {
		t.Fatal("got a handshake, want events")
	}
	return res.Events
}

// p26Code checks that d fails with code, in and field (field "" checks only
// the code and location).
func p26Code(t *testing.T, v verify.Verifier, d verifytest.Delivery, code verify.Code, in verify.Location, field string) *verify.Error {
	t.Helper()
	_, err := v.Verify(p26Req(d))
	var e *verify.Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v, want a *verify.Error %s", err, code)
	}
	if e.Code != code || (in != "" && e.In != in) || (field != "" && e.Field != field) {
		t.Fatalf("got %s %s %q (%s), want %s %s %q", e.Code, e.In, e.Field, e.Reason, code, in, field)
	}
	return e
}

// p26Fixture replays the registered fixture of typ through the verifier:
// distinct deliveries give distinct ids, redeliveries the first one's,
// the tampered delivery is refused and handshakes are answered as given.
func p26Fixture(t *testing.T, typ string, core verify.Core) {
	t.Helper()
	var f *verifytest.Fixture
	for _, x := range verifytest.Fixtures() {
		if x.Type == typ {
			f = &x
		}
	}
	if f == nil {
		t.Fatalf("no fixture for %s", typ)
	}
	opts := f.Options
	if f.Setup != nil {
		opts = f.Setup(t)
	}
	core.Secrets = f.Secrets
	now := time.Now()
	if core.Now == nil {
		core.Now = p26Clock(now)
	} else {
		now = core.Now()
	}
	v := p26MustBuild(t, verify.Type(typ), core, opts)
	c := f.Cases(now)
	per := max(c.EventsPerDelivery, 1)
	seen := map[string]bool{}
	for i, d := range c.Distinct {
		evs := p26Events(t, v, d)
		if len(evs) != per {
			t.Fatalf("distinct %d: %d events, want %d", i, len(evs), per)
		}
		for _, ev := range evs {
			if ev.ID == "" || seen[ev.ID] {
				t.Fatalf("distinct %d: id %q empty or seen before", i, ev.ID)
			}
			seen[ev.ID] = true
		}
	}
	var first []string
	for i, d := range c.Redelivery {
		evs := p26Events(t, v, d)
		var ids []string
		for _, ev := range evs {
			ids = append(ids, ev.ID)
		}
		if i == 0 {
			first = ids
			continue
		}
		if len(ids) != len(first) {
			t.Fatalf("redelivery %d: %d events, want %d", i, len(ids), len(first))
		}
		for j := range ids {
			if ids[j] != first[j] {
				t.Fatalf("redelivery %d: id %q, want %q", i, ids[j], first[j])
			}
		}
	}
	if _, err := v.Verify(p26Req(c.Tampered)); err == nil {
		t.Fatal("tampered delivery verified")
	}
	for i, h := range c.Handshakes {
		res, err := v.Verify(p26Req(h.Delivery))
		if err != nil {
			t.Fatalf("handshake %d: %v", i, err)
		}
		if !res.IsHandshake() {
			t.Fatalf("handshake %d: got events", i)
		}
		if res.Handshake.Status != h.Status || (h.Body != nil && string(res.Handshake.Body) != string(h.Body)) {
			t.Fatalf("handshake %d: got %d %q, want %d %q", i, res.Handshake.Status, res.Handshake.Body, h.Status, h.Body)
		}
	}
}

// p26ConfigField checks that err is a *verify.ConfigError naming field.
func p26ConfigField(t *testing.T, err error, field string) {
	t.Helper()
	var ce *verify.ConfigError
	if !errors.As(err, &ce) || ce.Field != field {
		t.Fatalf("got %v, want a config error naming %s", err, field)
	}
}

func mustProvider(t *testing.T, typ verify.Type) *verify.Provider {
	t.Helper()
	p, ok := verify.Lookup(typ)
	if !ok {
		t.Fatalf("provider %q is not registered", typ)
	}
	return p
}
