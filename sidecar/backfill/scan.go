package backfill

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/ingest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// Trigger says who started a scan.
type Trigger struct {
	// Kind is "schedule", "api" or "console".
	Kind string
	// Actor is the operator's key prefix ("" for the schedule).
	Actor string
	// Mode overrides the source's mode for this scan ("" keeps it); it
	// can only narrow it (see Scanner.Run).
	Mode ingest.BackfillMode
	// ScanID, when not zero, is the backfill_scans row of result queued
	// made when the scan was asked for: Run turns that row into the
	// running scan (with its range) instead of making a new one, or makes
	// a new one when that row is gone (purged) or no longer queued.
	ScanID int64
	// From and To ask for an explicit range [From, To) (an operator's),
	// clamped to the provider's window (see Window) and listed whatever
	// the source's cursor says; a zero bound is the window's own. Both
	// zero: the source's default range (from its cursor, less the
	// overlap, to the window's end).
	From, To time.Time
}

// Trigger kinds.
const (
	TriggerSchedule = "schedule"
	TriggerAPI      = "api"
	TriggerConsole  = "console"
)

// Scan results.
const (
	ResultRunning           = "running"
	ResultOK                = "ok"
	ResultRateLimited       = "rate_limited"
	ResultCredentialRefused = "credential_refused"
	ResultError             = "error"
)

// States of a missed event (backfill_events.state).
const (
	StateMissed              = "missed"
	StateFetched             = "fetched"
	StateRedeliveryRequested = "redelivery_requested"
	StateArrived             = "arrived"
	StateLateReal            = "late_real"
)

