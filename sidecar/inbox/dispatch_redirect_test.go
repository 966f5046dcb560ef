package inbox_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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

// B12: a forward target that answers a redirect. The dispatcher never
// follows one: the redirect's destination is never called (so never with
// a GET without the event, and never with forward.headers on another
// origin), the event is never marked dispatched (with require_claim: false
// too), and the dead letter names the status and the Location.

// seenRequest is one request a test server received.
type seenRequest struct {
	method, path, body string
	header             http.Header
}

// recorder is an httptest server that records every request and answers
// through answer.
type recorder struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []seenRequest
}

func newRecorder(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) *recorder {
	t.Helper()
	rec := &recorder{}
	rec.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, seenRequest{method: r.Method, path: r.URL.Path, body: string(b), header: r.Header.Clone()})
		rec.mu.Unlock()
		answer(w, r)
	}))
	t.Cleanup(rec.srv.Close)
	return rec
}

// requests returns the requests received at path ("" for all).
func (rec *recorder) requests(path string) []seenRequest {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var out []seenRequest
	for _, r := range rec.reqs {
		if path == "" || r.path == path {
			out = append(out, r)
		}
	}
	return out
}

// hookToken is the credential in forward.headers that must never reach
// another origin.
const hookToken = "n8n-hook-token-s3cr3t"

func TestDispatchNeverFollowsRedirects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// other is another origin (another port): the Location of half the
	// sources. It carries userinfo, a query token and a fragment, which
	// must never be logged or stored.
	other := newRecorder(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	codes := []int{301, 302, 303, 307, 308}
	type tcase struct {
		name, location, want string
		code                 int
		requireClaim         bool
	}
	// The cases and their Locations are complete before the target
	// starts: its handler reads them.
	var cases []tcase
	locations := map[string]string{}
	for _, code := range codes {
		for _, origin := range []string{"same", "other"} {
			for _, rc := range []bool{false, true} {
				c := tcase{name: fmt.Sprintf("r%d-%s-%t", code, origin, rc), code: code, requireClaim: rc}
				c.location = "/hook/moved-" + c.name + "?token=q-s3cr3t"
				if origin == "other" {
					c.location = strings.Replace(other.srv.URL, "http://", "http://user:pw-s3cr3t@", 1) +
						"/elsewhere/" + c.name + "?token=q-s3cr3t#frag"
				}
				locations[c.name] = c.location
				cases = append(cases, c)
			}
		}
	}
	target := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/hook/")
		loc, ok := locations[name]
		if !ok { // a redirect's destination: a page that answers anything with 200
			w.WriteHeader(http.StatusOK)
			return
		}
		var code int
		_, _ = fmt.Sscanf(name, "r%d", &code)
		w.Header().Set("Location", loc)
		w.WriteHeader(code)
	})
	var spec strings.Builder
	spec.WriteString("sources:\n")
	for i, c := range cases {
		cases[i].want = fmt.Sprintf("HTTP %d redirect to %s/hook/moved-%s — fix forward.url", c.code, target.srv.URL, c.name)
		if strings.Contains(c.name, "other") {
			cases[i].want = fmt.Sprintf("HTTP %d redirect to %s/elsewhere/%s (another origin) — fix forward.url", c.code, other.srv.URL, c.name)
		}
		fmt.Fprintf(&spec, `  %s:
    tenant: acme
    provider: token
    secrets: [tok]
    options: {key: {id_header: X-Id}}
    forward:
      url: "%s/hook/%s"
      headers: {X-N8N-Hook-Token: %q, Authorization: "Bearer %s"}
      require_claim: %t
      backoff_base_seconds: 1
      backoff_cap_seconds: 1
`, c.name, target.srv.URL, c.name, hookToken, hookToken, c.requireClaim)
	}
	cfg, err := sources.Parse([]byte(spec.String()), envOf(nil))
	require.NoError(t, err)
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 8 })
	ledger, err := claim.New(pool, claim.Config{Policies: claim.Policies{BySource: cfg.Policies}})
	require.NoError(t, err)
	results := make(chan string, 256)
	in, err := inbox.New(inbox.Options{Pool: pool, Ledger: ledger, Config: cfg, Logger: zerolog.Nop(),
		Observer: retryObserver{results}, Dispatch: true, PollInterval: 50 * time.Millisecond,
		// A client that would follow redirects (Go's default): New must
		// take that away.
		HTTPClient: &http.Client{}, Jitter: func() float64 { return 0.05 }})
	require.NoError(t, err)
	require.NoError(t, in.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, in.Stop(sctx))
	})

	ids := map[string]string{}
	for _, c := range cases {
		body := `{"id":"` + c.name + `","amount":100}`
		rs, err := in.Receive(ctx, cfg.Sources[c.name], []verify.Event{{ID: c.name}}, []byte(body), "application/json", nil)
		require.NoError(t, err)
		ids[c.name] = rs[0].ClaimID
	}
	deadline := time.NewTimer(retryWait)
	defer deadline.Stop()
	for done := 0; done < len(cases); {
		select {
		case r := <-results:
			require.Equal(t, "dead_lettered", r, "a redirect is never a delivery and, by default, not retried")
			done++
		case <-deadline.C:
			t.Fatalf("only %d of %d dispatches ended within %s", done, len(cases), retryWait)
		}
	}

	b := &retryBundle{ctx: ctx, pool: pool}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			posted := target.requests("/hook/" + c.name)
			require.Len(t, posted, 1, "one attempt at forward.url")
			require.Equal(t, http.MethodPost, posted[0].method)
			require.Equal(t, `{"id":"`+c.name+`","amount":100}`, posted[0].body)
			require.Empty(t, target.requests("/hook/moved-"+c.name), "the same-origin destination is never called")

			row := b.row(t, ids[c.name])
			require.Equal(t, "dead_lettered", row.state, "never dispatched (require_claim %t)", c.requireClaim)
			require.Equal(t, 1, row.attempts)
			require.NotNil(t, row.lastStatus)
			require.Equal(t, c.code, *row.lastStatus)
			require.Contains(t, row.lastError, c.want)
			log := b.dispatchLog(t, ids[c.name])
			require.Len(t, log, 1)
			require.Equal(t, "dispatch_dead_lettered", log[0].outcome)
			require.Equal(t, row.lastError, log[0].detail)
			for _, secret := range []string{"s3cr3t", "user", "frag"} {
				require.NotContains(t, row.lastError, secret, "userinfo, query and fragment of a Location are never stored")
			}
		})
	}
	require.Empty(t, other.requests(""), "another origin is never called, so never sees forward.headers")
}

