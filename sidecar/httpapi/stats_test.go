package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/httpapi"
)

// statsAnswer is the part of GET /v1/sources/{source}/stats the test reads.
type statsAnswer struct {
	Source string    `json:"source"`
	Scope  string    `json:"scope"`
	Range  string    `json:"range"`
	From   time.Time `json:"from"`
	To     time.Time `json:"to"`
	Shadow bool      `json:"shadow"`
	Hours  []struct {
		Hour              time.Time `json:"hour"`
		Deliveries        int64     `json:"deliveries"`
		DuplicatesStopped int64     `json:"duplicates_stopped"`
		DuplicatesByCause []struct {
			Cause string `json:"cause"`
			Count int64  `json:"count"`
		} `json:"duplicates_by_cause"`
		WouldDuplicates  int64   `json:"would_duplicates"`
		WouldConflicts   int64   `json:"would_conflicts"`
		ShadowDeliveries int64   `json:"shadow_deliveries"`
		Conflicts        int64   `json:"conflicts"`
		Missed           int64   `json:"missed"`
		Backfilled       int64   `json:"backfilled"`
		Dispatched       int64   `json:"dispatched"`
		DispatchLagAvgMs float64 `json:"dispatch_lag_ms_avg"`
		DispatchLagMaxMs float64 `json:"dispatch_lag_ms_max"`
	} `json:"hours"`
	Summary struct {
		Deliveries             int64   `json:"deliveries"`
		ShadowDeliveries       int64   `json:"shadow_deliveries"`
		DuplicatesStopped      int64   `json:"duplicates_stopped"`
		WouldDuplicates        int64   `json:"would_duplicates"`
		WouldConflicts         int64   `json:"would_conflicts"`
		WouldDuplicatesPercent int64   `json:"would_duplicates_percent"`
		Conflicts              int64   `json:"conflicts"`
		Missed                 int64   `json:"missed"`
		Backfilled             int64   `json:"backfilled"`
		Dispatched             int64   `json:"dispatched"`
		DispatchLagAvgMs       float64 `json:"dispatch_lag_ms_avg"`
		DispatchLagMaxMs       float64 `json:"dispatch_lag_ms_max"`
		DuplicatesByCause      []struct {
			Cause string `json:"cause"`
			Count int64  `json:"count"`
		} `json:"duplicates_by_cause"`
	} `json:"summary"`
	Saved struct {
		EffectsNotRepeated int64 `json:"effects_not_repeated"`
		ConflictsHeld      int64 `json:"conflicts_held"`
		MissedRecovered    int64 `json:"missed_recovered"`
		Missed             int64 `json:"missed"`
		ByCause            []struct {
			Cause string `json:"cause"`
			Count int64  `json:"count"`
		} `json:"by_cause"`
	} `json:"saved_7d"`
}

