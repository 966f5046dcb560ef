package console

import (
	"fmt"
	"html/template"
	"math"
	"net/url"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/httpquery"
)

// statsRange is one range the source page offers: its span and the hours
// per bar.
type statsRange struct {
	Name   string
	Span   time.Duration
	Bucket int
	// Layout formats a bucket's start (UTC).
	Layout string
	// Words says the range in a sentence ("the last 24 hours").
	Words string
}

// statsRanges are the source page's ranges; the first is the default.
var statsRanges = []statsRange{
	{Name: "24h", Span: 24 * time.Hour, Bucket: 1, Layout: "15:04", Words: "the last 24 hours"},
	{Name: "7d", Span: 7 * 24 * time.Hour, Bucket: 6, Layout: "Mon 15h", Words: "the last 7 days"},
}

// causeText says a duplicate's cause (claim.Cause values of the delivery
// log) in words; a cause not listed is shown as stored.
var causeText = map[string]string{
	"":                 "no cause recorded",
	"provider_retry":   "provider retries",
	"another_door":     "another door (shared scope)",
	"operator_replay":  "operator replays",
	"reconciled":       "after a reconciler's verdict",
	"backfill":         "late real delivery after backfill",
	"dispatch_retry":   "dispatch retries",
	"n8n_twice":        "n8n ran it twice",
	"n8n_two_versions": "two workflow versions active at once",
	"upstream_repeat":  "the workflow claimed again",
}

func causeWords(c string) string {
	if t, ok := causeText[c]; ok {
		return t
	}
	return c
}

// savedView is the "what this saved you" sentence's numbers.
type savedView struct {
	Words             string
	DuplicatesStopped int64
	Causes            []causeCount
	Conflicts         int64
	Missed            int64
	Backfilled        int64
}

type causeCount struct {
	Cause, Words string
	N            int64
}

func newSaved(s claim.Savings, words string) savedView {
	v := savedView{Words: words, DuplicatesStopped: s.DuplicatesStopped, Conflicts: s.Conflicts, Missed: s.Missed,
		Backfilled: s.Backfilled}
	for _, c := range s.Causes() {
		v.Causes = append(v.Causes, causeCount{Cause: c.Cause, Words: causeWords(c.Cause), N: c.N})
	}
	return v
}

type sourceView struct {
	Source string
	Range  string
	Ranges []rangeLink
	Saved  savedView
	Charts []template.HTML
	// Rolled is when the numbers end (the current hour's numbers grow
	// with each maintenance tick).
	Until time.Time
	// Backfill is the source's gap detection (backfill.go), nil without.
	Backfill *backfillView
	// Shadow is the shadow-mode line, nil when the source is not in
	// shadow and observed nothing in shadow in the range.
	Shadow *shadowView
	// Scope is the dedupe_scope whose numbers the page shows when Source
	// is an ingest door or trigger source keyed in another scope, else "".
	Scope string
}

// shadowView is what shadow mode saw over a range: of Observed
// deliveries observed in shadow (all of them ran), Would would-be
// duplicates and WouldConflicts would-be conflicts (copies enforcement
// would have stopped or held), Percent the would-be duplicates of
// Observed (whole percent, rounded). Enforced counts the other
// deliveries of the range, enforced (a range across the switch), Stopped
// and Held their duplicates stopped and conflicts held. On when the
// source's policy is in shadow now.
type shadowView struct {
	Would, WouldConflicts, Observed int64
	Percent                         int64
	Enforced, Stopped, Held         int64
	Words                           string
	On                              bool
}

// newShadowView sums hours for source; nil when there is nothing to say.
func newShadowView(hours []claim.HourStats, words string, on bool) *shadowView {
	v := shadowView{Words: words, On: on}
	var sum claim.HourStats
	for _, h := range hours {
		sum.WouldDuplicates += h.WouldDuplicates
		sum.WouldConflicts += h.WouldConflicts
		sum.ShadowDeliveries += h.ShadowDeliveries
		sum.Deliveries += h.Deliveries
		v.Stopped += h.DuplicatesStopped
		v.Held += h.Conflicts
	}
	v.Would, v.WouldConflicts, v.Observed = sum.WouldDuplicates, sum.WouldConflicts, sum.ShadowDeliveries
	v.Enforced = max(sum.Deliveries-sum.ShadowDeliveries, 0)
	if !on && v.Observed == 0 && v.Would == 0 && v.WouldConflicts == 0 {
		return nil
	}
	v.Percent = claim.WouldPercent(sum)
	return &v
}

type rangeLink struct {
	Name, URL string
	Current   bool
}

func sourceURL(source, rng string) string {
	u := Prefix + "/sources/" + url.PathEscape(source)
	if rng != "" {
		u += "?range=" + url.QueryEscape(rng)
	}
	return u
}

