package backfill

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
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

// ListScans returns a source's latest scans, newest first, at most limit.
func ListScans(ctx context.Context, db claim.DBTX, tenant, source string, limit int) ([]Scan, error) {
	rows, err := db.Query(ctx, `SELECT id, source, trigger, COALESCE(actor, ''), mode, started_at, finished_at, range_start,
		range_end, pages, listed, missed, backfilled, redelivered, result, COALESCE(error, '')
		FROM backfill_scans WHERE tenant = $1 AND source = $2 ORDER BY id DESC LIMIT $3`, tenant, source, limit)
	if err != nil {
		return nil, claim.DBError(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Scan, error) {
		var s Scan
		err := r.Scan(&s.ID, &s.Source, &s.Trigger, &s.Actor, &s.Mode, &s.StartedAt, &s.FinishedAt, &s.RangeStart,
			&s.RangeEnd, &s.Pages, &s.Listed, &s.Missed, &s.Backfilled, &s.Redelivered, &s.Result, &s.Error)
		return s, err
	})
	if err != nil {
		return nil, claim.DBError(err)
	}
	if out == nil {
		out = []Scan{}
	}
	return out, nil
}

// ListEvents returns a source's findings, newest first, at most limit;
// state "" means any.
func ListEvents(ctx context.Context, db claim.DBTX, tenant, source, state string, limit int) ([]Finding, error) {
	rows, err := db.Query(ctx, `SELECT event_id, provider_id, COALESCE(event_type, ''), provider_created_at, detected_at,
		scan_id, state, COALESCE(claim_id::text, '') FROM backfill_events
		WHERE tenant = $1 AND source = $2 AND ($3 = '' OR state = $3) ORDER BY detected_at DESC, event_id LIMIT $4`,
		tenant, source, state, limit)
	if err != nil {
		return nil, claim.DBError(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Finding, error) {
		var f Finding
		err := r.Scan(&f.EventID, &f.ProviderID, &f.EventType, &f.ProviderCreatedAt, &f.DetectedAt, &f.ScanID, &f.State, &f.ClaimID)
		return f, err
	})
	if err != nil {
		return nil, claim.DBError(err)
	}
	if out == nil {
		out = []Finding{}
	}
	return out, nil
}
