package claim_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// Release: processing → unknown, logged with actor and note; the holder
// is fenced as after a lease expiry under review.
func TestReleaseFencesTheHolder(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	won, err := b.ledger.Claim(b.ctx, req("a", "evt_rel"))
	require.NoError(t, err)

	_, err = b.ledger.Release(b.ctx, "a", won.ID, "  ", "ick_abcdef")
	require.Equal(t, "note", apperr.As(err).Field)
	_, err = b.ledger.Release(b.ctx, "b", won.ID, "stuck", "ick_abcdef")
	require.Equal(t, apperr.NotFound, apperr.CodeOf(err), "another tenant's record")

	rec, err := b.ledger.Release(b.ctx, "a", won.ID, "worker died", "ick_abcdef")
	require.NoError(t, err)
	require.Equal(t, claim.StateUnknown, rec.State)
	require.Nil(t, rec.LeaseUntil)

	_, err = b.ledger.Release(b.ctx, "a", won.ID, "again", "ick_abcdef")
	require.Equal(t, apperr.InvalidState, apperr.CodeOf(err))

	// A claim of the key is unknown; the holder's Fail and Extend are
	// lease_lost; its Complete lands (the effect did happen).
	again, err := b.ledger.Claim(b.ctx, req("a", "evt_rel"))
	require.NoError(t, err)
	require.Equal(t, claim.Unknown, again.Outcome)
	_, err = b.ledger.Fail(b.ctx, "a", won.ID, won.Token, claim.Retryable, "x")
	require.Equal(t, apperr.LeaseLost, apperr.CodeOf(err))
	_, err = b.ledger.Extend(b.ctx, "a", won.ID, won.Token, time.Minute)
	require.Equal(t, apperr.LeaseLost, apperr.CodeOf(err))
	done, err := b.ledger.Complete(b.ctx, "a", won.ID, won.Token, "inv_1")
	require.NoError(t, err)
	require.Equal(t, claim.StateCompleted, done.State)

	got, err := b.ledger.Get(b.ctx, "a", won.ID)
	require.NoError(t, err)
	var released *claim.Delivery
	for i, d := range got.Deliveries {
		if d.Outcome == "released" {
			released = &got.Deliveries[i]
		} else {
			require.Empty(t, d.Actor, d.Outcome)
		}
	}
	require.NotNil(t, released)
	require.Equal(t, "worker died", released.Detail)
	require.Equal(t, "ick_abcdef", released.Actor)
}

func TestResolveFailedAndActor(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	won, err := b.ledger.Claim(b.ctx, req("a", "evt_res"))
	require.NoError(t, err)
	_, err = b.ledger.Fail(b.ctx, "a", won.ID, won.Token, claim.UnknownOutcome, "timeout")
	require.NoError(t, err)

	rec, err := b.ledger.ResolveAs(b.ctx, "a", won.ID, claim.ResolveFailed, "", "never sent", "ick_op1234")
	require.NoError(t, err)
	require.Equal(t, claim.StateDeadLettered, rec.State)
	// A dead-lettered record cannot be failed again, but completed.
	_, err = b.ledger.ResolveAs(b.ctx, "a", won.ID, claim.ResolveFailed, "", "again", "ick_op1234")
	require.Equal(t, apperr.InvalidState, apperr.CodeOf(err))
	rec, err = b.ledger.ResolveAs(b.ctx, "a", won.ID, claim.ResolveCompleted, "inv_9", "found it", "ick_op1234")
	require.NoError(t, err)
	require.Equal(t, claim.StateCompleted, rec.State)
	require.Equal(t, "inv_9", rec.ResultRef)

	got, err := b.ledger.Get(b.ctx, "a", won.ID)
	require.NoError(t, err)
	var entries []claim.Delivery
	for _, d := range got.Deliveries {
		if d.Actor != "" {
			entries = append(entries, d)
		}
	}
	require.Len(t, entries, 2)
	require.Equal(t, "resolved_failed", entries[0].Outcome)
	require.Equal(t, "never sent", entries[0].Detail)
	require.Equal(t, "resolved_completed", entries[1].Outcome)
	require.Equal(t, "ick_op1234", entries[1].Actor)
}

