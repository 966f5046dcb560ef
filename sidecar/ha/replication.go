package ha

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/httpapi"
	"github.com/idempotent-claim/idempotent-claim/sidecar/metrics"
)

// Say when an acknowledged claim can be lost: the replication report.
//
// A claim acknowledged `won` survives a failover only if its commit waited
// for the standby that is promoted: the primary names it in
// synchronous_standby_names and claimd's sessions run synchronous_commit
// on, remote_write or remote_apply. With asynchronous standbys the promoted
// one misses the commits of the last moments (measured: 1,715 and 3,170
// acknowledged claims with a standby 1–2 s behind), and each of them is
// won again on its redelivery: a second effect. claimd reads, at start and
// on readiness checks (at most every ReplicationMaxAge), what its commits
// wait for; logs it (a warning for asynchronous standbys); shows it in
// /readyz (durability) and as metrics; and, with
// CLAIMD_REQUIRE_SYNC_REPLICATION, is not ready and acknowledges no write
// unless commits are synchronously replicated (SyncGuard, below).
//
// claimd does not set synchronous_commit on its sessions: the operator's
// choice stands (a deployment may run a standby for reads only and accept
// the risk), and what is reported is the value claimd's own sessions run
// with (a per-role or per-database override included). A session-level
// synchronous_commit = local or off voids synchronous replication whatever
// the server's setting.

// ReplicationMaxAge is how long a replication reading is reused (the
// default of NewReplicationMonitor).
const ReplicationMaxAge = 5 * time.Second

// Replication is one reading of what the primary's commits wait for.
type Replication struct {
	// Synchronous: whether commits wait for a connected synchronous
	// standby; nil when it cannot be told (see Note), or on a standby.
	Synchronous *bool
	// SynchronousCommit and SynchronousStandbyNames are the settings as
	// claimd's sessions see them.
	SynchronousCommit       string
	SynchronousStandbyNames string
	// InRecovery: read on a standby, which says nothing of a primary.
	InRecovery bool
	// Standbys is how many standbys stream from the primary (base backups
	// in progress left out).
	Standbys int
	ByState  map[string]int // sync_state → count; "unknown" when unreadable
	// Note says what the reading means, for an operator.
	Note string
}

// waitingCommitLevels are the synchronous_commit values whose commits
// wait for the synchronous standbys (when synchronous_standby_names is set).
var waitingCommitLevels = []string{"on", "remote_write", "remote_apply"}

// EvaluateReplication makes a reading from what dbsqlc.Replication returns:
// the session's synchronous_commit, synchronous_standby_names, whether the
// server is in recovery, and each standby's sync_state ("" when it cannot
// be read).
func EvaluateReplication(commit, names string, inRecovery bool, states []string) Replication {
	r := Replication{SynchronousCommit: commit, SynchronousStandbyNames: names, InRecovery: inRecovery,
		ByState: map[string]int{}}
	if inRecovery {
		r.Note = "the database is a standby: what a primary's commits wait for is read once claimd reaches a primary"
		return r
	}
	for _, s := range states {
		if s == "" {
			s = "unknown"
		}
		r.ByState[s]++
		r.Standbys++
	}
	synced := r.ByState["sync"] + r.ByState["quorum"]
	waits := false
	for _, l := range waitingCommitLevels {
		waits = waits || commit == l
	}
	no, yes := false, true
	switch {
	case !waits:
		r.Synchronous = &no
		r.Note = fmt.Sprintf("synchronous_commit = %s on claimd's sessions: commits do not wait for any standby; a failover can lose "+
			"claims already acknowledged", commit)
	case names == "":
		r.Synchronous = &no
		if r.Standbys == 0 {
			r.Note = "no standby: a failover would have nothing to promote, and synchronous_standby_names is empty"
		} else {
			r.Note = fmt.Sprintf("%d asynchronous standby(s): synchronous_standby_names is empty, so commits do not wait for them and "+
				"a failover can lose claims already acknowledged (their redelivery is won again: a second effect)", r.Standbys)
		}
	case synced > 0:
		r.Synchronous = &yes
		r.Note = fmt.Sprintf("commits wait for %d synchronous standby(s) (synchronous_standby_names = '%s', synchronous_commit = %s)",
			synced, names, commit)
	case r.ByState["unknown"] > 0:
		r.Note = "cannot read the standbys' sync_state (pg_stat_replication): grant pg_monitor to claimd's database role"
	default:
		r.Synchronous = &no
		r.Note = fmt.Sprintf("synchronous_standby_names = '%s' but no synchronous standby is connected: commits wait until one "+
			"connects", names)
	}
	return r
}

// warn reports whether r deserves a warning: it cannot be told, or
// standbys are there (or named) but commits do not wait for them.
func (r Replication) warn() bool {
	switch {
	case r.InRecovery:
		return false
	case r.Synchronous == nil:
		return true
	case *r.Synchronous:
		return false
	}
	return r.Standbys > 0 || r.SynchronousStandbyNames != ""
}

