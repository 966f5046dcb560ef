package httpapi_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/httpapi"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/metrics"
)

// Static API keys of every bundle.
const (
	tenantA  = "tenant-a"
	tenantB  = "tenant-b"
	keyA     = "key-tenant-a-0123456789"
	keyB     = "key-tenant-b-0123456789"
	keyAdmin = "key-admin-0123456789abc"
)

type options struct {
	bodyLimit int
	maxBatch  int
	keyTTL    time.Duration
	static    []auth.StaticKey
	policies  claim.Policies
	// serverPool, when set, makes the pool the server works on (the
	// ledger, API key lookups, readiness) from the bundle's own, which
	// stays the tests' direct access to the database (bundle.pool).
	serverPool func(t *testing.T, direct *pgxpool.Pool) *pgxpool.Pool
	// server, when set, adjusts the server's configuration (edge limits).
	server func(*httpapi.Config)
}

// serve runs srv on a kernel-chosen loopback port until the test ends and
// returns its address.
func serve(t *testing.T, srv *httpapi.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Listener(ln)
	}()
	t.Cleanup(func() {
		_ = srv.App().Shutdown()
		_ = ln.Close()
		<-served
	})
	return ln.Addr().String()
}

// bundle is one sidecar HTTP API over its own fresh database. Every response
// that passes through do is validated against openapi.yaml.
type bundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	ledger *claim.Ledger
	server *httpapi.Server
	logs   *lockedBuffer
	cov    *coverage
	// addr is where the app also listens on a real socket, for requests
	// that app.Test cannot carry (see do).
	addr      string
	bodyLimit int
}

func setup(t *testing.T, adjust ...func(*options)) *bundle {
	t.Helper()
	o := options{bodyLimit: 64 << 10, maxBatch: 8, static: []auth.StaticKey{
		{Tenant: tenantA, Key: keyA}, {Tenant: tenantB, Key: keyB}, {Tenant: "*", Key: keyAdmin, Admin: true}}}
	for _, f := range adjust {
		f(&o)
	}
	pool := pgtest.NewPool(t)
	serverPool := pool
	if o.serverPool != nil {
		serverPool = o.serverPool(t, pool)
	}
	l, err := claim.New(serverPool, claim.Config{Jitter: func() float64 { return 1 }, Policies: o.policies})
	require.NoError(t, err)
	logs := &lockedBuffer{}
	cfg := httpapi.Config{
		Ledger:  l,
		Keys:    auth.NewKeys(serverPool, o.static, o.keyTTL),
		Metrics: metrics.New(l.Stats),
		Ready: func(ctx context.Context) error {
			if err := serverPool.Ping(ctx); err != nil {
				return errors.New("database unreachable")
			}
			return nil
		},
		Logger:    zerolog.New(logs),
		BodyLimit: o.bodyLimit,
		MaxBatch:  o.maxBatch,
	}
	if o.server != nil {
		o.server(&cfg)
	}
	srv := httpapi.New(cfg)
	addr := serve(t, srv)
	return &bundle{ctx: context.Background(), pool: pool, ledger: l, server: srv, logs: logs, cov: newCoverage(),
		addr: addr, bodyLimit: o.bodyLimit}
}

// call is one HTTP request.
type call struct {
	method, path string
	// key is sent as a bearer token when not empty.
	key string
	// body: string or []byte sent verbatim; nil sends none; anything else is
	// sent as JSON.
	body   any
	header map[string]string
	// lax skips checking a successful request against the document's request
	// schemas (a batch with invalid items, a compressed body).
	lax bool
}

// reply is one HTTP response, already read.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

