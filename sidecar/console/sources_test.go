package console_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/console"
)

var figureRe = regexp.MustCompile(`(?s)<figure class="chart".*?</figure>`)

// TestSourcePageCharts seeds claims, rolls the numbers up as the
// maintenance loop does, and reads the source page: the console's strict
// CSP is sent with it, every chart is well-formed XML with a title and a
// description and nothing the CSP forbids, and its bars carry the seeded
// counts; another tenant gets 404; a bad range is a 400 naming the field.
func TestSourcePageCharts(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	for _, ev := range []string{"e1", "e2", "e3"} {
		r := e.claim(t, tenantA, "stripe", ev)
		_, err := e.ledger.Complete(e.ctx, tenantA, r.ID, r.Token, "")
		require.NoError(t, err)
	}
	again := func(ev, hash string) claim.Outcome {
		r, err := e.ledger.Claim(e.ctx, claim.Request{Tenant: tenantA, Key: claim.Key{Source: "stripe", EventID: ev},
			PayloadHash: hash})
		require.NoError(t, err)
		return r.Outcome
	}
	same := strings.Repeat("ab", 32)
	require.Equal(t, claim.Duplicate, again("e1", same))
	require.Equal(t, claim.Duplicate, again("e1", same))
	require.Equal(t, claim.Duplicate, again("e2", same))
	require.Equal(t, claim.Conflict, again("e3", strings.Repeat("cd", 32)))
	_, _, err := e.ledger.RollupStats(e.ctx, time.Now().Add(-claim.RollupWindow))
	require.NoError(t, err)

	b := e.browser(t)
	b.signIn(keyA)
	r := b.get("/ui/sources/stripe")
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Equal(t, "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
		r.header.Get("Content-Security-Policy"), "the source page keeps the console's CSP")
	require.NotContains(t, r.body, "<script")
	require.NotContains(t, r.body, "style=")
	figs := figureRe.FindAllString(r.body, -1)
	require.Len(t, figs, 5, "deliveries, duplicates, conflicts, missed/backfilled, dispatch lag")
	sums := map[string]float64{}
	for _, fig := range figs {
		f, err := console.CheckChart(fig)
		require.NoError(t, err, fig)
		for _, m := range f.Marks {
			sums[f.ID+"/"+m.Series] += m.Value
		}
	}
	// 3 won + 3 duplicates + 1 conflict claims; the duplicates' cause is
	// whatever the delivery log records (one series per cause).
	require.Equal(t, 7.0, sums["chart-deliveries/deliveries"])
	var dups float64
	for k, v := range sums {
		if strings.HasPrefix(k, "chart-duplicates/") {
			dups += v
		}
	}
	require.Equal(t, 3.0, dups)
	require.Equal(t, 1.0, sums["chart-conflicts/conflicts"])
	require.Equal(t, 0.0, sums["chart-missed/missed"])
	require.Equal(t, []string{"3"}, texts(r.body, "saved-duplicates"))
	require.Equal(t, []string{"1"}, texts(r.body, "saved-conflicts"))

	week := b.get("/ui/sources/stripe?range=7d")
	require.Equal(t, http.StatusOK, week.status)
	require.Len(t, figureRe.FindAllString(week.body, -1), 5)
	bad := b.get("/ui/sources/stripe?range=1y")
	require.Equal(t, http.StatusUnprocessableEntity, bad.status)
	require.Equal(t, []string{"range"}, texts(bad.body, "error-field"))
	require.Equal(t, []string{"must be 24h or 7d"}, texts(bad.body, "error-message"))
	require.NotContains(t, withoutToken(bad.body), "1y", "the caller's value is not echoed")
	require.Equal(t, http.StatusNotFound, b.get("/ui/sources/nosuch").status)

	home := b.get("/ui/")
	require.Equal(t, http.StatusOK, home.status)
	require.Equal(t, []string{"3"}, texts(home.body, "saved-duplicates"))
	require.Contains(t, home.body, `href="/ui/sources/stripe"`)

	other := e.browser(t)
	other.signIn(keyB)
	require.Equal(t, http.StatusNotFound, other.get("/ui/sources/stripe").status, "another tenant's source")
}

