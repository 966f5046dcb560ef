package httpapi

import (
	"math"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/httpquery"
)

// GET /v1/sources/{source}/stats?range=24h|7d: the numbers the console's
// source page charts (claim.Ledger.SourceStats, the hourly rollup of the
// delivery log) for the key's tenant, one entry per hour, with their
// totals over the range and what the layer saved in the last 7 days (the
// overview's "effects not repeated this week").

// statsSpans are the ranges of GET …/stats, as the console offers them.
var statsSpans = map[string]time.Duration{"24h": 24 * time.Hour, "7d": 7 * 24 * time.Hour}

// statsWeek is the span of the "saved" summary.
const statsWeek = 7 * 24 * time.Hour

// causeCountJSON is one duplicate cause (claim.Cause; "" when the
// delivery log names none) and its count.
type causeCountJSON struct {
	Cause string `json:"cause"`
	Count int64  `json:"count"`
}

// causesJSON lists by, largest first (ties by name); [] when empty.
func causesJSON(by map[string]int64) []causeCountJSON {
	out := []causeCountJSON{}
	for _, c := range (claim.Savings{ByCause: by}).Causes() {
		out = append(out, causeCountJSON{Cause: c.Cause, Count: c.N})
	}
	return out
}

// statsNumbersJSON are the numbers of one hour, or of a whole range.
type statsNumbersJSON struct {
	// Deliveries counts the copies that reached claimd (ingest, trigger
	// and claims of records that came through neither).
	Deliveries int64 `json:"deliveries"`
	// ShadowDeliveries counts those of Deliveries observed in shadow mode
	// (all of them ran); the others were enforced.
	ShadowDeliveries int64 `json:"shadow_deliveries"`
	// DuplicatesStopped counts the copies answered duplicate or
	// in_progress (effects not run again), split by cause in
	// DuplicatesByCause.
	DuplicatesStopped int64            `json:"duplicates_stopped"`
	DuplicatesByCause []causeCountJSON `json:"duplicates_by_cause"`
	// WouldDuplicates counts shadow mode's would-be duplicates: copies
	// that ran, and that enforcement would have stopped.
	WouldDuplicates int64 `json:"would_duplicates"`
	// WouldConflicts counts shadow mode's would-be conflicts: copies
	// with a known key and another payload that ran, and that
	// enforcement would have held.
	WouldConflicts int64 `json:"would_conflicts"`
	// Conflicts counts the copies with a known key and another payload,
	// held (not those seen in shadow: WouldConflicts).
	Conflicts int64 `json:"conflicts"`
	// Missed and Backfilled count the events backfill found missing and
	// recovered.
	Missed     int64 `json:"missed"`
	Backfilled int64 `json:"backfilled"`
	// Dispatched counts the inbox events forwarded to n8n;
	// DispatchLagAvgMs and DispatchLagMaxMs their times from receipt to
	// dispatch, milliseconds (0 without a dispatch).
	Dispatched       int64   `json:"dispatched"`
	DispatchLagAvgMs float64 `json:"dispatch_lag_ms_avg"`
	DispatchLagMaxMs float64 `json:"dispatch_lag_ms_max"`
}

// statsHourJSON is one hour (its start, UTC) and its numbers.
type statsHourJSON struct {
	Hour time.Time `json:"hour"`
	statsNumbersJSON
}

// savedJSON is what the layer saved over a span.
type savedJSON struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// EffectsNotRepeated counts the duplicate copies stopped, by cause in
	// ByCause.
	EffectsNotRepeated int64            `json:"effects_not_repeated"`
	ByCause            []causeCountJSON `json:"by_cause"`
	ConflictsHeld      int64            `json:"conflicts_held"`
	MissedRecovered    int64            `json:"missed_recovered"`
	Missed             int64            `json:"missed"`
}

// statsJSON is the answer of GET /v1/sources/{source}/stats.
type statsJSON struct {
	Source string `json:"source"`
	// Scope is the ledger source whose numbers these are: an ingest
	// door's dedupe_scope (the records of every door of the scope, which
	// deduplicate together), else Source itself.
	Scope string `json:"scope"`
	Range string `json:"range"`
	// From and To bound the hours, [from, to), UTC: To is the end of the
	// current hour (whose numbers grow until it ends).
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Shadow: the source's policy is in shadow mode now.
	Shadow bool            `json:"shadow"`
	Hours  []statsHourJSON `json:"hours"`
	// Summary is the numbers of the whole range; WouldDuplicatesPercent
	// the would-be duplicates in whole percent of the deliveries observed
	// in shadow (ShadowDeliveries), whatever the enforced hours of the
	// range saw.
	Summary struct {
		statsNumbersJSON
		WouldDuplicatesPercent int64 `json:"would_duplicates_percent"`
	} `json:"summary"`
	// Saved is what the layer saved in the last 7 days.
	Saved savedJSON `json:"saved_7d"`
}

