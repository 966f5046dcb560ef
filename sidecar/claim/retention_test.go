package claim_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// The two retentions (issue "Every hop keeps the event" §7, case B21): past
// the payload retention a terminal record loses its payload and delivery
// log and keeps its key, hashes and final outcome; past the key retention
// it is deleted.

const day = 24 * time.Hour

// payload adds what ingest and the dispatcher store for a record: an inbox
// row (body and headers) and a conflicting delivery's body.
func (b *bundle) payload(t *testing.T, id string) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, `INSERT INTO inbox_events (claim_id, tenant, source, body, headers, dispatch_state)
		SELECT id, tenant, source, '{"amount":4200}', '{"webhook-id":"msg"}', 'dispatched' FROM claims WHERE id = $1`, id)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `INSERT INTO inbox_conflicts (claim_id, body, payload_hash) VALUES ($1, '{"amount":1}', $2)`,
		id, strings.Repeat("f", 64))
	require.NoError(t, err)
}

// stored counts a record's rows: claims, inbox_events, inbox_conflicts and
// delivery-log entries.
func (b *bundle) stored(t *testing.T, id string) (claims, inbox, conflicts, log int) {
	t.Helper()
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT
		(SELECT count(*) FROM claims WHERE id = $1), (SELECT count(*) FROM inbox_events WHERE claim_id = $1),
		(SELECT count(*) FROM inbox_conflicts WHERE claim_id = $1), (SELECT count(*) FROM claim_deliveries WHERE claim_id = $1)`,
		id).Scan(&claims, &inbox, &conflicts, &log))
	return
}

func hashOf(c string) string { return strings.Repeat(c, 64) }

func TestRetentionPurgeKeepsKeysPastPayloadRetention(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{BySource: map[string]claim.Policy{
		"short": {Retention: 2 * time.Hour, KeyRetention: 5 * time.Hour},
	}})
	mk := func(source, event string, complete bool) claim.Result {
		r := claim.Request{Tenant: "a", Key: claim.Key{Source: source, EventID: event}, PayloadHash: hashOf("a")}
		res, err := b.ledger.Claim(b.ctx, r)
		require.NoError(t, err)
		if complete {
			_, err = b.ledger.Complete(b.ctx, "a", res.ID, res.Token, "ref-"+event)
			require.NoError(t, err)
		}
		b.payload(t, res.ID)
		return res
	}
	young := mk("stripe", "young", true)     // default: payload 30 days, key 400 days
	payload := mk("stripe", "payload", true) // past 30 days
	gone := mk("stripe", "gone", true)       // past 400 days
	open := mk("stripe", "open", false)      // processing, 500 days old
	shortYoung := mk("short", "s_young", true)
	shortPayload := mk("short", "s_payload", true)
	shortGone := mk("short", "s_gone", true)
	b.travel(t, young.ID, 29*day)
	b.travel(t, payload.ID, 31*day)
	b.travel(t, gone.ID, 401*day)
	b.travel(t, open.ID, 500*day)
	b.travel(t, shortYoung.ID, time.Hour)
	b.travel(t, shortPayload.ID, 3*time.Hour)
	b.travel(t, shortGone.ID, 6*time.Hour)

	res, err := b.ledger.Purge(b.ctx, 1) // one row per statement: every loop runs
	require.NoError(t, err)
	require.Equal(t, claim.PurgeResult{KeysDeleted: 2, PayloadsPurged: 2}, res)

	for _, id := range []string{gone.ID, shortGone.ID} {
		_, err := b.ledger.Get(b.ctx, "a", id)
		require.Equal(t, apperr.NotFound, apperr.CodeOf(err), "past the key retention the record is gone")
		c, in, cf, lg := b.stored(t, id)
		require.Zero(t, c+in+cf+lg, "with everything it held")
	}
	for _, id := range []string{young.ID, open.ID, shortYoung.ID} {
		c, in, cf, lg := b.stored(t, id)
		require.Equal(t, []int{1, 1, 1}, []int{c, in, cf}, "untouched")
		require.Positive(t, lg)
	}
	for _, r := range []claim.Result{payload, shortPayload} {
		c, in, cf, _ := b.stored(t, r.ID)
		require.Equal(t, []int{1, 0, 0}, []int{c, in, cf}, "key kept, body and conflict body removed")
		rec, err := b.ledger.Get(b.ctx, "a", r.ID)
		require.NoError(t, err)
		require.Equal(t, claim.StateCompleted, rec.State)
		require.Equal(t, "ref-"+r.EventID, rec.ResultRef)
		require.Equal(t, hashOf("a"), rec.PayloadHash)
		require.NotNil(t, rec.CompletedAt)
		require.Len(t, rec.Deliveries, 1, "the delivery log is replaced by its summary")
		require.Equal(t, "payload_purged", rec.Deliveries[0].Outcome)
		require.Equal(t, "removed 2 entries", rec.Deliveries[0].Detail, "won and completed")
		require.Equal(t, 1, rec.Deliveries[0].Attempt)
		var purgedAt *time.Time
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT payload_purged_at FROM claims WHERE id = $1`, r.ID).Scan(&purgedAt))
		require.NotNil(t, purgedAt)

		// The kept key decides as before: duplicate with its result_ref,
		// conflict on another payload hash.
		again := claim.Request{Tenant: "a", Key: r.Key, PayloadHash: hashOf("a")}
		d, err := b.ledger.Claim(b.ctx, again)
		require.NoError(t, err)
		require.Equal(t, claim.Duplicate, d.Outcome)
		require.Equal(t, r.ID, d.ID)
		require.Equal(t, "ref-"+r.EventID, d.ResultRef)
		again.PayloadHash = hashOf("b")
		c2, err := b.ledger.Claim(b.ctx, again)
		require.NoError(t, err)
		require.Equal(t, claim.Conflict, c2.Outcome)
	}

	res, err = b.ledger.Purge(b.ctx, 1000)
	require.NoError(t, err)
	require.Equal(t, claim.PurgeResult{}, res, "a second purge finds nothing: a kept key is purged once")
	rec, err := b.ledger.Get(b.ctx, "a", payload.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"payload_purged", "duplicate", "conflict"}, outcomes(rec))

	// Past the key retention the kept key goes too.
	b.travel(t, payload.ID, 370*day)
	res, err = b.ledger.Purge(b.ctx, 1000)
	require.NoError(t, err)
	require.Equal(t, claim.PurgeResult{KeysDeleted: 1}, res)
	fresh, err := b.ledger.Claim(b.ctx, claim.Request{Tenant: "a", Key: payload.Key})
	require.NoError(t, err)
	require.Equal(t, claim.Won, fresh.Outcome, "documented: after the key retention the key is new again")
	require.NotEqual(t, payload.ID, fresh.ID)
}