// sourcePage is GET /ui/sources/{source}?range=24h|7d: the source's
// charts (deliveries, duplicates stopped by cause, conflicts, missed and
// backfilled, dispatch lag) over the range, each with its table, and what
// the layer saved in it. A source the tenant has neither records nor
// numbers of is 404, like another tenant's. Each of range, scan,
// scans_before and events_before is read only when given at most once
// (httpquery.Once: 400 naming it otherwise).
func (c *Console) sourcePage(ctx *fiber.Ctx) error {
	sess := sessionOf(ctx)
	source := ctx.Params("source")
	if s, err := url.PathUnescape(source); err == nil {
		source = s
	}
	if err := httpquery.Once(ctx.Context().QueryArgs(), "range", "scan", "scans_before", "events_before"); err != nil {
		return err
	}
	rng := statsRanges[0]
	if q := ctx.Query("range"); q != "" {
		found := false
		for _, r := range statsRanges {
			if r.Name == q {
				rng, found = r, true
			}
		}
		if !found {
			return apperr.Field("range", "must be 24h or 7d")
		}
	}
	dctx, cancel := c.ctx(ctx)
	defer cancel()
	scope := c.statsScope(sess.Tenant, source)
	known, err := c.cfg.Ledger.SourceKnown(dctx, sess.Tenant, scope)
	if err != nil {
		return err
	}
	bq, err := backfillPageOf(ctx)
	if err != nil {
		return err
	}
	bf, err := c.backfillOf(dctx, sess, source, bq)
	if err != nil {
		return err
	}
	if !known && bf == nil {
		return apperr.New(apperr.NotFound, "no such page")
	}
	to := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
	from := to.Add(-rng.Span)
	hours, err := c.cfg.Ledger.SourceStats(dctx, sess.Tenant, scope, from, to)
	if err != nil {
		return err
	}
	saved, err := c.cfg.Ledger.Savings(dctx, sess.Tenant, scope, from, to)
	if err != nil {
		return err
	}
	v := sourceView{Source: source, Range: rng.Name, Saved: newSaved(saved, rng.Words), Until: to,
		Charts: sourceCharts(hours, rng), Backfill: bf,
		Shadow: newShadowView(hours, rng.Words, c.cfg.Ledger.Policy(scope).Shadow)}
	if scope != source {
		v.Scope = scope
	}
	for _, r := range statsRanges {
		v.Ranges = append(v.Ranges, rangeLink{Name: r.Name, URL: sourceURL(source, r.Name), Current: r.Name == rng.Name})
	}
	return c.render(ctx, fiber.StatusOK, "source", page{Title: "Source " + source, Session: sess, CSRF: sess.CSRF,
		Nav: "overview", Data: v})
}

// statsScope is the ledger source whose numbers the source page of
// source shows for tenant: the dedupe_scope of tenant's ingest door or
// trigger source of that name (the doors of a scope share their records,
// so a copy at one door of an event another door received is the scope's
// duplicate, no one door's), else source.
func (c *Console) statsScope(tenant, source string) string {
	if c.cfg.Inbox == nil {
		return source
	}
	if src := c.cfg.Inbox.TriggerSource(source); src != nil && src.Tenant == tenant && src.Scope != "" {
		return src.Scope
	}
	return source
}

// bucket is the sum of a range's hours drawn as one bar.
type bucket struct {
	claim.HourStats
	Label string
}

// buckets sums hours (oldest first, one per hour) into bars of rng.Bucket
// hours.
func buckets(hours []claim.HourStats, rng statsRange) []bucket {
	var out []bucket
	for i, h := range hours {
		if i%rng.Bucket == 0 {
			out = append(out, bucket{HourStats: claim.HourStats{Hour: h.Hour, Causes: map[string]int64{}},
				Label: h.Hour.UTC().Format(rng.Layout)})
		}
		b := &out[len(out)-1]
		b.Deliveries += h.Deliveries
		b.DuplicatesStopped += h.DuplicatesStopped
		b.Conflicts += h.Conflicts
		b.WouldDuplicates += h.WouldDuplicates
		b.Missed += h.Missed
		b.Backfilled += h.Backfilled
		b.Dispatched += h.Dispatched
		b.DispatchLagSumMs += h.DispatchLagSumMs
		b.DispatchLagMaxMs = max(b.DispatchLagMaxMs, h.DispatchLagMaxMs)
		for k, n := range h.Causes {
			b.Causes[k] += n
		}
	}
	return out
}

