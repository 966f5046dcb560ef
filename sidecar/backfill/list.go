package backfill

import (
	"context"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
)

// Finding is one missed event (backfill_events), as the API shows it.
type Finding struct {
	EventID           string     `json:"event_id"`
	ProviderID        string     `json:"provider_id"`
	EventType         string     `json:"event_type,omitempty"`
	ProviderCreatedAt *time.Time `json:"provider_created_at,omitempty"`
	DetectedAt        time.Time  `json:"detected_at"`
	ScanID            int64      `json:"scan_id"`
	State             string     `json:"state"`
	ClaimID           string     `json:"claim_id,omitempty"`
}

// Listing bounds: a page holds 1 to MaxListLimit rows; without a limit
// the API answers DefaultScanLimit scans or DefaultEventLimit findings.
const (
	MaxListLimit      = 200
	DefaultScanLimit  = 50
	DefaultEventLimit = 200
)

// ScanQuery selects a page of a source's scans, newest first.
type ScanQuery struct {
	// Limit is the page's size, 1…MaxListLimit (0: DefaultScanLimit).
	Limit int
	// Before, when positive, starts the page after the scan of that id
	// (the previous page's next): scans of a smaller id.
	Before int64
}

// EventQuery selects a page of a source's findings, newest first.
type EventQuery struct {
	// State is the state the findings are in now (ListEvents), "" any.
	State string
	// Limit is the page's size, 1…MaxListLimit (0: DefaultEventLimit).
	Limit int
	// Before, when not "", starts the page after the finding it names
	// (the previous page's next, an opaque cursor: EventCursor).
	Before string
}

// ErrBadCursor is EventQuery.Before that is no cursor ListEvents made.
var ErrBadCursor = errors.New("not a cursor of this listing (use the next of the previous page)")

// EventCursor is the opaque cursor of the finding detected at at with
// eventID: base64url (RFC 4648 §5, no padding) of the detection time in
// Unix microseconds (PostgreSQL's precision), ".", and the event id.
func EventCursor(at time.Time, eventID string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at.UnixMicro(), 10) + "." + eventID))
}

// parseEventCursor reverses EventCursor; ErrBadCursor for anything else.
func parseEventCursor(c string) (time.Time, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, "", ErrBadCursor
	}
	us, id, ok := strings.Cut(string(raw), ".")
	n, err := strconv.ParseInt(us, 10, 64)
	if !ok || err != nil || id == "" || n <= 0 {
		return time.Time{}, "", ErrBadCursor
	}
	return time.UnixMicro(n).UTC(), id, nil
}

func limitOf(n, def int) int {
	if n <= 0 {
		return def
	}
	if n > MaxListLimit {
		return MaxListLimit
	}
	return n
}

// ListScans returns a page of a source's scans, newest first, and next:
// the Before of the page after it, 0 at the end.
func ListScans(ctx context.Context, dbtx claim.DBTX, tenant, source string, q ScanQuery) (scans []Scan, next int64, err error) {
	limit := limitOf(q.Limit, DefaultScanLimit)
	rows, err := queries.ListScans(ctx, dbtx, dbsqlc.ListScansParams{Tenant: tenant, Source: source, Before: q.Before,
		MaxRows: int32(limit + 1)})
	if err != nil {
		return nil, 0, db.Error(err)
	}
	out := make([]Scan, len(rows))
	for i, r := range rows {
		out[i] = scanOf(dbsqlc.GetScanRow(r))
	}
	if len(out) > limit {
		out = out[:limit]
		next = out[limit-1].ID
	}
	return out, next, nil
}

// GetScan returns the tenant's scan id of source; found false when there
// is none (or it is another tenant's or source's).
func GetScan(ctx context.Context, dbtx claim.DBTX, tenant, source string, id int64) (Scan, bool, error) {
	row, err := queries.GetScan(ctx, dbtx, dbsqlc.GetScanParams{Tenant: tenant, Source: source, ID: id})
	if errors.Is(err, pgx.ErrNoRows) {
		return Scan{}, false, nil
	}
	if err != nil {
		return Scan{}, false, db.Error(err)
	}
	return scanOf(row), true, nil
}

// scanOf is the Scan of a row of the statements that return one (each
// selects GetScan's columns, so that its row converts to GetScanRow); a
// range not known yet (a queued scan of the source's default range) is
// left nil.
func scanOf(r dbsqlc.GetScanRow) Scan {
	return Scan{ID: r.ID, Source: r.Source, Trigger: r.Trigger, Actor: r.Actor, Mode: r.Mode, RequestedAt: r.RequestedAt,
		StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, RangeStart: r.RangeStart, RangeEnd: r.RangeEnd, Pages: int(r.Pages),
		Listed: int(r.Listed), Missed: int(r.Missed), Backfilled: int(r.Backfilled), Redelivered: int(r.Redelivered),
		Result: r.Result, Error: r.Error, BacklogFrom: r.BacklogFrom, BacklogTo: r.BacklogTo, Notes: r.Notes}
}

// queries runs the package's statements (sidecar/db/queries/backfill.sql).
var queries = dbsqlc.New()

// ListEvents returns a page of a source's findings, newest first, each
// in the state it is in now (dbsqlc.Findings), filtered on that state
// (q.State, "" any), and next: the Before of the page after it, "" at
// the end. Errors: ErrBadCursor for a q.Before it did not make, else the
// database's.
func ListEvents(ctx context.Context, dbtx claim.DBTX, tenant, source string, q EventQuery) (evs []Finding, next string, err error) {
	limit := limitOf(q.Limit, DefaultEventLimit)
	var at *time.Time
	var afterID string
	if q.Before != "" {
		t, id, err := parseEventCursor(q.Before)
		if err != nil {
			return nil, "", err
		}
		at, afterID = &t, id
	}
	rows, err := queries.Findings(ctx, dbtx, dbsqlc.FindingsParams{Tenant: tenant, Source: source, State: q.State,
		BeforeAt: at, AfterEventID: afterID, MaxRows: int32(limit + 1)})
	if err != nil {
		return nil, "", db.Error(err)
	}
	out := make([]Finding, len(rows))
	for i, r := range rows {
		out[i] = Finding(r)
	}
	if len(out) > limit {
		out = out[:limit]
		last := out[limit-1]
		next = EventCursor(last.DetectedAt, last.EventID)
	}
	return out, next, nil
}
