package claim

// What the web console reads: a tenant's overview per source, and its
// records filtered and paged newest first. Every statement is scoped to
// the tenant in its WHERE clause.

import (
	"context"
	"sort"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
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
	open, err := queries.OverviewOpen(ctx, l.pool, tenant)
	if err != nil {
		return nil, db.Error(err)
	}
	for _, r := range open {
		s := get(r.Source)
		s.Open[State(r.State)] = r.Records
		switch State(r.State) {
		case StateReceived:
			s.OldestReceived = seconds(r.OldestReceivedSeconds)
		case StateProcessing:
			s.OldestProcessing = seconds(r.OldestProcessingSeconds)
		}
	}
	conflicts, err := queries.OverviewConflicts(ctx, l.pool, tenant)
	if err != nil {
		return nil, db.Error(err)
	}
	for _, r := range conflicts {
		s := get(r.Source)
		s.ConflictRecords, s.Conflicts = r.Records, r.Conflicts
	}
	dead, err := queries.OverviewDeadDispatches(ctx, l.pool, tenant)
	if err != nil {
		return nil, db.Error(err)
	}
	for _, r := range dead {
		get(r.Source).DispatchDeadLettered = r.Dispatches
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
	switch f.Field {
	case "", ByUpdated, ByCreated:
	default:
		return nil, "", apperr.Field("time_field", "must be updated or created")
	}
	limit, after, afterID, err := pageStart(f.Limit, f.Cursor, "is not a next cursor of this list")
	if err != nil {
		return nil, "", err
	}
	arg := dbsqlc.BrowseByUpdatedParams{Tenant: tenant, State: nullable(string(f.State)), Source: nullable(f.Source),
		EventIDPrefix: nullable(f.EventIDPrefix), FromAt: timeOrNil(f.From), UntilAt: timeOrNil(f.To),
		AfterAt: after, AfterID: afterID, MaxRows: int32(limit + 1)}
	recs := []Record{}
	if f.Field == ByCreated {
		rows, err := queries.BrowseByCreated(ctx, l.pool, dbsqlc.BrowseByCreatedParams(arg))
		for _, r := range rows {
			recs = append(recs, recordOf(dbsqlc.RecordRow(r)))
		}
		if err != nil {
			return nil, "", db.Error(err)
		}
	} else {
		rows, err := queries.BrowseByUpdated(ctx, l.pool, arg)
		for _, r := range rows {
			recs = append(recs, recordOf(dbsqlc.RecordRow(r)))
		}
		if err != nil {
			return nil, "", db.Error(err)
		}
	}
	return page(recs, limit, func(r Record) time.Time {
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