// answer is the union of the JSON answers: claim result, record, error.
type answer struct {
	Outcome           string `json:"outcome"`
	ClaimToken        string `json:"claim_token"`
	RetryAfterSeconds *int   `json:"retry_after_seconds"`
	ClaimID           string `json:"claim_id"`
	IdempotencyKey    string `json:"idempotency_key"`
	Source            string `json:"source"`
	EventID           string `json:"event_id"`
	Action            string `json:"action"`
	State             string `json:"state"`
	Attempt           int    `json:"attempt"`
	ResultRef         string `json:"result_ref"`
	PayloadHash       string `json:"payload_hash"`
	LastError         string `json:"last_error"`
	LeasePolicy       string `json:"lease_policy"`
	Deliveries        []struct {
		Outcome     string `json:"outcome"`
		ExecutionID string `json:"execution_id"`
		Detail      string `json:"detail"`
		Actor       string `json:"actor"`
	} `json:"deliveries"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Field   string `json:"field"`
	} `json:"error"`
	Results []answer `json:"results"`
	// Claims and More: the answer of POST /v1/claims/fail/execution.
	Claims []answer `json:"claims"`
	More   bool     `json:"more"`
	Tenant string   `json:"tenant"`
	Admin  bool     `json:"admin"`
}

func encode(t *testing.T, body any) []byte {
	t.Helper()
	switch b := body.(type) {
	case nil:
		return nil
	case string:
		return []byte(b)
	case []byte:
		return b
	}
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	return raw
}

func (c call) request(raw []byte) *http.Request {
	var body io.Reader = http.NoBody
	if raw != nil {
		body = bytes.NewReader(raw)
	}
	req := httptest.NewRequest(c.method, c.path, body)
	if raw != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	return req
}

// do sends c through the Fiber app (app.Test) and checks the answer against
// openapi.yaml. A body over the limit goes over a real socket instead:
// fasthttp answers it 413 while reading the request, and app.Test reports
// that as an error without the response.
func (b *bundle) do(t *testing.T, c call) reply {
	t.Helper()
	raw := encode(t, c.body)
	var res *http.Response
	var err error
	if len(raw) > b.bodyLimit {
		req := c.request(raw)
		req.RequestURI = ""
		req.URL.Scheme, req.URL.Host = "http", b.addr
		res, err = http.DefaultClient.Do(req.WithContext(b.ctx))
	} else {
		res, err = b.server.App().Test(c.request(raw), -1)
	}
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	r := reply{status: res.StatusCode, header: res.Header, body: body}
	b.conform(t, c, raw, r)
	return r
}

// doJSON is do, decoding the JSON answer.
func (b *bundle) doJSON(t *testing.T, c call) (reply, answer) {
	t.Helper()
	r := b.do(t, c)
	var a answer
	require.NoError(t, json.Unmarshal(r.body, &a), "%s %s: %s", c.method, c.path, r)
	return r, a
}

// ok is doJSON requiring 200.
func (b *bundle) ok(t *testing.T, c call) answer {
	t.Helper()
	r, a := b.doJSON(t, c)
	require.Equal(t, http.StatusOK, r.status, "%s %s: %s", c.method, c.path, r)
	return a
}

// fails is doJSON requiring an error answer with status, code and field.
func (b *bundle) fails(t *testing.T, c call, status int, code, field string) answer {
	t.Helper()
	r, a := b.doJSON(t, c)
	require.Equal(t, status, r.status, "%s %s: %s", c.method, c.path, r)
	require.NotNil(t, a.Error, "%s", r)
	require.Equal(t, code, a.Error.Code, "%s", r)
	require.Equal(t, field, a.Error.Field, "%s", r)
	require.NotEmpty(t, a.Error.Message)
	return a
}

func (b *bundle) claim(t *testing.T, key string, body map[string]any) answer {
	t.Helper()
	return b.ok(t, call{method: "POST", path: "/v1/claims", key: key, body: body})
}

func (b *bundle) won(t *testing.T, key string, body map[string]any) answer {
	t.Helper()
	a := b.claim(t, key, body)
	require.Equal(t, "won", a.Outcome)
	require.NotEmpty(t, a.ClaimToken)
	return a
}

func (b *bundle) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM `+table).Scan(&n))
	return n
}

// reclaimSources gives the named sources lease policy reclaim (the default
// is review), for tests of what happens when another claim wins an expired
// lease.
func reclaimSources(sources ...string) func(*options) {
	return func(o *options) {
		if o.policies.BySource == nil {
			o.policies.BySource = map[string]claim.Policy{}
		}
		for _, s := range sources {
			p := o.policies.BySource[s]
			p.LeasePolicy = claim.Reclaim
			o.policies.BySource[s] = p
		}
	}
}

// expireLease ends a processing record's lease, as if it had run out.
func (b *bundle) expireLease(t *testing.T, id string) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, `UPDATE claims SET lease_until = statement_timestamp() - interval '1 second' WHERE id = $1`, id)
	require.NoError(t, err)
}

// dueNow makes a retryable_failed record's next attempt due.
func (b *bundle) dueNow(t *testing.T, id string) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, `UPDATE claims SET next_attempt_at = statement_timestamp() - interval '1 second' WHERE id = $1`, id)
	require.NoError(t, err)
}

