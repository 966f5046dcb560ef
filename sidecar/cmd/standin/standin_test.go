package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/backfill"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/httpapi"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/metrics"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// Tests of the standin command: run as a user runs it (its run function,
// its printed lines), against claimd's real ingest door, inbox, dispatcher
// and backfill scanner on PostgreSQL.

const (
	testSecret = "whsec_standin_cmd_test_5d1f0a9b"
	testAPIKey = "standin-cmd-test-api-key-0123456789abcdef"
	testTenant = "acme"
	// testWait bounds each wait for the command's output (a failure
	// bound, not a synchronisation).
	testWait = 60 * time.Second
)

// lines is the command's stdout or stderr: safe for concurrent writers,
// and waitable.
type lines struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func newLines() *lines { return &lines{changed: make(chan struct{})} }

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.buf.Write(p)
	close(l.changed)
	l.changed = make(chan struct{})
	return n, err
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// waitFor waits until ok holds for the output so far, and returns it.
func (l *lines) waitFor(t *testing.T, what string, ok func(string) bool) string {
	t.Helper()
	deadline := time.After(testWait)
	for {
		l.mu.Lock()
		s, ch := l.buf.String(), l.changed
		l.mu.Unlock()
		if ok(s) {
			return s
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("the command did not print %s; it printed:\n%s", what, s)
		}
	}
}

func count(s, sub string) int { return strings.Count(s, sub) }

// claimdEnv is claimd's API (ingest door, backfill routes) over a fresh
// database, with dispatch.
type claimdEnv struct {
	ctx   context.Context
	inbox *inbox.Inbox
	base  string
}

// startClaimd serves claimd on ln with the sources file file; env
// gives its ${VAR}s.
func startClaimd(t *testing.T, ln net.Listener, file string, env map[string]string) *claimdEnv {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	cfg, err := sources.Parse([]byte(file), func(k string) string { return env[k] })
	require.NoError(t, err)
	ledger, err := claim.New(pool, claim.Config{Policies: claim.Policies{BySource: cfg.Policies}})
	require.NoError(t, err)
	in, err := inbox.New(inbox.Options{Pool: pool, Ledger: ledger, Config: cfg, Logger: zerolog.Nop(),
		Dispatch: true, PollInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, in.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, in.Stop(sctx))
	})
	srv := httpapi.New(httpapi.Config{Ledger: ledger, Logger: zerolog.Nop(), Inbox: in, Metrics: metrics.New(ledger.Stats),
		Keys: auth.NewKeys(pool, []auth.StaticKey{{Tenant: testTenant, Key: testAPIKey}}, time.Minute)})
	served := make(chan error, 1)
	go func() { served <- srv.Listener(ln) }()
	t.Cleanup(func() {
		_ = srv.App().ShutdownWithTimeout(10 * time.Second)
		_ = ln.Close()
		<-served
	})
	return &claimdEnv{ctx: ctx, inbox: in, base: "http://" + ln.Addr().String()}
}

// findings is GET /v1/sources/{source}/backfill/events: event id → state.
func (e *claimdEnv) findings(t *testing.T, source string) map[string]string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.base+"/v1/sources/"+source+"/backfill/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testAPIKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	var out struct {
		Events []backfill.Finding `json:"events"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	m := map[string]string{}
	for _, f := range out.Events {
		m[f.EventID] = f.State
	}
	return m
}

var (
	baseURLLine = regexp.MustCompile(`(?m)^  base_url   (http://\S+)`)
	keyLine     = regexp.MustCompile(`(?m)^  read key   (\S+)   \(generated`)
	missedLine  = regexp.MustCompile(`(?m)^  never delivered  (\S+)$`)
)

