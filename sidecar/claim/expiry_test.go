package claim_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// Per-key expiry (issue 27, part 4): KeyExpiry names the time after which
// the retention purge may delete a record, from the purge's own rule.

// expiryPolicies: "short" has its own key retention; every other source
// follows the default policy's.
var expiryPolicies = claim.Policies{
	Default:  claim.Policy{Retention: 2 * time.Hour, KeyRetention: 50 * time.Hour},
	BySource: map[string]claim.Policy{"short": {Retention: time.Hour, KeyRetention: 5 * time.Hour}},
}

// dbNow is the database's clock, the purge's.
func (b *bundle) dbNow(t *testing.T) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT statement_timestamp()`).Scan(&now))
	return now
}

func TestKeyPurgedStatesAreThePurgesStates(t *testing.T) {
	t.Parallel()
	m := regexp.MustCompile(`state IN \(([^)]*)\)`).FindStringSubmatch(claim.PurgeKeysSQL)
	require.NotNil(t, m, "PurgeKeys names its states")
	var want []string
	for _, s := range claim.KeyPurgedStates {
		want = append(want, "'"+string(s)+"'")
	}
	require.Equal(t, strings.Join(want, ", "), m[1], "KeyExpiry's terminal states are exactly those the purge deletes")
}

func TestKeyExpiryByStateAndPolicy(t *testing.T) {
	t.Parallel()
	b := setup(t, expiryPolicies)
	for _, tc := range []struct {
		source string
		kr     time.Duration
	}{{"short", 5 * time.Hour}, {"other", 50 * time.Hour}} {
		t.Run(tc.source, func(t *testing.T) {
			key := func(id string) claim.Request {
				return claim.Request{Tenant: "a", Key: claim.Key{Source: tc.source, EventID: id}, PayloadHash: hashOf("a")}
			}
			won := func(id string) claim.Result {
				r, err := b.ledger.Claim(b.ctx, key(id))
				require.NoError(t, err)
				require.Equal(t, claim.Won, r.Outcome)
				return r
			}
			fixed := func(rec claim.Record, state claim.State) {
				t.Helper()
				require.Equal(t, state, rec.State)
				e := b.ledger.KeyExpiry(rec)
				require.True(t, e.Fixed, "a terminal record's date is the purge's")
				require.Equal(t, claim.ExpiryFixed, e.Kind())
				require.True(t, e.At.Equal(rec.UpdatedAt.Add(tc.kr)), "updated_at + the source's key retention")
				require.Equal(t, time.UTC, e.At.Location())
			}
			open := func(rec claim.Record, state claim.State, before time.Time) {
				t.Helper()
				require.Equal(t, state, rec.State)
				e := b.ledger.KeyExpiry(rec)
				require.False(t, e.Fixed, "an open record's clock has not started")
				require.Equal(t, claim.ExpiryNotBefore, e.Kind())
				require.True(t, e.At.Equal(rec.UpdatedAt.Add(tc.kr)), "its last change + key retention, whenever asked")
				require.Equal(t, e, b.ledger.KeyExpiry(rec), "the same record, the same date")
				require.False(t, rec.UpdatedAt.Before(before.Truncate(time.Microsecond)), "the record changed after before")
			}

			before := time.Now()
			p := won("processing")
			open(p.Record, claim.StateProcessing, before)
			done, err := b.ledger.Complete(b.ctx, "a", p.ID, p.Token, "ref")
			require.NoError(t, err)
			fixed(done, claim.StateCompleted)
			dup, err := b.ledger.Claim(b.ctx, key("processing"))
			require.NoError(t, err)
			require.Equal(t, claim.Duplicate, dup.Outcome)
			fixed(dup.Record, claim.StateCompleted)
			require.Equal(t, done.UpdatedAt, dup.UpdatedAt, "a duplicate leaves the date as it was")

			r := won("dead")
			dead, err := b.ledger.Fail(b.ctx, "a", r.ID, r.Token, claim.Permanent, "no")
			require.NoError(t, err)
			fixed(dead, claim.StateDeadLettered)

			r = won("unknown")
			unk, err := b.ledger.Fail(b.ctx, "a", r.ID, r.Token, claim.UnknownOutcome, "timeout")
			require.NoError(t, err)
			open(unk, claim.StateUnknown, before)

			r = won("retry")
			rf, err := b.ledger.Fail(b.ctx, "a", r.ID, r.Token, claim.Retryable, "later")
			require.NoError(t, err)
			open(rf, claim.StateRetryableFailed, before)

			v := int64(1)
			obj := key("v2")
			obj.ObjectID, obj.ObjectVersion = "obj", new(int64)
			*obj.ObjectVersion = 2
			r, err = b.ledger.Claim(b.ctx, obj)
			require.NoError(t, err)
			_, err = b.ledger.Complete(b.ctx, "a", r.ID, r.Token, "")
			require.NoError(t, err)
			old := key("v1")
			old.ObjectID, old.ObjectVersion = "obj", &v
			st, err := b.ledger.Claim(b.ctx, old)
			require.NoError(t, err)
			require.Equal(t, claim.Stale, st.Outcome)
			fixed(st.Record, claim.StateStale)

			rc, err := b.ledger.ReceiveTx(b.ctx, b.pool, key("received"))
			require.NoError(t, err)
			open(rc.Record, claim.StateReceived, before)
		})
	}
}

// The date KeyExpiry names is the purge's boundary: a record backdated
// to an hour before its key_expires_at survives the real purge, an hour
// after it is deleted; an open record is never purged.
func TestKeyExpiryIsThePurgeBoundary(t *testing.T) {
	t.Parallel()
	b := setup(t, expiryPolicies)
	for _, tc := range []struct {
		source string
		kr     time.Duration
	}{{"short", 5 * time.Hour}, {"other", 50 * time.Hour}} {
		t.Run(tc.source, func(t *testing.T) {
			k := claim.Request{Tenant: "a", Key: claim.Key{Source: tc.source, EventID: "boundary"}}
			r, err := b.ledger.Claim(b.ctx, k)
			require.NoError(t, err)
			_, err = b.ledger.Complete(b.ctx, "a", r.ID, r.Token, "")
			require.NoError(t, err)
			openK := claim.Request{Tenant: "a", Key: claim.Key{Source: tc.source, EventID: "open"}}
			o, err := b.ledger.Claim(b.ctx, openK)
			require.NoError(t, err)

			b.travel(t, r.ID, tc.kr-time.Hour)
			b.travel(t, o.ID, 100*tc.kr)
			rec, err := b.ledger.Get(b.ctx, "a", r.ID)
			require.NoError(t, err)
			e := b.ledger.KeyExpiry(rec)
			require.True(t, e.Fixed)
			require.True(t, e.At.After(b.dbNow(t)), "an hour before its key_expires_at")
			_, err = b.ledger.Purge(b.ctx, 1000)
			require.NoError(t, err)
			_, err = b.ledger.Get(b.ctx, "a", r.ID)
			require.NoError(t, err, "not purged before key_expires_at")

			b.travel(t, r.ID, 2*time.Hour)
			rec, err = b.ledger.Get(b.ctx, "a", r.ID)
			require.NoError(t, err)
			e = b.ledger.KeyExpiry(rec)
			require.True(t, e.At.Before(b.dbNow(t)), "an hour after its key_expires_at")
			_, err = b.ledger.Purge(b.ctx, 1000)
			require.NoError(t, err)
			_, err = b.ledger.Get(b.ctx, "a", r.ID)
			require.Equal(t, apperr.NotFound, apperr.CodeOf(err), "purged after key_expires_at")
			again, err := b.ledger.Claim(b.ctx, k)
			require.NoError(t, err)
			require.Equal(t, claim.Won, again.Outcome, "a resend after the date is a new event")
			require.NotEqual(t, r.ID, again.ID)

			orec, err := b.ledger.Get(b.ctx, "a", o.ID)
			require.NoError(t, err, "an open record is never purged")
			oe := b.ledger.KeyExpiry(orec)
			require.False(t, oe.Fixed)
			require.True(t, oe.At.Equal(orec.UpdatedAt.Add(tc.kr)),
				"a lower bound from its own last change, in the past here: the key is kept while the record is open")
		})
	}
}

// A reload of the policies changes the date of a kept record, and the
// purge follows the reloaded policy: the answer and the purge never part.
func TestKeyExpiryFollowsAPolicyReload(t *testing.T) {
	t.Parallel()
	b := setup(t, expiryPolicies)
	k := claim.Request{Tenant: "a", Key: claim.Key{Source: "short", EventID: "reload"}}
	r, err := b.ledger.Claim(b.ctx, k)
	require.NoError(t, err)
	done, err := b.ledger.Complete(b.ctx, "a", r.ID, r.Token, "")
	require.NoError(t, err)
	require.True(t, b.ledger.KeyExpiry(done).At.Equal(done.UpdatedAt.Add(5*time.Hour)))

	b.travel(t, r.ID, 4*time.Hour)
	rec, err := b.ledger.Get(b.ctx, "a", r.ID)
	require.NoError(t, err)
	require.NoError(t, b.ledger.SetPolicies(claim.Policies{Default: expiryPolicies.Default,
		BySource: map[string]claim.Policy{"short": {Retention: time.Hour, KeyRetention: 3 * time.Hour}}}))
	e := b.ledger.KeyExpiry(rec)
	require.True(t, e.At.Equal(rec.UpdatedAt.Add(3*time.Hour)), "the reloaded key retention")
	require.True(t, e.At.Before(b.dbNow(t)))
	_, err = b.ledger.Purge(b.ctx, 1000)
	require.NoError(t, err)
	_, err = b.ledger.Get(b.ctx, "a", r.ID)
	require.Equal(t, apperr.NotFound, apperr.CodeOf(err), "the purge follows the same reloaded policy")
}
