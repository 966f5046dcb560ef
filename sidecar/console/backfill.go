package console

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/backfill"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// backfillView is the source page's gap detection: a page of the scans,
// a page of the events the provider holds that claimd did not receive
// (each in its state now), and the "Scan now" and "Scan the whole
// window" forms.
type backfillView struct {
	Mode     string
	Interval string
	Scans    []backfill.Scan
	Findings []backfill.Finding
	// OlderScans and OlderFindings link the next page of each list ("" on
	// the last).
	OlderScans, OlderFindings string
	// Done says a scan was just queued ("queued", or "running" when one
	// was queued or running already).
	Done string
}

// backfillPage is the source page's query for its backfill section:
// scan (the flash after a scan was asked for), scans_before and
// events_before (the lists' cursors, as the API's before).
type backfillPage struct {
	Done         string
	ScansBefore  int64
	EventsBefore string
}

// backfillPageOf reads backfillPage from the source page's query, whose
// parameters sourcePage has checked with httpquery.Once (each at most
// once); a cursor that is none is 400 naming it.
func backfillPageOf(ctx *fiber.Ctx) (backfillPage, error) {
	q := backfillPage{Done: ctx.Query("scan"), EventsBefore: ctx.Query("events_before")}
	if raw := ctx.Query("scans_before"); raw != "" {
		n, ok := backfill.ParseScanID(raw)
		if !ok {
			return q, &apperr.Error{Code: apperr.Malformed, Field: "scans_before", Message: "must be a scan id (the older link's)"}
		}
		q.ScansBefore = n
	}
	return q, nil
}

// Page sizes of the source page's lists.
const (
	consoleScans    = 5
	consoleFindings = 20
)

// backfillSource is the session tenant's configured source with
// backfill, or nil.
func (c *Console) backfillSource(sess *auth.Session, name string) *sources.Source {
	if c.cfg.Inbox == nil {
		return nil
	}
	src := c.cfg.Inbox.TriggerSource(name)
	if src == nil || src.Tenant != sess.Tenant || src.Backfill == nil {
		return nil
	}
	return src
}

// configuredWithoutBackfill reports whether the sources file names name
// for the session's tenant (an ingest door or trigger source of its
// tenant, or a claim-only source, which names no tenant) without backfill,
// as the API's backfill routes answer 409 for.
func (c *Console) configuredWithoutBackfill(sess *auth.Session, name string) bool {
	if c.cfg.Inbox == nil {
		return false
	}
	if src := c.cfg.Inbox.TriggerSource(name); src != nil {
		return src.Tenant == sess.Tenant && src.Backfill == nil
	}
	return c.cfg.Ledger != nil && c.cfg.Ledger.Configured(name)
}

// backfillOf reads the source page's backfill section, nil for a source
// without backfill.
func (c *Console) backfillOf(ctx context.Context, sess *auth.Session, name string, q backfillPage) (*backfillView, error) {
	src := c.backfillSource(sess, name)
	if src == nil {
		return nil, nil
	}
	v := &backfillView{Mode: string(src.Backfill.Mode), Interval: "on demand only"}
	if src.Backfill.Interval > 0 {
		v.Interval = "every " + age(src.Backfill.Interval)
	}
	switch q.Done {
	case backfill.ResultQueued:
		v.Done = "Scan queued: it lists the provider's events and records the ones claimd did not receive."
	case backfill.ResultRunning:
		v.Done = "A scan of this source is queued or running already: no scan was queued for this request, and what it asked for " +
			"(its range) was not applied. The scan below runs with its own; ask again once it has finished."
	}
	scans, nextScan, err := backfill.ListScans(ctx, c.cfg.Inbox.Pool(), src.Tenant, src.Name,
		backfill.ScanQuery{Limit: consoleScans, Before: q.ScansBefore})
	if err != nil {
		return nil, err
	}
	finds, nextFinding, err := backfill.ListEvents(ctx, c.cfg.Inbox.Pool(), src.Tenant, src.Name,
		backfill.EventQuery{Limit: consoleFindings, Before: q.EventsBefore})
	if errors.Is(err, backfill.ErrBadCursor) {
		return nil, &apperr.Error{Code: apperr.Malformed, Field: "events_before", Message: "must be the older link's"}
	}
	if err != nil {
		return nil, err
	}
	v.Scans, v.Findings = scans, finds
	base := sourceURL(src.Name, "")
	if nextScan != 0 {
		v.OlderScans = base + "?scans_before=" + strconv.FormatInt(nextScan, 10) + "#backfill"
	}
	if nextFinding != "" {
		v.OlderFindings = base + "?events_before=" + url.QueryEscape(nextFinding) + "#backfill-events"
	}
	return v, nil
}

// backfillScan is POST /ui/sources/{source}/backfill: "Scan now" (the
// source's default range), or with whole_window=yes "Scan the whole
// window" (the provider's listable window, whatever earlier scans
// covered), with the form's CSRF token (session) and its confirmation
// box; the scan is asked for as the API's (one per source at a time),
// actor the key prefix.
func (c *Console) backfillScan(ctx *fiber.Ctx) error {
	sess := sessionOf(ctx)
	name := ctx.Params("source")
	if s, err := url.PathUnescape(name); err == nil {
		name = s
	}
	src := c.backfillSource(sess, name)
	if src == nil {
		if c.configuredWithoutBackfill(sess, name) {
			return &apperr.Error{Code: apperr.InvalidState, Field: "source",
				Message: "this source has no backfill configured (backfill: in the sources file)"}
		}
		return apperr.New(apperr.NotFound, "no such page")
	}
	form := formOf(ctx)
	if form.Get("confirm") != "yes" {
		return apperr.Field("confirm", "tick the box to confirm the scan")
	}
	trig := backfill.Trigger{Kind: backfill.TriggerConsole, Actor: sess.KeyPrefix}
	switch form.Get("whole_window") {
	case "":
	case "yes":
		w := backfill.Window(src, time.Now())
		trig.From, trig.To = w.From, w.To
	default:
		return apperr.Field("whole_window", "must be yes or absent")
	}
	dctx, cancel := c.ctx(ctx)
	defer cancel()
	sc, already, err := backfill.Enqueue(dctx, c.cfg.Inbox, src, trig)
	if err != nil {
		return err
	}
	c.cfg.Logger.Info().Str("tenant", sess.Tenant).Str("key_prefix", sess.KeyPrefix).Str("source", src.Name).
		Int64("scan", sc.ID).Bool("whole_window", !trig.From.IsZero()).Bool("already_running", already).Msg("console: backfill scan")
	done := backfill.ResultQueued
	if already {
		done = backfill.ResultRunning
	}
	return ctx.Redirect(sourceURL(src.Name, "")+"?scan="+done+"#backfill", fiber.StatusSeeOther)
}
