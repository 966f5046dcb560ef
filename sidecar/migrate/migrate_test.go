package migrate_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/migrate"
)

// Replicas starting together on a fresh database (after a failover, all
// waiting for the same promotion) migrate it once, and none hangs: the
// migration lock is polled, not waited for in a statement whose snapshot
// a CREATE INDEX CONCURRENTLY migration of the holder would wait for.
func TestConcurrentUpAppliesOnceWithoutHanging(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const replicas = 3
	applied := make([]int, replicas)
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		pool, err := pgxpool.New(ctx, db)
		require.NoError(t, err)
		defer pool.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			applied[i], errs[i] = migrate.Up(ctx, pool)
		}()
	}
	wg.Wait()
	total := 0
	for i := range replicas {
		require.NoError(t, errs[i], "replica %d", i)
		total += applied[i]
	}
	pool, err := pgxpool.New(ctx, db)
	require.NoError(t, err)
	defer pool.Close()
	pending, err := migrate.Pending(ctx, pool)
	require.NoError(t, err)
	require.False(t, pending)
	n, err := migrate.Up(ctx, pool)
	require.NoError(t, err)
	require.Zero(t, n, "applied once: nothing left")
	require.Positive(t, total)
}
