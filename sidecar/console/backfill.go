package console

import (
	"context"
	"net/url"

	"github.com/gofiber/fiber/v2"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/backfill"
	"github.com/idempotent-claim/idempotent-claim/sidecar/ingest"
)

// backfillView is the source page's gap detection: the latest scans,
// the events the provider holds that claimd did not receive, and the
// "Scan now" form.
type backfillView struct {
	Mode     string
	Interval string
	Scans    []backfill.Scan
	Findings []backfill.Finding
	// Done says a scan was just queued ("queued", or "running" when one
	// was queued or running already).
	Done string
}

// backfillSource is the session tenant's configured source with
// backfill, or nil.
func (c *Console) backfillSource(sess *auth.Session, name string) *ingest.Source {
	if c.cfg.Inbox == nil {
		return nil
	}
	src := c.cfg.Inbox.TriggerSource(name)
	if src == nil || src.Tenant != sess.Tenant || src.Backfill == nil {
		return nil
	}
	return src
}

// backfillOf reads the source page's backfill section, nil for a source
// without backfill.
func (c *Console) backfillOf(ctx context.Context, sess *auth.Session, name, done string) (*backfillView, error) {
	src := c.backfillSource(sess, name)
	if src == nil {
		return nil, nil
	}
	v := &backfillView{Mode: string(src.Backfill.Mode), Interval: "on demand only"}
	if src.Backfill.Interval > 0 {
		v.Interval = "every " + age(src.Backfill.Interval)
	}
	switch done {
	case "queued":
		v.Done = "Scan queued: it lists the provider's events and records the ones claimd did not receive."
	case "running":
		v.Done = "A scan of this source is queued or running already."
	}
	var err error
	if v.Scans, err = backfill.ListScans(ctx, c.cfg.Inbox.Pool(), src.Tenant, src.Name, 5); err != nil {
		return nil, err
	}
	if v.Findings, err = backfill.ListEvents(ctx, c.cfg.Inbox.Pool(), src.Tenant, src.Name, "", 20); err != nil {
		return nil, err
	}
	return v, nil
}

// backfillScan is POST /ui/sources/{source}/backfill: "Scan now", with
// the form's CSRF token (session) and its confirmation box; the scan is
// queued as the API's (one per source at a time), actor the key prefix.
func (c *Console) backfillScan(ctx *fiber.Ctx) error {
	sess := sessionOf(ctx)
	name := ctx.Params("source")
	if s, err := url.PathUnescape(name); err == nil {
		name = s
	}
	src := c.backfillSource(sess, name)
	if src == nil {
		return apperr.New(apperr.NotFound, "no such page")
	}
	if formOf(ctx).Get("confirm") != "yes" {
		return apperr.Field("confirm", "tick the box to confirm the scan")
	}
	dctx, cancel := c.ctx(ctx)
	defer cancel()
	_, already, err := backfill.Enqueue(dctx, c.cfg.Inbox, src, backfill.Trigger{Kind: backfill.TriggerConsole, Actor: sess.KeyPrefix})
	if err != nil {
		return err
	}
	c.cfg.Logger.Info().Str("tenant", sess.Tenant).Str("key_prefix", sess.KeyPrefix).Str("source", src.Name).
		Bool("already_running", already).Msg("console: backfill scan")
	done := "queued"
	if already {
		done = "running"
	}
	return ctx.Redirect(sourceURL(src.Name, "")+"?scan="+done+"#backfill", fiber.StatusSeeOther)
}