func outcomes(rec claim.Record) []string {
	var out []string
	for _, d := range rec.Deliveries {
		out = append(out, d.Outcome)
	}
	return out
}

// Every terminal state is purged (payload, then key), and the payload purge
// clears last_error (delivery detail); dead-lettered and stale keys keep
// answering dead_lettered and stale.
func TestRetentionPurgeTerminalStates(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{Default: claim.Policy{MaxAttempts: 1}})
	dl, err := b.ledger.Claim(b.ctx, req("a", "dead"))
	require.NoError(t, err)
	_, err = b.ledger.Fail(b.ctx, "a", dl.ID, dl.Token, claim.Permanent, "card 4242… declined for jane@example.com")
	require.NoError(t, err)
	v, v2 := int64(1), int64(2)
	done, err := b.ledger.Claim(b.ctx, claim.Request{Tenant: "a", Key: claim.Key{Source: "stripe", EventID: "v2"}, ObjectID: "o", ObjectVersion: &v2})
	require.NoError(t, err)
	_, err = b.ledger.Complete(b.ctx, "a", done.ID, done.Token, "")
	require.NoError(t, err)
	stale, err := b.ledger.Claim(b.ctx, claim.Request{Tenant: "a", Key: claim.Key{Source: "stripe", EventID: "v1"}, ObjectID: "o", ObjectVersion: &v})
	require.NoError(t, err)
	require.Equal(t, claim.Stale, stale.Outcome)
	unknown, err := b.ledger.Claim(b.ctx, req("a", "unknown"))
	require.NoError(t, err)
	_, err = b.ledger.Fail(b.ctx, "a", unknown.ID, unknown.Token, claim.UnknownOutcome, "timeout")
	require.NoError(t, err)
	for _, id := range []string{dl.ID, done.ID, stale.ID, unknown.ID} {
		b.travel(t, id, 31*day)
	}
	res, err := b.ledger.Purge(b.ctx, 10)
	require.NoError(t, err)
	require.Equal(t, claim.PurgeResult{PayloadsPurged: 3}, res, "dead_lettered, completed, stale; unknown is open")

	rec, err := b.ledger.Get(b.ctx, "a", dl.ID)
	require.NoError(t, err)
	require.Empty(t, rec.LastError, "the failure detail goes with the payload")
	require.Equal(t, claim.StateDeadLettered, rec.State)
	u, err := b.ledger.Get(b.ctx, "a", unknown.ID)
	require.NoError(t, err)
	require.Equal(t, "timeout", u.LastError, "open records keep everything")

	again, err := b.ledger.Claim(b.ctx, req("a", "dead"))
	require.NoError(t, err)
	require.Equal(t, claim.DeadLettered, again.Outcome)
	st, err := b.ledger.Claim(b.ctx, claim.Request{Tenant: "a", Key: claim.Key{Source: "stripe", EventID: "v1"}, ObjectID: "o", ObjectVersion: &v})
	require.NoError(t, err)
	require.Equal(t, claim.Stale, st.Outcome)
}

