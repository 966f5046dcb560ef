// Package migrate applies the embedded schema migrations (package schema)
// with goose, under a PostgreSQL session advisory lock, so several sidecar
// replicas starting at once apply each migration exactly once.
package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/idempotent-claim/idempotent-claim/schema"
)

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

// Up applies every pending migration and returns how many it applied.
func Up(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	p, db, err := provider(pool)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	res, err := p.Up(ctx)
	if err != nil {
		return len(res), fmt.Errorf("apply migrations: %w", err)
	}
	return len(res), nil
}

// Pending reports whether some embedded migration is not applied yet.
func Pending(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	p, db, err := provider(pool)
	if err != nil {
		return false, err
	}
	defer db.Close()
	return p.HasPending(ctx)
}
