package console_test

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/backfill"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/httpapi"
	"github.com/idempotent-claim/idempotent-claim/sidecar/ingest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

const bfReadKey = "rk_test_console_backfill_0001"

// setupBackfill is setup with a stripe source of tenant A that has
// backfill, the scan worker registered and nothing worked (no dispatch).
func setupBackfill(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 8 })
	cfg, err := ingest.Parse([]byte(`
sources:
  bf:
    tenant: tenant-a
    provider: stripe
    secrets: ["whsec_console_bf"]
    forward: {url: "http://n8n.invalid/webhook/bf"}
    backfill: {credentials: ["${K}"], base_url: "http://127.0.0.1:9", interval_minutes: 30}
`), func(string) string { return bfReadKey })
	require.NoError(t, err)
	ledger, err := claim.New(pool, claim.Config{Policies: claim.Policies{BySource: cfg.Policies}})
	require.NoError(t, err)
	logs := &lockedBuffer{}
	log := zerolog.New(logs)
	inbox, err := ingest.New(ingest.Options{Pool: pool, Ledger: ledger, Config: cfg, Logger: log,
		Workers: backfill.Workers(&backfill.Scanner{})})
	require.NoError(t, err)
	keys := auth.New(pool, []auth.StaticKey{{Tenant: tenantA, Key: keyA}, {Tenant: tenantB, Key: keyB}}, auth.DefaultOptions())
	srv := httpapi.New(httpapi.Config{Ledger: ledger, Keys: keys, Logger: log, Inbox: inbox,
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

	other := e.browser(t)
	otok := other.signIn(keyB)
	require.Equal(t, http.StatusNotFound, other.get("/ui/sources/bf").status)
	require.Equal(t, http.StatusNotFound, other.post("/ui/sources/bf/backfill", url.Values{"csrf": {otok}, "confirm": {"yes"}}).status)
	for _, p := range append(b.pages, other.pages...) {
		require.NotContains(t, p, bfReadKey)
	}
	require.NotContains(t, e.logs.String(), bfReadKey)
}