// TestSourcePageShadow: a source observed only (shadow mode) shows how
// many of the deliveries it observed would have been stopped or held, a
// chart of the would-be duplicates and how to enforce; once enforced the
// line says so, and its rate stays that of the shadow deliveries while
// the enforced ones are told apart.
func TestSourcePageShadow(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	require.NoError(t, e.ledger.SetPolicies(claim.Policies{BySource: map[string]claim.Policy{"obs": {Shadow: true}}}))
	first := e.claim(t, tenantA, "obs", "e1")
	_, err := e.ledger.Complete(e.ctx, tenantA, first.ID, first.Token, "")
	require.NoError(t, err)
	copyOf := func(hash string) claim.Result {
		r, err := e.ledger.Claim(e.ctx, claim.Request{Tenant: tenantA, Key: claim.Key{Source: "obs", EventID: "e1"},
			PayloadHash: strings.Repeat(hash, 32)})
		require.NoError(t, err)
		return r
	}
	for range 3 {
		r := copyOf("ab")
		require.Equal(t, claim.Won, r.Outcome)
		require.Equal(t, claim.Duplicate, r.WouldBe)
	}
	r := copyOf("cd")
	require.Equal(t, claim.Won, r.Outcome)
	require.Equal(t, claim.Conflict, r.WouldBe)
	_, _, err = e.ledger.RollupStats(e.ctx, time.Now().Add(-claim.RollupWindow))
	require.NoError(t, err)

	b := e.browser(t)
	b.signIn(keyA)
	page := b.get("/ui/sources/obs")
	require.Equal(t, http.StatusOK, page.status, page.body)
	require.NotContains(t, page.body, "style=")
	require.Equal(t, []string{"60 %"}, texts(page.body, "shadow-percent"), "3 of 5 deliveries")
	require.Equal(t, []string{"5"}, texts(page.body, "shadow-observed"))
	require.Equal(t, []string{"3"}, texts(page.body, "shadow-would"))
	require.Equal(t, []string{"1"}, texts(page.body, "shadow-would-conflicts"))
	require.Empty(t, texts(page.body, "shadow-enforced"), "nothing enforced in the range")
	require.Contains(t, page.body, "<code>shadow: true</code>")
	figs := figureRe.FindAllString(page.body, -1)
	require.Len(t, figs, 6, "the five charts and the would-be duplicates")
	var would float64
	for _, fig := range figs {
		f, err := console.CheckChart(fig)
		require.NoError(t, err, fig)
		for _, m := range f.Marks {
			if f.ID == "chart-shadow" {
				would += m.Value
			}
		}
	}
	require.Equal(t, 3.0, would)
	require.NotContains(t, texts(page.body, "saved-duplicates"), "3", "nothing was stopped")
	rec := b.get("/ui/claims/" + first.ID)
	require.Equal(t, http.StatusOK, rec.status)
	require.Len(t, texts(rec.body, "delivery-shadow"), 5, "the won claim and its four copies are shadow entries")

	require.NoError(t, e.ledger.SetPolicies(claim.Policies{}))
	page = b.get("/ui/sources/obs")
	require.Contains(t, page.body, "Enforced now")
	require.NotContains(t, page.body, "<code>shadow: true</code>")

	// Enforced copies of the same hours: stopped, and not in the rate.
	for range 5 {
		require.Equal(t, claim.Duplicate, copyOf("ab").Outcome)
	}
	_, _, err = e.ledger.RollupStats(e.ctx, time.Now().Add(-claim.RollupWindow))
	require.NoError(t, err)
	page = b.get("/ui/sources/obs")
	require.Equal(t, []string{"60 %"}, texts(page.body, "shadow-percent"), "still 3 of the 5 observed in shadow, not of 10")
	require.Equal(t, []string{"5"}, texts(page.body, "shadow-observed"))
	require.Equal(t, []string{"The other 5 deliveries of this range were enforced: 5 duplicates stopped, 0 conflicts held."},
		texts(page.body, "shadow-enforced"))
}

// TestSourcePageDoorScope: the source page of an ingest door keyed in a
// dedupe_scope shows the scope's numbers and says so; the scope's own
// page shows the same numbers without the note.
func TestSourcePageDoorScope(t *testing.T) {
	t.Parallel()
	e := setup(t, options{sources: `
sources:
  door-a: {tenant: tenant-a, provider: token, secrets: ["` + tokKey + `"], dedupe_scope: shop, options: {header: X-Api-Key, key: {id_pointers: ["/id"]}}, forward: {url: "http://n8n.invalid/webhook/a"}}
  door-b: {tenant: tenant-a, provider: token, secrets: ["` + tokKey + `"], dedupe_scope: shop, options: {header: X-Api-Key, key: {id_pointers: ["/id"]}}, forward: {url: "http://n8n.invalid/webhook/b"}}
`})
	_, err := e.pool.Exec(e.ctx, `INSERT INTO stats_hourly (tenant, source, hour, deliveries, duplicates_stopped)
		VALUES ($1, 'shop', $2, 7, 4)`, tenantA, time.Now().UTC().Truncate(time.Hour))
	require.NoError(t, err)
	b := e.browser(t)
	b.signIn(keyA)
	for _, name := range []string{"door-a", "door-b"} {
		page := b.get("/ui/sources/" + name)
		require.Equal(t, http.StatusOK, page.status, "%s: %s", name, page.body)
		require.Len(t, texts(page.body, "scope"), 1, name)
		require.Contains(t, page.body, "dedupe scope <code>shop</code>", name)
		require.Contains(t, texts(page.body, "saved-duplicates"), "4", name)
	}
	page := b.get("/ui/sources/shop")
	require.Equal(t, http.StatusOK, page.status, page.body)
	require.Empty(t, texts(page.body, "scope"))
	require.Contains(t, texts(page.body, "saved-duplicates"), "4")
}