// Scan is one scan's record (backfill_scans).
type Scan struct {
	ID          int64      `json:"id"`
	Source      string     `json:"source"`
	Trigger     string     `json:"trigger"`
	Actor       string     `json:"actor,omitempty"`
	Mode        string     `json:"mode"`
	StartedAt   time.Time  `json:"started_at"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
	RangeStart  time.Time  `json:"range_start"`
	RangeEnd    time.Time  `json:"range_end"`
	Pages       int        `json:"pages"`
	Listed      int        `json:"listed"`
	Missed      int        `json:"missed"`
	Backfilled  int        `json:"backfilled"`
	Redelivered int        `json:"redelivered"`
	Result      string     `json:"result"`
	Error       string     `json:"error,omitempty"`
}

// Scanner runs scans. Its zero value is not usable: set Inbox.
type Scanner struct {
	Inbox *ingest.Inbox
	Log   zerolog.Logger
	// HTTP, Sleep, Now, Jitter: see Client. Now is also the scan's clock.
	HTTP   *http.Client
	Sleep  func(ctx context.Context, d time.Duration) error
	Now    func() time.Time
	Jitter func() float64
	// Obs receives metrics events; nil none.
	Obs Observer
	// Overlap is how far before the last scan's end a scan lists again
	// (clock skew, events the provider lists late); default 1 h.
	Overlap time.Duration
}

func (s *Scanner) now() time.Time {
	if s.Now != nil {
		return s.Now().UTC()
	}
	return time.Now().UTC()
}

func (s *Scanner) obs() Observer {
	if s.Obs != nil {
		return s.Obs
	}
	return nopObserver{}
}

// NewLister returns the Lister of src's provider over c.
func NewLister(src *ingest.Source, c *Client) (Lister, error) {
	b := src.Backfill
	if b == nil {
		return nil, errors.New("the source has no backfill configuration")
	}
	switch src.Provider {
	case verify.TypeStripe:
		return &stripeLister{c: c, base: b.BaseURL, key: b.Credentials[0], failed: b.OnlyFailed, pageSize: StripePageSize}, nil
	case verify.TypeGitHub:
		return newGitHubLister(c, b)
	case verify.TypeSquare:
		return &squareLister{c: c, base: b.BaseURL, key: b.Credentials[0], version: b.SquareVersion, locations: b.SquareLocationIDs}, nil
	}
	return nil, fmt.Errorf("backfill is not implemented for provider %s", src.Provider)
}

// Run scans src once: it lists the provider's events over the window,
// finds those the ledger lacks, records them (backfill_events) and, by
// mode, fetches or has them redelivered; the scan is recorded in
// backfill_scans and the source's cursor in backfill_state. A provider
// failure ends the scan with its result (credential_refused,
// rate_limited, error) and a fixed error text, and is not an error of
// Run; Run's error is the database's (the scan row may then say running).
// trig.Mode may narrow the source's mode (report always; fetch or
// redeliver when the source's mode is auto or that mode).
func (s *Scanner) Run(ctx context.Context, src *ingest.Source, trig Trigger) (Scan, error) {
	b := src.Backfill
	if b == nil {
		return Scan{}, errors.New("the source has no backfill configuration")
	}
	mode, err := ModeFor(src, trig.Mode)
	if err != nil {
		return Scan{}, err
	}
	pool := s.Inbox.Pool()
	now := s.now()
	win := Window(src, now)
	r := win
	var until *time.Time
	if err := pool.QueryRow(ctx, `SELECT scanned_until FROM backfill_state WHERE tenant = $1 AND source = $2`,
		src.Tenant, src.Name).Scan(&until); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return Scan{}, claim.DBError(err)
	}
	if !trig.From.IsZero() || !trig.To.IsZero() {
		if trig.From.After(r.From) {
			r.From = trig.From
		}
		if !trig.To.IsZero() && trig.To.Before(r.To) {
			r.To = trig.To
		}
	} else {
		overlap := s.Overlap
		if overlap == 0 {
			overlap = time.Hour
		}
		if until != nil && until.Add(-overlap).After(r.From) {
			r.From = until.Add(-overlap)
		}
	}
	// contiguous: the range joins what earlier scans covered (or starts
	// at the window), so a complete scan moves the cursor to its end.
	contiguous := !r.From.After(win.From) || (until != nil && !r.From.After(*until))
	if !r.From.Before(r.To) {
		r.From = r.To
	}
	// Findings of earlier scans settled since: a requested redelivery
	// whose key the ledger now holds has arrived; a fetched event whose
	// record now has a receipt hash got its real delivery late.
	if _, err := pool.Exec(ctx, `UPDATE backfill_events e SET state = 'arrived', claim_id = c.id, updated_at = now()
		FROM claims c WHERE e.tenant = $1 AND e.source = $2 AND e.state = 'redelivery_requested'
		AND c.tenant = e.tenant AND c.source = e.scope AND c.event_id = e.event_id AND c.action = ''`, src.Tenant, src.Name); err != nil {
		return Scan{}, claim.DBError(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE backfill_events e SET state = 'late_real', updated_at = now()
		FROM claims c WHERE e.tenant = $1 AND e.source = $2 AND e.state = 'fetched' AND c.id = e.claim_id
		AND c.receipt_hash IS NOT NULL`, src.Tenant, src.Name); err != nil {
		return Scan{}, claim.DBError(err)
	}
	sc := Scan{Source: src.Name, Trigger: trig.Kind, Actor: trig.Actor, Mode: string(mode), StartedAt: now,
		RangeStart: r.From, RangeEnd: r.To, Result: ResultRunning}
	var actor *string
	if trig.Actor != "" {
		actor = &trig.Actor
	}
	if trig.ScanID != 0 {
		// The row made when the scan was asked for, if it is still there
		// and still queued (a purge may have removed it).
		err := pool.QueryRow(ctx, `UPDATE backfill_scans SET result = 'running', started_at = $4, mode = $5,
			range_start = $6, range_end = $7 WHERE id = $1 AND tenant = $2 AND source = $3 AND result = 'queued'
			RETURNING id`, trig.ScanID, src.Tenant, src.Name, now, string(mode), r.From, r.To).Scan(&sc.ID)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return Scan{}, claim.DBError(err)
		}
	}
	if sc.ID == 0 {
		if err := pool.QueryRow(ctx, `INSERT INTO backfill_scans (tenant, source, trigger, actor, mode, started_at, range_start, range_end)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id`, src.Tenant, src.Name, trig.Kind, actor, string(mode), now, r.From, r.To).
			Scan(&sc.ID); err != nil {
			return Scan{}, claim.DBError(err)
		}
	}
	c := &Client{HTTP: s.HTTP, Sleep: s.Sleep, Now: s.Now, Jitter: s.Jitter, MaxWait: b.MaxWait, Log: s.Log, Source: src.Name,
		Obs: s.Obs, GitHub: src.Provider == verify.TypeGitHub}
	lister, err := NewLister(src, c)
	var dbErr error
	if err == nil {
		err = lister.List(ctx, r, func(p Page) error {
			sc.Pages++
			if sc.Pages > b.MaxPages {
				return errMaxPages
			}
			e := s.page(ctx, src, lister, mode, &sc, p)
			if e != nil && !providerErr(e) {
				dbErr = e
			}
			return e
		})
	}
	if dbErr != nil {
		return sc, dbErr
	}
	switch {
	case err == nil:
		sc.Result = ResultOK
	case errors.Is(err, errMaxPages):
		sc.Pages--
		sc.Result, sc.Error = ResultError, fmt.Sprintf("the list has more than backfill.max_pages (%d) pages: the scan stopped there", b.MaxPages)
	case errors.Is(err, ErrCredentialRefused):
		sc.Result, sc.Error = ResultCredentialRefused, ErrCredentialRefused.Error()
	case errors.Is(err, ErrRateLimited):
		sc.Result, sc.Error = ResultRateLimited, ErrRateLimited.Error()
	case ctx.Err() != nil:
		sc.Result, sc.Error = ResultError, "the scan was cancelled"
	default:
		var pe *ProviderError
		msg := "the scan failed"
		if errors.As(err, &pe) || errors.Is(err, ErrNoRedelivery) || errors.As(err, new(providerFailure)) {
			msg = err.Error()
		} else if e := apperrMessage(err); e != "" {
			msg = e
		}
		sc.Result, sc.Error = ResultError, msg
	}
	if sc.Result != ResultOK {
		s.Log.Warn().Str("source", src.Name).Int64("scan", sc.ID).Str("result", sc.Result).Str("reason", sc.Error).
			Msg("backfill scan did not complete")
	}
	fin := s.now()
	sc.FinishedAt = &fin
	wctx := context.WithoutCancel(ctx)
	err = claim.RunTx(wctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(wctx, `UPDATE backfill_scans SET finished_at = $2, pages = $3, listed = $4, missed = $5,
			backfilled = $6, redelivered = $7, result = $8, error = $9 WHERE id = $1`,
			sc.ID, fin, sc.Pages, sc.Listed, sc.Missed, sc.Backfilled, sc.Redelivered, sc.Result, nullable(sc.Error)); err != nil {
			return err
		}
		var scanned *time.Time
		if sc.Result == ResultOK && contiguous {
			scanned = &r.To
		}
		next := fin.Add(b.Interval)
		if b.Interval == 0 {
			next = fin.Add(100 * 365 * 24 * time.Hour)
		}
		_, err := tx.Exec(wctx, `INSERT INTO backfill_state (tenant, source, scanned_until, next_scan_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (tenant, source) DO UPDATE SET scanned_until = COALESCE(GREATEST(excluded.scanned_until, backfill_state.scanned_until), backfill_state.scanned_until),
			next_scan_at = excluded.next_scan_at`, src.Tenant, src.Name, scanned, next)
		return err
	})
	if err != nil {
		return sc, claim.DBError(err)
	}
	o := s.obs()
	o.Scanned(src.Name, sc.Result, fin)
	return sc, nil
}