func marker(t *testing.T, what string) string {
	t.Helper()
	b := make([]byte, 8)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return "MARK" + what + hex.EncodeToString(b)
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func TestInvalidInputNamesFieldAndWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_kept"})
	claims, deliveries := b.count(t, "claims"), b.count(t, "claim_deliveries")
	before := b.do(t, call{method: "GET", path: "/v1/claims/" + w.ClaimID, key: keyA})

	id := "/v1/claims/" + w.ClaimID
	tok := w.ClaimToken
	for _, tc := range []struct {
		name   string
		path   string
		body   any
		status int
		code   string
		field  string
	}{
		{"unknown field", "/v1/claims", `{"source":"stripe","event_id":"e1","colour":"red"}`, 400, "malformed", "colour"},
		{"source wrong type", "/v1/claims", `{"source":42,"event_id":"e1"}`, 400, "malformed", "source"},
		{"lease wrong type", "/v1/claims", `{"source":"stripe","event_id":"e1","lease_seconds":"60"}`, 400, "malformed", "lease_seconds"},
		{"lease fraction", "/v1/claims", `{"source":"stripe","event_id":"e1","lease_seconds":1.5}`, 400, "malformed", "lease_seconds"},
		{"key_parts wrong type", "/v1/claims", `{"source":"stripe","key_parts":"a|b"}`, 400, "malformed", "key_parts"},
		{"object_version wrong type", "/v1/claims", `{"source":"stripe","event_id":"e1","object_id":"o","object_version":"7"}`, 400, "malformed", "object_version"},
		{"missing source", "/v1/claims", `{"event_id":"e1"}`, 422, "invalid", "source"},
		{"empty source", "/v1/claims", `{"source":"","event_id":"e1"}`, 422, "invalid", "source"},
		{"bad source", "/v1/claims", `{"source":"has space","event_id":"e1"}`, 422, "invalid", "source"},
		{"no event id", "/v1/claims", `{"source":"stripe"}`, 422, "invalid", "event_id"},
		{"event_id and key_parts", "/v1/claims", `{"source":"stripe","event_id":"e1","key_parts":["a"]}`, 422, "invalid", "event_id"},
		{"event_id and key_fields", "/v1/claims", `{"source":"stripe","event_id":"e1","key_fields":{"a":1}}`, 422, "invalid", "event_id"},
		{"key_parts and key_fields", "/v1/claims", `{"source":"stripe","key_parts":["a"],"key_fields":{"a":1}}`, 422, "invalid", "event_id"},
		{"payload and payload_hash", "/v1/claims", `{"source":"stripe","event_id":"e1","payload":{"a":1},"payload_hash":"` + strings.Repeat("a", 64) + `"}`, 422, "invalid", "payload_hash"},
		{"bad payload_hash", "/v1/claims", `{"source":"stripe","event_id":"e1","payload_hash":"XYZ"}`, 422, "invalid", "payload_hash"},
		{"zero lease", "/v1/claims", `{"source":"stripe","event_id":"e1","lease_seconds":0}`, 422, "invalid", "lease_seconds"},
		{"negative lease", "/v1/claims", `{"source":"stripe","event_id":"e1","lease_seconds":-5}`, 422, "invalid", "lease_seconds"},
		{"lease over policy", "/v1/claims", `{"source":"stripe","event_id":"e1","lease_seconds":86401}`, 422, "invalid", "lease_seconds"},
		// 10^11 s overflows time.Duration; it must not wrap to a valid lease.
		{"lease overflow", "/v1/claims", `{"source":"stripe","event_id":"e1","lease_seconds":100000000000}`, 422, "invalid", "lease_seconds"},
		{"lease overflow to 1h", "/v1/claims", fmt.Sprintf(`{"source":"stripe","event_id":"e1","lease_seconds":%d}`, wrapsTo(time.Hour)), 422, "invalid", "lease_seconds"},
		{"object_id without version", "/v1/claims", `{"source":"stripe","event_id":"e1","object_id":"o"}`, 422, "invalid", "object_version"},
		{"event_id too long", "/v1/claims", `{"source":"stripe","event_id":"` + strings.Repeat("e", 1025) + `"}`, 422, "invalid", "event_id"},
		{"malformed JSON", "/v1/claims", `{"source":"stripe",`, 400, "malformed", ""},
		{"not JSON", "/v1/claims", `source=stripe`, 400, "malformed", ""},
		{"two objects", "/v1/claims", `{"source":"stripe","event_id":"e1"}{}`, 400, "malformed", ""},
		{"array body", "/v1/claims", `[{"source":"stripe","event_id":"e1"}]`, 400, "malformed", ""},
		{"empty body", "/v1/claims", "", 400, "malformed", ""},
		{"batch empty", "/v1/claims/batch", `{"claims":[]}`, 422, "invalid", "claims"},
		{"batch missing", "/v1/claims/batch", `{}`, 422, "invalid", "claims"},
		{"batch wrong type", "/v1/claims/batch", `{"claims":{"source":"stripe"}}`, 400, "malformed", "claims"},
		{"batch over max", "/v1/claims/batch", batchOf(9), 422, "invalid", "claims"},
		{"complete without token", id + "/complete", `{"result_ref":"r"}`, 422, "invalid", "claim_token"},
		{"complete bad token", id + "/complete", `{"claim_token":"not-a-token"}`, 422, "invalid", "claim_token"},
		{"complete result_ref too long", id + "/complete", `{"claim_token":"` + tok + `","result_ref":"` + strings.Repeat("r", 2001) + `"}`, 422, "invalid", "result_ref"},
		{"fail bad retry kind", id + "/fail", `{"claim_token":"` + tok + `","error":"boom","retry":"maybe"}`, 422, "invalid", "retry"},
		{"fail without retry", id + "/fail", `{"claim_token":"` + tok + `","error":"boom"}`, 422, "invalid", "retry"},
		{"fail without error", id + "/fail", `{"claim_token":"` + tok + `","retry":"permanent"}`, 422, "invalid", "error"},
		{"fail unknown field", id + "/fail", `{"claim_token":"` + tok + `","error":"boom","retry":"permanent","later":true}`, 400, "malformed", "later"},
		{"extend zero", id + "/extend", `{"claim_token":"` + tok + `","lease_seconds":0}`, 422, "invalid", "lease_seconds"},
		{"extend over policy", id + "/extend", `{"claim_token":"` + tok + `","lease_seconds":86401}`, 422, "invalid", "lease_seconds"},
		{"extend overflow", id + "/extend", fmt.Sprintf(`{"claim_token":"%s","lease_seconds":%d}`, tok, wrapsTo(time.Hour)), 422, "invalid", "lease_seconds"},
		{"resolve bad outcome", id + "/resolve", `{"outcome":"done","note":"n"}`, 422, "invalid", "outcome"},
		{"resolve without note", id + "/resolve", `{"outcome":"completed"}`, 422, "invalid", "note"},
		{"resolve empty body", id + "/resolve", "", 400, "malformed", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b.fails(t, call{method: "POST", path: tc.path, key: keyA, body: tc.body}, tc.status, tc.code, tc.field)
		})
	}
	b.fails(t, call{method: "GET", path: "/v1/claims?event_id=evt_kept", key: keyA}, 422, "invalid", "source")
	b.fails(t, call{method: "GET", path: "/v1/claims?source=stripe", key: keyA}, 422, "invalid", "event_id")

	require.Equal(t, claims, b.count(t, "claims"), "no claim written")
	require.Equal(t, deliveries, b.count(t, "claim_deliveries"), "no delivery logged")
	after := b.do(t, call{method: "GET", path: "/v1/claims/" + w.ClaimID, key: keyA})
	require.JSONEq(t, stableRecord(t, before.body), stableRecord(t, after.body), "the existing record is unchanged")
}