// TestSourceStats: GET /v1/sources/{source}/stats answers the seeded
// hourly numbers of the key's tenant, one entry per hour of the range,
// their totals and the week's savings (the would-be duplicate rate of
// the deliveries observed in shadow, not of all); another tenant's numbers are
// neither counted nor found; a bad or repeated range is 400 naming it.
func TestSourceStats(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, "sources: {}\n", ingestOptions{})
	cur := time.Now().UTC().Truncate(time.Hour)
	seed := func(tenant, source string, hour time.Time, n int64) {
		_, err := e.pool.Exec(e.ctx, `INSERT INTO stats_hourly (tenant, source, hour, deliveries, shadow_deliveries,
			duplicates_stopped, conflicts, would_duplicates, would_conflicts, missed, backfilled, dispatched,
			dispatch_lag_ms_sum, dispatch_lag_ms_max)
			VALUES ($1, $2, $3, 10*$4, 5*$4, 3*$4, $4, 2*$4, $4, $4, $4, 4*$4, 400*$4, 250*$4)`, tenant, source, hour, n)
		require.NoError(t, err)
		_, err = e.pool.Exec(e.ctx, `INSERT INTO stats_causes_hourly (tenant, source, hour, cause, n)
			VALUES ($1, $2, $3, 'provider_retry', 2*$4), ($1, $2, $3, 'another_door', $4)`, tenant, source, hour, n)
		require.NoError(t, err)
	}
	seed(ingestTenant, "payments", cur, 1)                       // the current hour
	seed(ingestTenant, "payments", cur.Add(-5*time.Hour), 2)     // in 24h
	seed(ingestTenant, "payments", cur.Add(-48*time.Hour), 5)    // in 7d only
	seed(ingestTenant, "payments", cur.Add(-10*24*time.Hour), 7) // in neither
	seed("other-tenant", "payments", cur, 100)
	seed("other-tenant", "theirs", cur, 1)

	get := func(query string) ingestAnswer {
		return e.api(t, http.MethodGet, "/v1/sources/payments/stats"+query)
	}
	ans := get("")
	require.Equal(t, http.StatusOK, ans.status, "%s", ans.body)
	var s statsAnswer
	require.NoError(t, json.Unmarshal(ans.body, &s))
	require.Equal(t, "payments", s.Source)
	require.Equal(t, "payments", s.Scope, "a ledger source is its own scope")
	require.Equal(t, "24h", s.Range, "the default range")
	require.Len(t, s.Hours, 24)
	require.Equal(t, cur.Add(time.Hour), s.To.UTC())
	require.Equal(t, cur, s.Hours[23].Hour.UTC())
	last := s.Hours[23]
	require.Equal(t, int64(10), last.Deliveries, "another tenant's numbers are not counted")
	require.Equal(t, int64(3), last.DuplicatesStopped)
	require.Equal(t, int64(2), last.WouldDuplicates)
	require.Equal(t, int64(1), last.WouldConflicts)
	require.Equal(t, int64(5), last.ShadowDeliveries)
	require.Equal(t, 100.0, last.DispatchLagAvgMs, "400 ms over 4 dispatches")
	require.Equal(t, 250.0, last.DispatchLagMaxMs)
	require.Len(t, last.DuplicatesByCause, 2)
	require.Equal(t, "provider_retry", last.DuplicatesByCause[0].Cause, "largest first")
	require.Equal(t, int64(2), last.DuplicatesByCause[0].Count)
	require.Equal(t, int64(20), s.Hours[18].Deliveries)
	require.Zero(t, s.Hours[0].Deliveries)
	require.Equal(t, int64(30), s.Summary.Deliveries)
	require.Equal(t, int64(9), s.Summary.DuplicatesStopped)
	require.Equal(t, int64(6), s.Summary.WouldDuplicates)
	require.Equal(t, int64(3), s.Summary.WouldConflicts)
	require.Equal(t, int64(15), s.Summary.ShadowDeliveries)
	require.Equal(t, int64(40), s.Summary.WouldDuplicatesPercent, "6 of the 15 deliveries observed in shadow, not of all 30")
	require.Equal(t, int64(3), s.Summary.Conflicts)
	require.Equal(t, int64(12), s.Summary.Dispatched)
	require.Equal(t, 100.0, s.Summary.DispatchLagAvgMs)
	require.Equal(t, 500.0, s.Summary.DispatchLagMaxMs)
	require.Equal(t, int64(24), s.Saved.EffectsNotRepeated, "3×(1+2+5): the last 7 days")
	require.Equal(t, int64(8), s.Saved.ConflictsHeld)
	require.Equal(t, int64(8), s.Saved.MissedRecovered)
	require.Len(t, s.Saved.ByCause, 2)

	ans = get("?range=7d")
	require.Equal(t, http.StatusOK, ans.status, "%s", ans.body)
	s = statsAnswer{}
	require.NoError(t, json.Unmarshal(ans.body, &s))
	require.Equal(t, "7d", s.Range)
	require.Len(t, s.Hours, 7*24)
	require.Equal(t, int64(80), s.Summary.Deliveries)

	for _, q := range []string{"?range=30d", "?range=", "?range=24h&range=7d", "?range=24H"} {
		bad := get(q)
		require.Equal(t, http.StatusBadRequest, bad.status, "%s: %s", q, bad.body)
		var eb httpapi.ErrorBody
		require.NoError(t, json.Unmarshal(bad.body, &eb))
		require.Equal(t, "range", eb.Error.Field, q)
		require.NotContains(t, string(bad.body), "30d", "never the caller's value")
	}
	for _, path := range []string{"/v1/sources/nowhere/stats", "/v1/sources/theirs/stats"} {
		nf := e.api(t, http.MethodGet, path)
		require.Equal(t, http.StatusNotFound, nf.status, "%s: %s", path, nf.body)
		var eb httpapi.ErrorBody
		require.NoError(t, json.Unmarshal(nf.body, &eb))
		require.Equal(t, "source", eb.Error.Field)
	}
	req, err := http.NewRequest(http.MethodGet, e.base+"/v1/sources/payments/stats", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, e.do(t, req).status, "the API key is required")
}

// TestSourceStatsDoorScope: the stats of an ingest door whose records
// live under its dedupe_scope are the scope's numbers (every door of the
// scope together), and the answer names the scope; the scope's own name
// answers the same numbers.
func TestSourceStatsDoorScope(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, `
sources:
  door-a: {tenant: acme, provider: github, secrets: ["`+dispatchSecret+`"], dedupe_scope: shop, `+unusedForward+`}
  door-b: {tenant: acme, provider: github, secrets: ["`+dispatchSecret+`"], dedupe_scope: shop, `+unusedForward+`}
`, ingestOptions{})
	cur := time.Now().UTC().Truncate(time.Hour)
	_, err := e.pool.Exec(e.ctx, `INSERT INTO stats_hourly (tenant, source, hour, deliveries, duplicates_stopped)
		VALUES ($1, 'shop', $2, 7, 2)`, ingestTenant, cur)
	require.NoError(t, err)
	for _, name := range []string{"door-a", "door-b", "shop"} {
		ans := e.api(t, http.MethodGet, "/v1/sources/"+name+"/stats")
		require.Equal(t, http.StatusOK, ans.status, "%s: %s", name, ans.body)
		var s statsAnswer
		require.NoError(t, json.Unmarshal(ans.body, &s))
		require.Equal(t, name, s.Source)
		require.Equal(t, "shop", s.Scope, name)
		require.Equal(t, int64(7), s.Summary.Deliveries, name)
		require.Equal(t, int64(2), s.Summary.DuplicatesStopped, name)
		require.Equal(t, int64(2), s.Saved.EffectsNotRepeated, name)
	}
}