// TestDeliveredAndMissedEventsBackfilled runs the command for each
// provider with a generated read key, 5 events of which 2 were never
// delivered, delivering the others to claimd's ingest door: the 3 are
// accepted and dispatched to the command's POST /forward; a scan of the
// source reads the command's list API, finds exactly the 2 it printed as
// never delivered and recovers them (Stripe and Square: stored from the
// list and dispatched with X-Idempotency-Origin: backfill; GitHub:
// redelivered through the door by the stand-in, then found arrived by the
// next scan); GET …/backfill/events shows them; the webhook secret is
// never printed.
func TestDeliveredAndMissedEventsBackfilled(t *testing.T) {
	for _, p := range []struct {
		provider, source, extra, srcExtra string
		states                            []string
	}{
		{provider: "stripe", source: "stripe-try", states: []string{backfill.StateFetched}},
		{provider: "github", source: "github-try", extra: `, github: {hook: repos/acme/shop/hooks/1}`, states: []string{backfill.StateRedeliveryRequested, backfill.StateArrived}},
		{provider: "square", source: "square-try", srcExtra: `
    options: {notification_url: "https://claimd.example.com/ingest/square-try"}`, states: []string{backfill.StateFetched}},
	} {
		t.Run(p.provider, func(t *testing.T) {
			t.Parallel()
			// claimd's listener exists before the command delivers to it:
			// the deliveries wait in its backlog until claimd serves.
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			ingestURL := "http://" + ln.Addr().String() + "/ingest/" + p.source
			args := []string{"-provider", p.provider, "-events", "5", "-missed", "2", "-secret", testSecret, "-deliver", ingestURL}
			if p.provider == "square" {
				args = append(args, "-notification-url", "https://claimd.example.com/ingest/square-try")
			}
			ctx, cancel := context.WithCancel(context.Background())
			stdout, stderr := newLines(), newLines()
			exited := make(chan int, 1)
			go func() { exited <- run(ctx, args, stdout, stderr) }()
			t.Cleanup(func() {
				cancel()
				select {
				case code := <-exited:
					require.Equal(t, 0, code, "stderr:\n%s", stderr)
				case <-time.After(testWait):
					t.Errorf("the command did not stop")
				}
				require.NotContains(t, stdout.String()+stderr.String(), testSecret, "the webhook secret is never printed")
				require.Empty(t, stderr.String(), "the stand-in found no request off its provider's documented shape")
			})
			out := stdout.waitFor(t, "its base URL and key", func(s string) bool { return keyLine.MatchString(s) })
			base := baseURLLine.FindStringSubmatch(out)[1]
			key := keyLine.FindStringSubmatch(out)[1]

			sources := `sources:
  ` + p.source + `:
    tenant: ` + testTenant + `
    provider: ` + p.provider + `
    secrets: ["${WEBHOOK_SECRET}"]` + p.srcExtra + `
    forward: {url: "` + base + `/forward", require_claim: false}
    backfill: {credentials: ["${EVENTS_KEY}"], base_url: "` + base + `", interval_minutes: 0` + p.extra + `}
`
			e := startClaimd(t, ln, sources, map[string]string{"WEBHOOK_SECRET": testSecret, "EVENTS_KEY": key})

			out = stdout.waitFor(t, "three accepted deliveries, then serving", func(s string) bool {
				return strings.Contains(s, "serving until interrupted")
			})
			require.Equal(t, 3, count(out, " -> 200\n"), out)
			var missed []string
			for _, m := range missedLine.FindAllStringSubmatch(out, -1) {
				missed = append(missed, m[1])
			}
			require.Len(t, missed, 2, out)
			stdout.waitFor(t, "three dispatches of the delivered events", func(s string) bool {
				return count(s, "origin=delivery\n") >= 3
			})

			sc := &backfill.Scanner{Inbox: e.inbox, Log: zerolog.Nop()}
			src := e.inbox.Source(p.source)
			require.NotNil(t, src)
			scan, err := sc.Run(e.ctx, src, backfill.Trigger{Kind: backfill.TriggerAPI, Actor: "test"})
			require.NoError(t, err)
			require.Equal(t, backfill.ResultOK, scan.Result, scan.Error)
			require.Equal(t, 5, scan.Listed)
			require.Equal(t, 2, scan.Missed)
			found := e.findings(t, p.source)
			require.Len(t, found, 2)
			for _, id := range missed {
				// A redelivery may already have arrived when the findings
				// are read (the stand-in posts it before answering 202).
				require.Contains(t, p.states, found[id], "finding %s", id)
			}

			if p.provider == "github" {
				require.Equal(t, 2, scan.Redelivered)
				// The redeliveries came through the door: ordinary
				// deliveries, dispatched as such.
				stdout.waitFor(t, "five dispatches", func(s string) bool { return count(s, "origin=delivery\n") >= 5 })
				again, err := sc.Run(e.ctx, src, backfill.Trigger{Kind: backfill.TriggerAPI, Actor: "test"})
				require.NoError(t, err)
				require.Equal(t, backfill.ResultOK, again.Result, again.Error)
				require.Zero(t, again.Missed)
				require.Equal(t, map[string]string{missed[0]: backfill.StateArrived, missed[1]: backfill.StateArrived}, e.findings(t, p.source))
			} else {
				require.Equal(t, 2, scan.Backfilled)
				out = stdout.waitFor(t, "two dispatches from the backfill", func(s string) bool { return count(s, "origin=backfill\n") >= 2 })
				for _, id := range missed {
					require.Regexp(t, `(?m)^  forwarded        `+regexp.QuoteMeta(id)+` \(\S+\) origin=backfill$`, out)
				}
			}
			ids := forwardedIDs(stdout.String())
			require.Len(t, ids, 5, "each event dispatched once")
			seen := map[string]bool{}
			for _, id := range ids {
				seen[id] = true
			}
			require.Len(t, seen, 5, "each event dispatched once")
		})
	}
}