// summary identifies a reading for logging changes only.
func (r Replication) summary() string {
	s := "unknown"
	if r.Synchronous != nil {
		s = fmt.Sprint(*r.Synchronous)
	}
	return fmt.Sprintf("%s|%d|%v|%s|%s|%v", s, r.Standbys, r.ByState, r.SynchronousCommit, r.SynchronousStandbyNames, r.InRecovery)
}

// ReplicationMonitor reads and caches the replication state. A reading
// describes the primary it was read on: when claimd sees a failover (the
// fence admits a primary on a newer timeline, or another connection of a
// server) the cache is dropped (Invalidate, given to Fence.OnFailover), so
// that /readyz and the metrics read the new primary at their next call
// instead of describing the old one's standbys for up to maxAge. Safe for
// concurrent use.
type ReplicationMonitor struct {
	pool   *pgxpool.Pool
	log    zerolog.Logger
	maxAge time.Duration
	// gen counts invalidations; a reading is cached with the generation it
	// began in and reused only while that is still current. Atomic, not
	// under mu: invalidate is called from connection set-up, which may run
	// under get (its query opening a new connection).
	gen atomic.Uint64

	mu      sync.Mutex
	atGen   uint64
	last    Replication
	lastErr error
	at      time.Time
	logged  string // summary of the last logged reading
}

// NewReplicationMonitor returns a monitor reading on pool's sessions,
// reusing a reading for maxAge (ReplicationMaxAge when 0), logging each
// reading that differs from the last one logged to log.
func NewReplicationMonitor(pool *pgxpool.Pool, log zerolog.Logger, maxAge time.Duration) *ReplicationMonitor {
	if maxAge == 0 {
		maxAge = ReplicationMaxAge
	}
	return &ReplicationMonitor{pool: pool, log: log, maxAge: maxAge}
}

// Get returns a reading at most maxAge old, reading again (one query, as
// claimd's own work: Internal) when the last one is older or a failover
// was seen since, and logs a reading that differs from the last one
// logged. The error is the query's.
func (m *ReplicationMonitor) Get(ctx context.Context) (Replication, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	gen := m.gen.Load()
	if !m.at.IsZero() && m.atGen == gen && time.Since(m.at) < m.maxAge {
		return m.last, m.lastErr
	}
	r, err := queries.Replication(Internal(ctx), m.pool)
	// A failover seen while the query ran may have left it on the old
	// server: answer it, but do not keep it.
	m.at, m.atGen = time.Now(), gen
	if m.gen.Load() != gen {
		m.at = time.Time{}
	}
	if err != nil {
		m.last, m.lastErr = Replication{}, err
		return m.last, err
	}
	m.last, m.lastErr = EvaluateReplication(r.SynchronousCommit, r.SynchronousStandbyNames, r.InRecovery, r.SyncStates), nil
	if s := m.last.summary(); s != m.logged && !m.last.InRecovery {
		m.logged = s
		m.logReading(m.last)
	}
	return m.last, nil
}

// Invalidate drops the cached reading: the next Get reads again.
func (m *ReplicationMonitor) Invalidate() { m.gen.Add(1) }

func (m *ReplicationMonitor) logReading(r Replication) {
	ev := m.log.Info()
	msg := "database replication: commits wait for a synchronous standby; an acknowledged claim survives a failover to it"
	switch {
	case r.Synchronous == nil:
		ev, msg = m.log.Warn(), "database replication: cannot tell whether commits wait for a standby"
	case !*r.Synchronous && r.warn():
		ev, msg = m.log.Warn(), "database replication: commits do not wait for a standby; a failover can lose claims already "+
			"acknowledged, and their redelivery runs the effect again (see sidecar/docs/ha.md#what-claimd-tells-you-synchronous-or-not)"
	case !*r.Synchronous:
		msg = "database replication: no standby; an acknowledged claim survives a crash of the database server, not the loss of it"
	}
	byState := zerolog.Dict()
	for s, n := range r.ByState {
		byState.Int(s, n)
	}
	ev.Str("synchronous_commit", r.SynchronousCommit).Str("synchronous_standby_names", r.SynchronousStandbyNames).
		Int("standbys", r.Standbys).Dict("standbys_by_sync_state", byState).Str("note", r.Note).Msg(msg)
}

// Metric is the metrics.ReplicationFunc of the monitor: false when no
// primary's reading is at hand.
func (m *ReplicationMonitor) Metric(ctx context.Context) (metrics.Replication, bool) {
	r, err := m.Get(ctx)
	if err != nil || r.InRecovery {
		return metrics.Replication{}, false
	}
	out := metrics.Replication{Known: r.Synchronous != nil, Standbys: r.ByState}
	if r.Synchronous != nil {
		out.Synchronous = *r.Synchronous
	}
	return out, true
}

// Facts is r as /readyz shows it.
func (r Replication) Facts() *httpapi.ReplicationFacts {
	return &httpapi.ReplicationFacts{Synchronous: r.Synchronous, Standbys: r.Standbys,
		SyncStandbys: r.ByState["sync"] + r.ByState["quorum"], SynchronousCommit: r.SynchronousCommit,
		SynchronousStandbyNames: r.SynchronousStandbyNames, Note: r.Note}
}

