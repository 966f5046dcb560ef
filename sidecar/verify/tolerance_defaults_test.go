package verify_test

import (
	"errors"
	"testing"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// TestProviderDefaultTolerance: a provider that documents its own replay
// window gets it when a source sets no tolerance_seconds, through
// verify.New as claimd builds sources, and a source's own tolerance still
// wins. Linear: 60 s (https://linear.app/developers/webhooks); Twitch:
// 10 minutes (https://dev.twitch.tv/docs/eventsub/handling-webhook-events/).
func TestProviderDefaultTolerance(t *testing.T) {
	signed := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	fixture := func(typ verify.Type) verifytest.Fixture {
		for _, f := range verifytest.Fixtures() {
			if f.Type == string(typ) {
				return f
			}
		}
		t.Fatalf("no fixture for %s", typ)
		return verifytest.Fixture{}
	}
	check := func(typ verify.Type, age, tolerance time.Duration, accepted bool) {
		t.Helper()
		f := fixture(typ)
		d := f.Cases(signed).Distinct[0]
		v, err := verify.New(typ, verify.Core{Secrets: f.Secrets, Tolerance: tolerance,
			Now: func() time.Time { return signed.Add(age) }}, nil)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		_, err = v.Verify(verify.Request{Method: d.Method, Header: d.Header, RawQuery: d.RawQuery, Body: d.Body})
		var ve *verify.Error
		switch {
		case accepted && err != nil:
			t.Errorf("%s signed %s ago, tolerance %s: %v, want accepted", typ, age, tolerance, err)
		case !accepted && (!errors.As(err, &ve) || ve.Code != verify.CodeTimestampOutsideTolerance):
			t.Errorf("%s signed %s ago, tolerance %s: %v, want %s", typ, age, tolerance, err, verify.CodeTimestampOutsideTolerance)
		}
	}
	check(verify.TypeLinear, 30*time.Second, 0, true)
	check(verify.TypeLinear, 90*time.Second, 0, false)
	check(verify.TypeLinear, 90*time.Second, 120*time.Second, true)
	check(verify.TypeTwitch, 6*time.Minute, 0, true)
	check(verify.TypeTwitch, 11*time.Minute, 0, false)
	check(verify.TypeTwitch, 6*time.Minute, 300*time.Second, false)
}
