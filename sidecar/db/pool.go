package db

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ConfigurePool pins, on every session of pc, the run-time parameters the
// sidecar's statements are written for, whatever the database's or role's
// defaults (a parameter sent at connection start overrides ALTER DATABASE
// or ALTER ROLE … SET): default_transaction_isolation = read committed.
// The claim is one INSERT … ON CONFLICT … DO UPDATE: at READ COMMITTED a
// concurrent claim of the same key waits for the row and then decides on
// it as the other claim left it; at REPEATABLE READ or SERIALIZABLE the
// same statement fails with a serialization failure instead, and a storm
// of duplicate deliveries turns into a storm of 503s. A connection pooler
// that drops start-up parameters defeats this; claimd's readiness check
// reports the isolation its sessions really run at. It also installs the
// notice handler that tells a commit kept without its synchronous standby
// (unreplicated.go).
func ConfigurePool(pc *pgxpool.Config) {
	if pc.ConnConfig.RuntimeParams == nil {
		pc.ConnConfig.RuntimeParams = map[string]string{}
	}
	pc.ConnConfig.RuntimeParams["default_transaction_isolation"] = "read committed"
	if prev := pc.ConnConfig.OnNotice; prev != nil {
		pc.ConnConfig.OnNotice = func(c *pgconn.PgConn, n *pgconn.Notice) { prev(c, n); noteUnreplicated(c, n) }
	} else {
		pc.ConnConfig.OnNotice = noteUnreplicated
	}
}

// NewPoolConfig parses the pool configuration of url (a PostgreSQL URL or
// keyword/value string, as pgxpool.ParseConfig reads it) for sessions
// named application (application_name), configured as ConfigurePool does.
// When url sets no pool_max_conns, the pool gets max(16, 4×CPUs)
// connections: claim throughput is bounded by commit latency ×
// connections, and pgxpool's own default (4) is far too small for a claim
// service.
//
// After a query fails on a broken connection (PostgreSQL restarted, a
// backend terminated: the connection closed, or SQLSTATE class 08 or
// 57P…), every connection taken from the pool during the next 30 seconds
// is pinged first, so the other dead idle connections are dropped instead
// of each failing one request; otherwise a connection idle for more than
// a second is.
func NewPoolConfig(url, application string) (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	if !strings.Contains(url, "pool_max_conns") {
		pc.MaxConns = int32(max(16, 4*runtime.NumCPU()))
	}
	pc.ConnConfig.RuntimeParams["application_name"] = application
	ConfigurePool(pc)
	var lastBroken atomic.Int64
	pc.ConnConfig.Tracer = brokenConnTracer{last: &lastBroken}
	pc.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool {
		return p.IdleDuration > time.Second || time.Since(time.Unix(0, lastBroken.Load())) < 30*time.Second
	}
	return pc, nil
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
	// Class 08, or 57P01…57P05 (a shutdown, a crash, a dropped database,
	// a session timeout: the server ended the session).
	if conn.IsClosed() || (errors.As(d.Err, &pgErr) && (inClass(pgErr.Code, pgerrcode.ConnectionException) ||
		strings.HasPrefix(pgErr.Code, "57P"))) {
		t.last.Store(time.Now().UnixNano())
	}
}
