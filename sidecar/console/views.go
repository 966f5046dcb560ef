package console

import (
	"fmt"
	"html/template"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/httpquery"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
)

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"when": func(t any) string {
		switch v := t.(type) {
		case time.Time:
			if v.IsZero() {
				return "—"
			}
			return v.UTC().Format("2006-01-02 15:04:05Z")
		case *time.Time:
			if v == nil {
				return "—"
			}
			return v.UTC().Format("2006-01-02 15:04:05Z")
		}
		return "—"
	},
	"age": age,
	"count": func(m map[claim.State]int64, s string) int64 {
		return m[claim.State(s)]
	},
	"listURL": func(source, state string) string {
		v := url.Values{}
		if source != "" {
			v.Set("source", source)
		}
		if state != "" {
			v.Set("state", state)
		}
		return Prefix + "/claims?" + v.Encode()
	},
	"recordURL": func(id string) string { return Prefix + "/claims/" + url.PathEscape(id) },
	"sourceURL": func(source string) string { return sourceURL(source, "") },
	// plural is one when n is 1 (or -1), else many: {{plural .N "conflict" "conflicts"}}.
	"plural": func(n int64, one, many string) string {
		if n == 1 || n == -1 {
			return one
		}
		return many
	},
	"dflt": func(s, alt string) string {
		if s == "" {
			return alt
		}
		return s
	},
}

