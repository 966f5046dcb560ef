package inbox_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// Group commit of receipts (receipt_groups.go): concurrent deliveries share
// transactions, and each still gets exactly the receipts it would get
// alone.

// groupSizes is an ingest Observer that records every group's size by kind.
type groupSizes struct {
	mu    sync.Mutex
	sizes map[string][]int
}

func (*groupSizes) Received(string, inbox.Status)            {}
func (*groupSizes) Rejected(string, string)                  {}
func (*groupSizes) Dispatched(string, string, time.Duration) {}
func (g *groupSizes) Grouped(kind string, n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.sizes == nil {
		g.sizes = map[string][]int{}
	}
	g.sizes[kind] = append(g.sizes[kind], n)
}

func (g *groupSizes) of(kind string) []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int(nil), g.sizes[kind]...)
}

// groupInbox is an inbox of source "orders" (dispatch off) over pool with
// group commit gc.
func groupInbox(t *testing.T, pool *pgxpool.Pool, obs inbox.Observer, gc claim.GroupConfig) (*inbox.Inbox, *sources.Source) {
	t.Helper()
	cfg, err := sources.Parse([]byte(`
sources:
  orders:
    tenant: acme
    provider: token
    secrets: [tok]
    options: {key: {id_header: X-Id}}
    forward: {url: "http://127.0.0.1:9/webhook/orders"}
`), envOf(nil))
	require.NoError(t, err)
	ledger, err := claim.New(pool, claim.Config{Policies: claim.Policies{BySource: cfg.Policies}, Group: &gc})
	require.NoError(t, err)
	in, err := inbox.New(inbox.Options{Pool: pool, Ledger: ledger, Config: cfg, Logger: zerolog.Nop(), Observer: obs})
	require.NoError(t, err)
	return in, cfg.Sources["orders"]
}

// events builds a delivery's events: id=payload pairs, each payload the
// event's own body.
func events(idPayload ...string) []verify.Event {
	evs := make([]verify.Event, 0, len(idPayload)/2)
	for i := 0; i+1 < len(idPayload); i += 2 {
		evs = append(evs, verify.Event{ID: idPayload[i], Payload: []byte(idPayload[i+1])})
	}
	return evs
}

func receive(ctx context.Context, in *inbox.Inbox, src *sources.Source, evs []verify.Event) ([]inbox.Receipt, error) {
	return in.Receive(ctx, src, evs, []byte(`[]`), "application/json", map[string]string{"x-test": "1"})
}

// holdReceipts blocks the inbox's only group worker: a redelivery of
// event "held" waits for a row lock the test holds, so that every
// delivery made meanwhile queues and the next group takes them (up to its
// bounds). release lets it go and returns the held delivery's receipts.
func holdReceipts(t *testing.T, ctx context.Context, pool *pgxpool.Pool, in *inbox.Inbox, src *sources.Source) func() []inbox.Receipt {
	t.Helper()
	first, err := receive(ctx, in, src, events("held", `{"n":0}`))
	require.NoError(t, err)
	lockerPID, unlock := pgtest.LockClaim(t, ctx, pool, first[0].ClaimID)
	answer := make(chan []inbox.Receipt, 1)
	go func() {
		rs, err := receive(ctx, in, src, events("held", `{"n":0}`))
		if err != nil {
			rs = []inbox.Receipt{{Status: inbox.Status("error: " + err.Error())}}
		}
		answer <- rs
	}()
	pgtest.WaitBlockedBy(t, ctx, pool, lockerPID, "the held delivery")
	return func() []inbox.Receipt {
		unlock()
		return <-answer
	}
}

// poisonEvents makes the database refuse any inbox record of event id
// "poison" (a trigger): a failure no validation foresees, met inside a
// group.
func poisonEvents(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(ctx, `CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.event_id = 'poison' THEN RAISE EXCEPTION 'poisoned event'; END IF; RETURN NEW; END $$;
		CREATE TRIGGER poison BEFORE INSERT OR UPDATE ON claims FOR EACH ROW EXECUTE FUNCTION poison()`)
	require.NoError(t, err)
}

