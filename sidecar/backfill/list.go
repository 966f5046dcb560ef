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
	rows, err := dbtx.Query(ctx, `SELECT `+scanColumns+` FROM backfill_scans
		WHERE tenant = $1 AND source = $2 AND ($3::bigint <= 0 OR id < $3) ORDER BY id DESC LIMIT $4`,
		tenant, source, q.Before, limit+1)
	if err != nil {
		return nil, 0, db.Error(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Scan, error) { return scanScan(r) })
	if err != nil {
		return nil, 0, db.Error(err)
	}
	if len(out) > limit {
		out = out[:limit]
		next = out[limit-1].ID
	}
	if out == nil {
		out = []Scan{}
	}
	return out, next, nil
}

// GetScan returns the tenant's scan id of source; found false when there
// is none (or it is another tenant's or source's).
func GetScan(ctx context.Context, dbtx claim.DBTX, tenant, source string, id int64) (Scan, bool, error) {
	sc, err := scanScan(dbtx.QueryRow(ctx, `SELECT `+scanColumns+` FROM backfill_scans
		WHERE tenant = $1 AND source = $2 AND id = $3`, tenant, source, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Scan{}, false, nil
	}
	if err != nil {
		return Scan{}, false, db.Error(err)
	}
	return sc, true, nil
}

// scanColumns are the backfill_scans columns scanScan reads.
const scanColumns = `id, source, trigger, COALESCE(actor, ''), mode, requested_at, started_at, finished_at, range_start,
	range_end, pages, listed, missed, backfilled, redelivered, result, COALESCE(error, ''), backlog_from, backlog_to,
	COALESCE(notes, '')`

// scanScan reads scanColumns; a range not known yet (a queued scan of
// the source's default range) is left nil.
func scanScan(r pgx.Row) (Scan, error) {
	var s Scan
	err := r.Scan(&s.ID, &s.Source, &s.Trigger, &s.Actor, &s.Mode, &s.RequestedAt, &s.StartedAt, &s.FinishedAt, &s.RangeStart,
		&s.RangeEnd, &s.Pages, &s.Listed, &s.Missed, &s.Backfilled, &s.Redelivered, &s.Result, &s.Error, &s.BacklogFrom,
		&s.BacklogTo, &s.Notes)
	return s, err
}

// findingsSQL reads a source's findings with their state now: a stored
// state is what the last scan saw, and the ledger may have moved since —
// a fetched event whose record now has a receipt hash got its real
// delivery after the backfill (late_real); a missed event, or one whose
// redelivery was requested, whose key the ledger now holds has arrived
// (with that record's id). The next scan persists the same states.
const findingsSQL = `SELECT event_id, provider_id, event_type, provider_created_at, detected_at, scan_id, state, claim_id FROM (
	SELECT e.event_id, e.provider_id, COALESCE(e.event_type, '') AS event_type, e.provider_created_at, e.detected_at, e.scan_id,
		CASE WHEN e.state = 'fetched' AND cf.receipt_hash IS NOT NULL THEN 'late_real'
			WHEN e.state IN ('missed', 'redelivery_requested') AND ck.id IS NOT NULL THEN 'arrived'
			ELSE e.state END AS state,
		COALESCE(e.claim_id::text, ck.id::text, '') AS claim_id
	FROM backfill_events e
	LEFT JOIN claims cf ON cf.id = e.claim_id AND cf.tenant = e.tenant
	LEFT JOIN claims ck ON e.state IN ('missed', 'redelivery_requested') AND ck.tenant = e.tenant
		AND ck.source = e.scope AND ck.event_id = e.event_id AND ck.action = ''
	WHERE e.tenant = $1 AND e.source = $2
		AND ($4::timestamptz IS NULL OR e.detected_at < $4 OR (e.detected_at = $4 AND e.event_id > $5))
	) f
	WHERE ($3 = '' OR state = $3)
	ORDER BY detected_at DESC, event_id LIMIT $6`

// ListEvents returns a page of a source's findings, newest first, each
// in the state it is in now (findingsSQL), filtered on that state
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
	rows, err := dbtx.Query(ctx, findingsSQL, tenant, source, q.State, at, afterID, limit+1)
	if err != nil {
		return nil, "", db.Error(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Finding, error) {
		var f Finding
		err := r.Scan(&f.EventID, &f.ProviderID, &f.EventType, &f.ProviderCreatedAt, &f.DetectedAt, &f.ScanID, &f.State, &f.ClaimID)
		return f, err
	})
	if err != nil {
		return nil, "", db.Error(err)
	}
	if len(out) > limit {
		out = out[:limit]
		last := out[limit-1]
		next = EventCursor(last.DetectedAt, last.EventID)
	}
	if out == nil {
		out = []Finding{}
	}
	return out, next, nil
}
