package migrate_test

import (
	"context"
	"io/fs"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/schema"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// TestBackfillOneActiveScanMigration: 00023 ends the duplicate queued or
// running scans of a source an older claimd left (the running one stays,
// else the newest queued), then allows one queued or running row per
// tenant and source; requested_at is the old started_at, and a queued
// row's started_at becomes NULL. Down and up again work.
func TestBackfillOneActiveScanMigration(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, pgtest.NewDatabase(t))
	require.NoError(t, err)
	defer pool.Close()
	sub, err := fs.Sub(schema.Migrations, schema.Dir)
	require.NoError(t, err)
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, sub, goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	_, err = p.UpTo(ctx, 22)
	require.NoError(t, err)

	insert := func(tenant, source, result string) int64 {
		var id int64
		require.NoError(t, pool.QueryRow(ctx, `INSERT INTO backfill_scans (tenant, source, trigger, mode, result, started_at)
			VALUES ($1, $2, 'api', 'report', $3, '2026-01-02T03:04:05Z') RETURNING id`, tenant, source, result).Scan(&id))
		return id
	}
	q1, running, q2 := insert("a", "s", "queued"), insert("a", "s", "running"), insert("a", "s", "queued")
	oldQ, newQ := insert("a", "t", "queued"), insert("a", "t", "queued")
	other, done := insert("b", "s", "queued"), insert("a", "s", "ok")

	_, err = p.UpTo(ctx, 23)
	require.NoError(t, err)
	state := func(id int64) string {
		var s string
		require.NoError(t, pool.QueryRow(ctx, `SELECT result || ':' || (finished_at IS NOT NULL)::text || ':' ||
			(started_at IS NULL)::text || ':' || to_char(requested_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
			FROM backfill_scans WHERE id = $1`, id).Scan(&s))
		return s
	}
	const at = "2026-01-02T03:04:05"
	require.Equal(t, "running:false:false:"+at, state(running), "the running row stays")
	require.Equal(t, "error:true:false:"+at, state(q1))
	require.Equal(t, "error:true:false:"+at, state(q2))
	require.Equal(t, "error:true:false:"+at, state(oldQ))
	require.Equal(t, "queued:false:true:"+at, state(newQ), "the newest queued row stays, not started")
	require.Equal(t, "queued:false:true:"+at, state(other), "another tenant's source")
	require.Equal(t, "ok:false:false:"+at, state(done))
	_, err = pool.Exec(ctx, `INSERT INTO backfill_scans (tenant, source, trigger, mode, result) VALUES ('a', 't', 'api', 'report', 'queued')`)
	require.ErrorContains(t, err, "backfill_scans_one_active_idx")
	_, err = pool.Exec(ctx, `INSERT INTO backfill_scans (tenant, source, trigger, mode, result) VALUES ('a', 't', 'api', 'report', 'ok')`)
	require.NoError(t, err, "finished rows are not limited")

	_, err = p.DownTo(ctx, 22)
	require.NoError(t, err)
	var nulls int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM backfill_scans WHERE started_at IS NULL`).Scan(&nulls))
	require.Zero(t, nulls)
	_, err = p.UpTo(ctx, 23)
	require.NoError(t, err)
}
