package claim

// What the web console reads: a tenant's overview per source, and its
// records filtered and paged newest first. Every statement is scoped to
// the tenant in its WHERE clause.

import (
	"context"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
)

// SourceSummary is one source of a tenant's overview: the numbers the
// metrics have (claimd_records_open, the oldest waiting ages, conflicts,
// dead letters), for this tenant and source.
type SourceSummary struct {
	Source string
	// Open counts the open records by state (received, processing,
	// retryable_failed, dead_lettered, unknown; absent: 0).
	Open map[State]int64
	// OldestReceived is the age of the oldest received (ingested, not yet
	// claimed) record, OldestProcessing of the oldest processing claim
	// (since it was won); 0 when there is none.
	OldestReceived, OldestProcessing time.Duration
	// ConflictRecords counts the records that saw a conflicting payload,
	// Conflicts the conflicting deliveries and claims they saw.
	ConflictRecords, Conflicts int64
	// DispatchDeadLettered counts the inbox events whose dispatch was
	// dead-lettered (replay them).
	DispatchDeadLettered int64
}

// overviewOpenSQL counts tenant $1's open records per source and state,
// with the oldest received and processing ages (seconds), through the
// partial index claims_list_idx (tenant, state, …).
const overviewOpenSQL = `SELECT source, state, count(*),
	COALESCE(EXTRACT(EPOCH FROM statement_timestamp() - min(created_at) FILTER (WHERE state = 'received')), 0),
	COALESCE(EXTRACT(EPOCH FROM statement_timestamp() - min(claimed_at) FILTER (WHERE state = 'processing')), 0)
	FROM claims
	WHERE tenant = $1 AND state IN ('received', 'processing', 'retryable_failed', 'dead_lettered', 'unknown')
	GROUP BY source, state`

// overviewConflictsSQL counts tenant $1's records with conflicts, and the
// conflicts, per source (partial index claims_conflicts_idx, migration
// 00010).
const overviewConflictsSQL = `SELECT source, count(*), sum(conflict_count)::bigint FROM claims
	WHERE tenant = $1 AND conflict_count > 0 GROUP BY source`

// overviewDispatchSQL counts tenant $1's dead-lettered dispatches per
// source of their record (partial index inbox_events_dispatch_dead_idx).
const overviewDispatchSQL = `SELECT c.source, count(*) FROM inbox_events e JOIN claims c ON c.id = e.claim_id
	WHERE e.tenant = $1 AND e.dispatch_state = 'dead_lettered' AND c.tenant = $1 GROUP BY c.source`

// Overview returns tenant's summary per source, sorted by source name:
// every source with an open record, a conflict or a dead-lettered
// dispatch. Its three statements read partial indexes of open, conflicting
// and dead-lettered rows only, so its cost grows with those, never with
// the completed records kept for their retention. Errors: Unavailable.
func (l *Ledger) Overview(ctx context.Context, tenant string) ([]SourceSummary, error) {
	by := map[string]*SourceSummary{}
	get := func(src string) *SourceSummary {
		s := by[src]
		if s == nil {
			s = &SourceSummary{Source: src, Open: map[State]int64{}}
			by[src] = s
		}
		return s
	}
	rows, err := l.pool.Query(ctx, overviewOpenSQL, tenant)
	if err != nil {
		return nil, db.Error(err)
	}
	var src string
	var state State
	var n int64
	var oldRec, oldProc float64
	_, err = pgx.ForEachRow(rows, []any{&src, &state, &n, &oldRec, &oldProc}, func() error {
		s := get(src)
		s.Open[state] = n
		switch state {
		case StateReceived:
			s.OldestReceived = seconds(oldRec)
		case StateProcessing:
			s.OldestProcessing = seconds(oldProc)
		}
		return nil
	})
	if err != nil {
		return nil, db.Error(err)
	}
	var records, conflicts int64
	rows, err = l.pool.Query(ctx, overviewConflictsSQL, tenant)
	if err != nil {
		return nil, db.Error(err)
	}
	if _, err = pgx.ForEachRow(rows, []any{&src, &records, &conflicts}, func() error {
		s := get(src)
		s.ConflictRecords, s.Conflicts = records, conflicts
		return nil
	}); err != nil {
		return nil, db.Error(err)
	}
	rows, err = l.pool.Query(ctx, overviewDispatchSQL, tenant)
	if err != nil {
		return nil, db.Error(err)
	}
	if _, err = pgx.ForEachRow(rows, []any{&src, &n}, func() error {
		get(src).DispatchDeadLettered = n
		return nil
	}); err != nil {
		return nil, db.Error(err)
	}
	out := make([]SourceSummary, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Source < out[j].Source })
	return out, nil
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