// wrapsTo returns a number of seconds whose conversion to time.Duration
// overflows int64 and wraps around to exactly d.
func wrapsTo(d time.Duration) uint64 {
	// n·10⁹ ≡ d (mod 2⁶⁴) with n = d/10⁹ + k·2⁶⁴/gcd: 2⁶⁴ = 2⁹·2⁵⁵ and
	// 10⁹ = 2⁹·5⁹, so adding 2⁵⁵ seconds adds exactly 2⁶⁴ nanoseconds.
	return uint64(d/time.Second) + 1<<55
}

func batchOf(n int) string {
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf(`{"source":"stripe","event_id":"b%d"}`, i)
	}
	return `{"claims":[` + strings.Join(items, ",") + `]}`
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	b := setup(t) // key cache TTL 0: every request asks the database
	for _, c := range []call{
		{method: "GET", path: "/v1/whoami"},
		{method: "GET", path: "/v1/whoami", key: "wrong-key-0123456789"},
		{method: "GET", path: "/v1/whoami", header: map[string]string{"Authorization": "Basic " + keyA}},
		{method: "GET", path: "/v1/whoami", header: map[string]string{"Authorization": keyA}},
		{method: "POST", path: "/v1/claims", body: map[string]any{"source": "stripe", "event_id": "e1"}},
		{method: "GET", path: "/v1/claims/00000000-0000-4000-8000-000000000000", key: "wrong-key-0123456789"},
	} {
		b.fails(t, c, http.StatusUnauthorized, "unauthorized", "")
	}
	require.Zero(t, b.count(t, "claims"), "an unauthenticated claim writes nothing")

	who := b.ok(t, call{method: "GET", path: "/v1/whoami", key: keyA})
	require.Equal(t, tenantA, who.Tenant)
	require.False(t, who.Admin)

	key, info, err := auth.Create(b.ctx, b.pool, "tenant-db", "ci")
	require.NoError(t, err)
	who = b.ok(t, call{method: "GET", path: "/v1/whoami", key: key})
	require.Equal(t, "tenant-db", who.Tenant)
	w := b.won(t, key, map[string]any{"source": "stripe", "event_id": "evt_db"})
	_, err = b.ledger.Get(b.ctx, "tenant-db", w.ClaimID)
	require.NoError(t, err, "the claim belongs to the key's tenant")

	_, err = auth.Revoke(b.ctx, b.pool, info.ID)
	require.NoError(t, err)
	b.fails(t, call{method: "GET", path: "/v1/whoami", key: key}, http.StatusUnauthorized, "unauthorized", "")
	b.fails(t, call{method: "GET", path: "/v1/claims/" + w.ClaimID, key: key}, http.StatusUnauthorized, "unauthorized", "")
}

func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	secret := marker(t, "payload")
	a := b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_iso_a", "action": "send-email",
		"payload": map[string]any{"card": secret}})
	u := b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_iso_u"})
	b.ok(t, call{method: "POST", path: "/v1/claims/" + u.ClaimID + "/fail", key: keyA,
		body: map[string]any{"claim_token": u.ClaimToken, "error": "timeout", "retry": "unknown"}})
	// The same key in tenant B is B's own record.
	own := b.won(t, keyB, map[string]any{"source": "stripe", "event_id": "evt_iso_a", "action": "send-email"})
	require.NotEqual(t, a.ClaimID, own.ClaimID)

	snapshot := func(id string) string {
		return stableRecord(t, b.do(t, call{method: "GET", path: "/v1/claims/" + id, key: keyA}).body)
	}
	beforeA, beforeU := snapshot(a.ClaimID), snapshot(u.ClaimID)
	leaks := []string{secret, a.EventID, a.IdempotencyKey, a.PayloadHash, a.ClaimToken, tenantA, "send-email"}

	for _, target := range []answer{a, u} {
		id := "/v1/claims/" + target.ClaimID
		for _, c := range []call{
			{method: "GET", path: id},
			{method: "POST", path: id + "/complete", body: map[string]any{"claim_token": target.ClaimToken, "result_ref": "stolen"}},
			{method: "POST", path: id + "/fail", body: map[string]any{"claim_token": target.ClaimToken, "error": "x", "retry": "permanent"}},
			{method: "POST", path: id + "/extend", body: map[string]any{"claim_token": target.ClaimToken, "lease_seconds": 600}},
			{method: "POST", path: id + "/resolve", body: map[string]any{"outcome": "completed", "note": "mine now"}},
			{method: "POST", path: id + "/release", body: map[string]any{"note": "mine now"}},
		} {
			c.key = keyB
			r := b.do(t, c)
			require.Equal(t, http.StatusNotFound, r.status, "%s %s: %s", c.method, c.path, r)
			for _, leak := range leaks {
				require.NotContains(t, string(r.body), leak, "%s %s", c.method, c.path)
			}
		}
	}
	r := b.do(t, call{method: "GET", path: "/v1/claims?source=stripe&event_id=evt_iso_u", key: keyB})
	require.Equal(t, http.StatusNotFound, r.status, "%s", r)
	for _, leak := range leaks {
		require.NotContains(t, string(r.body), leak)
	}
	// B's lookup of the shared key finds B's record, not A's.
	mine := b.ok(t, call{method: "GET", path: "/v1/claims?source=stripe&event_id=evt_iso_a&action=send-email", key: keyB})
	require.Equal(t, own.ClaimID, mine.ClaimID)
	require.Empty(t, mine.PayloadHash)

	require.JSONEq(t, beforeA, snapshot(a.ClaimID), "A's record is unchanged")
	require.JSONEq(t, beforeU, snapshot(u.ClaimID), "A's record is unchanged")
	// A can still finish its own claim.
	done := b.ok(t, call{method: "POST", path: "/v1/claims/" + a.ClaimID + "/complete", key: keyA,
		body: map[string]any{"claim_token": a.ClaimToken}})
	require.Equal(t, "completed", done.State)
}

