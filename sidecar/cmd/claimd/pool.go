package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotent-claim/idempotent-claim/sidecar/config"
)

// openPool opens the pgx pool of DATABASE_URL. When the URL sets no
// pool_max_conns, the pool gets max(16, 4×CPUs) connections: claim
// throughput is bounded by commit latency × connections, and pgxpool's own
// default (4) is far too small for a claim service.
//
// After a query fails on a broken connection (PostgreSQL restarted, backend
// terminated), every connection taken from the pool during the next 30
// seconds is pinged first, so the other dead idle connections are dropped
// instead of each failing one request.
func openPool(ctx context.Context, cfg config.Config) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if !strings.Contains(cfg.DatabaseURL, "pool_max_conns") {
		pc.MaxConns = int32(max(16, 4*runtime.NumCPU()))
	}
	pc.ConnConfig.RuntimeParams["application_name"] = "claimd"
	var lastBroken atomic.Int64
	pc.ConnConfig.Tracer = brokenConnTracer{last: &lastBroken}
	pc.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool {
		return p.IdleDuration > time.Second || time.Since(time.Unix(0, lastBroken.Load())) < 30*time.Second
	}
	return pgxpool.NewWithConfig(ctx, pc)
}

// brokenConnTracer notes the time of the last query that failed because its
// connection broke.
type brokenConnTracer struct{ last *atomic.Int64 }

func (brokenConnTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (t brokenConnTracer) TraceQueryEnd(_ context.Context, conn *pgx.Conn, d pgx.TraceQueryEndData) {
	if d.Err == nil {
		return
	}
	var pgErr *pgconn.PgError
	if conn.IsClosed() || (errors.As(d.Err, &pgErr) && (strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57P"))) {
		t.last.Store(time.Now().UnixNano())
	}
}