// RequireSyncProblem is the not-ready reason under
// CLAIMD_REQUIRE_SYNC_REPLICATION for r, or for err (Get could not read),
// "" when r satisfies it.
func RequireSyncProblem(r Replication, err error) string {
	const prefix = "CLAIMD_REQUIRE_SYNC_REPLICATION is on and commits are not known to be synchronously replicated: "
	switch {
	case err != nil:
		return prefix + "cannot read the replication state"
	case r.Synchronous == nil:
		return prefix + r.Note
	case !*r.Synchronous:
		return strings.Replace(prefix, "not known to be", "not", 1) + r.Note
	}
	return ""
}

// No write is acknowledged unless its commit waits for a synchronous
// standby (CLAIMD_REQUIRE_SYNC_REPLICATION).
//
// Readiness alone protects nothing: a caller that does not ask /readyz (n8n
// calls claimd directly) would still get `won` for a claim an asynchronous
// standby may not have. So with the setting on, every connection handed
// out by the pool to a request, the dispatcher or the maintenance loop is
// checked first (SyncGuard.Prepare, the pool's PrepareConn) in one query:
// the session's synchronous_commit waits for standbys (on, remote_write or
// remote_apply), synchronous_standby_names is set, and a standby is
// connected in sync or quorum state (pg_stat_get_wal_senders, the function
// behind pg_stat_replication; its sync_state reads NULL without pg_monitor,
// which counts as not synchronous). When that fails the same query makes
// the session's transactions read-only (default_transaction_read_only, a
// session setting, put back by RESET at the next acquisition that passes):
// reads are served, and every write on that connection — a claim (single
// or batch), complete, fail, settle, resolve, an ingested or triggered
// delivery, a dispatch, a console action, River's own bookkeeping — is
// refused by PostgreSQL itself (25006 read_only_sql_transaction) before
// anything is written, answered 503 with Retry-After, nothing kept: the
// ledger's writes (claims, settles, resolve, release, ingest and trigger
// stores) name the setting and the reason (db.SyncRequiredKey), other
// writes (the console's session bookkeeping) say the database is
// read-only now. /readyz says why (RequireSyncProblem).
//
// Why checking before the work is enough: once synchronous_standby_names
// is set and synchronous_commit waits, PostgreSQL does not acknowledge a
// commit until a synchronous standby confirmed it; a standby that leaves
// after the check makes the commit wait (claimd's request timeout then
// closes the connection and answers 503, outcome unknown), not return
// unreplicated. What the check cannot see is an operator emptying
// synchronous_standby_names (or setting synchronous_commit to local or off
// in postgresql.conf) and reloading between the check and the commit of
// that connection's work, a window of one request's database time.
//
// A commit whose wait for the standby is cancelled is the other way to an
// unreplicated commit: PostgreSQL keeps it (committed locally) and answers
// the COMMIT with a WARNING ("canceling wait for synchronous replication
// …"). claimd never sends a cancel request (pgx's default context
// handling closes the socket instead, an unknown outcome answered 503) and
// statement_timeout is disabled before the commit, so only someone else's
// pg_cancel_backend can cause it; db.ConfigurePool marks such a
// connection and the ledger's writes answer it as an unknown outcome (503),
// never `won` (see db.ErrUnreplicatedCommit).
//
// Internal work (the start-up's migrations, readiness, the replication
// reading) is not checked: it acknowledges nothing to a caller.
//
// Cost: one query per pool acquisition (reads too), about one loopback
// round trip; nothing when the setting is off.

// readOnlyKey marks, in a connection's CustomData, a session that
// SyncCommit made read-only; the ledger's writes refused there answer
// with the setting's name and the reason (db.SyncRequiredKey).
const readOnlyKey = db.SyncRequiredKey

// SyncGuard is the pool check of CLAIMD_REQUIRE_SYNC_REPLICATION; its
// zero value is ready for use.
type SyncGuard struct{}

// Prepare is a pgxpool PrepareConn hook: it checks conn before it is
// handed out (see above) and makes its session read-only when commits are
// not synchronously replicated; claimd's own work (Internal) is let
// through unchecked. An error is the check's query failing.
func (g *SyncGuard) Prepare(ctx context.Context, conn *pgx.Conn) (bool, error) {
	data := conn.PgConn().CustomData()
	if IsInternal(ctx) {
		return g.restore(ctx, conn, data)
	}
	check, err := queries.SyncCommit(ctx, conn)
	if err != nil {
		return false, err
	}
	if !check.Ok {
		data[readOnlyKey] = true
		return true, nil
	}
	return g.restore(ctx, conn, data)
}

// restore puts back the session's own default_transaction_read_only when
// Prepare had made it read-only.
func (g *SyncGuard) restore(ctx context.Context, conn *pgx.Conn, data map[string]any) (bool, error) {
	if data[readOnlyKey] != true {
		return true, nil
	}
	if err := queries.RestoreReadOnly(ctx, conn); err != nil {
		return false, err
	}
	delete(data, readOnlyKey)
	return true, nil
}