func TestLeaseLost(t *testing.T) {
	t.Parallel()
	b := setup(t, reclaimSources("stripe"))
	body := map[string]any{"source": "stripe", "event_id": "evt_lease", "lease_seconds": 60}
	first := b.won(t, keyA, body)
	b.expireLease(t, first.ClaimID)
	second := b.won(t, keyA, body)
	require.Equal(t, first.ClaimID, second.ClaimID)
	require.Equal(t, 2, second.Attempt)
	require.NotEqual(t, first.ClaimToken, second.ClaimToken)

	id := "/v1/claims/" + first.ClaimID
	for _, c := range []call{
		{method: "POST", path: id + "/complete", body: map[string]any{"claim_token": first.ClaimToken, "result_ref": "late"}},
		{method: "POST", path: id + "/fail", body: map[string]any{"claim_token": first.ClaimToken, "error": "late", "retry": "retryable"}},
		{method: "POST", path: id + "/extend", body: map[string]any{"claim_token": first.ClaimToken, "lease_seconds": 600}},
		{method: "POST", path: id + "/complete", body: map[string]any{"claim_token": "00000000-0000-4000-8000-000000000000"}},
	} {
		c.key = keyA
		a := b.fails(t, c, http.StatusConflict, "lease_lost", "")
		require.Contains(t, strings.ToLower(a.Error.Message), "lease lost")
	}
	done := b.ok(t, call{method: "POST", path: id + "/complete", key: keyA,
		body: map[string]any{"claim_token": second.ClaimToken, "result_ref": "inv_2"}})
	require.Equal(t, "completed", done.State)
	require.Equal(t, "inv_2", done.ResultRef)
	again := b.ok(t, call{method: "POST", path: id + "/complete", key: keyA,
		body: map[string]any{"claim_token": second.ClaimToken, "result_ref": "inv_2"}})
	require.Equal(t, "completed", again.State, "completing twice with the current token is idempotent")
	// The late holder still cannot report after completion.
	b.fails(t, call{method: "POST", path: id + "/complete", key: keyA,
		body: map[string]any{"claim_token": first.ClaimToken}}, http.StatusConflict, "lease_lost", "")
	dup := b.claim(t, keyA, body)
	require.Equal(t, "duplicate", dup.Outcome)
	require.Equal(t, "inv_2", dup.ResultRef)
}

func TestBodyTooLarge(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *options) { o.bodyLimit = 2048 })
	big := `{"source":"stripe","event_id":"evt_big","payload":"` + strings.Repeat("x", 4096) + `"}`
	b.fails(t, call{method: "POST", path: "/v1/claims", key: keyA, body: big}, http.StatusRequestEntityTooLarge, "body_too_large", "")
	b.fails(t, call{method: "POST", path: "/v1/claims/batch", key: keyA, body: `{"claims":[` + big + `]}`},
		http.StatusRequestEntityTooLarge, "body_too_large", "")

	// A compressed body is limited by its decoded size: 1 MiB of JSON
	// whitespace gzips to about a kilobyte.
	bomb := gzipped(t, `{"source":"stripe","event_id":"evt_bomb"`+strings.Repeat(" ", 1<<20)+`}`)
	require.Less(t, len(bomb), 2048)
	b.fails(t, call{method: "POST", path: "/v1/claims", key: keyA, body: bomb, lax: true,
		header: map[string]string{"Content-Encoding": "gzip"}}, http.StatusRequestEntityTooLarge, "body_too_large", "")
	b.fails(t, call{method: "POST", path: "/v1/claims", key: keyA, body: `{"source":"stripe","event_id":"e"}`,
		header: map[string]string{"Content-Encoding": "compress"}}, http.StatusBadRequest, "malformed", "Content-Encoding")
	b.fails(t, call{method: "POST", path: "/v1/claims", key: keyA, body: `{"source":"stripe","event_id":"e"}`,
		header: map[string]string{"Content-Encoding": "gzip"}}, http.StatusBadRequest, "malformed", "Content-Encoding")
	require.Zero(t, b.count(t, "claims"))

	// A small compressed body is still accepted.
	r := b.ok(t, call{method: "POST", path: "/v1/claims", key: keyA, lax: true,
		body:   gzipped(t, `{"source":"stripe","event_id":"evt_gz"}`),
		header: map[string]string{"Content-Encoding": "gzip"}})
	require.Equal(t, "won", r.Outcome)
	require.Equal(t, "evt_gz", r.EventID)
}