// jobsOf counts the dispatch jobs of inbox record id.
func jobsOf(t *testing.T, ctx context.Context, pool *pgxpool.Pool, id string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE args->>'claim_id' = $1`, id).Scan(&n))
	return n
}

// One group of mixed deliveries: new events, two copies of one event, two
// payloads of one event id, a delivery of three events, two redeliveries
// of a dead-lettered event, a delivery whose caller went away, and (in
// the second run) a delivery the database refuses, alone and with a good
// event beside it. Each gets the receipts it would get alone; without a
// refused delivery the group is one transaction; the refused ones fail
// alone and store nothing, their neighbours are stored each in a
// transaction of its own; the abandoned one is left out.
func TestGroupedDeliveriesEachGetTheirOwnReceipts(t *testing.T) {
	t.Parallel()
	for _, withPoison := range []bool{false, true} {
		t.Run(fmt.Sprintf("refused=%v", withPoison), func(t *testing.T) {
			t.Parallel()
			testGroupedDeliveries(t, withPoison)
		})
	}
}

func testGroupedDeliveries(t *testing.T, withPoison bool) {
	ctx := context.Background()
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 20 })
	poisonEvents(t, ctx, pool)
	sizes := &groupSizes{}
	in, src := groupInbox(t, pool, sizes, claim.GroupConfig{Workers: 1, MaxItems: 64})

	// A stored event whose dispatch was dead-lettered: a redelivery re-arms
	// it, once.
	dead, err := receive(ctx, in, src, events("dead", `{"d":1}`))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE inbox_events SET dispatch_state = 'dead_lettered' WHERE claim_id = $1`, dead[0].ClaimID)
	require.NoError(t, err)

	release := holdReceipts(t, ctx, pool, in, src)
	deliveries := map[string][]verify.Event{}
	for i := range 5 {
		deliveries[fmt.Sprintf("new-%d", i)] = events(fmt.Sprintf("new-%d", i), fmt.Sprintf(`{"n":%d}`, i))
	}
	deliveries["twin-1"], deliveries["twin-2"] = events("twin", `{"t":1}`), events("twin", `{"t":1}`)
	deliveries["conf-1"], deliveries["conf-2"] = events("conf", `{"c":1}`), events("conf", `{"c":2}`)
	deliveries["multi"] = events("m-3", `{"m":3}`, "m-1", `{"m":1}`, "m-2", `{"m":2}`)
	deliveries["dead-1"], deliveries["dead-2"] = events("dead", `{"d":1}`), events("dead", `{"d":1}`)
	if withPoison {
		deliveries["poison"] = events("poison", `{}`)
		deliveries["poison-mixed"] = events("beside-poison", `{}`, "poison", `{}`)
	}
	type answer struct {
		rs  []inbox.Receipt
		err error
	}
	answers := map[string]answer{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, evs := range deliveries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rs, err := receive(ctx, in, src, evs)
			mu.Lock()
			answers[name] = answer{rs, err}
			mu.Unlock()
		}()
	}
	// A caller that goes away before its group starts is left out.
	gone, cancel := context.WithCancel(ctx)
	goneErr := make(chan error, 1)
	go func() { _, err := receive(gone, in, src, events("gone", `{}`)); goneErr <- err }()
	pgtest.WaitUntil(t, "every delivery to queue", func() bool { return in.QueuedReceipts() == len(deliveries)+1 })
	cancel()
	err = <-goneErr
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, apperr.Unavailable, apperr.As(err).Code, "answered as a statement cut by its context: 503, deliver again")

	held := release()
	require.Len(t, held, 1)
	require.Equal(t, inbox.Duplicate, held[0].Status)
	wg.Wait()

	status := func(name string) []inbox.Status {
		a := answers[name]
		require.NoError(t, a.err, name)
		out := make([]inbox.Status, len(a.rs))
		for i, r := range a.rs {
			out[i] = r.Status
		}
		return out
	}
	for i := range 5 {
		require.Equal(t, []inbox.Status{inbox.Accepted}, status(fmt.Sprintf("new-%d", i)))
	}
	require.ElementsMatch(t, []inbox.Status{inbox.Accepted, inbox.Duplicate}, append(status("twin-1"), status("twin-2")...),
		"two copies of one event in a group: stored once, the second a duplicate")
	require.ElementsMatch(t, []inbox.Status{inbox.Accepted, inbox.Conflict}, append(status("conf-1"), status("conf-2")...),
		"two payloads of one event id in a group: the second a conflict")
	require.ElementsMatch(t, []inbox.Status{inbox.Accepted, inbox.Duplicate}, append(status("dead-1"), status("dead-2")...),
		"two redeliveries of a dead-lettered event: one re-arms it")
	multi := answers["multi"].rs
	require.Equal(t, []string{"m-3", "m-1", "m-2"}, []string{multi[0].EventID, multi[1].EventID, multi[2].EventID},
		"receipts in the delivery's order")
	require.Equal(t, []inbox.Status{inbox.Accepted, inbox.Accepted, inbox.Accepted}, status("multi"))
	for _, name := range []string{"poison", "poison-mixed"} {
		if !withPoison {
			break
		}
		a := answers[name]
		require.Error(t, a.err, name)
		require.Equal(t, apperr.Unavailable, apperr.As(a.err).Code, "%s: 503, as alone: the provider delivers it again", name)
	}

	var stored, kept int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM claims WHERE event_id IN ('gone', 'beside-poison', 'poison')`).Scan(&stored))
	require.Zero(t, stored, "the abandoned and the refused deliveries stored nothing")
	// Every accepted event has its inbox row and exactly one dispatch job
	// (the re-armed one a second); the conflict its kept body, no job.
	for name, a := range answers {
		for _, r := range a.rs {
			want := 1
			if r.EventID == "dead" {
				want = 2
			}
			if r.EventID == "conf" && r.Status == inbox.Conflict {
				require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM inbox_conflicts WHERE claim_id = $1`, r.ClaimID).Scan(&kept))
				require.Equal(t, 1, kept)
			}
			require.Equal(t, want, jobsOf(t, ctx, pool, r.ClaimID), "%s: %s", name, r.EventID)
		}
	}
	var rows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM inbox_events`).Scan(&rows))
	require.Equal(t, 1+1+5+1+1+3, rows, "dead, held, new, twin, conf, multi")
	require.Contains(t, sizes.of("ingest"), len(deliveries), "the queued deliveries went as one group")
	// The rows one transaction wrote share its id (xmin).
	var txs int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(DISTINCT e.xmin::text) FROM inbox_events e
		JOIN claims c ON c.id = e.claim_id WHERE c.event_id NOT IN ('dead', 'held')`).Scan(&txs))
	if withPoison {
		require.Equal(t, 5+1+1+1, txs, "after a refusal each delivery alone: new, twin, conf, multi")
	} else {
		require.Equal(t, 1, txs, "the group is one transaction")
	}
}