func TestOverviewCountsPerSourceAndTenant(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	claimOf := func(tenant, source, event string) claim.Result {
		r, err := b.ledger.Claim(b.ctx, claim.Request{Tenant: tenant, Key: claim.Key{Source: source, EventID: event},
			PayloadHash: "0000000000000000000000000000000000000000000000000000000000000001"})
		require.NoError(t, err)
		return r
	}
	p1 := claimOf("a", "stripe", "e1") // processing
	claimOf("a", "stripe", "e2")       // processing
	u := claimOf("a", "stripe", "e3")
	_, err := b.ledger.Fail(b.ctx, "a", u.ID, u.Token, claim.UnknownOutcome, "t")
	require.NoError(t, err)
	d := claimOf("a", "github", "g1")
	_, err = b.ledger.Fail(b.ctx, "a", d.ID, d.Token, claim.Permanent, "p")
	require.NoError(t, err)
	c := claimOf("a", "github", "g2")
	_, err = b.ledger.Complete(b.ctx, "a", c.ID, c.Token, "")
	require.NoError(t, err)
	// A conflict on the completed record: another payload hash.
	r, err := b.ledger.Claim(b.ctx, claim.Request{Tenant: "a", Key: claim.Key{Source: "github", EventID: "g2"},
		PayloadHash: "0000000000000000000000000000000000000000000000000000000000000002"})
	require.NoError(t, err)
	require.Equal(t, claim.Conflict, r.Outcome)
	claimOf("b", "stripe", "e1") // another tenant's
	_, err = b.pool.Exec(b.ctx, `UPDATE claims SET claimed_at = now() - interval '90 seconds' WHERE id = $1`, p1.ID)
	require.NoError(t, err)

	ov, err := b.ledger.Overview(b.ctx, "a")
	require.NoError(t, err)
	require.Len(t, ov, 2)
	require.Equal(t, "github", ov[0].Source)
	require.Equal(t, map[claim.State]int64{claim.StateDeadLettered: 1}, ov[0].Open)
	require.Equal(t, int64(1), ov[0].ConflictRecords)
	require.Equal(t, int64(1), ov[0].Conflicts)
	require.Equal(t, "stripe", ov[1].Source)
	require.Equal(t, map[claim.State]int64{claim.StateProcessing: 2, claim.StateUnknown: 1}, ov[1].Open)
	require.GreaterOrEqual(t, ov[1].OldestProcessing, 89*time.Second)
	require.Less(t, ov[1].OldestProcessing, 10*time.Minute)

	ov, err = b.ledger.Overview(b.ctx, "b")
	require.NoError(t, err)
	require.Len(t, ov, 1)
	require.Equal(t, map[claim.State]int64{claim.StateProcessing: 1}, ov[0].Open)
}

func TestBrowseFiltersAndPages(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	var ids []string
	for _, ev := range []string{"evt_1", "evt_2", "evt_10", "evt_%", "evt__x", "other", "evt_3"} {
		r, err := b.ledger.Claim(b.ctx, req("a", ev))
		require.NoError(t, err)
		ids = append(ids, r.ID)
	}
	_, err := b.ledger.Claim(b.ctx, req("b", "evt_1"))
	require.NoError(t, err)
	// Distinct times, oldest first in claim order.
	for i, id := range ids {
		_, err := b.pool.Exec(b.ctx, `UPDATE claims SET updated_at = now() - make_interval(mins => $2),
			created_at = now() - make_interval(hours => $2) WHERE id = $1`, id, len(ids)-i)
		require.NoError(t, err)
	}

	// Paging newest first: no gaps, no repeats.
	var seen []string
	cursor := ""
	for page := 0; ; page++ {
		recs, next, err := b.ledger.Browse(b.ctx, "a", claim.BrowseFilter{Limit: 3, Cursor: cursor})
		require.NoError(t, err)
		for _, r := range recs {
			seen = append(seen, r.ID)
		}
		if next == "" {
			break
		}
		require.Less(t, page, 5)
		cursor = next
	}
	want := make([]string, len(ids))
	for i, id := range ids {
		want[len(ids)-1-i] = id
	}
	require.Equal(t, want, seen)

	eventIDs := func(f claim.BrowseFilter) []string {
		recs, _, err := b.ledger.Browse(b.ctx, "a", f)
		require.NoError(t, err)
		var out []string
		for _, r := range recs {
			out = append(out, r.EventID)
		}
		return out
	}
	// A prefix has no wildcards: "evt_%" is that text, "evt__" too.
	require.Equal(t, []string{"evt_%"}, eventIDs(claim.BrowseFilter{EventIDPrefix: "evt_%"}))
	require.Equal(t, []string{"evt__x"}, eventIDs(claim.BrowseFilter{EventIDPrefix: "evt__"}))
	require.Equal(t, []string{"evt_10", "evt_1"}, eventIDs(claim.BrowseFilter{EventIDPrefix: "evt_1"}))
	require.Empty(t, eventIDs(claim.BrowseFilter{State: claim.StateCompleted}))
	require.Len(t, eventIDs(claim.BrowseFilter{State: claim.StateProcessing}), 7)
	require.Empty(t, eventIDs(claim.BrowseFilter{Source: "github"}))
	// Time ranges: updated in the last 3.5 minutes, created 2.5 to 4.5 hours ago.
	require.Equal(t, []string{"evt_3", "other", "evt__x"}, eventIDs(claim.BrowseFilter{From: time.Now().Add(-210 * time.Second)}))
	require.Equal(t, []string{"evt__x", "evt_%"}, eventIDs(claim.BrowseFilter{Field: claim.ByCreated,
		From: time.Now().Add(-270 * time.Minute), To: time.Now().Add(-150 * time.Minute)}))

	for _, tc := range []struct {
		f     claim.BrowseFilter
		field string
	}{
		{claim.BrowseFilter{State: "nope"}, "state"},
		{claim.BrowseFilter{Source: "-x"}, "source"},
		{claim.BrowseFilter{EventIDPrefix: "a\x00"}, "event_id_prefix"},
		{claim.BrowseFilter{Field: "x"}, "time_field"},
		{claim.BrowseFilter{From: time.Now(), To: time.Now().Add(-time.Hour)}, "to"},
		{claim.BrowseFilter{Limit: 501}, "limit"},
		{claim.BrowseFilter{Cursor: "zz"}, "cursor"},
	} {
		_, _, err := b.ledger.Browse(b.ctx, "a", tc.f)
		require.Equal(t, tc.field, apperr.As(err).Field)
	}
}