// sourceStats is GET /v1/sources/{source}/stats. {source} is the ledger's
// source (the claims' source: a source's dedupe_scope, by default its
// name) or an ingest door or trigger source of the key's tenant, whose
// numbers are its dedupe_scope's (named in scope): the doors of one
// scope share their records, so a copy at one door of an event another
// door received is the scope's duplicate, no one door's. A source the key's tenant has neither records nor numbers of,
// nor configures, is 404 naming the parameter (another tenant's alike); a
// range other than 24h or 7d, or given twice, is 400 naming range.
func (s *Server) sourceStats(c *fiber.Ctx) error {
	args := c.Context().QueryArgs()
	if err := httpquery.Once(args, "range"); err != nil {
		return err
	}
	rng := "24h"
	if args.Has("range") {
		rng = string(args.Peek("range"))
	}
	span, ok := statsSpans[rng]
	if !ok {
		return &apperr.Error{Code: apperr.Malformed, Field: "range", Message: "must be 24h or 7d"}
	}
	source, tn := c.Params("source"), tenant(c)
	ctx, cancel := s.ctx(c)
	defer cancel()
	known, err := s.cfg.Ledger.SourceKnown(ctx, tn, source)
	if err != nil {
		return err
	}
	if !known && !s.configures(tn, source) {
		return &apperr.Error{Code: apperr.NotFound, Field: "source", Message: "no such source for this key's tenant"}
	}
	scope := s.statsScope(tn, source)
	to := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
	from := to.Add(-span)
	hours, err := s.cfg.Ledger.SourceStats(ctx, tn, scope, from, to)
	if err != nil {
		return err
	}
	weekFrom := to.Add(-statsWeek)
	saved, err := s.cfg.Ledger.Savings(ctx, tn, scope, weekFrom, to)
	if err != nil {
		return err
	}
	out := statsJSON{Source: source, Scope: scope, Range: rng, From: from, To: to, Shadow: s.cfg.Ledger.Policy(scope).Shadow,
		Hours: make([]statsHourJSON, len(hours))}
	var total claim.HourStats
	total.Causes = map[string]int64{}
	for i, h := range hours {
		out.Hours[i] = statsHourJSON{Hour: h.Hour, statsNumbersJSON: numbersJSON(h)}
		total.Deliveries += h.Deliveries
		total.ShadowDeliveries += h.ShadowDeliveries
		total.WouldConflicts += h.WouldConflicts
		total.DuplicatesStopped += h.DuplicatesStopped
		total.WouldDuplicates += h.WouldDuplicates
		total.Conflicts += h.Conflicts
		total.Missed += h.Missed
		total.Backfilled += h.Backfilled
		total.Dispatched += h.Dispatched
		total.DispatchLagSumMs += h.DispatchLagSumMs
		total.DispatchLagMaxMs = max(total.DispatchLagMaxMs, h.DispatchLagMaxMs)
		for k, n := range h.Causes {
			total.Causes[k] += n
		}
	}
	out.Summary.statsNumbersJSON = numbersJSON(total)
	out.Summary.WouldDuplicatesPercent = claim.WouldPercent(total)
	out.Saved = savedJSON{From: weekFrom, To: to, EffectsNotRepeated: saved.DuplicatesStopped, ByCause: causesJSON(saved.ByCause),
		ConflictsHeld: saved.Conflicts, MissedRecovered: saved.Backfilled, Missed: saved.Missed}
	return c.JSON(out)
}

// numbersJSON is h's numbers on the wire (lags rounded to the
// millisecond).
func numbersJSON(h claim.HourStats) statsNumbersJSON {
	return statsNumbersJSON{Deliveries: h.Deliveries, ShadowDeliveries: h.ShadowDeliveries, DuplicatesStopped: h.DuplicatesStopped,
		DuplicatesByCause: causesJSON(h.Causes), WouldDuplicates: h.WouldDuplicates, WouldConflicts: h.WouldConflicts,
		Conflicts: h.Conflicts,
		Missed:    h.Missed, Backfilled: h.Backfilled, Dispatched: h.Dispatched,
		DispatchLagAvgMs: math.Round(h.DispatchLagAvgMs()), DispatchLagMaxMs: math.Round(h.DispatchLagMaxMs)}
}

// statsScope is the ledger source whose numbers GET …/stats of source
// reports for tenant: the dedupe_scope of tenant's ingest door or trigger
// source of that name, else source.
func (s *Server) statsScope(tenant, source string) string {
	if s.cfg.Inbox == nil {
		return source
	}
	if src := s.cfg.Inbox.TriggerSource(source); src != nil && src.Tenant == tenant && src.Scope != "" {
		return src.Scope
	}
	return source
}

// configures reports whether the sources file names source as tenant's
// ingest door or trigger source (a claim-only source names no tenant: it
// is known by its records).
func (s *Server) configures(tenant, source string) bool {
	if s.cfg.Inbox == nil {
		return false
	}
	src := s.cfg.Inbox.TriggerSource(source)
	return src != nil && src.Tenant == tenant
}