// A group holds at most MaxItems events, whatever its deliveries carry: a
// delivery of more is stored alone.
func TestIngestGroupBoundsEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 20 })
	sizes := &groupSizes{}
	in, src := groupInbox(t, pool, sizes, claim.GroupConfig{Workers: 1, MaxItems: 4})
	release := holdReceipts(t, ctx, pool, in, src)
	// Queued one after the other, in this order: 2+2 events, 3 (alone: 2
	// more would pass 4), 6 (alone: more than a group holds).
	sizes6 := []int{2, 2, 3, 6}
	errs := make(chan error, len(sizes6))
	for d, n := range sizes6 {
		idp := make([]string, 0, 2*n)
		for k := range n {
			idp = append(idp, fmt.Sprintf("b-%d-%d", d, k), `{}`)
		}
		go func() {
			rs, err := receive(ctx, in, src, events(idp...))
			if err == nil && len(rs) != n {
				err = fmt.Errorf("%d receipts for %d events", len(rs), n)
			}
			errs <- err
		}()
		pgtest.WaitUntil(t, "the delivery to queue", func() bool { return in.QueuedReceipts() == d+1 })
	}
	release()
	for range sizes6 {
		require.NoError(t, <-errs)
	}
	require.Equal(t, []int{1, 1, 2, 1, 1}, sizes.of("ingest"), "first, held, then groups of 2+2, 3 and 6 events")
}

// Concurrent deliveries of overlapping event ids, in every order and
// several events at a time, grouped on several workers and not grouped at
// all: no deadlock, no error, each event stored once with exactly one
// dispatch job.
func TestOverlappingIngestGroupsNeverDeadlock(t *testing.T) {
	t.Parallel()
	for _, workers := range []int{4, 0} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 20 })
			sizes := &groupSizes{}
			in, src := groupInbox(t, pool, sizes, claim.GroupConfig{Workers: workers, MaxItems: 8})
			const ids, callers = 40, 24
			accepted := make([]map[string]int, callers)
			errs := make([]error, callers)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for c := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					accepted[c] = map[string]int{}
					order := rand.Perm(ids)
					for len(order) > 0 {
						n := min(len(order), 1+rand.IntN(3))
						var idp []string
						for _, k := range order[:n] {
							idp = append(idp, fmt.Sprintf("ov-%02d", k), fmt.Sprintf(`{"k":%d}`, k))
						}
						order = order[n:]
						rs, err := receive(ctx, in, src, events(idp...))
						if err != nil {
							errs[c] = err
							return
						}
						for _, r := range rs {
							if r.Status == inbox.Accepted {
								accepted[c][r.ClaimID]++
							} else if r.Status != inbox.Duplicate {
								errs[c] = fmt.Errorf("%s: %s", r.EventID, r.Status)
								return
							}
						}
					}
				}()
			}
			close(start)
			wg.Wait()
			for c, err := range errs {
				require.NoError(t, err, "caller %d", c)
			}
			once := map[string]int{}
			for _, m := range accepted {
				for id, n := range m {
					once[id] += n
				}
			}
			require.Len(t, once, ids, "every event accepted")
			for id, n := range once {
				require.Equal(t, 1, n, "accepted once: %s", id)
				require.Equal(t, 1, jobsOf(t, ctx, pool, id), "one dispatch job: %s", id)
			}
			var deadlocks int64
			require.NoError(t, pool.QueryRow(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&deadlocks))
			require.Zero(t, deadlocks)
			for _, n := range sizes.of("ingest") {
				require.LessOrEqual(t, n, 8, "MaxItems bounds a group")
			}
			if workers == 0 {
				require.Empty(t, sizes.of("ingest"), "grouping off")
			}
		})
	}
}