func gzipped(t *testing.T, s string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	require.NoError(t, err)
	_, err = zw.Write([]byte(s))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

func TestBatchDecidesEachItemInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	done := b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_done"})
	b.ok(t, call{method: "POST", path: "/v1/claims/" + done.ClaimID + "/complete", key: keyA,
		body: map[string]any{"claim_token": done.ClaimToken, "result_ref": "ref_done"}})

	res := b.ok(t, call{method: "POST", path: "/v1/claims/batch", key: keyA, lax: true, body: `{"claims":[
		{"source":"stripe","event_id":"evt_z"},
		{"event_id":"evt_no_source"},
		{"source":"stripe","event_id":"evt_done"},
		{"source":"stripe","event_id":"evt_z"},
		{"source":"stripe","event_id":"evt_y","lease_seconds":"60"},
		7,
		{"source":"stripe","event_id":"evt_x","colour":"red"},
		{"source":"stripe","key_parts":["invoice.paid","in_1"]}
	]}`})
	require.Len(t, res.Results, 8)
	type item struct{ outcome, code, field string }
	got := make([]item, len(res.Results))
	for i, r := range res.Results {
		if r.Error != nil {
			require.Empty(t, r.ClaimID, "an error item carries no claim data")
			got[i] = item{code: r.Error.Code, field: r.Error.Field}
			continue
		}
		got[i] = item{outcome: r.Outcome}
	}
	require.Equal(t, []item{
		{outcome: "won"},
		{code: "invalid", field: "claims[1].source"},
		{outcome: "duplicate"},
		{outcome: "in_progress"},
		{code: "malformed", field: "claims[4].lease_seconds"},
		{code: "malformed", field: "claims[5]"},
		{code: "malformed", field: "claims[6].colour"},
		{outcome: "won"},
	}, got)
	require.Equal(t, "evt_z", res.Results[0].EventID)
	require.NotEmpty(t, res.Results[0].ClaimToken)
	require.Equal(t, "ref_done", res.Results[2].ResultRef)
	require.Empty(t, res.Results[3].ClaimToken)
	require.Equal(t, res.Results[0].ClaimID, res.Results[3].ClaimID)
	require.Equal(t, "12:invoice.paid|4:in_1", res.Results[7].EventID)
	require.Equal(t, 3, b.count(t, "claims"), "evt_done, evt_z and the key_parts claim; nothing for invalid items")

	// Item errors from the ledger's own validation are prefixed too.
	res = b.ok(t, call{method: "POST", path: "/v1/claims/batch", key: keyA, lax: true, body: `{"claims":[
		{"source":"stripe","event_id":"evt_w","object_id":"o"},
		{"source":"bad source","event_id":"evt_w"},
		{"source":"stripe","event_id":"evt_w","lease_seconds":86401}
	]}`})
	require.Len(t, res.Results, 3)
	for i, field := range []string{"claims[0].object_version", "claims[1].source", "claims[2].lease_seconds"} {
		require.NotNil(t, res.Results[i].Error, "item %d", i)
		require.Equal(t, "invalid", res.Results[i].Error.Code)
		require.Equal(t, field, res.Results[i].Error.Field)
	}
	require.Equal(t, 3, b.count(t, "claims"))
}

