package httpapi

import (
	"errors"
	"net/url"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/backfill"
	"github.com/idempotent-claim/idempotent-claim/sidecar/httpquery"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// Gap detection and backfill (package backfill), for the key's tenant:
//
//	POST /v1/sources/{source}/backfill/scans  {"mode"?, "from"?, "to"?} | {"mode"?, "whole_window": true}
//	     → 202 {scan, already_running, note?}, Location: …/backfill/scans/{id}
//	GET  /v1/sources/{source}/backfill/scans?limit=&before=            → {scans: [...], next?}, newest first
//	GET  /v1/sources/{source}/backfill/scans/{id}                      → the scan
//	GET  /v1/sources/{source}/backfill/events?state=&limit=&before=    → {events: [...], next?}, newest first
//
// A source of another tenant, or none, is 404 not_found; a configured
// source without backfill (an ingest door or trigger source without
// backfill:, or a claim-only source) 409 invalid_state naming source. A
// query parameter given twice, or a limit, before, state, from, to or
// scan id that is not one, is 400 malformed naming it.

// backfillSource is the caller's tenant's source with backfill.
func (s *Server) backfillSource(c *fiber.Ctx) (*sources.Source, auth.Principal, error) {
	p, _ := c.Locals(principalKey).(auth.Principal)
	name := c.Params("source")
	src := s.cfg.Inbox.TriggerSource(name)
	noBackfill := &apperr.Error{Code: apperr.InvalidState, Field: "source",
		Message: "this source has no backfill configured (backfill: in the sources file)"}
	if src == nil && s.cfg.Ledger != nil && s.cfg.Ledger.Configured(name) {
		// A claim-only source: no tenant of its own, no provider to list.
		return nil, p, noBackfill
	}
	if src == nil || src.Tenant != p.Tenant {
		return nil, p, apperr.New(apperr.NotFound, "no such source")
	}
	if src.Backfill == nil {
		return nil, p, noBackfill
	}
	return src, p, nil
}

type backfillScanBody struct {
	Mode string `json:"mode" validate:"omitempty,oneof=report fetch redeliver auto"`
	// From and To are RFC 3339 date-times (parsed by scanRange).
	From        string `json:"from"`
	To          string `json:"to"`
	WholeWindow bool   `json:"whole_window"`
}

// scanRange checks the range a scan is asked for against src's listable
// window at now (backfill.Window): from before to, both within it, not
// with whole_window (which asks for the window itself). Zero times: the
// source's default range. Errors are Malformed naming the field; they
// state the window's bounds, never the caller's values.
func scanRange(src *sources.Source, b backfillScanBody, now time.Time) (from, to time.Time, err error) {
	win := backfill.Window(src, now)
	if b.WholeWindow {
		if b.From != "" || b.To != "" {
			return from, to, &apperr.Error{Code: apperr.Malformed, Field: "whole_window",
				Message: "asks for the provider's whole window: give it without from and to"}
		}
		return win.From, win.To, nil
	}
	bounds := "the provider's listable window (backfill.window_hours back to backfill.grace_seconds ago): now from " +
		win.From.UTC().Format(time.RFC3339) + " to " + win.To.UTC().Format(time.RFC3339)
	parse := func(field, v string) (time.Time, error) {
		if v == "" {
			return time.Time{}, nil
		}
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return t, &apperr.Error{Code: apperr.Malformed, Field: field,
				Message: "must be an RFC 3339 date-time with its offset, e.g. 2026-01-02T15:04:05Z"}
		}
		if t.Before(win.From) || t.After(win.To) {
			return t, &apperr.Error{Code: apperr.Malformed, Field: field, Message: "must be within " + bounds}
		}
		return t, nil
	}
	if from, err = parse("from", b.From); err != nil {
		return
	}
	if to, err = parse("to", b.To); err != nil {
		return
	}
	if !from.IsZero() && !to.IsZero() && !from.Before(to) {
		return from, to, &apperr.Error{Code: apperr.Malformed, Field: "to", Message: "must be later than from"}
	}
	// One bound given: the other is the window's, as it is now.
	if !from.IsZero() && to.IsZero() {
		to = win.To
	}
	if from.IsZero() && !to.IsZero() {
		from = win.From
	}
	if !from.IsZero() && !from.Before(to) {
		return from, to, &apperr.Error{Code: apperr.Malformed, Field: "from", Message: "must be earlier than the end of " + bounds}
	}
	return from, to, nil
}

func (s *Server) backfillStart(c *fiber.Ctx) error {
	src, p, err := s.backfillSource(c)
	if err != nil {
		return err
	}
	var b backfillScanBody
	body, err := s.body(c)
	if err != nil {
		return err
	}
	if len(body) > 0 {
		if err := s.decode(body, &b, ""); err != nil {
			return err
		}
	}
	mode, err := backfill.ModeFor(src, sources.BackfillMode(b.Mode))
	if err != nil {
		return &apperr.Error{Code: apperr.Invalid, Field: "mode", Message: err.Error()}
	}
	from, to, err := scanRange(src, b, time.Now())
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	sc, already, err := backfill.Enqueue(ctx, s.cfg.Inbox, src, backfill.Trigger{Kind: backfill.TriggerAPI,
		Actor: p.KeyPrefix, Mode: mode, From: from, To: to})
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderLocation, "/v1/sources/"+url.PathEscape(src.Name)+"/backfill/scans/"+strconv.FormatInt(sc.ID, 10))
	ans := scanStartJSON{Scan: sc, AlreadyRunning: already}
	if already {
		ans.Note = alreadyRunningNote
	}
	return c.Status(fiber.StatusAccepted).JSON(ans)
}

