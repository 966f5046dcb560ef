package main

import (
	"bufio"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// B15 through the real binary: the sources file is reloaded whole or not
// at all. An empty, cut short, unparsable or invalid file is refused with
// a logged error and a metric while the running configuration keeps
// serving (ingest, claim policies, pending dispatches); a source removed on
// purpose leaves its pending dispatches waiting, and they go out when it
// is configured again.

const (
	reloadKey   = "t1-sources-reload-key-0123456789"
	ordersToken = "orders-token-0123456789"
	msgRefused  = "sources file not reloaded; keeping the running configuration"
	msgReloaded = "sources file reloaded"
	msgRemoved  = "source removed from the sources file: its new claims take the default policy (a running lease keeps " +
		"the policy it was won under, a record its attempt cap and backoff), its pending dispatches wait until it is configured again"
)

// reloadSources is the sources file of these tests: an ingest source
// "orders" posting to target (a plain consumer), and a claim-only source
// "payments" under the review policy. Without orders, or without payments,
// when told.
func reloadSources(target string, orders, payments bool) string {
	s := "sources:\n"
	if orders {
		s += `  orders:
    tenant: t1
    provider: token
    secrets: ["` + ordersToken + `"]
    options:
      header: X-Forms-Token
      key: {id_pointers: ["/id"]}
    forward: {url: "` + target + `/hook/orders", require_claim: false, max_attempts: 100, backoff_base_seconds: 1, backoff_cap_seconds: 1}
`
	}
	if payments {
		s += `  payments:                 # an irreversible effect: expired lease -> unknown
    lease_policy: review
`
	}
	return s
}

// reloadBundle is one claimd process serving a sources file, with a
// dispatch target that answers 503 until healthy.
type reloadBundle struct {
	t       *testing.T
	p       *proc
	api     *api
	path    string
	target  *httptest.Server
	healthy atomic.Bool
}

func setupReload(t *testing.T, interval string, dispatch bool) *reloadBundle {
	t.Helper()
	return setupReloadEnv(t, interval, dispatch, nil)
}

// setupReloadEnv is setupReload with more settings for claimd.
func setupReloadEnv(t *testing.T, interval string, dispatch bool, more map[string]string) *reloadBundle {
	t.Helper()
	b := &reloadBundle{t: t, path: filepath.Join(t.TempDir(), "sources.yaml")}
	b.target = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if b.healthy.Load() {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(b.target.Close)
	b.write(reloadSources(b.target.URL, true, true))
	env := map[string]string{
		"DATABASE_URL": pgtest.NewDatabase(t), "CLAIMD_API_KEYS": "t1:" + reloadKey,
		"CLAIMD_SOURCES_FILE": b.path, "CLAIMD_RELOAD_INTERVAL_SECONDS": interval,
		"CLAIMD_DISPATCH": strconv.FormatBool(dispatch),
		// Not the default (review), so that the removal of payments
		// (review) shows in the policy of its new claims.
		"CLAIMD_LEASE_POLICY": "reclaim",
	}
	maps.Copy(env, more)
	b.p = startServe(t, env)
	b.api = newAPI(t, b.p.url, reloadKey)
	return b
}

// write rewrites the sources file in place (truncate, then write), as
// shell redirection and most editors do.
func (b *reloadBundle) write(s string) {
	require.NoError(b.t, os.WriteFile(b.path, []byte(s), 0o600))
}

func (b *reloadBundle) hup() { require.NoError(b.t, b.p.cmd.Process.Signal(syscall.SIGHUP)) }

// ingest posts one authentic delivery to orders and returns the status
// and, when accepted, the inbox id.
func (b *reloadBundle) ingest(id string) (int, string) {
	req, err := http.NewRequest(http.MethodPost, b.p.url+"/ingest/orders", strings.NewReader(`{"id":"`+id+`"}`))
	require.NoError(b.t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Forms-Token", ordersToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	var out struct {
		Received []struct {
			ClaimID string `json:"claim_id"`
			Status  string `json:"status"`
		} `json:"received"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode != http.StatusOK || len(out.Received) != 1 || out.Received[0].Status != "accepted" {
		return resp.StatusCode, ""
	}
	return resp.StatusCode, out.Received[0].ClaimID
}

// leasePolicy claims a new payments event and returns the lease policy
// its record got.
func (b *reloadBundle) leasePolicy(eventID string) string {
	m := b.api.must(http.StatusOK, http.MethodPost, "/v1/claims", `{"source":"payments","event_id":"`+eventID+`"}`)
	require.Equal(b.t, "won", m["outcome"], "%v", m)
	return str(m, "lease_policy")
}

// inbox returns the inbox event's dispatch view.
func (b *reloadBundle) inbox(id string) map[string]any {
	return b.api.must(http.StatusOK, http.MethodGet, "/v1/inbox/"+id, "")
}

// deliveries returns the outcomes and details of the record's delivery log.
func (b *reloadBundle) deliveries(id string) (outcomes, details []string) {
	m := b.api.must(http.StatusOK, http.MethodGet, "/v1/claims/"+id, "")
	ds, _ := m["deliveries"].([]any)
	for _, d := range ds {
		e, _ := d.(map[string]any)
		outcomes = append(outcomes, str(e, "outcome"))
		details = append(details, str(e, "detail"))
	}
	return outcomes, details
}

// metric returns the value of one sample of /metrics, such as
// `claimd_sources_reloads_total{result="refused"}`.
func (b *reloadBundle) metric(sample string) float64 {
	resp, err := http.Get(b.p.url + "/metrics")
	require.NoError(b.t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(b.t, err)
			return f
		}
	}
	require.NoError(b.t, sc.Err())
	b.t.Fatalf("no sample %s in /metrics", sample)
	return 0
}

// messages returns the JSON log lines with message msg, oldest first.
func (b *reloadBundle) messages(msg string) []map[string]any {
	var out []map[string]any
	for _, l := range b.p.stderr.Lines() {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["message"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// waitMessages blocks until the process has logged msg n times (or has
// ended) and returns the n-th line.
func (b *reloadBundle) waitMessages(msg string, n int) map[string]any {
	b.t.Helper()
	s := b.p.stderr
	for {
		s.mu.Lock()
		changed := s.changed
		s.mu.Unlock()
		if got := b.messages(msg); len(got) >= n {
			return got[n-1]
		}
		select {
		case <-changed:
		case <-b.p.done:
			if got := b.messages(msg); len(got) >= n {
				return got[n-1]
			}
			b.t.Fatalf("claimd ended before logging %q %d times", msg, n)
		}
	}
}

func TestSourcesReloadRefusesEmptyCutShortAndInvalidFiles(t *testing.T) {
	t.Parallel()
	b := setupReload(t, "0", false)
	good := reloadSources(b.target.URL, true, true)
	require.Equal(t, "review", b.leasePolicy("pay-0"))
	for i, tc := range []struct{ name, file, want string }{
		{"empty", "", "sources file is empty"},
		// Where the cut falls depends on the target's address: refused
		// either as YAML or as an incomplete source.
		{"truncated to half", good[:len(good)/2], "source"},
		{"cut after a key", strings.TrimSuffix(good, " review\n"), "sources.payments.lease_policy has no value"},
		{"invalid YAML", "sources:\n  orders: {tenant: t1, provider: token\n", "sources file: yaml"},
		{"unknown provider", strings.Replace(good, "provider: token", "provider: nope", 1), "sources.orders.provider must be one of"},
	} {
		b.write(tc.file)
		b.hup()
		line := b.waitMessages(msgRefused, i+1)
		require.Contains(t, line["error"], tc.want, tc.name)
		require.NotContains(t, line["error"], "nope", "%s: the refusal repeats no value", tc.name)
		require.Equal(t, "error", line["level"], tc.name)
		require.EqualValues(t, i+1, b.metric(`claimd_sources_reloads_total{result="refused"}`), tc.name)
		require.EqualValues(t, 0, b.metric(`claimd_sources_file_applied`), tc.name)

		status, id := b.ingest("ord-" + strconv.Itoa(i))
		require.Equal(t, http.StatusOK, status, "%s: the running configuration still ingests", tc.name)
		require.NotEmpty(t, id, tc.name)
		require.Equal(t, "review", b.leasePolicy("pay-"+strconv.Itoa(i+1)), "%s: the claim policy is unchanged", tc.name)
	}
	require.Empty(t, b.messages(msgReloaded))
	require.EqualValues(t, 0, b.metric(`claimd_sources_reloads_total{result="applied"}`))

	b.write(good)
	b.hup()
	b.waitMessages(msgReloaded, 1)
	require.EqualValues(t, 1, b.metric(`claimd_sources_reloads_total{result="applied"}`))
	require.EqualValues(t, 1, b.metric(`claimd_sources_file_applied`))
	require.NotContains(t, b.p.stderr.String(), ordersToken, "secrets never reach the log")
}

// A sources file that adds a backfill source whose window reaches past
// the key retention claimd runs with (CLAIMD_KEY_RETENTION_DAYS 2 days,
// window 72 h) is refused whole at reload, as at start: a key purged
// within the window would look missed and its event would be dispatched
// again. The running configuration keeps serving; the credential is
// never logged.
func TestSourcesReloadRefusesBackfillPastKeyRetention(t *testing.T) {
	t.Parallel()
	const cred = "rk_test_reload_backfill_0001"
	b := setupReloadEnv(t, "0", false, map[string]string{"CLAIMD_KEY_RETENTION_DAYS": "2",
		"CLAIMD_RETENTION_DAYS": "1", "STRIPE_EVENTS_KEY": cred})
	b.write(reloadSources(b.target.URL, true, true) + `  stripe-bf:
    tenant: t1
    provider: stripe
    secrets: ["whsec_reload_backfill"]
    forward: {url: "` + b.target.URL + `/hook/stripe", require_claim: false}
    backfill: {credentials: ["${STRIPE_EVENTS_KEY}"], window_hours: 72}
`)
	b.hup()
	line := b.waitMessages(msgRefused, 1)
	require.Contains(t, line["error"], `source "stripe-bf": backfill.window_hours (72 h) must be shorter than the key retention of its records (48 h, from CLAIMD_KEY_RETENTION_DAYS)`)
	require.EqualValues(t, 1, b.metric(`claimd_sources_reloads_total{result="refused"}`))
	status, id := b.ingest("ord-1")
	require.Equal(t, http.StatusOK, status, "the running configuration still ingests")
	require.NotEmpty(t, id)
	require.NotContains(t, b.p.stderr.String(), cred)
}

// The B15 sequence through the poll: the file is truncated, stays empty
// for several polls, then is written again. Nothing changes for ingest,
// claims or the pending dispatch, which goes out once the target is
// healthy; the running configuration is never replaced.
func TestSourcesFileRewrittenInPlaceKeepsServing(t *testing.T) {
	t.Parallel()
	b := setupReload(t, "1", true)
	good := reloadSources(b.target.URL, true, true)
	status, id := b.ingest("ord-1")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "review", b.leasePolicy("pay-1"))
	waitFor(t, "a first dispatch attempt", func() bool { return b.inbox(id)["dispatch_attempts"].(float64) >= 1 })

	require.NoError(t, os.Truncate(b.path, 0))
	line := b.waitMessages(msgRefused, 1)
	require.Contains(t, line["error"], "sources file is empty")
	require.Equal(t, "poll", line["trigger"])
	status, id2 := b.ingest("ord-2")
	require.Equal(t, http.StatusOK, status, "ingest keeps working while the file is empty")
	require.Equal(t, "review", b.leasePolicy("pay-2"), "the claim policy never falls back to the default")
	ev := b.inbox(id)
	require.Equal(t, "pending", ev["dispatch_state"])
	require.NotContains(t, str(ev, "last_dispatch_error"), "not configured")

	b.write(good)
	b.waitMessages("sources file is the running configuration again", 1)
	require.EqualValues(t, 1, b.metric(`claimd_sources_file_applied`))
	b.healthy.Store(true)
	for _, id := range []string{id, id2} {
		waitFor(t, "the dispatch of "+id, func() bool { return b.inbox(id)["dispatch_state"] == "dispatched" })
		outcomes, _ := b.deliveries(id)
		require.NotContains(t, outcomes, "dispatch_dead_lettered")
	}
	require.Empty(t, b.messages(msgReloaded), "the running configuration was never replaced")
	require.EqualValues(t, 1, b.metric(`claimd_sources_reloads_total{result="refused"}`), "one refusal, logged once")
}

// A source removed on purpose: its pending dispatch waits, visibly, and
// goes out when the source is configured again; it is never dead-lettered.
func TestSourceRemovedThenRestoredDispatchesPendingEvent(t *testing.T) {
	t.Parallel()
	b := setupReload(t, "0", true)
	status, id := b.ingest("ord-1")
	require.Equal(t, http.StatusOK, status)
	waitFor(t, "a first dispatch attempt", func() bool { return b.inbox(id)["dispatch_attempts"].(float64) >= 1 })

	b.write(reloadSources(b.target.URL, false, true))
	b.hup()
	b.waitMessages(msgReloaded, 1)
	removed := b.messages(msgRemoved)
	require.Len(t, removed, 1)
	require.Equal(t, "orders", removed[0]["source"])
	const waiting = `source "orders" is not configured; waiting`
	waitFor(t, "the dispatch to wait", func() bool { return strings.Contains(str(b.inbox(id), "last_dispatch_error"), waiting) })
	require.Equal(t, "pending", b.inbox(id)["dispatch_state"])
	outcomes, details := b.deliveries(id)
	require.NotContains(t, outcomes, "dispatch_dead_lettered")
	require.Contains(t, strings.Join(details, "\n"), waiting, "the delivery log says why it waits")
	status, _ = b.ingest("ord-2")
	require.Equal(t, http.StatusUnauthorized, status, "a removed source takes no deliveries (answered as an unauthenticated one)")

	b.healthy.Store(true)
	b.write(reloadSources(b.target.URL, true, true))
	b.hup()
	b.waitMessages(msgReloaded, 2)
	waitFor(t, "the dispatch after the restore", func() bool { return b.inbox(id)["dispatch_state"] == "dispatched" })
	outcomes, _ = b.deliveries(id)
	require.NotContains(t, outcomes, "dispatch_dead_lettered")
}

// A change that removes a source is applied by the poll only once the file
// has read the same on several polls (a file cut short at a valid point
// looks like a removal); until then the source's policy stays.
func TestSourcesFileRemovalAppliesOnceTheFileIsStable(t *testing.T) {
	t.Parallel()
	b := setupReload(t, "1", false)
	require.Equal(t, "review", b.leasePolicy("pay-1"))
	b.write(reloadSources(b.target.URL, true, false))
	pending := b.waitMessages("sources file removes sources: applied once it has read the same on consecutive polls (or at once on SIGHUP)", 1)
	require.Equal(t, []any{"payments"}, pending["removed_sources"])
	require.Empty(t, b.messages(msgReloaded))
	require.Equal(t, "review", b.leasePolicy("pay-2"), "not applied yet")
	line := b.waitMessages(msgReloaded, 1)
	require.Equal(t, "poll", line["trigger"])
	require.Equal(t, "reclaim", b.leasePolicy("pay-3"), "applied: a removed source's new claims take the default, and the log said so")
	require.Len(t, b.messages(msgRemoved), 1)
}

// TestSourcesFileCutBeforeForwardWaitsLikeARemoval: a file whose ingest
// source lost its forward (as a file cut short just before it reads)
// parses (the source is then a trigger source), so it closes that ingest
// door only once the file is stable, as a removal does, and says so.
func TestSourcesFileCutBeforeForwardWaitsLikeARemoval(t *testing.T) {
	t.Parallel()
	b := setupReload(t, "1", false)
	full := reloadSources(b.target.URL, true, true)
	head, rest, found := strings.Cut(full, "    forward:")
	require.True(t, found)
	_, tail, _ := strings.Cut(rest, "\n")
	b.write(head + tail) // orders without its forward line; payments kept
	pending := b.waitMessages("sources file removes sources: applied once it has read the same on consecutive polls (or at once on SIGHUP)", 1)
	require.Equal(t, []any{"orders"}, pending["removed_sources"])
	status, id := b.ingest("ord-cut-1")
	require.Equal(t, http.StatusOK, status, "not applied yet: the door is open")
	require.NotEmpty(t, id)
	b.waitMessages(msgReloaded, 1)
	require.Len(t, b.messages("source has no forward any more: it is a trigger source now, POST /ingest/{source} answers for it "+
		"as for an unknown source, and its pending dispatches wait until forward is configured again"), 1)
	status, _ = b.ingest("ord-cut-2")
	require.Equal(t, http.StatusUnauthorized, status, "applied: a trigger source is no ingest door")
}