// A provider redelivery of a payload-purged key (ReceiveTx, as ingest calls
// it) finds the record: not inserted (no new inbox row, no dispatch), a
// conflict when the receipt hash differs, counted, the record unchanged.
func TestRedeliveryOfPayloadPurgedKey(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	r := req("a", "evt_b21")
	r.PayloadHash = hashOf("a")
	rc, err := b.ledger.ReceiveTx(b.ctx, b.pool, r)
	require.NoError(t, err)
	require.True(t, rc.Inserted)
	b.payload(t, rc.ID)
	w, err := b.ledger.Claim(b.ctx, req("a", "evt_b21"))
	require.NoError(t, err)
	require.Equal(t, claim.Won, w.Outcome)
	_, err = b.ledger.Complete(b.ctx, "a", w.ID, w.Token, "refund-1")
	require.NoError(t, err)
	b.travel(t, w.ID, 31*day)
	res, err := b.ledger.Purge(b.ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 1, res.PayloadsPurged)

	again, err := b.ledger.ReceiveTx(b.ctx, b.pool, r)
	require.NoError(t, err)
	require.False(t, again.Inserted, "a resend after the payload purge is no new event")
	require.False(t, again.Conflict)
	require.Equal(t, rc.ID, again.ID)
	require.Equal(t, "refund-1", again.ResultRef)
	require.Equal(t, claim.StateCompleted, again.State)

	r.PayloadHash = hashOf("c")
	other, err := b.ledger.ReceiveTx(b.ctx, b.pool, r)
	require.NoError(t, err)
	require.False(t, other.Inserted)
	require.True(t, other.Conflict, "the receipt hash is kept and compared")
	require.Equal(t, 1, other.ConflictCount)
}