// sourceCharts draws the source page's charts.
func sourceCharts(hours []claim.HourStats, rng statsRange) []template.HTML {
	bs := buckets(hours, rng)
	labels := make([]string, len(bs))
	for i, b := range bs {
		labels[i] = b.Label
	}
	per := "hour"
	if rng.Bucket > 1 {
		per = fmt.Sprintf("%d hours", rng.Bucket)
	}
	xl := fmt.Sprintf("Time (UTC), one bar per %s", per)
	one := func(name string, f func(bucket) float64) chartSeries {
		s := chartSeries{Name: name, Values: make([]float64, len(bs))}
		for i, b := range bs {
			s.Values[i] = f(b)
		}
		return s
	}
	sum := func(f func(bucket) float64) float64 {
		t := 0.0
		for _, b := range bs {
			t += f(b)
		}
		return t
	}
	deliveries := func(b bucket) float64 { return float64(b.Deliveries) }
	dups := func(b bucket) float64 { return float64(b.DuplicatesStopped) }
	conflicts := func(b bucket) float64 { return float64(b.Conflicts) }
	missed := func(b bucket) float64 { return float64(b.Missed) }
	backfilled := func(b bucket) float64 { return float64(b.Backfilled) }
	would := func(b bucket) float64 { return float64(b.WouldDuplicates) }

	// Duplicates by cause, largest cause first.
	totals := claim.Savings{ByCause: map[string]int64{}}
	for _, b := range bs {
		for k, n := range b.Causes {
			totals.ByCause[k] += n
		}
	}
	var dupSeries []chartSeries
	for _, cc := range totals.Causes() {
		cause := cc.Cause
		dupSeries = append(dupSeries, one(causeWords(cause), func(b bucket) float64 { return float64(b.Causes[cause]) }))
	}
	if len(dupSeries) == 0 {
		dupSeries = []chartSeries{one("duplicates stopped", dups)}
	}
	var dispatched float64
	var lagMax float64
	for _, b := range bs {
		dispatched += float64(b.Dispatched)
		lagMax = max(lagMax, b.DispatchLagMaxMs)
	}
	lagAvg := 0.0
	if dispatched > 0 {
		lagAvg = sum(func(b bucket) float64 { return b.DispatchLagSumMs }) / dispatched
	}
	charts := []template.HTML{
		barChart([]chartSeries{one("deliveries", deliveries)}, chartOpts{ID: "chart-deliveries", Title: "Deliveries",
			Desc:   fmt.Sprintf("Copies that reached claimd over %s: %s in all.", rng.Words, short(sum(deliveries))),
			XLabel: xl, YLabel: "deliveries", Labels: labels}),
		barChart(dupSeries, chartOpts{ID: "chart-duplicates", Title: "Duplicates stopped",
			Desc: fmt.Sprintf("Copies answered duplicate or in progress over %s, stacked by cause: %s in all; none ran its effect again.",
				rng.Words, short(sum(dups))),
			XLabel: xl, YLabel: "duplicates", Labels: labels, Kind: barsStacked}),
		barChart([]chartSeries{one("conflicts", conflicts)}, chartOpts{ID: "chart-conflicts", Title: "Conflicts held",
			Desc: fmt.Sprintf("Copies with a known key and another payload over %s: %s in all, held for review, never run.",
				rng.Words, short(sum(conflicts))),
			XLabel: xl, YLabel: "conflicts", Labels: labels}),
		barChart([]chartSeries{one("missed", missed), one("backfilled", backfilled)}, chartOpts{ID: "chart-missed",
			Title: "Missed and backfilled",
			Desc: fmt.Sprintf("Events the provider sent but claimd never received, found by backfill over %s: %s missed, %s recovered.",
				rng.Words, short(sum(missed)), short(sum(backfilled))),
			XLabel: xl, YLabel: "events", Labels: labels}),
		barChart([]chartSeries{
			one("average", func(b bucket) float64 { return math.Round(b.avgLag()) }),
			one("largest", func(b bucket) float64 { return math.Round(b.DispatchLagMaxMs) }),
		}, chartOpts{ID: "chart-lag", Title: "Dispatch lag",
			Desc: fmt.Sprintf("Time from receipt to the dispatch to n8n over %s, milliseconds: %s dispatches, average %s ms, largest %s ms.",
				rng.Words, short(dispatched), short(math.Round(lagAvg)), short(math.Round(lagMax))),
			XLabel: xl, YLabel: "milliseconds", Unit: "ms", Labels: labels, Kind: lines}),
	}
	if w := sum(would); w > 0 {
		// Shadow mode: only when it saw something, so that a source
		// never in shadow keeps its five charts.
		charts = append(charts, barChart([]chartSeries{one("would-be duplicates", would)}, chartOpts{ID: "chart-shadow",
			Title: "Would-be duplicates (shadow mode)",
			Desc: fmt.Sprintf("Copies that ran because the source was observed only, and that enforcement would have stopped, over %s: %s in all.",
				rng.Words, short(w)),
			XLabel: xl, YLabel: "would-be duplicates", Labels: labels}))
	}
	return charts
}

func (b bucket) avgLag() float64 { return b.DispatchLagAvgMs() }
