package inbox_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// The sources file as the inbox runs it: trigger sources kept apart from
// the ingest doors, credential headers left out of what is stored, one
// valid dispatch queue per source.

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

const fwd = `forward: {url: "http://n8n.internal:5678/webhook/x"}`

// TestSourcesFileTriggerSources: a source without forward is a trigger
// source: kept apart from the ingest doors (no dispatch queue; /ingest
// does not know it), found by TriggerSource, and held to the scope rules
// like any source.
func TestSourcesFileTriggerSources(t *testing.T) {
	t.Parallel()
	cfg, err := sources.Parse([]byte(`
sources:
  gh: {tenant: acme, provider: github, secrets: [s], `+fwd+`}
  gh-trigger: {tenant: acme, provider: github, secrets: [t], dedupe_scope: gh, max_body_bytes: 2097152}
  stripe-trigger: {tenant: acme, provider: stripe, secrets: [s], lease_policy: reclaim}
`), envOf(nil))
	require.NoError(t, err)
	require.Equal(t, []string{"gh"}, mapKeys(cfg.Sources), "ingest doors")
	require.Equal(t, []string{"gh-trigger", "stripe-trigger"}, mapKeys(cfg.Triggers), "trigger sources")
	tr := cfg.Triggers["gh-trigger"]
	require.True(t, tr.TriggerOnly())
	require.False(t, cfg.Sources["gh"].TriggerOnly())
	require.Equal(t, "gh", tr.Scope)
	require.Equal(t, sources.Forward{}, tr.Forward)
	require.Equal(t, claim.LeasePolicy("reclaim"), cfg.Policies["stripe-trigger"].LeasePolicy)

	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 2 })
	ledger, err := claim.New(pool, claim.Config{Policies: claim.Policies{BySource: cfg.Policies}})
	require.NoError(t, err)
	in, err := inbox.New(inbox.Options{Pool: pool, Ledger: ledger, Config: cfg, Logger: zerolog.Nop(), Dispatch: true})
	require.NoError(t, err, "a trigger source needs no dispatch queue")
	require.Nil(t, in.Source("gh-trigger"), "not an ingest door")
	require.Same(t, tr, in.TriggerSource("gh-trigger"))
	require.Same(t, cfg.Sources["gh"], in.TriggerSource("gh"), "an ingest door serves the trigger too")
	require.Nil(t, in.TriggerSource("nope"))
	require.Equal(t, 2097152, in.MaxBodyBytes(), "the largest limit of any source, trigger sources included")

	// A trigger source sharing an ingest door's scope must agree with it.
	_, err = sources.Parse([]byte(`
sources:
  gh: {tenant: acme, provider: github, secrets: [s], `+fwd+`}
  gh-trigger: {tenant: other, provider: github, secrets: [t], dedupe_scope: gh}
`), envOf(nil))
	require.ErrorContains(t, err, "tenant")
}

func mapKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestSourceCredentialHeaders: the headers that carry a source's signature
// or token, whatever a generic scheme calls them, are known to the source
// and dropped from what is stored and forwarded.
func TestSourceCredentialHeaders(t *testing.T) {
	t.Parallel()
	cfg, err := sources.Parse([]byte(`
sources:
  tok: {tenant: acme, provider: token, secrets: [s], options: {header: X-Api-Key, key: {id_header: X-Id}}, `+fwd+`}
  tok-default: {tenant: acme, provider: token, secrets: [s], options: {key: {id_header: X-Id}}, `+fwd+`}
  mac: {tenant: acme, provider: hmac, secrets: [s], options: {signature: {header: X-Payload-Digest}, key: {id_header: X-Id}}, `+fwd+`}
  ce: {tenant: acme, provider: cloudevents, secrets: [s], options: {auth: hmac, signature: {header: X-CE-Sig}}, `+fwd+`}
  ce-bearer: {tenant: acme, provider: cloudevents, secrets: [s], `+fwd+`}
  stripe: {tenant: acme, provider: stripe, secrets: [s], `+fwd+`}
`), envOf(nil))
	require.NoError(t, err)
	want := map[string][]string{
		"tok": {"x-api-key"}, "tok-default": {"authorization"}, "mac": {"x-payload-digest"},
		"ce": {"x-ce-sig"}, "ce-bearer": {"authorization"}, "stripe": {"stripe-signature"},
	}
	for name, hs := range want {
		require.Equal(t, hs, cfg.Sources[name].CredentialHeaders, name)
	}
	in := map[string]string{
		"X-Api-Key": "secret", "X-Payload-Digest": "sig", "X-Hub-Signature-256": "sig", "Authorization": "Bearer x",
		"Cookie": "c", "Content-Length": "3", "X-Id": "42", "Content-Type": "application/json", "User-Agent": "ua",
	}
	visit := func(f func(name, value string)) {
		for k, v := range in {
			f(k, v)
		}
	}
	require.Equal(t, map[string]string{"x-id": "42", "content-type": "application/json", "user-agent": "ua", "x-payload-digest": "sig"},
		inbox.ForwardableHeaders(visit, cfg.Sources["tok"].CredentialHeaders...), "the token source's header is dropped")
	require.Equal(t, map[string]string{"x-id": "42", "content-type": "application/json", "user-agent": "ua", "x-api-key": "secret"},
		inbox.ForwardableHeaders(visit, cfg.Sources["mac"].CredentialHeaders...), "the hmac source's header is dropped")
	require.Equal(t, map[string]string{"x-id": "42", "content-type": "application/json", "user-agent": "ua", "x-api-key": "secret", "x-payload-digest": "sig"},
		inbox.ForwardableHeaders(visit), "without them only the generic filter applies")
}

// TestSourceNamesMakeValidDispatchQueues: every name sources.Parse accepts gets a
// dispatch queue River accepts (names with doubled or trailing separators,
// or too long for River's 64-character queue names, used to make New or
// every enqueue fail), and two names that would share a queue are refused.
func TestSourceNamesMakeValidDispatchQueues(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 100)
	names := []string{"stripe", "github.orders", "a--b", "trailing-", "x._y", long}
	var b strings.Builder
	b.WriteString("sources:\n")
	for _, n := range names {
		b.WriteString("  " + n + `: {tenant: acme, provider: token, secrets: [tok], options: {key: {id_header: X-Id}}, forward: {require_claim: false, url: "${TARGET}"}}` + "\n")
	}
	var posts atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { posts.Add(1) }))
	t.Cleanup(target.Close)
	cfg, err := sources.Parse([]byte(b.String()), envOf(map[string]string{"TARGET": target.URL}))
	require.NoError(t, err)

	ctx := context.Background()
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 6 })
	ledger, err := claim.New(pool, claim.Config{Policies: claim.Policies{BySource: cfg.Policies}})
	require.NoError(t, err)
	in, err := inbox.New(inbox.Options{Pool: pool, Ledger: ledger, Config: cfg, Logger: zerolog.Nop(),
		Dispatch: true, PollInterval: 100 * time.Millisecond})
	require.NoError(t, err, "every source's queue is valid")
	require.NoError(t, in.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, in.Stop(sctx))
	})
	for _, n := range names {
		rs, err := in.Receive(ctx, cfg.Sources[n], []verify.Event{{ID: "e1"}}, []byte(`{"n":1}`), "application/json", nil)
		require.NoError(t, err, n)
		require.Equal(t, inbox.Accepted, rs[0].Status, n)
	}
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var pending int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM inbox_events WHERE dispatch_state <> 'dispatched'`).Scan(&pending))
		if pending == 0 {
			break
		}
		require.False(t, time.Now().After(deadline), "%d events not dispatched", pending)
		<-tick.C
	}
	require.EqualValues(t, len(names), posts.Load())

	_, err = sources.Parse([]byte(`
sources:
  a.b: {tenant: acme, provider: github, secrets: [s], `+fwd+`}
  a_b: {tenant: acme, provider: github, secrets: [s], `+fwd+`}
`), envOf(nil))
	require.ErrorContains(t, err, "dispatch queue")
}