var errMaxPages = errors.New("max pages")

// Window is the range of creation times src's provider can list at now
// and a scan may judge: [now − backfill.window, now − backfill.grace).
// An explicit scan range is clamped to it. src must have backfill.
func Window(src *ingest.Source, now time.Time) Range {
	b := src.Backfill
	return Range{From: now.Add(-b.Window), To: now.Add(-b.Grace)}
}

// ModeFor is the mode a scan of src runs in when asked for want ("" the
// source's own): a scan may narrow the source's mode, never widen it —
// report always; fetch or redeliver when the source's mode is auto (and
// the source and provider allow it) or that very mode. The error's text
// names the modes, nothing of the caller's input.
func ModeFor(src *ingest.Source, want ingest.BackfillMode) (ingest.BackfillMode, error) {
	mode := src.Backfill.Mode
	if want == "" || want == mode || want == ingest.BackfillReport {
		if want != "" {
			mode = want
		}
		return mode, nil
	}
	switch {
	case want != ingest.BackfillFetch && want != ingest.BackfillRedeliver && want != ingest.BackfillAuto:
		return "", errors.New("mode must be report, fetch, redeliver or auto")
	case mode != ingest.BackfillAuto:
		return "", fmt.Errorf("this source's backfill.mode is %s: a scan may ask for report or %s only", mode, mode)
	case want == ingest.BackfillFetch && src.TriggerOnly():
		return "", errors.New("fetch needs a source with forward.url")
	case want == ingest.BackfillRedeliver && src.Provider != verify.TypeGitHub:
		return "", errors.New("redeliver needs a provider that redelivers through its API (github)")
	}
	return want, nil
}

