package backfill

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
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
	Mode sources.BackfillMode
	// ScanID, when not zero, is the backfill_scans row of result queued
	// made when the scan was asked for (Enqueue): Run turns that row into
	// the running scan (with its range), and runs nothing when that row is
	// gone (purged) or no longer queued (ErrNotQueued). Zero: Run makes
	// its own row.
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
	ResultQueued            = "queued"
	ResultRunning           = "running"
	ResultOK                = "ok"
	ResultPartial           = "partial"
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
	ID      int64  `json:"id"`
	Source  string `json:"source"`
	Trigger string `json:"trigger"`
	Actor   string `json:"actor,omitempty"`
	Mode    string `json:"mode"`
	// RequestedAt is when the scan was asked for (its row made).
	RequestedAt time.Time `json:"requested_at"`
	// StartedAt is when it started running; nil (JSON null) while it is
	// queued, and for a queued scan that ended without running.
	StartedAt  *time.Time `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// RangeStart and RangeEnd bound the range the scan judges,
	// [RangeStart, RangeEnd), provider creation time; nil (JSON null)
	// while not known: a queued scan of the source's default range,
	// known when it starts.
	RangeStart  *time.Time `json:"range_start"`
	RangeEnd    *time.Time `json:"range_end"`
	Pages       int        `json:"pages"`
	Listed      int        `json:"listed"`
	Missed      int        `json:"missed"`
	Backfilled  int        `json:"backfilled"`
	Redelivered int        `json:"redelivered"`
	Result      string     `json:"result"`
	Error       string     `json:"error,omitempty"`
	// BacklogFrom and BacklogTo bound, for a partial scan, the part of
	// its range it did not reach, [BacklogFrom, BacklogTo), creation
	// time: a scan of the source's default range leaves it to the next
	// scans (the source's backlog).
	BacklogFrom *time.Time `json:"backlog_from,omitempty"`
	BacklogTo   *time.Time `json:"backlog_to,omitempty"`
	// Notes are fixed sentences, "; "-joined, on what the scan could not
	// cover that is no error of it: the part of the range left for later
	// (partial), a backlog that left the provider's window unlisted,
	// recorded misses too old to recover.
	Notes string `json:"notes,omitempty"`
}

// Scanner runs scans. Its zero value is not usable: set Inbox.
type Scanner struct {
	Inbox *inbox.Inbox
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
func NewLister(src *sources.Source, c *Client) (Lister, error) {
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
// backfill_scans and the source's cursor in backfill_state. trig.Mode may
// narrow the source's mode (report always; fetch or redeliver when the
// source's mode is auto or that mode).
//
// What a scan lists, newest first, within backfill.max_pages pages in all:
//
//   - the new part, [last scanned − overlap, window end) (the whole
//     window the first time); a scan in a recovering mode (fetch,
//     redeliver, auto) reaches back to the oldest event recorded missed
//     still inside the window, so that relisting recovers it;
//   - then, with the pages left, the backlog: the part an earlier scan
//     did not reach (backfill_state.backlog_*), resumed where it stopped
//     (GitHub, which has no time filter: from its stored next-page
//     cursor). A backlog that left the provider's window is dropped, and
//     the scan's notes say so.
//
// A scan that runs out of pages ends partial: what it did not reach is
// the source's backlog (and the scan's backlog_from/backlog_to), the
// cursor still moves past the part it covered. An explicit range
// (trig.From, trig.To) lists that range alone, clamped to the window; its
// unreached part is only shown on the scan, except for the whole window,
// whose unreached part becomes the source's backlog. A provider failure ends the
// scan with its result (credential_refused, rate_limited, error) and a
// fixed error text, and is not an error of Run; Run's error is the
// database's (the scan row may then say running), or, running no scan,
// ErrNotQueued (trig.ScanID names no queued row of src) or ErrSourceBusy
// (no trig.ScanID, and a scan of src is queued or running).
func (s *Scanner) Run(ctx context.Context, src *sources.Source, trig Trigger) (Scan, error) {
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
	sc := Scan{Source: src.Name, Trigger: trig.Kind, Actor: trig.Actor, Mode: string(mode), RequestedAt: now, StartedAt: &now,
		Result: ResultRunning}
	if trig.ScanID != 0 {
		// The row made when the scan was asked for runs, if it is still
		// there and still queued; else nothing does.
		row, err := queries.StartScan(ctx, pool, dbsqlc.StartScanParams{ID: trig.ScanID, Tenant: src.Tenant, Source: src.Name,
			StartedAt: &now, Mode: string(mode), Running: ResultRunning, Queued: ResultQueued})
		if errors.Is(err, pgx.ErrNoRows) {
			return Scan{}, ErrNotQueued
		}
		if err != nil {
			return Scan{}, db.Error(err)
		}
		sc.ID, sc.RequestedAt = row.ID, row.RequestedAt
	}
	win := Window(src, now)
	st, err := loadState(ctx, pool, src)
	if err != nil {
		return Scan{}, err
	}
	r := win
	explicit := !trig.From.IsZero() || !trig.To.IsZero()
	var notes []string
	var back *Range // the backlog this scan lists after the new part
	if explicit {
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
		if st.until != nil && st.until.Add(-overlap).After(r.From) {
			r.From = st.until.Add(-overlap)
		}
		back = st.backlog(win, &notes)
	}
	if !r.From.Before(r.To) {
		r.From = r.To
	}
	// contiguous: the range joins what earlier scans covered (or starts
	// at the window), so a complete scan moves the cursor to its end.
	contiguous := !r.From.After(win.From) || (st.until != nil && !r.From.After(*st.until))
	// whole: an explicit range that is the whole window; what it leaves
	// is all the window lacks, so it replaces the source's backlog.
	whole := explicit && !r.From.After(win.From) && !r.To.Before(win.To)
	// Findings of earlier scans settled since: a missed event or a
	// requested redelivery whose key the ledger now holds has arrived; a
	// fetched event whose record now has a receipt hash got its real
	// delivery late.
	if err := queries.FindingsArrived(ctx, pool, dbsqlc.FindingsArrivedParams{Tenant: src.Tenant, Source: src.Name}); err != nil {
		return Scan{}, db.Error(err)
	}
	if err := queries.FindingsLateReal(ctx, pool, dbsqlc.FindingsLateRealParams{Tenant: src.Tenant, Source: src.Name}); err != nil {
		return Scan{}, db.Error(err)
	}
	if !explicit && recovers(src, mode) {
		// Events a report scan recorded missed are recovered by listing
		// them again: the scan reaches back to the oldest one the
		// provider still lists.
		oldest, gone, err := recordedMisses(ctx, pool, src, win.From)
		if err != nil {
			return Scan{}, err
		}
		if gone > 0 {
			notes = append(notes, fmt.Sprintf("%d events recorded missed were created before the provider's window (%s): "+
				"they can no longer be listed or recovered, and stay missed", gone, stamp(win.From)))
		}
		if oldest != nil {
			m := oldest.Truncate(time.Second)
			switch {
			case !m.Before(r.From):
			case back != nil && m.Before(back.To):
				if m.Before(back.From) {
					back.From = m
				}
			default:
				r.From = m
			}
		}
	}
	span := r
	if back != nil && back.From.Before(span.From) {
		span.From = back.From
	}
	sc.RangeStart, sc.RangeEnd = &span.From, &span.To
	if sc.ID != 0 {
		if err := queries.SetScanRange(ctx, pool, dbsqlc.SetScanRangeParams{ID: sc.ID, RangeStart: &span.From,
			RangeEnd: &span.To}); err != nil {
			return Scan{}, db.Error(err)
		}
	} else {
		var actor *string
		if trig.Actor != "" {
			actor = &trig.Actor
		}
		var err error
		sc.ID, err = queries.InsertRunningScan(ctx, pool, dbsqlc.InsertRunningScanParams{Tenant: src.Tenant, Source: src.Name,
			Trigger: trig.Kind, Actor: actor, Mode: string(mode), Result: ResultRunning, Now: now, RangeStart: &span.From,
			RangeEnd: &span.To})
		if errors.Is(err, pgx.ErrNoRows) {
			return Scan{}, ErrSourceBusy
		}
		if err != nil {
			return Scan{}, db.Error(err)
		}
	}
	c := &Client{HTTP: s.HTTP, Sleep: s.Sleep, Now: s.Now, Jitter: s.Jitter, MaxWait: b.MaxWait, Log: s.Log, Source: src.Name,
		Obs: s.Obs, GitHub: src.Provider == verify.TypeGitHub}
	lister, err := NewLister(src, c)
	budget := b.MaxPages
	var dbErr error
	var newRest, backRest *Range
	newDone := false
	if err == nil {
		newRest, dbErr, err = s.listPart(ctx, src, lister, mode, &sc, r, &budget)
		newDone = err == nil && dbErr == nil
		if newDone && back != nil {
			backRest, dbErr, err = s.listPart(ctx, src, lister, mode, &sc, *back, &budget)
		}
	}
	if dbErr != nil {
		return sc, dbErr
	}
	// rest: what the window (or the asked range) still lacks.
	rest := newRest
	switch {
	case explicit:
	case newRest != nil && back != nil:
		// The backlog was not reached: one backlog from the older of
		// the two, resumed where the new part stopped (below it lies
		// the covered part, then the old backlog).
		merged := *newRest
		if back.From.Before(merged.From) {
			merged.From = back.From
		}
		rest = &merged
	case newRest == nil:
		rest = backRest
	}
	switch {
	case err == nil && rest != nil:
		sc.Result = ResultPartial
		sc.BacklogFrom, sc.BacklogTo = &rest.From, &rest.To
		if explicit && !whole {
			notes = append(notes, fmt.Sprintf("backfill.max_pages (%d) pages were listed: events created in [%s, %s) were not reached; "+
				"ask for that range again", b.MaxPages, stamp(rest.From), stamp(rest.To)))
		} else {
			notes = append(notes, fmt.Sprintf("backfill.max_pages (%d) pages were listed: events created in [%s, %s) are not "+
				"checked yet and are listed by the next scans", b.MaxPages, stamp(rest.From), stamp(rest.To)))
		}
	case err == nil:
		sc.Result = ResultOK
	case errors.Is(err, ErrCredentialRefused):
		sc.Result, sc.Error = ResultCredentialRefused, ErrCredentialRefused.Error()
	case errors.Is(err, ErrRateLimited):
		sc.Result, sc.Error = ResultRateLimited, ErrRateLimited.Error()
	case ctx.Err() != nil:
		sc.Result, sc.Error = ResultError, "the scan was cancelled"
	default:
		var pe *ProviderError
		msg := "the scan failed"
		if errors.As(err, &pe) || errors.Is(err, ErrNoRedelivery) || errors.As(err, new(providerFailure)) ||
			errors.As(err, new(TransportError)) {
			msg = err.Error()
		} else if e := apperrMessage(err); e != "" {
			msg = e
		}
		sc.Result, sc.Error = ResultError, msg
	}
	sc.Notes = strings.Join(notes, "; ")
	if sc.Result != ResultOK && sc.Result != ResultPartial {
		s.Log.Warn().Str("source", src.Name).Int64("scan", sc.ID).Str("result", sc.Result).Str("reason", sc.Error).
			Msg("backfill scan did not complete")
	} else if sc.Result == ResultPartial {
		s.Log.Info().Str("source", src.Name).Int64("scan", sc.ID).Time("backlog_from", rest.From).Time("backlog_to", rest.To).
			Msg("backfill scan reached max_pages: the rest of the window is listed by the next scans")
	}
	fin := s.now()
	sc.FinishedAt = &fin
	// The source's state: the cursor moves past a default range the scan
	// covered (fully, or down to its backlog), also when only the
	// backlog's listing failed; the backlog is rewritten by a scan that
	// ended ok or partial.
	var scanned *time.Time
	setBacklog := false
	if explicit && !whole {
		if sc.Result == ResultOK && contiguous {
			scanned = &r.To
		}
	} else {
		if newDone {
			scanned = &r.To
		}
		setBacklog = sc.Result == ResultOK || sc.Result == ResultPartial
	}
	var blFrom, blTo *time.Time
	var blCursor *string
	if setBacklog && rest != nil {
		blFrom, blTo, blCursor = &rest.From, &rest.To, nullable(rest.Cursor)
	}
	wctx := context.WithoutCancel(ctx)
	err = db.RunTx(wctx, pool, func(tx pgx.Tx) error {
		if err := queries.FinishScan(wctx, tx, dbsqlc.FinishScanParams{ID: sc.ID, FinishedAt: &fin, Pages: int32(sc.Pages),
			Listed: int32(sc.Listed), Missed: int32(sc.Missed), Backfilled: int32(sc.Backfilled), Redelivered: int32(sc.Redelivered),
			Result: sc.Result, Error: nullable(sc.Error), BacklogFrom: sc.BacklogFrom, BacklogTo: sc.BacklogTo,
			Notes: nullable(sc.Notes)}); err != nil {
			return err
		}
		next := fin.Add(b.Interval)
		if b.Interval == 0 {
			next = fin.Add(100 * 365 * 24 * time.Hour)
		}
		return queries.SaveScanState(wctx, tx, dbsqlc.SaveScanStateParams{Tenant: src.Tenant, Source: src.Name,
			ScannedUntil: scanned, NextScanAt: next, SetBacklog: setBacklog, BacklogFrom: blFrom, BacklogTo: blTo,
			BacklogCursor: blCursor})
	})
	if err != nil {
		return sc, db.Error(err)
	}
	o := s.obs()
	o.Scanned(src.Name, sc.Result, fin)
	return sc, nil
}

// listPart lists r within the page budget (decremented per page) and
// judges its pages. rest is the part of r not reached when the budget ran
// out (with the cursor to resume at), nil when r was listed to its end;
// dbErr is the database's error, err the provider's.
func (s *Scanner) listPart(ctx context.Context, src *sources.Source, l Lister, mode sources.BackfillMode, sc *Scan, r Range,
	budget *int) (rest *Range, dbErr, err error) {
	if !r.From.Before(r.To) {
		return nil, nil, nil
	}
	if *budget <= 0 {
		return &r, nil, nil
	}
	var oldest time.Time
	next := r.Cursor
	err = l.List(ctx, r, func(p Page) error {
		sc.Pages++
		*budget--
		// Only [From, To) is judged, whatever the provider returned.
		in := p.Items[:0:0]
		for _, it := range p.Items {
			if !it.CreatedAt.Before(r.From) && it.CreatedAt.Before(r.To) {
				in = append(in, it)
			}
		}
		p.Items = in
		if e := s.page(ctx, src, l, mode, sc, p); e != nil {
			if !providerErr(e) {
				dbErr = e
			}
			return e
		}
		if !p.Oldest.IsZero() && (oldest.IsZero() || p.Oldest.Before(oldest)) {
			oldest = p.Oldest
		}
		next = p.Next
		if p.More && *budget <= 0 {
			return errMaxPages
		}
		return nil
	})
	if dbErr != nil {
		return nil, dbErr, nil
	}
	if !errors.Is(err, errMaxPages) {
		return nil, nil, err
	}
	// Listed: everything created from the second after the oldest row
	// reached to r.To (the oldest second may go on on the next page).
	left := Range{From: r.From, To: r.To, Cursor: next}
	if !oldest.IsZero() {
		if cut := oldest.Truncate(time.Second).Add(time.Second); cut.Before(left.To) {
			left.To = cut
		}
	}
	if !left.From.Before(left.To) {
		return nil, nil, nil
	}
	return &left, nil, nil
}

// scanState is a source's backfill_state.
type scanState struct {
	until, backFrom, backTo *time.Time
	cursor                  *string
}

func loadState(ctx context.Context, dbtx claim.DBTX, src *sources.Source) (scanState, error) {
	row, err := queries.ScanState(ctx, dbtx, dbsqlc.ScanStateParams{Tenant: src.Tenant, Source: src.Name})
	if errors.Is(err, pgx.ErrNoRows) {
		return scanState{}, nil
	}
	if err != nil {
		return scanState{}, db.Error(err)
	}
	return scanState{until: row.ScannedUntil, backFrom: row.BacklogFrom, backTo: row.BacklogTo, cursor: row.BacklogCursor}, nil
}

// backlog is the stored backlog cut to the window (nil when there is
// none left); a part that left the window is noted.
func (st scanState) backlog(win Range, notes *[]string) *Range {
	if st.backFrom == nil || st.backTo == nil || !st.backFrom.Before(*st.backTo) {
		return nil
	}
	bl := Range{From: *st.backFrom, To: *st.backTo}
	if st.cursor != nil {
		bl.Cursor = *st.cursor
	}
	if !bl.To.After(win.From) {
		*notes = append(*notes, fmt.Sprintf("the backlog [%s, %s) left the provider's window before it was listed: "+
			"events created then can no longer be checked", stamp(bl.From), stamp(bl.To)))
		return nil
	}
	if bl.From.Before(win.From) {
		*notes = append(*notes, fmt.Sprintf("the backlog's part [%s, %s) left the provider's window before it was listed: "+
			"events created then can no longer be checked", stamp(bl.From), stamp(win.From)))
		bl.From = win.From
	}
	if bl.To.After(win.To) {
		bl.To = win.To
	}
	return &bl
}

// recovers reports whether a scan in mode recovers missed events of src
// (fetch, redeliver, auto), rather than only recording them.
func recovers(src *sources.Source, mode sources.BackfillMode) bool {
	switch mode {
	case sources.BackfillRedeliver:
		return true
	case sources.BackfillFetch:
		return !src.TriggerOnly()
	case sources.BackfillAuto:
		return !src.TriggerOnly() || src.Provider == verify.TypeGitHub
	}
	return false
}

// recordedMisses returns the creation time of src's oldest event
// recorded missed at or after from (nil: none), and how many recorded
// missed were created before from (no longer listable).
func recordedMisses(ctx context.Context, dbtx claim.DBTX, src *sources.Source, from time.Time) (*time.Time, int, error) {
	row, err := queries.RecordedMisses(ctx, dbtx, dbsqlc.RecordedMissesParams{Tenant: src.Tenant, Source: src.Name, FromAt: &from})
	if err != nil {
		return nil, 0, db.Error(err)
	}
	var oldest *time.Time
	if t, ok := row.Oldest.(time.Time); ok { // NULL (none) scans as nil
		oldest = &t
	}
	return oldest, int(row.Gone), nil
}

// stamp is a time in notes: RFC 3339, UTC, whole seconds.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

var errMaxPages = errors.New("max pages")

// Errors of Run that run no scan.
var (
	// ErrNotQueued: Trigger.ScanID names no queued row of the source (it
	// ran, was ended, or was purged).
	ErrNotQueued = errors.New("the scan row is no longer queued")
	// ErrSourceBusy: Run without Trigger.ScanID while a scan of the
	// source is queued or running.
	ErrSourceBusy = errors.New("a scan of this source is queued or running")
)

// Window is the range of creation times src's provider can list at now
// and a scan may judge: [now − backfill.window, now − backfill.grace).
// An explicit scan range is clamped to it. src must have backfill.
func Window(src *sources.Source, now time.Time) Range {
	b := src.Backfill
	return Range{From: now.Add(-b.Window), To: now.Add(-b.Grace)}
}

// ModeFor is the mode a scan of src runs in when asked for want ("" the
// source's own): a scan may narrow the source's mode, never widen it —
// report always; fetch or redeliver when the source's mode is auto (and
// the source and provider allow it) or that very mode. The error's text
// names the modes, nothing of the caller's input.
func ModeFor(src *sources.Source, want sources.BackfillMode) (sources.BackfillMode, error) {
	mode := src.Backfill.Mode
	if want == "" || want == mode || want == sources.BackfillReport {
		if want != "" {
			mode = want
		}
		return mode, nil
	}
	switch {
	case want != sources.BackfillFetch && want != sources.BackfillRedeliver && want != sources.BackfillAuto:
		return "", errors.New("mode must be report, fetch, redeliver or auto")
	case mode == sources.BackfillReport:
		return "", errors.New("this source's backfill.mode is report: a scan may ask for report only " +
			"(backfill.mode auto, fetch or redeliver lets a scan act on missed events)")
	case mode != sources.BackfillAuto:
		return "", fmt.Errorf("this source's backfill.mode is %s: a scan may ask for report or %s only", mode, mode)
	case want == sources.BackfillFetch && src.TriggerOnly():
		return "", errors.New("fetch needs a source with forward.url")
	case want == sources.BackfillRedeliver && src.Provider != verify.TypeGitHub:
		return "", errors.New("redeliver needs a provider that redelivers through its API (github)")
	}
	return want, nil
}

// providerErr reports whether err is a provider call's failure (ending
// the scan with a result), not the database's.
func providerErr(err error) bool {
	var pe *ProviderError
	return errors.Is(err, ErrCredentialRefused) || errors.Is(err, ErrRateLimited) || errors.Is(err, ErrNoRedelivery) ||
		errors.As(err, &pe) || errors.As(err, new(providerFailure)) || errors.As(err, new(TransportError)) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
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
	ev sources.Event
}

// page judges one page: keys, known keys, findings, recovery. Its error
// is a database error (the scan stops).
func (s *Scanner) page(ctx context.Context, src *sources.Source, l Lister, mode sources.BackfillMode, sc *Scan, p Page) error {
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
	states, err := queries.FindingStates(ctx, pool, dbsqlc.FindingStatesParams{Tenant: src.Tenant, Scope: src.Scope, EventIDs: ids})
	if err != nil {
		return db.Error(err)
	}
	for _, f := range states {
		found[f.EventID] = f.State
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
				if err := queries.FindingArrived(ctx, pool, dbsqlc.FindingArrivedParams{Tenant: src.Tenant, Scope: src.Scope,
					EventID: id}); err != nil {
					return db.Error(err)
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
		if how == sources.BackfillAuto {
			how = sources.BackfillFetch
			if l.CanRedeliver(cd.it, now) {
				how = sources.BackfillRedeliver
			}
		}
		if how == sources.BackfillFetch && src.TriggerOnly() {
			how = sources.BackfillReport // nothing to dispatch a copy to: recorded missed
		}
		switch how {
		case sources.BackfillFetch:
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
		case sources.BackfillRedeliver:
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
func (s *Scanner) key(ctx context.Context, src *sources.Source, l Lister, it *Item) (sources.Event, bool, error) {
	if it.Body == nil && src.HasKeyRule() {
		// The source's key rule may read the body or any header: key
		// the delivery as it was sent.
		body, hdr, err := l.Fetch(ctx, *it)
		if err != nil {
			return sources.Event{}, false, err
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
		return sources.Event{}, false, nil
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
func (s *Scanner) record(ctx context.Context, src *sources.Source, scanID int64, cd candidate, state, claimID string) error {
	return recordTx(ctx, s.Inbox.Pool(), src, scanID, cd, state, claimID)
}

func recordTx(ctx context.Context, dbtx claim.DBTX, src *sources.Source, scanID int64, cd candidate, state, claimID string) error {
	var created *time.Time
	if !cd.it.CreatedAt.IsZero() {
		created = &cd.it.CreatedAt
	}
	err := queries.RecordFinding(ctx, dbtx, dbsqlc.RecordFindingParams{Tenant: src.Tenant, Scope: src.Scope,
		EventID: cd.ev.Request.EventID, Source: src.Name, ProviderID: cd.it.ProviderID, EventType: nullable(cd.ev.Request.EventType),
		ProviderCreatedAt: created, ScanID: scanID, State: state, PayloadHash: nullable(cd.ev.Request.PayloadHash),
		ClaimID: nullable(claimID)})
	if err != nil {
		return db.Error(err)
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
func (s *Scanner) fetch(ctx context.Context, src *sources.Source, l Lister, scanID int64, cd candidate) (fetchResult, error) {
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
		headers = inbox.StoredHeaders(src, func(f func(name, value string)) {
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
