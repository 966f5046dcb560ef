package httpapi_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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

	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/httpapi"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/metrics"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// Turning shadow off on an ingest door without losing an event: a record
// the door made in shadow that has no inbox row and is not settled (its
// forward failed, its attempts ran out, its lease ended without a settle)
// is adopted by the enforcing door's next copy of its payload: stored and
// queued for dispatch in that copy's transaction, exactly once however
// many copies race. A completed record stays a duplicate; a record whose
// forward is still in flight is a duplicate until the forward settles.

// adoptN8n is the n8n stand-in. A shadow forward (no X-Inbox-Id) is
// answered by the body's event id: evt_a and evt_x 500, evt_hold… when the
// test releases it (hold), anything else 200. A dispatch (X-Inbox-Id) is
// run as a workflow with an Idempotent Claim node: it claims the key it is
// sent (X-Idempotency-Source, -Event-Id), and only a won claim runs the
// effect (counted) and completes; it answers 200 either way.
type adoptN8n struct {
	srv     *httptest.Server
	ledger  *claim.Ledger
	mu      sync.Mutex
	posts   map[string]int // by event id and kind ("forward"/"dispatch")
	effects map[string]int // won workflow claims, by event id
	// held signals a held forward's arrival; release answers it.
	errs    []string
	held    chan string
	release chan int
}

func newAdoptN8n(t *testing.T) *adoptN8n {
	t.Helper()
	n := &adoptN8n{posts: map[string]int{}, effects: map[string]int{}, held: make(chan string, 8), release: make(chan int)}
	n.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id := r.Header.Get(inbox.HeaderEventID)
		if r.Header.Get(inbox.HeaderInboxID) == "" {
			n.count("forward", id)
			switch {
			case strings.HasPrefix(id, "evt_hold"):
				n.held <- id
				select {
				case st := <-n.release:
					w.WriteHeader(st)
				case <-r.Context().Done():
				}
			case id == "evt_a", id == "evt_x":
				w.WriteHeader(http.StatusInternalServerError)
			default:
				_, _ = w.Write([]byte(`{"message":"Workflow was started"}`))
			}
			return
		}
		n.count("dispatch", id)
		res, err := n.ledger.Claim(r.Context(), claim.Request{Tenant: ingestTenant,
			Key:         claim.Key{Source: r.Header.Get(inbox.HeaderSource), EventID: id},
			PayloadHash: workflowView(body), Lease: time.Minute})
		if err != nil {
			n.mu.Lock()
			n.errs = append(n.errs, err.Error())
			n.mu.Unlock()
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		if res.Outcome == claim.Won {
			n.mu.Lock()
			n.effects[id]++
			n.mu.Unlock()
			if _, err := n.ledger.Complete(r.Context(), ingestTenant, res.ID, res.Token, "workflow ran"); err != nil {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
		}
		_, _ = w.Write([]byte(`{"message":"Workflow was started"}`))
	}))
	t.Cleanup(n.srv.Close)
	return n
}

// workflowView is the workflow's payload hash of body: another view than
// the door's receipt hash (a workflow hashes what it reads).
func workflowView(body []byte) string {
	sum := sha256.Sum256(append([]byte("workflow view: "), body...))
	return hex.EncodeToString(sum[:])
}

func (n *adoptN8n) count(kind, id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.posts[kind+" "+id]++
}

func (n *adoptN8n) counts(kind, id string) (posts, effects int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.posts[kind+" "+id], n.effects[id]
}

// adoptSources: door (defaults: lease policy review), door-reclaim (lease
// policy reclaim) and door-one (max_attempts 1: a failed forward
// exhausts it), all forwarding to the stand-in, with require_claim on.
func adoptSources(shadow bool) string {
	return fmt.Sprintf(`
sources:
  door:
    tenant: acme
    provider: stripe
    secrets: ["%[1]s"]
    shadow: %[2]t
    forward: {url: "${N8N_URL}", backoff_base_seconds: 1, backoff_cap_seconds: 1}
  door-reclaim:
    tenant: acme
    provider: stripe
    secrets: ["%[1]s"]
    shadow: %[2]t
    lease_policy: reclaim
    forward: {url: "${N8N_URL}", backoff_base_seconds: 1, backoff_cap_seconds: 1}
  door-one:
    tenant: acme
    provider: stripe
    secrets: ["%[1]s"]
    shadow: %[2]t
    max_attempts: 1
    forward: {url: "${N8N_URL}", backoff_base_seconds: 1, backoff_cap_seconds: 1}
`, causeStripeSecret, shadow)
}

