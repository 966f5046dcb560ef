package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotent-claim/idempotent-claim/sidecar/config"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
	"github.com/idempotent-claim/idempotent-claim/sidecar/ha"
	"github.com/idempotent-claim/idempotent-claim/sidecar/httpapi"
)

// openPool opens the pgx pool of DATABASE_URL, configured by
// db.NewPoolConfig (the pool size, READ COMMITTED on every session, the
// pings after a broken connection, the check of unreplicated commits):
// River's statements and the dispatcher's run on these sessions too.
//
// hooks (nil for the one-shot commands) adds the serving process's checks:
// the fence, on every new connection (ha.Fence), the start-up gate and,
// with CLAIMD_REQUIRE_SYNC_REPLICATION, the synchronous-commit check, on
// every acquisition (ha.Gate, ha.SyncGuard).
//
// A one-shot command needs the database at once: its pool connects
// before openPool returns, and a failure reads as ha.ConnectProblem words it
// (the server's reason and the setting to check). The serving process's
// pool tries one connection (ha.Gate.Probe): openPool fails only
// when the server refuses the session for good (ha.ConnectRefused: no such
// database or role, a wrong password, no CONNECT privilege); any other
// failure is left to the start-up wait, so claimd listens during a
// failover.
func openPool(ctx context.Context, cfg config.Config, hooks *poolHooks) (*pgxpool.Pool, error) {
	pc, err := db.NewPoolConfig(cfg.DatabaseURL, "claimd")
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if hooks != nil {
		if hooks.fence != nil {
			if err := hooks.fence.Survey(ctx, &pc.ConnConfig.Config); err != nil {
				return nil, err
			}
			pc.ConnConfig.ValidateConnect = hooks.fence.Validate(pc.ConnConfig.ValidateConnect)
		}
		pc.PrepareConn = hooks.prepare

	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, err
	}
	switch {
	case hooks == nil:
		err = ha.ConnectProblem(pool.Ping(ctx))
	case hooks.gate != nil:
		err = hooks.gate.Probe(ctx, pool)
	}
	if err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// poolHooks are the checks of a serving process's pool.
type poolHooks struct {
	fence *ha.Fence
	gate  *ha.Gate
	sync  *ha.SyncGuard // nil unless CLAIMD_REQUIRE_SYNC_REPLICATION
}

// prepare is the pool's PrepareConn: the start-up gate, then the
// synchronous-commit check.
func (h *poolHooks) prepare(ctx context.Context, conn *pgx.Conn) (bool, error) {
	if h.gate != nil {
		if ok, err := h.gate.Prepare(ctx, conn); !ok || err != nil {
			return ok, err
		}
	}
	if h.sync != nil {
		return h.sync.Prepare(ctx, conn)
	}
	return true, nil
}

// minSessionTimeout is the smallest statement_timeout or lock_timeout
// (other than 0, none) claimd can work under: a claim may wait for the row
// of a concurrent claim of its key, or behind a batch of up to MaxBatch
// claims, and the purge and the lease sweep run batches of PurgeBatch rows.
const minSessionTimeout = time.Second

// readSession returns the database facts of one of pool's sessions
// (dbsqlc.SessionFacts, one round trip).
func readSession(ctx context.Context, pool *pgxpool.Pool) (httpapi.DatabaseFacts, error) {
	r, err := dbsqlc.New().SessionFacts(ctx, pool)
	if err != nil {
		return httpapi.DatabaseFacts{}, err
	}
	f := httpapi.DatabaseFacts{TransactionIsolation: r.TransactionIsolation, ReadOnly: r.ReadOnly, InRecovery: r.InRecovery,
		StatementTimeoutMS: r.StatementTimeoutMs, LockTimeoutMS: r.LockTimeoutMs, SynchronousCommit: r.SynchronousCommit,
		SynchronousStandby: r.SynchronousStandby}
	switch {
	case f.SynchronousCommit == "off":
		f.Durability = httpapi.DurabilityNone
	case f.SynchronousStandby && f.SynchronousCommit != "local":
		f.Durability = httpapi.DurabilityStandby
	default:
		f.Durability = httpapi.DurabilityLocal
	}
	return f, nil
}

// sessionProblems lists, for an operator, the settings of f that claimd
// cannot work with; empty when there is none. Each names the setting.
// Not ready: nothing can be written (a standby, or transactions read-only
// by default: "ready" means "can write"); the sessions do not run at READ
// COMMITTED although claimd asks for it at connection start (a connection
// pooler dropping start-up parameters); statement_timeout or lock_timeout
// below minSessionTimeout. synchronous_commit and synchronous_standby_names
// are reported (Durability), never refused here: only
// CLAIMD_REQUIRE_SYNC_REPLICATION makes their outcome a reason (see
// ha.RequireSyncProblem).
func sessionProblems(f httpapi.DatabaseFacts) []string {
	var ps []string
	switch {
	case f.ReadOnly && f.InRecovery:
		ps = append(ps, "the database is a standby (pg_is_in_recovery): claims cannot be written until a primary answers")
	case f.ReadOnly:
		ps = append(ps, "transactions are read-only (default_transaction_read_only = on for this database or role, "+
			"or transaction_read_only): claims cannot be written")
	}
	if f.TransactionIsolation != "read committed" {
		ps = append(ps, fmt.Sprintf("transactions run at %s, not read committed (default_transaction_isolation; claimd sets it "+
			"at connection start, so something between claimd and PostgreSQL drops start-up parameters)", f.TransactionIsolation))
	}
	for _, t := range []struct {
		name string
		ms   int64
	}{{"statement_timeout", f.StatementTimeoutMS}, {"lock_timeout", f.LockTimeoutMS}} {
		if t.ms > 0 && t.ms < minSessionTimeout.Milliseconds() {
			ps = append(ps, fmt.Sprintf("%s = %dms is too low: at least %s, or 0 (claimd bounds each request itself)",
				t.name, t.ms, minSessionTimeout))
		}
	}
	return ps
}

// logSession logs, on start, the database as claimd's sessions see it and,
// as errors, each setting claimd cannot work with. claimd serves anyway and
// stays not ready (/readyz names the setting) until it is fixed; it does
// not exit: a standby is promoted, and ALTER DATABASE … SET fixes the rest,
// without a restart.
func (m *Main) logSession(ctx context.Context) {
	f, err := readSession(ctx, m.pool)
	if err != nil {
		m.Log.Warn().Err(err).Msg("cannot read the database session settings")
		return
	}
	m.Log.Info().Str("transaction_isolation", f.TransactionIsolation).Bool("read_only", f.ReadOnly).
		Bool("in_recovery", f.InRecovery).Int64("statement_timeout_ms", f.StatementTimeoutMS).
		Int64("lock_timeout_ms", f.LockTimeoutMS).Str("synchronous_commit", f.SynchronousCommit).
		Str("durability", string(f.Durability)).Msg("database session")
	if f.Durability == httpapi.DurabilityNone {
		m.Log.Warn().Str("synchronous_commit", f.SynchronousCommit).
			Msg("synchronous_commit is off: a crash of the database can lose claims already acknowledged, and their next delivery runs the effect again")
	}
	for _, p := range sessionProblems(f) {
		m.Log.Error().Str("problem", p).Msg("database setting claimd cannot work with; not ready until it is fixed")
	}
}
