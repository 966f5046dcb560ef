package inbox_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// The database's settings cannot break the receipt (B16): with the
// database's default_transaction_isolation at SERIALIZABLE, concurrent
// deliveries of one event are one accepted and the rest duplicates, never
// "the event could not be stored". Receive sets READ COMMITTED on its own
// transaction, so this holds even on a pool whose sessions keep the
// database's default (claimd's pool pins it as well).
func TestSerializableDefaultReceiveStorm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var plain string
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) {
		admin, err := pgx.Connect(ctx, pgtest.ServerURL(t))
		require.NoError(t, err)
		defer admin.Close(ctx)
		_, err = admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{c.ConnConfig.Database}.Sanitize()+
			" SET default_transaction_isolation = 'serializable'")
		require.NoError(t, err)
		plain = c.ConnString()
		c.MaxConns = 30
	})
	conn, err := pgx.Connect(ctx, plain)
	require.NoError(t, err)
	var iso string
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_setting('transaction_isolation')").Scan(&iso))
	require.NoError(t, conn.Close(ctx))
	require.Equal(t, "serializable", iso, "the pool's sessions keep the database's default")

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
	ledger, err := claim.New(pool, claim.Config{Policies: claim.Policies{BySource: cfg.Policies}})
	require.NoError(t, err)
	in, err := inbox.New(inbox.Options{Pool: pool, Ledger: ledger, Config: cfg, Logger: zerolog.Nop()})
	require.NoError(t, err)
	src := cfg.Sources["orders"]

	// One event delivered 20 times at once; then a delivery of 3 events,
	// two of them known, 20 times at once.
	deliver := func(n int, ids ...string) [][]inbox.Receipt {
		out, errs := make([][]inbox.Receipt, n), make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				evs := make([]verify.Event, len(ids))
				for k, id := range ids {
					evs[k] = verify.Event{ID: id, Payload: []byte(fmt.Sprintf(`{"id":%q}`, id))}
				}
				out[i], errs[i] = in.Receive(ctx, src, evs, []byte(`[]`), "application/json", nil)
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "delivery %d of %d", i, n)
		}
		return out
	}
	count := func(rs [][]inbox.Receipt) map[string]map[inbox.Status]int {
		c := map[string]map[inbox.Status]int{}
		for _, r := range rs {
			for _, rc := range r {
				if c[rc.EventID] == nil {
					c[rc.EventID] = map[inbox.Status]int{}
				}
				c[rc.EventID][rc.Status]++
			}
		}
		return c
	}
	require.Equal(t, map[string]map[inbox.Status]int{"ord-1": {inbox.Accepted: 1, inbox.Duplicate: 19}},
		count(deliver(20, "ord-1")))
	require.Equal(t, map[string]map[inbox.Status]int{
		"ord-1": {inbox.Duplicate: 20},
		"ord-2": {inbox.Accepted: 1, inbox.Duplicate: 19},
		"ord-3": {inbox.Accepted: 1, inbox.Duplicate: 19},
	}, count(deliver(20, "ord-3", "ord-1", "ord-2")))

	var jobs int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job`).Scan(&jobs))
	require.Equal(t, 3, jobs, "one dispatch job per accepted event")
}