type adoptEnv struct {
	*shadowEnv
	n8n *adoptN8n
	env func(string) string
}

func setupAdopt(t *testing.T) *adoptEnv {
	t.Helper()
	ctx := context.Background()
	n8n := newAdoptN8n(t)
	env := func(k string) string {
		return map[string]string{"N8N_URL": n8n.srv.URL + "/webhook/stripe"}[k]
	}
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 24 })
	cfg, err := sources.Parse([]byte(adoptSources(true)), env)
	require.NoError(t, err)
	logs := &ingestLogBuffer{}
	log := zerolog.New(logs).Level(zerolog.DebugLevel).With().Timestamp().Logger()
	var ledger *claim.Ledger
	met := metrics.New(func(ctx context.Context) (claim.Stats, error) { return ledger.Stats(ctx) })
	ledger, err = claim.New(pool, claim.Config{Policies: claim.Policies{BySource: cfg.Policies}, Observer: met})
	require.NoError(t, err)
	n8n.ledger = ledger
	in, err := inbox.New(inbox.Options{Pool: pool, Ledger: ledger, Config: cfg, Logger: log, Observer: met,
		Dispatch: true, PollInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, in.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, in.Stop(sctx))
	})
	srv := httpapi.New(httpapi.Config{Ledger: ledger, Logger: log, Inbox: in, Metrics: met,
		Keys: auth.NewKeys(pool, []auth.StaticKey{{Tenant: ingestTenant, Key: ingestAPIKey}}, time.Minute)})
	ln := serveAPI(t, srv)
	return &adoptEnv{shadowEnv: &shadowEnv{causeEnv: &causeEnv{ingestEnv: &ingestEnv{ctx: ctx, pool: pool, inbox: in,
		base: "http://" + ln.Addr().String(), logs: logs, server: srv, client: &http.Client{Timeout: ingestWait}}, met: met},
		ledger: ledger}, n8n: n8n, env: env}
}

// enforce reloads with shadow off, as claimd's reload installs it.
func (e *adoptEnv) enforce(t *testing.T) {
	t.Helper()
	cfg, err := sources.Parse([]byte(adoptSources(false)), e.env)
	require.NoError(t, err)
	require.NoError(t, e.inbox.Reload(e.ctx, cfg))
	require.NoError(t, e.ledger.SetPolicies(claim.Policies{BySource: cfg.Policies}))
}

func (e *adoptEnv) find(t *testing.T, source, eventID string) claim.Record {
	t.Helper()
	rec, err := e.ledger.Find(e.ctx, ingestTenant, claim.Key{Source: source, EventID: eventID})
	require.NoError(t, err)
	return rec
}