// age writes a duration as "1h2m", "3m4s" or "5s"; "—" for 0.
func age(d time.Duration) string {
	if d <= 0 {
		return "—"
	}
	d = d.Round(time.Second)
	switch {
	case d >= 24*time.Hour:
		return fmt.Sprintf("%dd%dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
	case d >= time.Hour:
		return fmt.Sprintf("%dh%dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	case d >= time.Minute:
		return fmt.Sprintf("%dm%ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	}
	return fmt.Sprintf("%ds", int(d/time.Second))
}

// openStates are the overview's columns, in state-machine order.
var openStates = []string{"received", "processing", "retryable_failed", "dead_lettered", "unknown"}

type overviewView struct {
	Sources []claim.SourceSummary
	States  []string
	// Saved is what the layer saved the tenant in the last 7 days, Charted
	// the sources with numbers in them (links to their charts).
	Saved   savedView
	Charted []string
}

// overview is GET /ui/: the tenant's open records, conflicts and dead
// letters per source.
func (c *Console) overview(ctx *fiber.Ctx) error {
	dctx, cancel := c.ctx(ctx)
	defer cancel()
	sess := sessionOf(ctx)
	ov, err := c.cfg.Ledger.Overview(dctx, sess.Tenant)
	if err != nil {
		return err
	}
	v := overviewView{Sources: ov, States: openStates}
	to := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
	from := to.Add(-7 * 24 * time.Hour)
	saved, err := c.cfg.Ledger.Savings(dctx, sess.Tenant, "", from, to)
	if err != nil {
		return err
	}
	v.Saved = newSaved(saved, "the last 7 days")
	if v.Charted, err = c.cfg.Ledger.StatsSources(dctx, sess.Tenant, from); err != nil {
		return err
	}
	return c.render(ctx, fiber.StatusOK, "overview", page{Title: "Overview", Session: sess, CSRF: sess.CSRF,
		Nav: "overview", Data: v})
}

// PageSize is the list's page size unless limit says otherwise.
const PageSize = 50

type listView struct {
	Filter  listFilter
	States  []claim.State
	Records []claim.Record
	// Next is the URL of the next page, "" on the last; First the URL of
	// the first page of the same filters, "" on the first.
	Next, First string
}

// listFilter is the list's query as the form shows it again: the values
// the ledger accepted, re-encoded by the template.
type listFilter struct {
	State, Source, TimeField, From, To, EventIDPrefix string
}

// timeLayouts are the forms a from or to value may take: what a
// datetime-local input sends (read as UTC), with or without seconds, or
// RFC 3339.
var timeLayouts = []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339}

func parseTime(field, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	for _, l := range timeLayouts {
		if t, err := time.ParseInLocation(l, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, apperr.Field(field, "must be a time as YYYY-MM-DDTHH:MM (UTC) or RFC 3339")
}

// list is GET /ui/claims: records filtered by state, source, time range
// (updated or created) and event id prefix, newest first, keyset-paged
// (cursor).
func (c *Console) list(ctx *fiber.Ctx) error {
	sess := sessionOf(ctx)
	if err := httpquery.Once(ctx.Request().URI().QueryArgs(), "state", "source", "time_field", "from", "to",
		"event_id_prefix", "cursor", "limit"); err != nil {
		return err
	}
	q := func(name string) string { return string(ctx.Request().URI().QueryArgs().Peek(name)) }
	lf := listFilter{State: q("state"), Source: q("source"), TimeField: q("time_field"), From: q("from"), To: q("to"),
		EventIDPrefix: q("event_id_prefix")}
	f := claim.BrowseFilter{State: claim.State(lf.State), Source: lf.Source, EventIDPrefix: lf.EventIDPrefix,
		Field: claim.TimeField(lf.TimeField), Cursor: q("cursor"), Limit: PageSize}
	var err error
	if f.From, err = parseTime("from", lf.From); err != nil {
		return err
	}
	if f.To, err = parseTime("to", lf.To); err != nil {
		return err
	}
	if l := q("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 {
			return apperr.Field("limit", "must be from 1 to %d", claim.MaxListLimit)
		}
		f.Limit = n
	}
	dctx, cancel := c.ctx(ctx)
	defer cancel()
	recs, next, err := c.cfg.Ledger.Browse(dctx, sess.Tenant, f)
	if err != nil {
		return err
	}
	v := listView{Filter: lf, States: claim.States, Records: recs}
	args := url.Values{}
	for k, val := range map[string]string{"state": lf.State, "source": lf.Source, "time_field": lf.TimeField,
		"from": lf.From, "to": lf.To, "event_id_prefix": lf.EventIDPrefix, "limit": q("limit")} {
		if val != "" {
			args.Set(k, val)
		}
	}
	if q("cursor") != "" {
		v.First = Prefix + "/claims?" + args.Encode()
	}
	if next != "" {
		args.Set("cursor", next)
		v.Next = Prefix + "/claims?" + args.Encode()
	}
	return c.render(ctx, fiber.StatusOK, "list", page{Title: "Claims", Session: sess, CSRF: sess.CSRF, Nav: "claims", Data: v})
}

type recordView struct {
	Record claim.Record
	// Inbox is the record's inbox event (dispatch state), nil when it did
	// not come through ingest (or its payload was purged).
	Inbox *inbox.InboxEvent
	// Actions open for the record: "resolve", "release", "replay".
	Actions map[string]bool
	// Done is the action just done (a flash), "" for none.
	Done string
	// Expiry is when the record's key may be forgotten under the current
	// policy (claim.Ledger.KeyExpiry).
	Expiry claim.KeyExpiry
	// Reconcile is the record's reconcile (calls to its reconciler while
	// it is unknown), nil when it has none.
	Reconcile *claim.ReconcileState
}

// record is GET /ui/claims/{id}: the record, its dispatch state and its
// whole delivery log.
func (c *Console) record(ctx *fiber.Ctx) error {
	sess := sessionOf(ctx)
	if err := httpquery.Once(ctx.Context().QueryArgs(), "done"); err != nil {
		return err
	}
	v, err := c.loadRecord(ctx, ctx.Params("id"))
	if err != nil {
		return err
	}
	if d := ctx.Query("done"); doneText[d] != "" {
		v.Done = doneText[d]
	}
	return c.render(ctx, fiber.StatusOK, "record", page{Title: "Claim", Session: sess, CSRF: sess.CSRF, Nav: "claims", Data: v})
}

var doneText = map[string]string{
	"resolve": "Resolved: the decision is in the delivery log.",
	"release": "Released to unknown: the holder's token can no longer fail or extend it; resolve it when you know what happened.",
	"replay":  "Replayed: the dispatch is pending again.",
}

func (c *Console) loadRecord(ctx *fiber.Ctx, id string) (recordView, error) {
	sess := sessionOf(ctx)
	dctx, cancel := c.ctx(ctx)
	defer cancel()
	rec, err := c.cfg.Ledger.Get(dctx, sess.Tenant, id)
	if err != nil {
		return recordView{}, err
	}
	v := recordView{Record: rec, Actions: map[string]bool{}, Expiry: c.cfg.Ledger.KeyExpiry(rec)}
	if v.Reconcile, err = c.cfg.Ledger.ReconcileOf(dctx, sess.Tenant, rec.ID); err != nil {
		return recordView{}, err
	}
	if c.cfg.Inbox != nil {
		e, err := c.cfg.Inbox.Get(dctx, sess.Tenant, rec.ID)
		switch apperr.CodeOf(err) {
		case "":
			v.Inbox = &e
		case apperr.NotFound:
		default:
			return recordView{}, err
		}
	}
	switch rec.State {
	case claim.StateUnknown, claim.StateDeadLettered:
		v.Actions["resolve"] = true
	case claim.StateProcessing:
		v.Actions["release"] = true
	}
	if v.Inbox != nil && v.Inbox.DispatchState == "dead_lettered" {
		v.Actions["replay"] = true
	}
	return v, nil
}

// resolveOutcomes are the decisions the resolve form offers for a state.
func resolveOutcomes(s claim.State) []string {
	if s == claim.StateUnknown {
		return []string{"completed", "retry", "failed"}
	}
	return []string{"completed", "retry"}
}

type confirmView struct {
	Action   string
	Record   claim.Record
	Inbox    *inbox.InboxEvent
	Outcomes []string
	// LeaseValid: a release would fence a holder whose lease has not
	// ended.
	LeaseValid bool
	MaxNote    int
}

// confirmPage is GET /ui/claims/{id}/{action}: what the action will do,
// and its form (confirmation checkbox and note).
func (c *Console) confirmPage(ctx *fiber.Ctx) error {
	sess := sessionOf(ctx)
	action := ctx.Params("action")
	v, err := c.loadRecord(ctx, ctx.Params("id"))
	if err != nil {
		return err
	}
	if _, known := doneText[action]; !known {
		return apperr.New(apperr.NotFound, "no such page")
	}
	if !v.Actions[action] {
		return &apperr.Error{Code: apperr.InvalidState, Message: notOpen(action, v)}
	}
	cv := confirmView{Action: action, Record: v.Record, Inbox: v.Inbox, Outcomes: resolveOutcomes(v.Record.State),
		MaxNote: claim.MaxNoteLen}
	if lu := v.Record.LeaseUntil; lu != nil && lu.After(time.Now()) {
		cv.LeaseValid = true
	}
	return c.render(ctx, fiber.StatusOK, "confirm", page{Title: strings.ToUpper(action[:1]) + action[1:], Session: sess,
		CSRF: sess.CSRF, Nav: "claims", Data: cv})
}

func notOpen(action string, v recordView) string {
	switch action {
	case "resolve":
		return fmt.Sprintf("only unknown or dead_lettered claims can be resolved; this one is %s", v.Record.State)
	case "release":
		return fmt.Sprintf("only processing claims can be released to unknown; this one is %s", v.Record.State)
	}
	if v.Inbox == nil {
		return "this claim did not come through ingest (or its payload was purged): there is no dispatch to replay"
	}
	return fmt.Sprintf("only dead-lettered dispatches can be replayed; this one is %s", v.Inbox.DispatchState)
}

// act is POST /ui/claims/{id}/{action}: confirm=yes and a note are
// required; resolve also takes outcome and result_ref. The ledger and
// inbox calls check the tenant again in their statements.
func (c *Console) act(ctx *fiber.Ctx) error {
	sess := sessionOf(ctx)
	form := formOf(ctx)
	action, id := ctx.Params("action"), ctx.Params("id")
	if _, known := doneText[action]; !known {
		return apperr.New(apperr.NotFound, "no such page")
	}
	if form.Get("confirm") != "yes" {
		return apperr.Field("confirm", "tick the box to confirm the action")
	}
	note := form.Get("note")
	if strings.TrimSpace(note) == "" {
		return apperr.Field("note", "is required: say why, for the delivery log")
	}
	if len(note) > claim.MaxNoteLen {
		return apperr.Field("note", "must be at most %d bytes", claim.MaxNoteLen)
	}
	dctx, cancel := c.ctx(ctx)
	defer cancel()
	var err error
	switch action {
	case "resolve":
		outcome := form.Get("outcome")
		if outcome == "" {
			return apperr.Field("outcome", "is required: completed, retry or failed")
		}
		resultRef := form.Get("result_ref")
		if outcome != string(claim.ResolveCompleted) && resultRef != "" {
			return apperr.Field("result_ref", "is only for an outcome of completed")
		}
		_, err = c.cfg.Ledger.ResolveAs(dctx, sess.Tenant, id, claim.ResolveOutcome(outcome), resultRef, note, sess.KeyPrefix)
	case "release":
		_, err = c.cfg.Ledger.Release(dctx, sess.Tenant, id, note, sess.KeyPrefix)
	case "replay":
		if c.cfg.Inbox == nil {
			return apperr.New(apperr.NotFound, "no such page")
		}
		if err := textOK(note); err != nil {
			return err
		}
		if _, gerr := c.cfg.Ledger.Get(dctx, sess.Tenant, id); gerr != nil {
			return gerr
		}
		_, err = c.cfg.Inbox.ReplayAs(dctx, sess.Tenant, id, note, sess.KeyPrefix)
		if apperr.CodeOf(err) == apperr.NotFound {
			err = &apperr.Error{Code: apperr.InvalidState,
				Message: "this claim did not come through ingest (or its payload was purged): there is no dispatch to replay"}
		}
	}
	if err != nil {
		return err
	}
	c.cfg.Logger.Info().Str("tenant", sess.Tenant).Str("key_prefix", sess.KeyPrefix).Str("action", action).
		Str("claim_id", id).Msg("console: operator action")
	return ctx.Redirect(Prefix+"/claims/"+url.PathEscape(id)+"?done="+action, fiber.StatusSeeOther)
}

// textOK refuses a note PostgreSQL text cannot hold.
func textOK(note string) error {
	if !utf8Valid(note) {
		return apperr.Field("note", "must be valid UTF-8 without NUL characters")
	}
	return nil
}

func utf8Valid(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }
