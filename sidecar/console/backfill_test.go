package console_test

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/backfill"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/httpapi"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

const bfReadKey = "rk_test_console_backfill_0001"

// setupBackfill is setup with a stripe source of tenant A that has
// backfill, the scan worker registered and nothing worked (no dispatch).
func setupBackfill(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 8 })
	cfg, err := sources.Parse([]byte(`
sources:
  bf:
    tenant: tenant-a
    provider: stripe
    secrets: ["whsec_console_bf"]
    forward: {url: "http://n8n.invalid/webhook/bf"}
    backfill: {credentials: ["${K}"], base_url: "http://127.0.0.1:9", interval_minutes: 30}
  nobf:
    tenant: tenant-a
    provider: stripe
    secrets: ["whsec_console_bf"]
  claim-only: {}
`), func(string) string { return bfReadKey })
	require.NoError(t, err)
	ledger, err := claim.New(pool, claim.Config{Policies: claim.Policies{BySource: cfg.Policies}})
	require.NoError(t, err)
	logs := &lockedBuffer{}
	log := zerolog.New(logs)
	in, err := inbox.New(inbox.Options{Pool: pool, Ledger: ledger, Config: cfg, Logger: log,
		Workers: backfill.Workers(&backfill.Scanner{})})
	require.NoError(t, err)
	keys := auth.New(pool, []auth.StaticKey{{Tenant: tenantA, Key: keyA}, {Tenant: tenantB, Key: keyB}}, auth.DefaultOptions())
	srv := httpapi.New(httpapi.Config{Ledger: ledger, Keys: keys, Logger: log, Inbox: in,
		Console: &httpapi.ConsoleConfig{Sessions: auth.NewSessions(pool, keys, 0, 0)}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.App().Listener(ln) }()
	t.Cleanup(func() { _ = srv.App().Shutdown(); _ = ln.Close(); <-served })
	return &env{ctx: ctx, pool: pool, ledger: ledger, keys: keys, base: "http://" + ln.Addr().String(), logs: logs}
}

// TestConsoleBackfillScanNow: the source page of a source with backfill
// (even before it has any record) shows its scans and missed events, each
// linked to its record, and a "Scan now" form; posting it without the
// confirmation is refused naming the box, with it queues one scan job
// (actor the key prefix, trigger console) and a second says one is
// queued already; another tenant gets 404; the read key is on no page.
func TestConsoleBackfillScanNow(t *testing.T) {
	t.Parallel()
	e := setupBackfill(t)
	b := e.browser(t)
	tok := b.signIn(keyA)

	page := b.get("/ui/sources/bf")
	require.Equal(t, http.StatusOK, page.status, page.body)
	require.Contains(t, page.body, `data-testid="backfill"`)
	require.Contains(t, page.body, "No scan yet.")
	require.Contains(t, page.body, "every 30m")

	r := b.post("/ui/sources/bf/backfill", url.Values{"csrf": {tok}})
	require.Equal(t, http.StatusUnprocessableEntity, r.status, r.body)
	require.Contains(t, r.body, "confirm")
	r = b.post("/ui/sources/bf/backfill", url.Values{"csrf": {"wrong"}, "confirm": {"yes"}})
	require.Equal(t, http.StatusForbidden, r.status)

	r = b.post("/ui/sources/bf/backfill", url.Values{"csrf": {tok}, "confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	require.Equal(t, "/ui/sources/bf?scan=queued#backfill", r.location())
	var trig, actor string
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT args->>'trigger', args->>'actor' FROM river_job WHERE kind = 'claimd_backfill_scan'`).
		Scan(&trig, &actor))
	require.Equal(t, "console", trig)
	require.NotEmpty(t, actor)
	require.NotEqual(t, keyA, actor, "the key's prefix, never the key")
	page = b.get("/ui/sources/bf?scan=queued")
	require.Contains(t, page.body, "Scan queued")
	r = b.post("/ui/sources/bf/backfill", url.Values{"csrf": {tok}, "confirm": {"yes"}})
	require.Equal(t, "/ui/sources/bf?scan=running#backfill", r.location())

	// A scan and two findings, one stored (linked to its record).
	rec := e.claim(t, tenantA, "bf", "evt_found")
	var scanID int64
	require.NoError(t, e.pool.QueryRow(e.ctx, `INSERT INTO backfill_scans (tenant, source, trigger, actor, mode, range_start, range_end,
		listed, missed, backfilled, result, finished_at) VALUES ('tenant-a', 'bf', 'schedule', NULL, 'auto', now() - interval '1 day', now(),
		12, 2, 1, 'ok', now()) RETURNING id`).Scan(&scanID))
	_, err := e.pool.Exec(e.ctx, `INSERT INTO backfill_events (tenant, scope, event_id, source, provider_id, event_type,
		provider_created_at, scan_id, state, claim_id) VALUES
		('tenant-a', 'bf', 'evt_found', 'bf', 'evt_found', 'invoice.paid', now() - interval '2 hours', $1, 'fetched', $2::uuid),
		('tenant-a', 'bf', 'evt_only_missed', 'bf', 'evt_only_missed', 'invoice.paid', now() - interval '3 hours', $1, 'missed', NULL)`,
		scanID, rec.ID)
	require.NoError(t, err)
	page = b.get("/ui/sources/bf")
	require.Contains(t, page.body, `data-testid="backfill-scans"`)
	require.Contains(t, page.body, `href="/ui/claims/`+rec.ID+`"><code>evt_found</code></a>`)
	require.Contains(t, page.body, "<code>evt_only_missed</code>")
	require.NotContains(t, page.body, "style=")

	// A configured source without backfill: 409 naming source, as the API.
	for _, name := range []string{"nobf", "claim-only"} {
		r := b.post("/ui/sources/"+name+"/backfill", url.Values{"csrf": {tok}, "confirm": {"yes"}})
		require.Equal(t, http.StatusConflict, r.status, "%s: %s", name, r.body)
		require.Equal(t, []string{"source"}, texts(r.body, "error-field"))
	}
	require.Equal(t, http.StatusNotFound, b.post("/ui/sources/nosuch/backfill", url.Values{"csrf": {tok}, "confirm": {"yes"}}).status)

	other := e.browser(t)
	otok := other.signIn(keyB)
	require.Equal(t, http.StatusNotFound, other.get("/ui/sources/bf").status)
	require.Equal(t, http.StatusNotFound, other.post("/ui/sources/bf/backfill", url.Values{"csrf": {otok}, "confirm": {"yes"}}).status)
	require.Equal(t, http.StatusNotFound, other.post("/ui/sources/nobf/backfill", url.Values{"csrf": {otok}, "confirm": {"yes"}}).status,
		"another tenant's source")
	for _, p := range append(b.pages, other.pages...) {
		require.NotContains(t, p, bfReadKey)
	}
	require.NotContains(t, e.logs.String(), bfReadKey)
}

// TestConsoleBackfillScanAfterOneFinished: "Scan now" and "Scan the whole
// window" asked for as soon as the previous scan finished (its row ended,
// River's job not completed yet) queue a new scan; while one is queued
// the page says the ask was not queued and its range not applied; asks
// at the same moment queue one scan.
func TestConsoleBackfillScanAfterOneFinished(t *testing.T) {
	t.Parallel()
	e := setupBackfill(t)
	b := e.browser(t)
	tok := b.signIn(keyA)
	count := func(sql string) int {
		var n int
		require.NoError(t, e.pool.QueryRow(e.ctx, sql).Scan(&n))
		return n
	}
	finish := func() {
		// The replica ran the scan; River completes its job later.
		tag, err := e.pool.Exec(e.ctx, `UPDATE backfill_scans SET result = 'ok', started_at = now(), finished_at = now()
			WHERE result IN ('queued', 'running')`)
		require.NoError(t, err)
		require.EqualValues(t, 1, tag.RowsAffected())
	}
	for i, form := range []url.Values{
		{"csrf": {tok}, "confirm": {"yes"}},
		{"csrf": {tok}, "confirm": {"yes"}, "whole_window": {"yes"}},
		{"csrf": {tok}, "confirm": {"yes"}},
	} {
		r := b.post("/ui/sources/bf/backfill", form)
		require.Equal(t, http.StatusSeeOther, r.status, r.body)
		require.Equal(t, "/ui/sources/bf?scan=queued#backfill", r.location(), "ask %d", i)
		require.Equal(t, i+1, count(`SELECT count(*) FROM backfill_scans`))
		if form.Get("whole_window") == "yes" {
			require.Equal(t, 1, count(`SELECT count(*) FROM backfill_scans WHERE result = 'queued' AND range_start IS NOT NULL`))
		}
		finish()
	}

	r := b.post("/ui/sources/bf/backfill", url.Values{"csrf": {tok}, "confirm": {"yes"}})
	require.Equal(t, "/ui/sources/bf?scan=queued#backfill", r.location())
	r = b.post("/ui/sources/bf/backfill", url.Values{"csrf": {tok}, "confirm": {"yes"}, "whole_window": {"yes"}})
	require.Equal(t, "/ui/sources/bf?scan=running#backfill", r.location())
	require.Equal(t, 0, count(`SELECT count(*) FROM backfill_scans WHERE range_start IS NOT NULL AND result = 'queued'`),
		"the whole window was not applied to the queued scan")
	page := b.get("/ui/sources/bf?scan=running")
	require.Contains(t, page.body, "was not applied")
	finish()

	const n = 5
	locs := make([]string, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			req, err := http.NewRequest(http.MethodPost, e.base+"/ui/sources/bf/backfill",
				strings.NewReader(url.Values{"csrf": {tok}, "confirm": {"yes"}}.Encode()))
			if err != nil {
				return
			}
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			for k, v := range b.cookies {
				req.AddCookie(&http.Cookie{Name: k, Value: v})
			}
			<-start
			resp, err := client.Do(req)
			if err != nil {
				return
			}
			resp.Body.Close()
			locs[i] = resp.Header.Get("Location")
		}(i)
	}
	close(start)
	wg.Wait()
	queued := 0
	for _, l := range locs {
		require.Contains(t, []string{"/ui/sources/bf?scan=queued#backfill", "/ui/sources/bf?scan=running#backfill"}, l)
		if l == "/ui/sources/bf?scan=queued#backfill" {
			queued++
		}
	}
	require.Equal(t, 1, queued, "one scan queued")
	require.Equal(t, 1, count(`SELECT count(*) FROM backfill_scans WHERE result = 'queued'`))
}

// TestConsoleFormFieldsOnce: a field given twice in a console form is
// refused 400 naming it, before anything is done (whole_window=yes&
// whole_window=no queues nothing), on every form (sign-in too); a
// repeated field the console does not read is refused naming none.
func TestConsoleFormFieldsOnce(t *testing.T) {
	t.Parallel()
	e := setupBackfill(t)
	b := e.browser(t)
	tok := b.signIn(keyA)
	for _, tc := range []struct {
		form  url.Values
		field string
	}{
		{url.Values{"csrf": {tok}, "confirm": {"yes"}, "whole_window": {"yes", "no"}}, "whole_window"},
		{url.Values{"csrf": {tok}, "confirm": {"yes"}, "whole_window": {"no", "yes"}}, "whole_window"},
		{url.Values{"csrf": {tok}, "confirm": {"yes", "no"}}, "confirm"},
		{url.Values{"csrf": {tok, tok}, "confirm": {"yes"}}, "csrf"},
		{url.Values{"csrf": {tok}, "confirm": {"yes"}, "s3cr3t_name": {"a", "b"}}, ""},
	} {
		r := b.post("/ui/sources/bf/backfill", tc.form)
		require.Equal(t, http.StatusBadRequest, r.status, "%v: %s", tc.form, r.body)
		body := withoutToken(r.body)
		if tc.field != "" {
			require.Equal(t, []string{tc.field}, texts(body, "error-field"))
			require.Equal(t, []string{"must be given at most once (form field)"}, texts(body, "error-message"))
		}
		require.NotContains(t, body, "s3cr3t")
	}
	var n int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM backfill_scans`).Scan(&n))
	require.Zero(t, n, "nothing queued")

	other := e.browser(t)
	page := other.get("/ui/signin")
	require.Equal(t, http.StatusOK, page.status)
	r := other.post("/ui/signin", url.Values{"csrf": {csrf(t, page.body)}, "api_key": {keyB, keyA}})
	require.Equal(t, http.StatusBadRequest, r.status, r.body)
	require.Contains(t, r.body, "api_key")
	require.NotContains(t, r.body, keyA)
}