// A source may list 3xx in forward.retry_statuses (a proxy that redirects
// to a maintenance page for a while): the redirect is retried up to the
// attempt cap, still never followed, and the dead letter names it.
func TestDispatchRetriesListedRedirectWithoutFollowing(t *testing.T) {
	t.Parallel()
	b := setupRetry(t, `, max_attempts: 3, require_claim: false, retry_statuses: ["300-399", "500-599"]`,
		func(b *retryBundle, n int, r *http.Request) (int, string) { return http.StatusTemporaryRedirect, `{}` })
	id := b.receive(t, "evt-307")
	require.Equal(t, 2, b.waitEnd(t, "dead_lettered"))
	require.EqualValues(t, 3, b.hits.Load(), "every attempt posts to forward.url; the redirect is never followed")
	row := b.row(t, id)
	require.Equal(t, "dead_lettered", row.state)
	require.Equal(t, 3, row.attempts)
	require.Contains(t, row.lastError, "HTTP 307 redirect without a Location — fix forward.url")
	require.Contains(t, row.lastError, "attempt cap 3 reached")
	log := b.dispatchLog(t, id)
	require.Len(t, log, 3)
	require.Equal(t, "dispatch_failed", log[0].outcome)
	require.Contains(t, log[0].detail, "HTTP 307 redirect without a Location — fix forward.url")
	require.Contains(t, log[0].detail, "retryable for this source")
}