func TestLogsCarryNoSecrets(t *testing.T) {
	t.Parallel()
	staticKey := marker(t, "statickey")
	b := setup(t, func(o *options) {
		o.static = append(o.static, auth.StaticKey{Tenant: "tenant-log", Key: staticKey})
	})
	dbKey, _, err := auth.Create(b.ctx, b.pool, "tenant-log", "log test")
	require.NoError(t, err)
	wrongKey := marker(t, "wrongkey")
	payload, eventID, part, field := marker(t, "payload"), marker(t, "eventid"), marker(t, "keypart"), marker(t, "keyfield")
	failMsg, note, ref, exec := marker(t, "failerror"), marker(t, "note"), marker(t, "resultref"), marker(t, "exec")
	secrets := []string{staticKey, dbKey, wrongKey, payload, eventID, part, field, failMsg, note, ref, exec}

	body := map[string]any{"source": "stripe", "event_id": eventID, "execution_id": exec,
		"payload": map[string]any{"card": payload, "nested": []any{payload}}}
	w := b.won(t, staticKey, body)
	require.Equal(t, "in_progress", b.claim(t, dbKey, map[string]any{"source": "stripe", "event_id": eventID}).Outcome)
	b.claim(t, staticKey, body)
	changed := map[string]any{"source": "stripe", "event_id": eventID, "payload": map[string]any{"card": payload + "x"}}
	kp := b.won(t, staticKey, map[string]any{"source": "stripe", "key_parts": []string{part, "1"}})
	kf := b.won(t, dbKey, map[string]any{"source": "stripe", "key_fields": map[string]any{"email": field}})
	b.ok(t, call{method: "POST", path: "/v1/claims/batch", key: staticKey, lax: true, body: map[string]any{"claims": []any{
		body, map[string]any{"source": "stripe", "event_id": eventID, "payload": payload, "payload_hash": "x"},
	}}})
	b.ok(t, call{method: "POST", path: "/v1/claims/" + w.ClaimID + "/extend", key: staticKey,
		body: map[string]any{"claim_token": w.ClaimToken, "lease_seconds": 120}})
	b.ok(t, call{method: "POST", path: "/v1/claims/" + w.ClaimID + "/complete", key: staticKey,
		body: map[string]any{"claim_token": w.ClaimToken, "result_ref": ref}})
	require.Equal(t, "conflict", b.claim(t, staticKey, changed).Outcome)
	b.ok(t, call{method: "POST", path: "/v1/claims/" + kp.ClaimID + "/fail", key: staticKey,
		body: map[string]any{"claim_token": kp.ClaimToken, "error": failMsg, "retry": "permanent"}})
	b.ok(t, call{method: "POST", path: "/v1/claims/" + kp.ClaimID + "/resolve", key: staticKey,
		body: map[string]any{"outcome": "completed", "note": note, "result_ref": ref}})
	b.ok(t, call{method: "GET", path: "/v1/claims?source=stripe&event_id=" + eventID, key: dbKey})
	// Error paths: wrong key, lease lost, invalid input echoing secrets, not found.
	b.fails(t, call{method: "GET", path: "/v1/whoami", key: wrongKey}, 401, "unauthorized", "")
	b.fails(t, call{method: "POST", path: "/v1/claims/" + kf.ClaimID + "/complete", key: dbKey,
		body: map[string]any{"claim_token": w.ClaimToken, "result_ref": ref}}, 409, "lease_lost", "")
	b.fails(t, call{method: "POST", path: "/v1/claims", key: staticKey,
		body: `{"source":"stripe","event_id":"` + eventID + `","` + field + `":"` + payload + `"}`}, 400, "malformed", field)
	b.fails(t, call{method: "POST", path: "/v1/claims", key: staticKey,
		body: `{"source":"stripe","event_id":"` + eventID + `","payload":{"card":"` + payload + `"}`}, 400, "malformed", "")
	b.fails(t, call{method: "GET", path: "/v1/claims?source=stripe&event_id=" + eventID, key: keyB}, 404, "not_found", "")

	// An internal error: the delivery log table is gone, so the claim
	// statement fails inside PostgreSQL.
	_, err = b.pool.Exec(b.ctx, `ALTER TABLE claim_deliveries RENAME TO claim_deliveries_gone`)
	require.NoError(t, err)
	b.fails(t, call{method: "POST", path: "/v1/claims", key: staticKey, body: body}, 500, "internal", "")
	// The database goes away: the key check (cache TTL 0) cannot be made.
	b.pool.Close()
	r := b.do(t, call{method: "POST", path: "/v1/claims", key: dbKey, body: body})
	require.Equal(t, 503, r.status, "%s", r)
	require.Equal(t, "1", r.header.Get("Retry-After"))
	r = b.do(t, call{method: "POST", path: "/v1/claims/" + kf.ClaimID + "/complete", key: staticKey,
		body: map[string]any{"claim_token": kf.ClaimToken, "result_ref": ref}})
	require.GreaterOrEqual(t, r.status, 500, "%s", r)

	logs := b.logs.String()
	require.Contains(t, logs, `"message":"internal error"`)
	require.Contains(t, logs, `"message":"dependency unavailable"`)
	require.Contains(t, logs, `"status":500`)
	require.Contains(t, logs, `"status":503`)
	require.Contains(t, logs, `"tenant":"tenant-log"`)
	for _, s := range secrets {
		require.NotContains(t, logs, s)
	}
	for _, tok := range []string{w.ClaimToken, kp.ClaimToken, kf.ClaimToken} {
		require.NotContains(t, logs, tok, "claim token in the log")
	}
}

func TestAdminKeyActsForXTenant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fails(t, call{method: "GET", path: "/v1/whoami", key: keyAdmin}, 422, "invalid", "X-Tenant")
	b.fails(t, call{method: "POST", path: "/v1/claims", key: keyAdmin, body: map[string]any{"source": "stripe", "event_id": "e"}},
		422, "invalid", "X-Tenant")
	b.fails(t, call{method: "GET", path: "/v1/whoami", key: keyAdmin, header: map[string]string{"X-Tenant": "not a tenant"}},
		422, "invalid", "X-Tenant")
	require.Zero(t, b.count(t, "claims"))

	asA := map[string]string{"X-Tenant": tenantA}
	who := b.ok(t, call{method: "GET", path: "/v1/whoami", key: keyAdmin, header: asA})
	require.Equal(t, tenantA, who.Tenant)
	require.True(t, who.Admin)

	// A claim made by the admin for tenant A is A's.
	byAdmin := b.ok(t, call{method: "POST", path: "/v1/claims", key: keyAdmin, header: asA,
		body: map[string]any{"source": "stripe", "event_id": "evt_admin"}})
	require.Equal(t, "won", byAdmin.Outcome)
	_, err := b.ledger.Get(b.ctx, tenantA, byAdmin.ClaimID)
	require.NoError(t, err)
	seen := b.ok(t, call{method: "GET", path: "/v1/claims/" + byAdmin.ClaimID, key: keyA})
	require.Equal(t, byAdmin.IdempotencyKey, seen.IdempotencyKey)
	b.fails(t, call{method: "GET", path: "/v1/claims/" + byAdmin.ClaimID, key: keyB}, 404, "not_found", "")

	// A's own claim: the admin acting for A completes it; acting for B it sees nothing.
	own := b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_a"})
	b.fails(t, call{method: "GET", path: "/v1/claims/" + own.ClaimID, key: keyAdmin, header: map[string]string{"X-Tenant": tenantB}},
		404, "not_found", "")
	done := b.ok(t, call{method: "POST", path: "/v1/claims/" + own.ClaimID + "/complete", key: keyAdmin, header: asA,
		body: map[string]any{"claim_token": own.ClaimToken, "result_ref": "by_admin"}})
	require.Equal(t, "completed", done.State)
	// X-Tenant from a tenant key is ignored: it cannot switch tenants.
	who = b.ok(t, call{method: "GET", path: "/v1/whoami", key: keyB, header: asA})
	require.Equal(t, tenantB, who.Tenant)
	b.fails(t, call{method: "GET", path: "/v1/claims/" + own.ClaimID, key: keyB, header: asA}, 404, "not_found", "")
}

