package httpapi_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/httpapi"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/metrics"
)

// keyLookups counts the API-key queries that reach the database (a pgx
// tracer on the server's pool).
type keyLookups struct{ n atomic.Int64 }

func (k *keyLookups) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "FROM api_keys WHERE key_hash") {
		k.n.Add(1)
	}
	return ctx
}

func (*keyLookups) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// testClock is the key checks' clock; the test moves it instead of sleeping.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// costBundle is a sidecar on a real socket whose key checks are counted,
// limited to failureLimit failures per address per minute, on a test clock.
type costBundle struct {
	*bundle
	lookups *keyLookups
	clock   *testClock
	metrics *metrics.Metrics
	clients sync.Map // local address → *http.Client
}

const failureLimit = 5

func setupCost(t *testing.T) *costBundle {
	t.Helper()
	lookups := &keyLookups{}
	clock := &testClock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = lookups })
	l, err := claim.New(pool, claim.Config{})
	require.NoError(t, err)
	m := metrics.New(l.Stats)
	logs := &lockedBuffer{}
	srv := httpapi.New(httpapi.Config{
		Ledger: l,
		Keys: auth.New(pool, []auth.StaticKey{{Tenant: tenantA, Key: keyA}}, auth.Options{
			CacheTTL: 30 * time.Second, NegativeTTL: 10 * time.Second, FailureLimit: failureLimit,
			FailureWindow: time.Minute, Observer: m, Now: clock.now}),
		Metrics: m,
		Logger:  zerolog.New(logs),
	})
	addr := serve(t, srv)
	return &costBundle{bundle: &bundle{ctx: context.Background(), pool: pool, ledger: l, server: srv, logs: logs,
		cov: newCoverage(), addr: addr, bodyLimit: 4 << 20}, lookups: lookups, clock: clock, metrics: m}
}

// from sends c from the local address ip (any of 127.0.0.0/8), so that the
// sidecar sees that client address, and checks the answer against
// openapi.yaml.
func (b *costBundle) from(t *testing.T, ip string, c call) reply {
	t.Helper()
	v, _ := b.clients.LoadOrStore(ip, &http.Client{Transport: &http.Transport{
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).DialContext}})
	client := v.(*http.Client)
	raw := encode(t, c.body)
	req := c.request(raw)
	req.RequestURI = ""
	req.URL.Scheme, req.URL.Host = "http", b.addr
	res, err := client.Do(req.WithContext(b.ctx))
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	r := reply{status: res.StatusCode, header: res.Header, body: body}
	b.conform(t, c, raw, r)
	return r
}

func issuedShapeKey(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return "ick_" + base64.RawURLEncoding.EncodeToString(b)
}

// TestJunkKeyStormIsBounded: what a caller without a key can make the
// sidecar spend. 1,000 keys of claimd's shape from one address cost the
// failure limit in queries, then 429 with Retry-After; 1,000 keys of
// another shape cost none; other addresses keep authenticating; no
// answer or log line carries a presented key.
func TestJunkKeyStormIsBounded(t *testing.T) {
	t.Parallel()
	b := setupCost(t)
	dbKey, _, err := auth.Create(b.ctx, b.pool, tenantB, "storm")
	require.NoError(t, err)
	var presented []string
	storm := func(ip string, key func(int) string) (statuses map[int]int, retryAfter map[string]int, queries int64) {
		statuses, retryAfter = map[int]int{}, map[string]int{}
		before := b.lookups.n.Load()
		for i := range 1000 {
			k := key(i)
			if i%100 == 0 {
				presented = append(presented, k)
			}
			r := b.from(t, ip, call{method: "POST", path: "/v1/claims", key: k,
				body: map[string]any{"source": "stripe", "event_id": "storm"}})
			statuses[r.status]++
			if r.status == http.StatusTooManyRequests {
				retryAfter[r.header.Get("Retry-After")]++
				require.Contains(t, string(r.body), `"code":"rate_limited"`)
			}
			require.NotContains(t, string(r.body), k)
		}
		return statuses, retryAfter, b.lookups.n.Load() - before
	}

	statuses, retryAfter, queries := storm("127.0.0.2", func(int) string { return issuedShapeKey(t) })
	require.EqualValues(t, failureLimit, queries, "1,000 keys of claimd's shape from one address")
	require.Equal(t, map[int]int{401: failureLimit, 429: 1000 - failureLimit}, statuses)
	require.Equal(t, map[string]int{"60": 1000 - failureLimit}, retryAfter, "the clock stands still: the whole window is left")

	statuses, _, queries = storm("127.0.0.3", func(i int) string { return fmt.Sprintf("junk-%d-%s", i, issuedShapeKey(t)) })
	require.Zero(t, queries, "1,000 keys of another shape")
	require.Equal(t, map[int]int{401: failureLimit, 429: 1000 - failureLimit}, statuses)

	before := b.lookups.n.Load()
	who := b.from(t, "127.0.0.4", call{method: "GET", path: "/v1/whoami", key: dbKey})
	require.Equal(t, http.StatusOK, who.status, "%s", who)
	require.EqualValues(t, 1, b.lookups.n.Load()-before, "another address is asked for its key")
	require.Equal(t, http.StatusOK, b.from(t, "127.0.0.2", call{method: "GET", path: "/v1/whoami", key: keyA}).status,
		"a configured key works from a limited address")
	require.Equal(t, http.StatusOK, b.from(t, "127.0.0.2", call{method: "GET", path: "/v1/whoami", key: dbKey}).status,
		"so does a key the sidecar has cached")
	newcomer, _, err := auth.Create(b.ctx, b.pool, tenantB, "newcomer")
	require.NoError(t, err)
	r := b.from(t, "127.0.0.2", call{method: "GET", path: "/v1/whoami", key: newcomer})
	require.Equal(t, http.StatusTooManyRequests, r.status, "a key it has not seen waits for the window: %s", r)

	b.clock.advance(20 * time.Second)
	r = b.from(t, "127.0.0.2", call{method: "GET", path: "/v1/whoami", key: issuedShapeKey(t)})
	require.Equal(t, "40", r.header.Get("Retry-After"))
	b.clock.advance(40 * time.Second)
	require.Equal(t, http.StatusOK, b.from(t, "127.0.0.2", call{method: "GET", path: "/v1/whoami", key: newcomer}).status,
		"the window ended")

	require.EqualValues(t, 2*(1000-failureLimit)+2, b.refusals(t, "rate_limited"))
	require.EqualValues(t, failureLimit, b.refusals(t, "unknown"))
	require.EqualValues(t, failureLimit, b.refusals(t, "malformed"))
	require.Zero(t, b.refusals(t, "cached"))
	logs := b.logs.String()
	require.Contains(t, logs, `"status":429`)
	for _, k := range append(presented, dbKey, newcomer, keyA) {
		require.NotContains(t, logs, k, "a presented key in the log")
	}
}

// refusals reads claimd_auth_refusals_total{reason}.
func (b *costBundle) refusals(t *testing.T, reason string) float64 {
	t.Helper()
	families, err := b.metrics.Registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "claimd_auth_refusals_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no claimd_auth_refusals_total{reason=%q}", reason)
	return 0
}
