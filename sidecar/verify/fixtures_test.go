package verify_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// TestFixtures replays every registered verifytest.Fixture at the Verify
// level (sidecar/httpapi's TestIngestFixtures does it through the real
// handler on PostgreSQL), as [checkFixture] says. One subtest per provider
// type (go test -run 'TestFixtures/<type>$').
func TestFixtures(t *testing.T) {
	t.Parallel()
	for _, f := range verifytest.Fixtures() {
		t.Run(f.Type, func(t *testing.T) {
			t.Parallel()
			checkFixture(t, f, time.Now())
		})
	}
}

// checkFixture replays fixture f through a source configured from it (see
// fixtureVerifier) with the clock at now: distinct deliveries have
// distinct event ids, every redelivery the first one's, each with the
// provider's own reply (Cases.Reply) or none, a tampered delivery is
// refused with bad_signature, and each handshake is answered with its
// status and body.
func checkFixture(t *testing.T, f verifytest.Fixture, now time.Time) {
	t.Helper()
	v := fixtureVerifier(t, f, now)
	c := f.Cases(now)
	require.GreaterOrEqual(t, len(c.Distinct), 2, "at least two distinct deliveries")
	if c.Nudges {
		require.Empty(t, c.Redelivery, "nudges: every delivery is a new event")
	} else {
		require.GreaterOrEqual(t, len(c.Redelivery), 2, "at least two deliveries of one event")
	}
	per := max(c.EventsPerDelivery, 1)

	seen := map[string]int{}
	for i, d := range c.Distinct {
		ids := fixtureIDs(t, v, c.Reply, d, "distinct %d", i)
		require.Len(t, ids, per, "distinct %d: events per delivery", i)
		for _, id := range ids {
			prev, dup := seen[id]
			require.False(t, dup, "distinct %d has the id of distinct %d: %q", i, prev, id)
			seen[id] = i
		}
	}

	if !c.Nudges {
		first := fixtureIDs(t, v, c.Reply, c.Redelivery[0], "redelivery 0")
		require.NotEmpty(t, first)
		for i, d := range c.Redelivery[1:] {
			require.Equal(t, first, fixtureIDs(t, v, c.Reply, d, "redelivery %d", i+1), "redelivery %d is the first event again", i+1)
		}
	}

	_, err := v.Verify(deliveryRequest(c.Tampered))
	requireCode(t, err, verify.CodeBadSignature, "")

	for i, h := range c.Handshakes {
		res, err := v.Verify(deliveryRequest(h.Delivery))
		require.NoError(t, err, "handshake %d", i)
		require.True(t, res.IsHandshake(), "handshake %d is answered as one", i)
		require.Empty(t, res.Events, "handshake %d carries no event", i)
		require.Equal(t, h.Status, res.Handshake.Status, "handshake %d", i)
		if h.Body != nil {
			require.Equal(t, string(h.Body), string(res.Handshake.Body), "handshake %d", i)
		}
	}
}

// TestEveryProviderHasAFixture: every registered provider type is covered
// by the generic fixture tests.
func TestEveryProviderHasAFixture(t *testing.T) {
	t.Parallel()
	has := map[string]bool{}
	for _, f := range verifytest.Fixtures() {
		has[f.Type] = true
		_, ok := verify.Lookup(verify.Type(f.Type))
		require.True(t, ok, "fixture %q is of no registered provider type", f.Type)
	}
	for _, p := range verify.Providers() {
		require.True(t, has[string(p.Type)], "provider %q has no verifytest fixture", p.Type)
	}
}

// fixtureVerifier configures a source of f's provider as the sources file
// would: f's secrets, its options (from Setup when set) decoded as the
// file's, the clock at now.
func fixtureVerifier(t *testing.T, f verifytest.Fixture, now time.Time) verify.Verifier {
	t.Helper()
	p, ok := verify.Lookup(verify.Type(f.Type))
	require.True(t, ok, "provider %q is not registered", f.Type)
	raw := f.Options
	if f.Setup != nil {
		raw = f.Setup(t)
	}
	opts, err := p.DecodeOptions(raw)
	require.NoError(t, err)
	v, err := verify.New(p.Type, verify.Core{Secrets: f.Secrets, Now: func() time.Time { return now }}, opts)
	require.NoError(t, err)
	return v
}

// fixtureIDs verifies d, which must carry events and come with reply as
// Result.Reply's body (nil: no Reply), and returns their ids.
func fixtureIDs(t *testing.T, v verify.Verifier, reply []byte, d verifytest.Delivery, msg string, args ...any) []string {
	t.Helper()
	res, err := v.Verify(deliveryRequest(d))
	require.NoError(t, err, append([]any{msg}, args...)...)
	require.False(t, res.IsHandshake(), append([]any{msg}, args...)...)
	require.Empty(t, res.Rejected, append([]any{msg}, args...)...)
	if reply == nil {
		require.Nil(t, res.Reply, append([]any{msg}, args...)...)
	} else {
		require.NotNil(t, res.Reply, append([]any{msg}, args...)...)
		require.Equal(t, string(reply), string(res.Reply.Body), append([]any{msg}, args...)...)
	}
	ids := make([]string, len(res.Events))
	for i, ev := range res.Events {
		ids[i] = ev.ID
	}
	return ids
}