// scanStartJSON is the answer of POST …/backfill/scans: the scan made, or
// with AlreadyRunning the source's scan queued or running already (its own
// mode and range; Note says the one asked for was not made).
type scanStartJSON struct {
	Scan           backfill.Scan `json:"scan"`
	AlreadyRunning bool          `json:"already_running"`
	Note           string        `json:"note,omitempty"`
}

// alreadyRunningNote is scanStartJSON.Note of an ask that made no scan.
const alreadyRunningNote = "a scan of this source is queued or running already: no scan was made for this request, " +
	"and its mode and range were not applied; scan is that scan, with its own mode and range. " +
	"Ask again once it has finished (GET its Location until finished_at is set)"

// queryOne returns query parameter name ("" when absent) and whether it
// is there; one given more than once is httpquery.Once's 400 naming it.
func queryOne(c *fiber.Ctx, name string) (string, bool, error) {
	args := c.Context().QueryArgs()
	if err := httpquery.Once(args, name); err != nil {
		return "", true, err
	}
	if !args.Has(name) {
		return "", false, nil
	}
	return string(args.Peek(name)), true, nil
}

// backfillLimit reads limit (1…backfill.MaxListLimit; 0 when absent).
func backfillLimit(c *fiber.Ctx) (int, error) {
	raw, ok, err := queryOne(c, "limit")
	if err != nil || !ok {
		return 0, err
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 || n > backfill.MaxListLimit {
		return 0, &apperr.Error{Code: apperr.Malformed, Field: "limit",
			Message: "must be an integer from 1 to " + strconv.Itoa(backfill.MaxListLimit)}
	}
	return n, nil
}

// scansJSON is the answer of GET …/backfill/scans; Next is the before of
// the next page, absent on the last.
type scansJSON struct {
	Scans []backfill.Scan `json:"scans"`
	Next  int64           `json:"next,omitempty"`
}

func (s *Server) backfillScans(c *fiber.Ctx) error {
	src, _, err := s.backfillSource(c)
	if err != nil {
		return err
	}
	var q backfill.ScanQuery
	if q.Limit, err = backfillLimit(c); err != nil {
		return err
	}
	if raw, ok, err := queryOne(c, "before"); err != nil {
		return err
	} else if ok {
		n, ok := backfill.ParseScanID(raw)
		if !ok {
			return &apperr.Error{Code: apperr.Malformed, Field: "before",
				Message: "must be a scan id (a positive integer in decimal, without sign or leading zero: the next of the previous page)"}
		}
		q.Before = n
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	scans, next, err := backfill.ListScans(ctx, s.cfg.Inbox.Pool(), src.Tenant, src.Name, q)
	if err != nil {
		return err
	}
	return c.JSON(scansJSON{Scans: scans, Next: next})
}

func (s *Server) backfillScan(c *fiber.Ctx) error {
	src, _, err := s.backfillSource(c)
	if err != nil {
		return err
	}
	notFound := apperr.New(apperr.NotFound, "no such scan of this source")
	id, ok := backfill.ParseScanID(c.Params("id"))
	if !ok {
		return &apperr.Error{Code: apperr.Malformed, Field: "id",
			Message: "must be a scan id (a positive 64-bit integer in decimal, without sign or leading zero, the scan's id as answered)"}
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	sc, found, err := backfill.GetScan(ctx, s.cfg.Inbox.Pool(), src.Tenant, src.Name, id)
	if err != nil {
		return err
	}
	if !found {
		return notFound
	}
	return c.JSON(sc)
}

// eventsJSON is the answer of GET …/backfill/events; Next is the before
// of the next page, absent on the last.
type eventsJSON struct {
	Events []backfill.Finding `json:"events"`
	Next   string             `json:"next,omitempty"`
}

func (s *Server) backfillEvents(c *fiber.Ctx) error {
	src, _, err := s.backfillSource(c)
	if err != nil {
		return err
	}
	var q backfill.EventQuery
	var stateGiven bool
	if q.State, stateGiven, err = queryOne(c, "state"); err != nil {
		return err
	}
	if stateGiven && q.State == "" {
		return &apperr.Error{Code: apperr.Malformed, Field: "state",
			Message: "must not be empty: give missed, fetched, redelivery_requested, arrived or late_real, or leave state out for any"}
	}
	switch q.State {
	case "", backfill.StateMissed, backfill.StateFetched, backfill.StateRedeliveryRequested, backfill.StateArrived, backfill.StateLateReal:
	default:
		return &apperr.Error{Code: apperr.Invalid, Field: "state",
			Message: "state must be missed, fetched, redelivery_requested, arrived or late_real"}
	}
	if q.Limit, err = backfillLimit(c); err != nil {
		return err
	}
	badBefore := &apperr.Error{Code: apperr.Malformed, Field: "before",
		Message: "must be the next of the previous page, as it was answered"}
	if raw, ok, err := queryOne(c, "before"); err != nil {
		return err
	} else if ok {
		if raw == "" {
			return badBefore
		}
		q.Before = raw
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	evs, next, err := backfill.ListEvents(ctx, s.cfg.Inbox.Pool(), src.Tenant, src.Name, q)
	if errors.Is(err, backfill.ErrBadCursor) {
		return badBefore
	}
	if err != nil {
		return err
	}
	return c.JSON(eventsJSON{Events: evs, Next: next})
}
