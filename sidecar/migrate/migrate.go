// Package migrate applies the embedded schema migrations (package schema)
// with goose, under a PostgreSQL session advisory lock, so several sidecar
// replicas starting at once apply each migration exactly once.
package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/idempotent-claim/idempotent-claim/schema"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
)

// lockKey is the advisory lock held while migrating ("claimd" in ASCII).
const lockKey int64 = 0x636c61696d64

// VersionTable is goose's bookkeeping table.
const VersionTable = "claimd_schema_version"

func provider(pool *pgxpool.Pool) (*goose.Provider, *sql.DB, error) {
	sub, err := fs.Sub(schema.Migrations, schema.Dir)
	if err != nil {
		return nil, nil, err
	}
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, nil, err
	}
	db := stdlib.OpenDBFromPool(pool)
	p, err := goose.NewProvider(goose.DialectPostgres, db, sub,
		goose.WithSessionLocker(locker), goose.WithTableName(VersionTable),
		goose.WithDisableGlobalRegistry(true))
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return p, db, nil
}

// Up applies every pending migration of the sidecar's schema and of River
// (the dispatch queue, github.com/riverqueue/river) and returns how many it
// applied.
func Up(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	// One session-level advisory lock around both migrators, so replicas
	// starting together apply each migration once.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	if err := lockMigrations(ctx, conn.Conn()); err != nil {
		return 0, err
	}
	defer func() { _ = queries.MigrationUnlock(context.WithoutCancel(ctx), conn, lockKey) }()
	p, db, err := provider(pool)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	res, err := p.Up(ctx)
	if err != nil {
		return len(res), fmt.Errorf("apply migrations: %w", err)
	}
	rm, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return len(res), err
	}
	rres, err := rm.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return len(res), fmt.Errorf("apply River migrations: %w", err)
	}
	return len(res) + len(rres.Versions), nil
}

// queries runs the package's statements (sidecar/db/queries/migrate.sql).
var queries = dbsqlc.New()

// lockPoll is the pause between two tries of the migration lock.
const lockPoll = 200 * time.Millisecond

// lockMigrations takes the session advisory lock of the migrations,
// polling with pg_try_advisory_lock rather than waiting in
// pg_advisory_lock: a statement waiting for the lock holds a snapshot, and
// CREATE INDEX CONCURRENTLY (a migration of the holder) waits for every
// snapshot older than its index to end, so the holder would wait for the
// waiter and the waiter for the holder, a deadlock PostgreSQL cannot see
// (the lock is held by an idle session of the holder). Two replicas
// starting together on a database with that migration pending hung this
// way.
func lockMigrations(ctx context.Context, conn *pgx.Conn) error {
	for {
		locked, err := queries.TryMigrationLock(ctx, conn, lockKey)
		if err != nil {
			return err
		}
		if locked {
			return nil
		}
		t := time.NewTimer(lockPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Pending reports whether some embedded migration is not applied yet.
func Pending(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	p, db, err := provider(pool)
	if err != nil {
		return false, err
	}
	defer db.Close()
	pending, err := p.HasPending(ctx)
	if err != nil || pending {
		return pending, err
	}
	rm, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return false, err
	}
	res, err := rm.Migrate(ctx, rivermigrate.DirectionUp, &rivermigrate.MigrateOpts{DryRun: true})
	if err != nil {
		return false, err
	}
	return len(res.Versions) > 0, nil
}