// stored counts the inbox rows and dispatch jobs of one record.
func (e *adoptEnv) stored(t *testing.T, claimID string) [2]int {
	t.Helper()
	var c [2]int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT (SELECT count(*) FROM inbox_events WHERE claim_id = $1),
		(SELECT count(*) FROM river_job WHERE kind = 'claimd_inbox_dispatch' AND args->>'claim_id' = $2)`,
		claimID, claimID).Scan(&c[0], &c[1]))
	return c
}

// TestIngestShadowSwitchAdoptsFailedEvents: in shadow n8n answers 500 for
// evt_a and 200 for evt_b. After the switch to enforcing, 20 concurrent
// copies of evt_a: one is accepted (the record adopted: its inbox row and
// one dispatch job), 19 are duplicates; the event is dispatched once and
// the workflow's claim wins once. evt_b's copy is a duplicate, neither
// stored nor dispatched; a copy of evt_a with another payload is a
// conflict, not adopted.
func TestIngestShadowSwitchAdoptsFailedEvents(t *testing.T) {
	t.Parallel()
	e := setupAdopt(t)
	now := signNow()
	a := e.send(t, "door", causeStripe(now, stripeEvent("evt_a", 100)))
	require.Equal(t, http.StatusInternalServerError, a.status, "n8n's 500 relayed in shadow")
	b := e.send(t, "door", causeStripe(now, stripeEvent("evt_b", 100)))
	require.Equal(t, http.StatusOK, b.status)
	recA := e.find(t, "door", "evt_a")
	require.Equal(t, claim.StateRetryableFailed, recA.State)
	require.Equal(t, claim.StateCompleted, e.find(t, "door", "evt_b").State)

	e.enforce(t)
	// Another payload of evt_a: a conflict, kept, not adopted.
	e.ingestOne(t, "door", causeStripe(now+1, stripeEvent("evt_a", 999)), "conflict")
	require.Equal(t, [2]int{0, 0}, e.stored(t, recA.ID))

	statuses, ids := make([]string, 20), make([]string, 20)
	var wg sync.WaitGroup
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ans := e.send(t, "door", causeStripe(now+1, stripeEvent("evt_a", 100)))
			if ans.status != http.StatusOK {
				statuses[i] = fmt.Sprintf("HTTP %d: %s", ans.status, ans.body)
				return
			}
			rs, _ := ans.receipts(t)
			statuses[i], ids[i] = rs[0].Status, rs[0].ClaimID
		}()
	}
	wg.Wait()
	tally := map[string]int{}
	for _, s := range statuses {
		tally[s]++
	}
	require.Equal(t, map[string]int{"accepted": 1, "duplicate": 19}, tally)
	for _, id := range ids {
		require.Equal(t, recA.ID, id)
	}
	require.Equal(t, [2]int{1, 1}, e.stored(t, recA.ID), "one inbox row, one dispatch job")

	require.Equal(t, "dispatched", e.waitDispatchDone(t, recA.ID))
	posts, effects := e.n8n.counts("dispatch", "evt_a")
	require.Equal(t, 1, posts, "dispatched once")
	require.Equal(t, 1, effects, "the workflow's claim won once")
	rec := e.find(t, "door", "evt_a")
	require.Equal(t, claim.StateCompleted, rec.State)
	require.Equal(t, "workflow ran", rec.ResultRef)
	require.Equal(t, 2, rec.Attempt, "the shadow forward's attempt, then the workflow's")
	log := e.deliveryLog(t, recA.ID)
	require.Contains(t, log, "received")
	require.Contains(t, log, "dispatched")

	// evt_b completed in shadow: its copy is a duplicate, not dispatched.
	recB := e.find(t, "door", "evt_b")
	e.ingestOne(t, "door", causeStripe(now+2, stripeEvent("evt_b", 100)), "duplicate")
	require.Equal(t, [2]int{0, 0}, e.stored(t, recB.ID))
	posts, _ = e.n8n.counts("dispatch", "evt_b")
	require.Zero(t, posts)
	// A later copy of the adopted event is a plain duplicate.
	e.ingestOne(t, "door", causeStripe(now+3, stripeEvent("evt_a", 100)), "duplicate")
	require.Equal(t, [2]int{1, 1}, e.stored(t, recA.ID))
}

// TestIngestShadowSwitchForwardInFlight: a shadow forward is in flight
// when shadow is turned off. A copy meanwhile is a duplicate (the record
// is processing, its lease live): nothing stored, nothing dispatched
// beside the forward. The forward then fails (n8n's 502 is relayed to the
// provider, whose next copy is adopted and dispatched once), or succeeds
// (the next copy is a duplicate). Under lease policy reclaim, once the
// lease has ended without a settle the record is adopted, and the settle
// that lands afterwards is fenced: its claim token was cleared, so it
// changes nothing.
func TestIngestShadowSwitchForwardInFlight(t *testing.T) {
	t.Parallel()
	e := setupAdopt(t)
	now := signNow()
	inFlight := func(source, id string) chan ingestAnswer {
		done := make(chan ingestAnswer, 1)
		go func() { done <- e.send(t, source, causeStripe(now, stripeEvent(id, 100))) }()
		require.Equal(t, id, <-e.n8n.held)
		return done
	}
	fail := inFlight("door", "evt_hold_fail")
	ok := inFlight("door", "evt_hold_ok")
	late := inFlight("door-reclaim", "evt_hold_late")
	e.enforce(t)

	for _, id := range []string{"evt_hold_fail", "evt_hold_ok"} {
		rec := e.find(t, "door", id)
		require.Equal(t, claim.StateProcessing, rec.State)
		e.ingestOne(t, "door", causeStripe(now+1, stripeEvent(id, 100)), "duplicate")
		require.Equal(t, [2]int{0, 0}, e.stored(t, rec.ID), "nothing beside the forward in flight")
	}

	e.n8n.release <- http.StatusBadGateway
	require.Equal(t, http.StatusBadGateway, (<-fail).status, "the failure reaches the provider, which delivers again")
	e.n8n.release <- http.StatusOK
	require.Equal(t, http.StatusOK, (<-ok).status)
	require.Equal(t, claim.StateRetryableFailed, e.find(t, "door", "evt_hold_fail").State)
	require.Equal(t, claim.StateCompleted, e.find(t, "door", "evt_hold_ok").State)

	id := e.ingestOne(t, "door", causeStripe(now+2, stripeEvent("evt_hold_fail", 100)), "accepted")
	require.Equal(t, "dispatched", e.waitDispatchDone(t, id))
	posts, effects := e.n8n.counts("dispatch", "evt_hold_fail")
	require.Equal(t, [2]int{1, 1}, [2]int{posts, effects})
	okID := e.ingestOne(t, "door", causeStripe(now+2, stripeEvent("evt_hold_ok", 100)), "duplicate")
	require.Equal(t, [2]int{0, 0}, e.stored(t, okID))

	// Reclaim: the lease ends (moved to the past: the forward's deadline
	// ends before it, so only a settle delayed past it lands later).
	rec := e.find(t, "door-reclaim", "evt_hold_late")
	_, err := e.pool.Exec(e.ctx, `UPDATE claims SET lease_until = now() - interval '1 second' WHERE id = $1`, rec.ID)
	require.NoError(t, err)
	e.ingestOne(t, "door-reclaim", causeStripe(now+1, stripeEvent("evt_hold_late", 100)), "accepted")
	e.n8n.release <- http.StatusOK
	require.Equal(t, http.StatusOK, (<-late).status)
	require.Equal(t, "dispatched", e.waitDispatchDone(t, rec.ID))
	got := e.find(t, "door-reclaim", "evt_hold_late")
	require.Equal(t, claim.StateCompleted, got.State)
	require.Equal(t, "workflow ran", got.ResultRef, "the late settle changed nothing: the workflow's claim completed it")
	require.Contains(t, e.logs.String(), "shadow claim not settled by its forward's answer")
}

// TestIngestShadowSwitchAdoptsExhausted: with max_attempts 1 a failed
// forward dead-letters the record in shadow. The enforcing door's next
// copy adopts it with a fresh attempt budget: dispatched once, the
// workflow's claim wins.
func TestIngestShadowSwitchAdoptsExhausted(t *testing.T) {
	t.Parallel()
	e := setupAdopt(t)
	now := signNow()
	require.Equal(t, http.StatusInternalServerError, e.send(t, "door-one", causeStripe(now, stripeEvent("evt_x", 100))).status)
	rec := e.find(t, "door-one", "evt_x")
	require.Equal(t, claim.StateDeadLettered, rec.State)
	e.enforce(t)
	id := e.ingestOne(t, "door-one", causeStripe(now+1, stripeEvent("evt_x", 100)), "accepted")
	require.Equal(t, rec.ID, id)
	adopted := e.find(t, "door-one", "evt_x")
	require.Equal(t, claim.StateReceived, adopted.State)
	require.Equal(t, 2, adopted.MaxAttempts, "a fresh budget: the attempt made in shadow plus max_attempts")
	if st := e.waitDispatchDone(t, id); st != "dispatched" {
		var why string
		_ = e.pool.QueryRow(e.ctx, `SELECT COALESCE(last_dispatch_error, '') FROM inbox_events WHERE claim_id = $1`, id).Scan(&why)
		t.Fatalf("%s: %s; %v; workflow errors %v", st, why, e.deliveryLog(t, id), e.n8n.errs)
	}
	posts, effects := e.n8n.counts("dispatch", "evt_x")
	require.Equal(t, [2]int{1, 1}, [2]int{posts, effects})
	require.Equal(t, claim.StateCompleted, e.find(t, "door-one", "evt_x").State)
	// Settled now: the next copy is a duplicate.
	e.ingestOne(t, "door-one", causeStripe(now+2, stripeEvent("evt_x", 100)), "duplicate")
	require.Equal(t, [2]int{1, 1}, e.stored(t, id))
}