// A conflicting body that arrives after the record's payload purge is kept
// for the payload retention from its own arrival, then purged; the record
// stays.
func TestRetentionPurgesLateConflictBodies(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	w, err := b.ledger.Claim(b.ctx, req("a", "evt_late"))
	require.NoError(t, err)
	_, err = b.ledger.Complete(b.ctx, "a", w.ID, w.Token, "")
	require.NoError(t, err)
	b.travel(t, w.ID, 31*day)
	res, err := b.ledger.Purge(b.ctx, 100)
	require.NoError(t, err)
	require.Equal(t, claim.PurgeResult{PayloadsPurged: 1}, res)

	_, err = b.pool.Exec(b.ctx, `INSERT INTO inbox_conflicts (claim_id, body, payload_hash, received_at)
		VALUES ($1, 'late-young', $2, now() - interval '29 days'), ($1, 'late-old', $2, now() - interval '31 days')`, w.ID, hashOf("e"))
	require.NoError(t, err)
	res, err = b.ledger.Purge(b.ctx, 100)
	require.NoError(t, err)
	require.Equal(t, claim.PurgeResult{ConflictsPurged: 1}, res)
	var left string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT string_agg(convert_from(body, 'UTF8'), ',') FROM inbox_conflicts WHERE claim_id = $1`, w.ID).Scan(&left))
	require.Equal(t, "late-young", left)
	c, _, _, _ := b.stored(t, w.ID)
	require.Equal(t, 1, c)
}

// A record another transaction holds (a claim or a redelivery deciding on
// it) is skipped, never waited for, and purged by the next run.
func TestRetentionPurgeSkipsLockedRecords(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	var ids []string
	for _, ev := range []string{"l1", "l2"} {
		w, err := b.ledger.Claim(b.ctx, req("a", ev))
		require.NoError(t, err)
		_, err = b.ledger.Complete(b.ctx, "a", w.ID, w.Token, "")
		require.NoError(t, err)
		b.travel(t, w.ID, 31*day)
		ids = append(ids, w.ID)
	}
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	_, err = tx.Exec(b.ctx, `SELECT 1 FROM claims WHERE id = $1 FOR UPDATE`, ids[0])
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	res, err := b.ledger.Purge(ctx, 100)
	require.NoError(t, err, "the purge does not wait for the held row")
	require.Equal(t, claim.PurgeResult{PayloadsPurged: 1}, res)
	require.NoError(t, tx.Rollback(b.ctx))
	res, err = b.ledger.Purge(b.ctx, 100)
	require.NoError(t, err)
	require.Equal(t, claim.PurgeResult{PayloadsPurged: 1}, res)
}

// Each purge statement can walk its partial index: the planner, told to
// avoid sequential scans, finds an index whose predicate the statement
// implies. (On a table this small it would otherwise scan it whole.) The
// conflict purge may as well start from the claims of the source; it
// never scans a table whole. claimbench -retention-keys shows the plans
// at scale.
func TestRetentionPurgeStatementsUseIndexes(t *testing.T) {
	t.Parallel()
	b := setup(t, claim.Policies{})
	for _, c := range []struct{ sql, index string }{
		{claim.PurgeKeysSQL, "claims_terminal_updated_idx"},
		{claim.PurgePayloadsSQL, "claims_payload_purge_idx"},
		{claim.PurgeConflictsSQL, ""},
	} {
		for _, exclude := range []bool{false, true} {
			tx, err := b.pool.Begin(b.ctx)
			require.NoError(t, err)
			_, err = tx.Exec(b.ctx, `SET LOCAL enable_seqscan = off`)
			require.NoError(t, err)
			// The statements' arguments: retention_seconds, exclude, sources, max_rows.
			rows, err := tx.Query(b.ctx, "EXPLAIN "+c.sql, (30 * day).Seconds(), exclude, []string{"stripe"}, 1000)
			require.NoError(t, err)
			plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			require.NoError(t, tx.Rollback(b.ctx))
			p := strings.Join(plan, "\n")
			require.NotContains(t, p, "Seq Scan", "plan:\n%s", p)
			require.Contains(t, p, c.index, "plan:\n%s", p)
		}
	}
}

func TestKeyRetentionPolicy(t *testing.T) {
	t.Parallel()
	d := claim.Policy{}.WithDefaults()
	require.Equal(t, 30*day, d.Retention)
	require.Equal(t, 400*day, d.KeyRetention)
	require.Equal(t, claim.DefaultKeyRetention, d.KeyRetention)

	long := claim.Policy{Retention: 500 * day}.WithDefaults()
	require.Equal(t, 500*day, long.KeyRetention, "a payload retention over the default key retention raises it")

	ps := claim.Policies{Default: claim.Policy{Retention: 10 * day, KeyRetention: 100 * day}, BySource: map[string]claim.Policy{
		"inherits": {},
		"own":      {KeyRetention: 200 * day},
		"longer":   {Retention: 150 * day},
	}}.WithDefaults()
	require.NoError(t, ps.Validate())
	require.Equal(t, 100*day, ps.For("inherits").KeyRetention)
	require.Equal(t, 200*day, ps.For("own").KeyRetention)
	require.Equal(t, 150*day, ps.For("longer").KeyRetention, "an inherited key retention never falls below the source's payload retention")

	for _, c := range []struct {
		p    claim.Policies
		want string
	}{
		{claim.Policies{Default: claim.Policy{Retention: 30 * day, KeyRetention: 20 * day}},
			`default policy: key_retention_days (20) cannot be shorter than retention_days (30)`},
		{claim.Policies{BySource: map[string]claim.Policy{"svix": {Retention: 90 * day, KeyRetention: 60 * day}}},
			`source "svix": key_retention_days (60) cannot be shorter than retention_days (90)`},
		{claim.Policies{BySource: map[string]claim.Policy{"svix": {KeyRetention: 10 * day}}},
			`source "svix": key_retention_days (10) cannot be shorter than retention_days (30)`},
		{claim.Policies{Default: claim.Policy{KeyRetention: -day}},
			`key_retention_days (-1) cannot be shorter than retention_days (30)`},
	} {
		err := c.p.WithDefaults().Validate()
		require.Error(t, err)
		require.Contains(t, err.Error(), c.want)
		_, err = claim.New(nil, claim.Config{Policies: c.p})
		require.ErrorContains(t, err, c.want, "the ledger refuses it too")
	}
}
