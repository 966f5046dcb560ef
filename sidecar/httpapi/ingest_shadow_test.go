package httpapi_test

import (
	"context"
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

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/httpapi"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/metrics"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// Shadow mode on the ingest door: every verified copy is passed through to
// forward.url and n8n's answer relayed; each event is claimed as a shadow
// claim, the copy that would have won settled by the forward's answer;
// nothing is stored in the inbox and nothing dispatched. Turning shadow
// off enforces against the records written in shadow.

// shadowN8n is the n8n stand-in: it counts posts and answers by event id
// (the body's "id"): evt_fail 503 with Retry-After, evt_slow never (until
// the request ends), anything else 200 with a JSON body.
type shadowN8n struct {
	srv  *httptest.Server
	mu   sync.Mutex
	got  []ingestCaptured
	done chan struct{}
}

func newShadowN8n(t *testing.T) *shadowN8n {
	t.Helper()
	n := &shadowN8n{done: make(chan struct{})}
	n.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n.mu.Lock()
		n.got = append(n.got, ingestCaptured{at: time.Now(), header: r.Header.Clone(), body: body})
		n.mu.Unlock()
		switch {
		case strings.Contains(string(body), `"evt_slow"`):
			select { // no answer: claimd's forward timeout ends the request
			case <-r.Context().Done():
			case <-n.done:
			}
			return
		case strings.Contains(string(body), `"evt_fail"`):
			w.Header().Set("Retry-After", "7")
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("n8n is failing"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "http://n8n.internal/elsewhere")
		_, _ = w.Write([]byte(`{"message":"Workflow was started"}`))
	}))
	t.Cleanup(func() { close(n.done); n.srv.Close() })
	return n
}

func (n *shadowN8n) posts() []ingestCaptured {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]ingestCaptured(nil), n.got...)
}

// shadowDoorSources: door and door-slow (forward.timeout_seconds 1) and
// graph-door (batches), in shadow or enforcing, forwarding to the
// stand-in, and door-down forwarding to a closed port.
func shadowDoorSources(shadow bool) string {
	return fmt.Sprintf(`
sources:
  door:
    tenant: acme
    provider: stripe
    secrets: ["%[1]s"]
    shadow: %[2]t
    forward: {url: "${N8N_URL}", headers: {X-N8n-Auth: "hook-token"}}
  door-slow:
    tenant: acme
    provider: stripe
    secrets: ["%[1]s"]
    shadow: %[2]t
    forward: {url: "${N8N_URL}", timeout_seconds: 1}
  graph-door:
    tenant: acme
    provider: msgraph
    secrets: ["shadow-graph-client-state"]
    shadow: %[2]t
    forward: {url: "${N8N_URL}"}
  door-down:
    tenant: acme
    provider: stripe
    secrets: ["%[1]s"]
    shadow: %[2]t
    forward: {url: "${DOWN_URL}"}
`, causeStripeSecret, shadow)
}

type shadowDoorEnv struct {
	*shadowEnv
	n8n *shadowN8n
	env func(string) string
}

func setupShadowDoor(t *testing.T) *shadowDoorEnv {
	t.Helper()
	ctx := context.Background()
	n8n := newShadowN8n(t)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := "http://" + closed.Addr().String() + "/webhook/x"
	require.NoError(t, closed.Close())
	env := func(k string) string {
		return map[string]string{"N8N_URL": n8n.srv.URL + "/webhook/stripe", "DOWN_URL": down}[k]
	}
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 8 })
	cfg, err := sources.Parse([]byte(shadowDoorSources(true)), env)
	require.NoError(t, err)
	logs := &ingestLogBuffer{}
	log := zerolog.New(logs).Level(zerolog.DebugLevel).With().Timestamp().Logger()
	var ledger *claim.Ledger
	met := metrics.New(func(ctx context.Context) (claim.Stats, error) { return ledger.Stats(ctx) })
	ledger, err = claim.New(pool, claim.Config{Policies: claim.Policies{BySource: cfg.Policies}, Observer: met})
	require.NoError(t, err)
	in, err := inbox.New(inbox.Options{Pool: pool, Ledger: ledger, Config: cfg, Logger: log, Observer: met})
	require.NoError(t, err)
	srv := httpapi.New(httpapi.Config{Ledger: ledger, Logger: log, Inbox: in, Metrics: met,
		Keys: auth.NewKeys(pool, []auth.StaticKey{{Tenant: ingestTenant, Key: ingestAPIKey}}, time.Minute)})
	ln := serveAPI(t, srv)
	return &shadowDoorEnv{shadowEnv: &shadowEnv{causeEnv: &causeEnv{ingestEnv: &ingestEnv{ctx: ctx, pool: pool, inbox: in,
		base: "http://" + ln.Addr().String(), logs: logs, server: srv, client: &http.Client{Timeout: ingestWait}}, met: met},
		ledger: ledger}, n8n: n8n, env: env}
}