func TestListClaims(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var want []string
	for i := 0; i < 3; i++ {
		w := b.won(t, keyA, map[string]any{"source": "stripe", "event_id": fmt.Sprint("evt_", i)})
		b.ok(t, call{method: "POST", path: "/v1/claims/" + w.ClaimID + "/fail", key: keyA,
			body: map[string]any{"claim_token": w.ClaimToken, "error": "timeout", "retry": "unknown"}})
		want = append(want, w.ClaimID)
	}
	b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_processing"})
	ow := b.won(t, keyB, map[string]any{"source": "stripe", "event_id": "evt_0"})
	b.ok(t, call{method: "POST", path: "/v1/claims/" + ow.ClaimID + "/fail", key: keyB,
		body: map[string]any{"claim_token": ow.ClaimToken, "error": "timeout", "retry": "unknown"}})

	list := func(key, query string) listReply {
		t.Helper()
		r := b.do(t, call{method: "GET", path: "/v1/claims/list?" + query, key: key})
		require.Equal(t, http.StatusOK, r.status, "%s", r)
		require.NotContains(t, string(r.body), `"deliveries"`)
		return decodeAs[listReply](t, r)
	}
	var got []string
	cursor := ""
	for pages := 1; ; pages++ {
		require.LessOrEqual(t, pages, 2)
		page := list(keyA, "state=unknown&source=stripe&limit=2&cursor="+cursor)
		for _, c := range page.Claims {
			require.Equal(t, "unknown", c.State)
			got = append(got, c.ClaimID)
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	require.Equal(t, want, got, "oldest first, each once")
	other := list(keyB, "state=unknown")
	require.Len(t, other.Claims, 1)
	require.Equal(t, ow.ClaimID, other.Claims[0].ClaimID)
	require.Empty(t, list(keyA, "state=unknown&source=github").Claims)
	empty := decodeAs[map[string]json.RawMessage](t, b.do(t, call{method: "GET", path: "/v1/claims/list?state=received", key: keyA}))
	require.Equal(t, map[string]json.RawMessage{"claims": json.RawMessage("[]")}, empty, "an empty page: an empty array, no cursor")

	for _, tc := range []struct{ query, field string }{
		{"", "state"},
		{"source=stripe", "state"},
		{"state=completed", "state"},
		{"state=stale", "state"},
		{"state=bogus", "state"},
		{"state=unknown&source=-bad", "source"},
		{"state=unknown&limit=0", "limit"},
		{"state=unknown&limit=501", "limit"},
		{"state=unknown&limit=ten", "limit"},
		{"state=unknown&limit=-1", "limit"},
		{"state=unknown&cursor=nope", "cursor"},
		{"state=unknown&cursor=%25%25", "cursor"},
	} {
		b.fails(t, call{method: "GET", path: "/v1/claims/list?" + tc.query, key: keyA}, http.StatusUnprocessableEntity, "invalid", tc.field)
	}
	b.fails(t, call{method: "GET", path: "/v1/claims/list?state=unknown"}, http.StatusUnauthorized, "unauthorized", "")
}

// An id the caller sent is never echoed in a not-found answer, on any
// route that takes one: a well-formed UUID no record has, and a string
// that is no UUID at all (both 404 with a fixed message).
func TestUnknownIDsAreNotEchoed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	noRecord := "0b4f2e10-dead-4000-8000-00000000e0e0"
	notUUID := marker(t, "id")
	for _, id := range []string{noRecord, notUUID} {
		path := "/v1/claims/" + id
		for _, c := range []call{
			{method: "GET", path: path},
			{method: "POST", path: path + "/complete", body: map[string]any{"claim_token": noRecord, "result_ref": "r"}},
			{method: "POST", path: path + "/fail", body: map[string]any{"claim_token": noRecord, "error": "x", "retry": "permanent"}},
			{method: "POST", path: path + "/extend", body: map[string]any{"claim_token": noRecord, "lease_seconds": 600}},
			{method: "POST", path: path + "/resolve", body: map[string]any{"outcome": "completed", "note": "n"}},
			{method: "POST", path: path + "/release", body: map[string]any{"note": "n"}},
			{method: "POST", path: "/v1/claims/complete/batch", body: map[string]any{"items": []any{
				map[string]any{"claim_id": id, "claim_token": noRecord, "result_ref": "r"}}}},
			{method: "GET", path: "/v1/inbox/" + id},
			{method: "POST", path: "/v1/inbox/" + id + "/replay", body: map[string]any{"note": "n"}},
		} {
			c.key = keyA
			r := b.do(t, c)
			require.Less(t, r.status, 500, "%s %s: %s", c.method, c.path, r)
			require.GreaterOrEqual(t, r.status, 400, "%s %s: %s", c.method, c.path, r)
			require.NotContains(t, string(r.body), id, "%s %s echoes the id", c.method, c.path)
		}
	}
}