// forwardedIDs returns the event ids of the printed dispatches.
func forwardedIDs(out string) []string {
	var ids []string
	for _, m := range regexp.MustCompile(`(?m)^  forwarded        (\S+) `).FindAllStringSubmatch(out, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

// TestFlagsRefused: bad flags exit 2 with a message naming the flag and
// nothing of the values given (a secret stays unprinted); a non-loopback
// address needs -allow-remote.
func TestFlagsRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "-provider is required"},
		{[]string{"-provider", "paypal"}, "-provider must be stripe, github or square"},
		{[]string{"-provider", "stripe", "-listen", "0.0.0.0:0"}, "-listen is not a loopback address"},
		{[]string{"-provider", "stripe", "-listen", "192.0.2.1:9000"}, "-listen is not a loopback address"},
		{[]string{"-provider", "stripe", "-listen", "example.com:9000"}, "-listen is not a loopback address"},
		{[]string{"-provider", "stripe", "-listen", "nonsense"}, "-listen must be HOST:PORT"},
		{[]string{"-provider", "stripe", "-events", "0"}, "-events must be between 1 and 1000"},
		{[]string{"-provider", "stripe", "-events", "3", "-missed", "4"}, "-missed must be between 0 and -events"},
		{[]string{"-provider", "stripe", "-deliver", "http://127.0.0.1:1/ingest/s"}, "-secret is required with -deliver"},
		{[]string{"-provider", "stripe", "-secret", testSecret}, "-secret signs deliveries: it needs -deliver"},
		{[]string{"-provider", "stripe", "-secret", testSecret, "-deliver", "ftp://x/" + testSecret}, "-deliver must be an absolute http(s) URL"},
		{[]string{"-provider", "square", "-secret", testSecret, "-deliver", "http://127.0.0.1:1/ingest/s"}, "-notification-url is required"},
		{[]string{"-provider", "stripe", "-hook", "repos/a/b/hooks/1"}, "-hook is for -provider github"},
		{[]string{"-provider", "github", "-hook", "repos/a/hooks/x"}, "-hook must be repos/OWNER/REPO/hooks/ID"},
		{[]string{"-provider", "stripe", "-key", "has space " + testSecret}, "-key must not hold whitespace"},
		{[]string{"-provider", "stripe", testSecret}, "unexpected argument"},
	} {
		stdout, stderr := newLines(), newLines()
		code := run(context.Background(), c.args, stdout, stderr)
		require.Equal(t, 2, code, "%v", c.args)
		require.Contains(t, stderr.String(), c.want, "%v", c.args)
		require.NotContains(t, stdout.String()+stderr.String(), testSecret, "%v", c.args)
	}
}

// TestGivenKeyNotPrinted: a key given with -key is accepted and not
// printed; a request with another key is refused as Stripe refuses one
// (401).
func TestGivenKeyNotPrinted(t *testing.T) {
	const key = "rk_test_given_standin_key_9f3e"
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := newLines(), newLines()
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"-provider", "stripe", "-key", key, "-events", "3", "-missed", "1"}, stdout, stderr)
	}()
	out := stdout.waitFor(t, "serving", func(s string) bool { return strings.Contains(s, "serving until interrupted") })
	require.Contains(t, out, "read key   as given with -key")
	require.NotContains(t, out, key)
	require.Equal(t, 1, len(missedLine.FindAllString(out, -1)))
	base := baseURLLine.FindStringSubmatch(out)[1]
	get := func(k string) int {
		req, err := http.NewRequest(http.MethodGet, base+"/v1/events?created[gte]=0&created[lt]=9999999999&limit=100", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+k)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var list struct {
			Data []json.RawMessage `json:"data"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&list)
		if resp.StatusCode == http.StatusOK {
			require.Len(t, list.Data, 3)
		}
		return resp.StatusCode
	}
	require.Equal(t, 200, get(key))
	require.Equal(t, 401, get("rk_test_other"))
	cancel()
	require.Equal(t, 0, <-exited)
	require.Empty(t, stderr.String())
}