// TimeField is the record time a Browse filters and orders by.
type TimeField string

// Time fields.
const (
	// ByUpdated: the record's last change (the default).
	ByUpdated TimeField = "updated"
	// ByCreated: when the record was first seen.
	ByCreated TimeField = "created"
)

// BrowseFilter selects the records of Browse. Every field is optional.
type BrowseFilter struct {
	// State keeps the records in this state (any of States).
	State State
	// Source keeps the records of this source.
	Source string
	// EventIDPrefix keeps the records whose event id starts with it, byte
	// for byte (no wildcards), at most MaxEventIDLen bytes.
	EventIDPrefix string
	// Field is the time the range and the order use; "" is ByUpdated.
	Field TimeField
	// From and To bound Field: From ≤ t < To; zero: unbounded.
	From, To time.Time
	// Limit is the page size, 1..MaxListLimit; 0 means DefaultListLimit.
	Limit int
	// Cursor is the next cursor of the previous page; empty for the first.
	Cursor string
}

// browseTemplate returns one page of tenant $1's records, newest first by
// ({T}, id), {T} being updated_at or created_at, after the cursor position
// ($7, $8) when given. $2 state, $3 source, $4 event id prefix (each NULL:
// any), $5 from, $6 to (NULL: unbounded), $9 row limit. The prefix is
// compared with starts_with, so no byte of it is a wildcard.
const browseTemplate = `SELECT ` + recordColumns + ` FROM claims
	WHERE tenant = $1
	  AND ($2::text IS NULL OR state = $2)
	  AND ($3::text IS NULL OR source = $3)
	  AND ($4::text IS NULL OR starts_with(event_id, $4))
	  AND ($5::timestamptz IS NULL OR {T} >= $5)
	  AND ($6::timestamptz IS NULL OR {T} < $6)
	  AND ($7::timestamptz IS NULL OR ({T}, id) < ($7::timestamptz, $8::uuid))
	ORDER BY {T} DESC, id DESC
	LIMIT $9`

var (
	browseUpdatedSQL = strings.ReplaceAll(browseTemplate, "{T}", "updated_at")
	browseCreatedSQL = strings.ReplaceAll(browseTemplate, "{T}", "created_at")
)

// Browse returns one page of tenant's records, newest first by f.Field
// (and id), without delivery logs, and the cursor of the next page: empty
// when there is no more. A record that changes while a caller pages by
// ByUpdated moves to the front and is not seen again on later pages.
// Errors: Invalid naming state, source, event_id_prefix, to, limit or
// cursor; Unavailable.
func (l *Ledger) Browse(ctx context.Context, tenant string, f BrowseFilter) ([]Record, string, error) {
	if tenant == "" {
		return nil, "", apperr.New(apperr.Unauthorized, "no tenant")
	}
	if f.State != "" && !containsState(States, f.State) {
		return nil, "", apperr.Field("state", "must be one of received, processing, completed, retryable_failed, "+
			"dead_lettered, unknown, stale")
	}
	if err := checkSource(f.Source); err != nil {
		return nil, "", err
	}
	if len(f.EventIDPrefix) > MaxEventIDLen {
		return nil, "", apperr.Field("event_id_prefix", "must be at most %d bytes", MaxEventIDLen)
	}
	if err := textFields(map[string]string{"event_id_prefix": f.EventIDPrefix}); err != nil {
		return nil, "", err
	}
	if !f.From.IsZero() && !f.To.IsZero() && !f.To.After(f.From) {
		return nil, "", apperr.Field("to", "must be later than from")
	}
	if f.Limit < 0 || f.Limit > MaxListLimit {
		return nil, "", apperr.Field("limit", "must be from 1 to %d", MaxListLimit)
	}
	sql := browseUpdatedSQL
	switch f.Field {
	case "", ByUpdated:
	case ByCreated:
		sql = browseCreatedSQL
	default:
		return nil, "", apperr.Field("time_field", "must be updated or created")
	}
	limit, after, afterID, err := pageStart(f.Limit, f.Cursor, "is not a next cursor of this list")
	if err != nil {
		return nil, "", err
	}
	rows, err := l.pool.Query(ctx, sql, tenant, nullable(string(f.State)), nullable(f.Source),
		nullable(f.EventIDPrefix), timeOrNil(f.From), timeOrNil(f.To), after, afterID, limit+1)
	return collectPage(rows, err, limit, func(r Record) time.Time {
		if f.Field == ByCreated {
			return r.CreatedAt
		}
		return r.UpdatedAt
	})
}

func containsState(states []State, s State) bool {
	for _, x := range states {
		if x == s {
			return true
		}
	}
	return false
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