// providerErr reports whether err is a provider call's failure (ending
// the scan with a result), not the database's.
func providerErr(err error) bool {
	var pe *ProviderError
	return errors.Is(err, ErrCredentialRefused) || errors.Is(err, ErrRateLimited) || errors.Is(err, ErrNoRedelivery) ||
		errors.As(err, &pe) || errors.As(err, new(providerFailure)) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// providerFailure is any other provider failure (an unreadable answer,
// an unreachable API), with a fixed text.
type providerFailure string

func (f providerFailure) Error() string { return string(f) }

func apperrMessage(err error) string {
	var verr *verify.Error
	if errors.As(err, &verr) {
		return "an event of the provider's list could not be keyed: " + verr.Error()
	}
	return ""
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// candidate is one listed event with its key.
type candidate struct {
	it Item
	ev ingest.Event
}

// page judges one page: keys, known keys, findings, recovery. Its error
// is a database error (the scan stops).
func (s *Scanner) page(ctx context.Context, src *ingest.Source, l Lister, mode ingest.BackfillMode, sc *Scan, p Page) error {
	sc.Listed += len(p.Items)
	var cands []candidate
	ids := make([]string, 0, len(p.Items))
	for _, it := range p.Items {
		ev, ok, err := s.key(ctx, src, l, &it)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		cands = append(cands, candidate{it: it, ev: ev})
		ids = append(ids, ev.Request.EventID)
	}
	if len(cands) == 0 {
		return nil
	}
	known, err := s.Inbox.Ledger().KnownKeys(ctx, src.Tenant, src.Scope, ids)
	if err != nil {
		return err
	}
	pool := s.Inbox.Pool()
	// Findings of earlier scans: not missed again; a requested
	// redelivery whose key is now known has arrived.
	found := map[string]string{}
	rows, err := pool.Query(ctx, `SELECT event_id, state FROM backfill_events WHERE tenant = $1 AND scope = $2 AND event_id = ANY($3::text[])`,
		src.Tenant, src.Scope, ids)
	if err != nil {
		return claim.DBError(err)
	}
	for rows.Next() {
		var id, st string
		if err := rows.Scan(&id, &st); err != nil {
			rows.Close()
			return claim.DBError(err)
		}
		found[id] = st
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return claim.DBError(err)
	}
	now := s.now()
	// Counted once durable (stored, or recorded in backfill_events), and
	// tallied however the page ends: a scan stopped part-way (credential
	// refused, rate limited, a database error) still reports what it
	// recorded, and what it did not record is found again by the next
	// scan, so nothing is counted twice.
	missed, fetched, redelivered := 0, 0, 0
	defer func() {
		sc.Missed += missed
		sc.Backfilled += fetched
		sc.Redelivered += redelivered
		o := s.obs()
		if missed > 0 {
			o.Missed(src.Name, missed)
		}
		if fetched > 0 {
			o.Recovered(src.Name, "fetched", fetched)
		}
		if redelivered > 0 {
			o.Recovered(src.Name, "redelivered", redelivered)
		}
	}()
	for _, cd := range cands {
		id := cd.ev.Request.EventID
		st, seen := found[id]
		if known[id] {
			if seen && (st == StateRedeliveryRequested || st == StateMissed) {
				if _, err := pool.Exec(ctx, `UPDATE backfill_events SET state = 'arrived', updated_at = now(),
					claim_id = (SELECT id FROM claims WHERE tenant = $1 AND source = $2 AND event_id = $3 AND action = '')
					WHERE tenant = $1 AND scope = $2 AND event_id = $3`, src.Tenant, src.Scope, id); err != nil {
					return claim.DBError(err)
				}
			}
			continue
		}
		if seen && st != StateMissed {
			continue // fetched (and purged since?) or redelivery requested: judged before
		}
		// newMiss is 1 for an event no earlier scan recorded: counted
		// missed once this scan has made it durable.
		newMiss := 0
		if !seen {
			newMiss = 1
		}
		how := mode
		if how == ingest.BackfillAuto {
			how = ingest.BackfillFetch
			if l.CanRedeliver(cd.it, now) {
				how = ingest.BackfillRedeliver
			}
		}
		if how == ingest.BackfillFetch && src.TriggerOnly() {
			how = ingest.BackfillReport // nothing to dispatch a copy to: recorded missed
		}
		switch how {
		case ingest.BackfillFetch:
			res, err := s.fetch(ctx, src, l, sc.ID, cd)
			if err != nil {
				return err
			}
			switch res {
			case fetchStored:
				missed += newMiss
				fetched++
			case fetchRecordedMissed:
				missed += newMiss
			case fetchArrived: // not missed after all
			}
			continue
		case ingest.BackfillRedeliver:
			err := l.Redeliver(ctx, cd.it)
			if err == nil {
				if err := s.record(ctx, src, sc.ID, cd, StateRedeliveryRequested, ""); err != nil {
					return err
				}
				missed += newMiss
				redelivered++
				continue
			}
			if errors.Is(err, ErrCredentialRefused) || errors.Is(err, ErrRateLimited) || ctx.Err() != nil {
				// The scan stops here; this event is recorded missed
				// (when the context still allows) so that it is counted.
				if newMiss == 1 && ctx.Err() == nil {
					if rerr := s.record(ctx, src, sc.ID, cd, StateMissed, ""); rerr == nil {
						missed++
					}
				}
				return err
			}
			s.Log.Warn().Str("source", src.Name).Str("provider_id", cd.it.ProviderID).Msg("backfill: redelivery refused by the provider; recorded as missed")
		}
		if newMiss == 1 {
			if err := s.record(ctx, src, sc.ID, cd, StateMissed, ""); err != nil {
				return err
			}
			missed++
		}
	}
	return nil
}

// key keys a listed item through the source's own rules; false for an
// item the source does not take (a filtered type) or cannot key (logged
// by its provider id, which is no secret).
func (s *Scanner) key(ctx context.Context, src *ingest.Source, l Lister, it *Item) (ingest.Event, bool, error) {
	if it.Body == nil && src.HasKeyRule() {
		// The source's key rule may read the body or any header: key
		// the delivery as it was sent.
		body, hdr, err := l.Fetch(ctx, *it)
		if err != nil {
			return ingest.Event{}, false, err
		}
		it.Body, it.Header = body, hdr
	}
	body := it.Body
	if body == nil {
		body = []byte("{}") // the list names the event by its headers (GitHub)
	}
	evs, err := src.IdentifyUnsigned(headerOf(it.Header), body, "application/json")
	if err != nil || len(evs) != 1 {
		var verr *verify.Error
		if !(errors.As(err, &verr) && verr.Code == verify.CodeEventTypeNotAllowed) {
			s.Log.Warn().Str("source", src.Name).Str("provider_id", it.ProviderID).Msg("backfill: a listed event could not be keyed; skipped")
		}
		return ingest.Event{}, false, nil
	}
	return evs[0], true, nil
}

func headerOf(h http.Header) verify.Header {
	if h == nil {
		return nil
	}
	return h
}

// record writes (or, for a missed event seen before, keeps) a finding.
func (s *Scanner) record(ctx context.Context, src *ingest.Source, scanID int64, cd candidate, state, claimID string) error {
	return recordTx(ctx, s.Inbox.Pool(), src, scanID, cd, state, claimID)
}

func recordTx(ctx context.Context, db claim.DBTX, src *ingest.Source, scanID int64, cd candidate, state, claimID string) error {
	var created *time.Time
	if !cd.it.CreatedAt.IsZero() {
		created = &cd.it.CreatedAt
	}
	_, err := db.Exec(ctx, `INSERT INTO backfill_events (tenant, scope, event_id, source, provider_id, event_type,
		provider_created_at, scan_id, state, payload_hash, claim_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::uuid)
		ON CONFLICT (tenant, scope, event_id) DO UPDATE SET state = excluded.state, scan_id = excluded.scan_id,
			payload_hash = COALESCE(excluded.payload_hash, backfill_events.payload_hash),
			claim_id = COALESCE(excluded.claim_id, backfill_events.claim_id), updated_at = now()`,
		src.Tenant, src.Scope, cd.ev.Request.EventID, src.Name, cd.it.ProviderID, nullable(cd.ev.Request.EventType),
		created, scanID, state, nullable(cd.ev.Request.PayloadHash), nullable(claimID))
	if err != nil {
		return claim.DBError(err)
	}
	return nil
}

// fetchResult is what fetch did with a missed event.
type fetchResult int

const (
	// fetchStored: stored from the provider's copy, with its finding.
	fetchStored fetchResult = iota
	// fetchRecordedMissed: the copy did not key as listed; recorded missed.
	fetchRecordedMissed
	// fetchArrived: its real delivery arrived meanwhile; nothing missed.
	fetchArrived
)

// fetch stores the provider's copy of a missed event (its body from the
// list, or fetched) as an inbox event of origin backfill, with its
// finding, in one transaction.
func (s *Scanner) fetch(ctx context.Context, src *ingest.Source, l Lister, scanID int64, cd candidate) (fetchResult, error) {
	ev := cd.ev
	var headers map[string]string
	hdr := cd.it.Header
	if cd.it.Body == nil {
		body, h, err := l.Fetch(ctx, cd.it)
		if err != nil {
			return fetchArrived, err
		}
		hdr = h
		ct := hdr.Get("Content-Type")
		if ct == "" {
			ct = "application/json"
		}
		evs, err := src.IdentifyUnsigned(headerOf(hdr), body, ct)
		if err != nil || len(evs) != 1 || evs[0].Request.EventID != cd.ev.Request.EventID {
			s.Log.Warn().Str("source", src.Name).Str("provider_id", cd.it.ProviderID).Msg("backfill: the fetched event does not key as listed; recorded as missed")
			return fetchRecordedMissed, recordTx(ctx, s.Inbox.Pool(), src, scanID, cd, StateMissed, "")
		}
		ev = evs[0]
	}
	if hdr != nil {
		// The delivery's own headers, as a delivery's are stored:
		// credentials (the signature) left out.
		headers = src.StoredHeaders(func(f func(name, value string)) {
			for k, vs := range hdr {
				for _, v := range vs {
					f(k, v)
				}
			}
		})
	}
	detail := fmt.Sprintf("backfilled from provider event list (scan %d)", scanID)
	_, stored, err := s.Inbox.StoreBackfilled(ctx, src, ev, headers, detail, func(tx pgx.Tx, claimID string) error {
		return recordTx(ctx, tx, src, scanID, candidate{it: cd.it, ev: ev}, StateFetched, claimID)
	})
	if err != nil {
		return fetchArrived, err
	}
	if !stored {
		return fetchArrived, nil
	}
	return fetchStored, nil
}