// enforceDoor reloads with shadow off, as claimd's reload installs it.
func (e *shadowDoorEnv) enforceDoor(t *testing.T) {
	t.Helper()
	cfg, err := sources.Parse([]byte(shadowDoorSources(false)), e.env)
	require.NoError(t, err)
	require.NoError(t, e.inbox.Reload(e.ctx, cfg))
	require.NoError(t, e.ledger.SetPolicies(claim.Policies{BySource: cfg.Policies}))
}

// wouldBe counts the delivery-log entries of scope's records by outcome,
// shadow ones as "<outcome> (shadow)".
func (e *shadowDoorEnv) wouldBe(t *testing.T, scope string) map[string]int {
	t.Helper()
	rows, err := e.pool.Query(e.ctx, `SELECT d.outcome || CASE WHEN d.shadow THEN ' (shadow)' ELSE '' END, count(*)
		FROM claim_deliveries d JOIN claims c ON c.id = d.claim_id WHERE c.tenant = 'acme' AND c.source = $1 GROUP BY 1`, scope)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var o string
		var n int
		require.NoError(t, rows.Scan(&o, &n))
		out[o] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// stored is what a shadow delivery must never write: inbox rows and
// dispatch jobs.
func (e *shadowDoorEnv) stored(t *testing.T) [2]int {
	t.Helper()
	var c [2]int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT (SELECT count(*) FROM inbox_events),
		(SELECT count(*) FROM river_job WHERE kind = 'claimd_inbox_dispatch')`).Scan(&c[0], &c[1]))
	return c
}

func (e *shadowDoorEnv) record(t *testing.T, eventID string) claim.Record {
	t.Helper()
	return e.recordOf(t, "door", eventID)
}

func (e *shadowDoorEnv) recordOf(t *testing.T, source, eventID string) claim.Record {
	t.Helper()
	rec, err := e.ledger.Find(e.ctx, ingestTenant, claim.Key{Source: source, EventID: eventID})
	require.NoError(t, err)
	return rec
}

// TestIngestShadowPassThrough: 3 events × 4 copies at once through a door
// in shadow: 12 forwards, each answered with n8n's answer; 3 would-be wins
// (completed by their forward's 2xx), 9 would-be copies; nothing stored.
// A changed payload is a would-be conflict, still forwarded; a bad
// signature is refused and not forwarded. Enforcing afterwards: the next
// copy is a duplicate, not dispatched, and another payload a conflict.
func TestIngestShadowPassThrough(t *testing.T) {
	t.Parallel()
	e := setupShadowDoor(t)
	now := signNow()
	type sent struct {
		body string
		ans  ingestAnswer
	}
	var wg sync.WaitGroup
	answers := make([]sent, 12)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := stripeEvent(fmt.Sprintf("evt_pass_%d", i%3), 100)
			answers[i] = sent{body: body, ans: e.send(t, "door", causeStripe(now+int64(i/3), body))}
		}()
	}
	wg.Wait()
	for i, a := range answers {
		require.Equal(t, http.StatusOK, a.ans.status, "copy %d: n8n's status relayed", i)
		require.Equal(t, `{"message":"Workflow was started"}`, string(a.ans.body), "copy %d: n8n's body relayed", i)
		require.Equal(t, "application/json", a.ans.header.Get("Content-Type"))
		require.Empty(t, a.ans.header.Get("Location"), "only Content-Type and Retry-After are relayed")
	}
	posts := e.n8n.posts()
	require.Len(t, posts, 12, "every copy is forwarded")
	bodies := map[string]int{}
	for _, p := range posts {
		bodies[string(p.body)]++
		require.NotEmpty(t, p.header.Get("Stripe-Signature"), "the provider's headers pass through")
		require.Equal(t, "hook-token", p.header.Get("X-N8n-Auth"), "forward.headers are sent")
		require.Equal(t, "door", p.header.Get(inbox.HeaderSource))
		require.True(t, strings.HasPrefix(p.header.Get(inbox.HeaderEventID), "evt_pass_"))
		require.NotEmpty(t, p.header.Get(inbox.HeaderIdempotencyKey))
		require.Empty(t, p.header.Get(inbox.HeaderInboxID), "no inbox record")
		require.Empty(t, p.header.Get(inbox.HeaderAttempt), "no dispatch")
	}
	for i := 0; i < 3; i++ {
		require.Equal(t, 4, bodies[stripeEvent(fmt.Sprintf("evt_pass_%d", i), 100)], "the raw body, byte for byte")
	}
	log := e.wouldBe(t, "door")
	require.Equal(t, 3, log["won (shadow)"], "%v", log)
	require.Equal(t, 9, log["duplicate (shadow)"]+log["in_progress (shadow)"], "%v", log)
	require.Equal(t, 3, log["completed"], "%v", log)
	require.Equal(t, 3.0, e.shadowMetric(t, "door", "won"))
	require.Equal(t, 9.0, e.shadowMetric(t, "door", "duplicate")+e.shadowMetric(t, "door", "in_progress"))
	for i := 0; i < 3; i++ {
		rec := e.record(t, fmt.Sprintf("evt_pass_%d", i))
		require.Equal(t, claim.StateCompleted, rec.State)
		require.Equal(t, "forward: HTTP 200", rec.ResultRef)
	}
	require.Equal(t, [2]int{0, 0}, e.stored(t), "no inbox row, no dispatch job")

	// The rollup counts them: 12 deliveries, 9 would-be duplicates.
	_, _, err := e.ledger.RollupStats(e.ctx, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	hours, err := e.ledger.SourceStats(e.ctx, ingestTenant, "door", time.Now().Add(-2*time.Hour), time.Now().Add(time.Hour))
	require.NoError(t, err)
	var deliveries, would int64
	for _, h := range hours {
		deliveries, would = deliveries+h.Deliveries, would+h.WouldDuplicates
	}
	require.Equal(t, int64(12), deliveries)
	require.Equal(t, int64(9), would)

	// A changed payload with the same key: a would-be conflict, forwarded.
	changed := e.send(t, "door", causeStripe(now+10, stripeEvent("evt_pass_0", 999)))
	require.Equal(t, http.StatusOK, changed.status, "%s", changed.body)
	require.Len(t, e.n8n.posts(), 13)
	require.Equal(t, 1, e.wouldBe(t, "door")["conflict (shadow)"])
	require.Equal(t, 1, e.record(t, "evt_pass_0").ConflictCount)

	// A bad signature: refused as the door refuses it, never forwarded.
	forged := causeStripe(now+11, stripeEvent("evt_pass_9", 100))
	forged.body = []byte(stripeEvent("evt_pass_9", 1))
	bad := e.send(t, "door", forged)
	require.Equal(t, http.StatusUnauthorized, bad.status)
	require.Len(t, e.n8n.posts(), 13, "shadow still refuses what it could not verify")
	_, err = e.ledger.Find(e.ctx, ingestTenant, claim.Key{Source: "door", EventID: "evt_pass_9"})
	require.Equal(t, apperr.NotFound, apperr.CodeOf(err))

	// Enforcing: the next copy of an event seen in shadow is a duplicate,
	// neither forwarded nor queued for dispatch.
	e.enforceDoor(t)
	id := e.ingestOne(t, "door", causeStripe(now+12, stripeEvent("evt_pass_1", 100)), "duplicate")
	require.Equal(t, e.record(t, "evt_pass_1").ID, id)
	require.Len(t, e.n8n.posts(), 13)
	require.Equal(t, [2]int{0, 0}, e.stored(t), "not dispatched again")
	// Another payload with a key seen in shadow is a conflict: the door
	// compares with the payload seen in shadow, not with its first copy.
	e.ingestOne(t, "door", causeStripe(now+12, stripeEvent("evt_pass_2", 777)), "conflict")
	e.ingestOne(t, "door", causeStripe(now+12, stripeEvent("evt_pass_2", 100)), "duplicate")
	require.Equal(t, [2]int{0, 0}, e.stored(t))
	// A new event is stored and queued as the door does when enforcing.
	e.ingestOne(t, "door", causeStripe(now+13, stripeEvent("evt_new", 100)), "accepted")
	require.Equal(t, [2]int{1, 1}, e.stored(t))
}

// TestIngestShadowForwardFailures: n8n's failure is relayed (status,
// body, Retry-After) and fails the would-be winner retryable; no answer
// within forward.timeout_seconds answers 504, an unreachable target 502,
// both failing the claim retryable.
func TestIngestShadowForwardFailures(t *testing.T) {
	t.Parallel()
	e := setupShadowDoor(t)
	now := signNow()

	fail := e.send(t, "door", causeStripe(now, stripeEvent("evt_fail", 100)))
	require.Equal(t, http.StatusServiceUnavailable, fail.status)
	require.Equal(t, "n8n is failing", string(fail.body))
	require.Equal(t, "7", fail.header.Get("Retry-After"))
	rec := e.record(t, "evt_fail")
	require.Equal(t, claim.StateRetryableFailed, rec.State)
	require.Equal(t, "forward: HTTP 503", rec.LastError)

	slow := e.send(t, "door-slow", causeStripe(now, stripeEvent("evt_slow", 100)))
	require.Equal(t, http.StatusGatewayTimeout, slow.status, "%s", slow.body)
	require.Equal(t, "gateway_timeout", slow.errorCode(t))
	rec = e.recordOf(t, "door-slow", "evt_slow")
	require.Equal(t, claim.StateRetryableFailed, rec.State)
	require.Contains(t, rec.LastError, "no answer within forward.timeout_seconds (1)")

	down := e.send(t, "door-down", causeStripe(now, stripeEvent("evt_down", 100)))
	require.Equal(t, http.StatusBadGateway, down.status, "%s", down.body)
	require.Equal(t, "bad_gateway", down.errorCode(t))
	rec = e.recordOf(t, "door-down", "evt_down")
	require.Equal(t, claim.StateRetryableFailed, rec.State)
	require.Equal(t, "forward: forward.url unreachable", rec.LastError)
	require.NotContains(t, e.logs.String(), causeStripeSecret)
	require.Equal(t, [2]int{0, 0}, e.stored(t))
}

// TestIngestShadowBatch: a delivery of several events (a Microsoft Graph
// batch) is forwarded once, as the provider sent it, without the
// per-event idempotency headers; each event is its own shadow claim.
func TestIngestShadowBatch(t *testing.T) {
	t.Parallel()
	e := setupShadowDoor(t)
	item := func(id string) string {
		return `{"subscriptionId":"sub_1","id":"` + id + `","clientState":"shadow-graph-client-state","changeType":"created",` +
			`"resource":"users/u_1","tenantId":"t_1","resourceData":{"id":"u_1"}}`
	}
	body := `{"value":[` + item("n_1") + `,` + item("n_2") + `]}`
	batch := ingestDelivery{header: jsonHeaders(), body: []byte(body)}
	for i := 0; i < 2; i++ {
		ans := e.send(t, "graph-door", batch)
		require.Equal(t, http.StatusOK, ans.status, "n8n's status, not the door's 202: %s", ans.body)
	}
	posts := e.n8n.posts()
	require.Len(t, posts, 2, "one forward per delivery")
	for _, p := range posts {
		require.Equal(t, body, string(p.body))
		require.Empty(t, p.header.Get(inbox.HeaderIdempotencyKey), "no one key names a batch")
		require.Empty(t, p.header.Get(inbox.HeaderEventID))
	}
	log := e.wouldBe(t, "graph-door")
	require.Equal(t, 2, log["won (shadow)"], "%v", log)
	require.Equal(t, 2, log["duplicate (shadow)"], "%v", log)
	require.Equal(t, 2, log["completed"], "%v", log)
	require.Equal(t, [2]int{0, 0}, e.stored(t))
}
