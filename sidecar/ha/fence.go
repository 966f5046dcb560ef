package ha

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
)

// A returning old primary does not take writes: the fence.
//
// A PostgreSQL cluster that failed over has two servers that take writes
// once its old primary is started again unchanged: the promoted standby,
// on a new timeline, and the old primary, still on the timeline it had,
// missing what the promoted one acknowledged since. A host list
// (postgres://…@old,new/…?target_session_attrs=read-write) picks the first
// one that takes writes, so new connections of a running claimd go back to
// the old primary, and claims the promoted server answered `won` are won
// again there: a second effect.
//
// The fence remembers, per process, the server identity it writes to: the
// system identifier (pg_control_system(), the same on a primary and every
// standby made from it, different for any other cluster) and the highest
// timeline seen on a primary. Every new connection to a primary (the
// pool's, River's through the pool, the claim waiter's LISTEN connection)
// is checked before use, in pgconn's ValidateConnect, where
// target_session_attrs is checked too: a server of another system, or of
// the same system on an older timeline, is refused, and pgconn tries the
// next host of the URL. When no host is left, the connection fails (a
// *pgconn.ConnectError wrapping a StaleServerError), which requests answer
// 503 with Retry-After and /readyz names. A newer timeline (a failover
// claimd follows) is accepted and remembered.
//
// The timeline is the one the server writes WAL on now: the first 8 hex
// digits of pg_walfile_name(pg_current_wal_lsn()). Not
// pg_control_checkpoint().timeline_id: after pg_ctl promote it still names
// the old timeline until the end-of-recovery checkpoint completes (seen
// on PostgreSQL 15: 1 right after promote, 2 about a second later), so a
// fence reading it could take the promoted server for a stale one.
//
// Standbys are not fenced (they take no writes; pg_walfile_name is not
// available during recovery). When the identity cannot be read (a managed
// service that hides the functions), fencing is off for that server, said
// once in the log.

// ServerIdentity is what the fence knows of a server.
type ServerIdentity struct {
	System   string // pg_control_system().system_identifier
	Timeline uint32
}

// Fence is the per-process record of the server claimd writes to (see
// above). Install it with Survey, before the pool opens, and Validate, as
// the pool's ValidateConnect. Safe for concurrent use.
type Fence struct {
	log zerolog.Logger
	// refusals counts refused connections (a metric).
	refusals atomic.Int64
	// onFailover, when set, is called (without the lock held) each time a
	// primary on a newer timeline is admitted: claimd has seen a failover.
	onFailover atomic.Pointer[func()]

	mu      sync.Mutex
	current ServerIdentity // zero until the first primary
	// logged: the refusals already logged, by address and identity, so
	// each stale server is logged once (not once per connection attempt).
	logged map[string]bool
	// unreadable: addresses whose identity could not be read (logged once).
	unreadable map[string]bool
}

// NewFence returns a Fence that knows no server yet; it logs to log (the
// first primary, a failover, each refused server once).
func NewFence(log zerolog.Logger) *Fence {
	return &Fence{log: log, logged: map[string]bool{}, unreadable: map[string]bool{}}
}

// OnFailover sets fn to be called each time the fence admits a primary on
// a newer timeline of its system (a failover claimd follows), outside the
// fence's lock, from the connection set-up that saw it.
func (f *Fence) OnFailover(fn func()) { f.onFailover.Store(&fn) }

// StaleServerError is a refused server. It wraps an Unavailable
// *apperr.Error, so a request whose connection could not be opened
// because of it answers 503 with Retry-After and a message in the
// sidecar's words (db.Error keeps an *apperr.Error of the chain);
// the address and timelines are for the log and /readyz only.
type StaleServerError struct {
	Addr           string
	Seen           ServerIdentity // the refused server
	Current        ServerIdentity // the one claimd writes to
	OtherSystem    bool           // Seen is of another system than Current
	At             time.Time
	unavailableErr *apperr.Error
}

func (e *StaleServerError) Error() string {
	if e.OtherSystem {
		return fmt.Sprintf("refused the database server at %s: it is another PostgreSQL system (system identifier %s) than the one "+
			"claimd already wrote to (%s); restart claimd to accept it", e.Addr, e.Seen.System, e.Current.System)
	}
	return fmt.Sprintf("refused the database server at %s: it is a primary on timeline %d, older than timeline %d that claimd "+
		"already wrote to (an old primary started again after a failover); it does not have every claim already acknowledged",
		e.Addr, e.Seen.Timeline, e.Current.Timeline)
}

func (e *StaleServerError) Unwrap() error { return e.unavailableErr }

// SafeToRetry tells pgconn's classification that nothing was sent for the
// request: the connection was refused before use.
func (e *StaleServerError) SafeToRetry() bool { return true }

// Validate returns the pgconn ValidateConnect hook of the fence: next
// (the URL's own target_session_attrs check, when set), then the server's
// identity, read with one query on each new connection. It answers a
// *StaleServerError for a server refused, so pgconn tries the next host.
func (f *Fence) Validate(next pgconn.ValidateConnectFunc) pgconn.ValidateConnectFunc {
	return func(ctx context.Context, pc *pgconn.PgConn) error {
		if next != nil {
			if err := next(ctx, pc); err != nil {
				return err
			}
		}
		return f.check(ctx, pc)
	}
}

func (f *Fence) check(ctx context.Context, pc *pgconn.PgConn) error {
	addr := pc.Conn().RemoteAddr().String()
	res, err := pc.Exec(ctx, dbsqlc.Fence).ReadAll()
	if err == nil && (len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 3) {
		err = errors.New("unexpected answer")
	}
	if err != nil {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pc.IsClosed() {
			return err // the connection broke: pgconn tries the next host
		}
		f.mu.Lock()
		first := !f.unreadable[addr]
		f.unreadable[addr] = true
		f.mu.Unlock()
		if first {
			f.log.Warn().Str("server", addr).Str("sqlstate", pgErr.Code).Str("error", pgErr.Message).
				Msg("cannot read the database server's identity (pg_control_system, pg_walfile_name): claimd cannot tell an old primary " +
					"started again after a failover from the current one on this server")
		}
		return nil
	}
	row := res[0].Rows[0]
	if string(row[0]) == "t" {
		return nil // a standby takes no writes
	}
	tl, perr := strconv.ParseUint(string(row[2]), 16, 32)
	if perr != nil {
		return fmt.Errorf("reading the timeline of %s: %w", addr, perr)
	}
	seen := ServerIdentity{System: string(row[1]), Timeline: uint32(tl)}
	return f.admit(addr, seen)
}

// MsgFailedOver is the log message of a failover the fence saw.
const MsgFailedOver = "database failed over: writing to the promoted primary on its new timeline; older timelines are refused from now on"

// admit accepts seen (and remembers it when newer) or refuses it.
func (f *Fence) admit(addr string, seen ServerIdentity) error {
	err := f.admitLocked(addr, seen)
	if errors.Is(err, errFailedOver) {
		if fn := f.onFailover.Load(); fn != nil {
			(*fn)()
		}
		return nil
	}
	return err
}

// errFailedOver is admitLocked's answer for a newer timeline: admitted.
var errFailedOver = errors.New("failed over")

func (f *Fence) admitLocked(addr string, seen ServerIdentity) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur := f.current
	switch {
	case cur.System == "":
		f.current = seen
		f.log.Info().Str("server", addr).Str("system_identifier", seen.System).Uint32("timeline", seen.Timeline).
			Msg("database primary identified (a failover fence: claimd will not write to an older timeline of it, nor to another database system)")
		return nil
	case seen.System == cur.System && seen.Timeline == cur.Timeline:
		return nil
	case seen.System == cur.System && seen.Timeline > cur.Timeline:
		f.current = seen
		f.log.Warn().Str("server", addr).Uint32("timeline", seen.Timeline).Uint32("previous_timeline", cur.Timeline).
			Msg(MsgFailedOver)
		return errFailedOver
	}
	e := &StaleServerError{Addr: addr, Seen: seen, Current: cur, OtherSystem: seen.System != cur.System, At: time.Now(),
		unavailableErr: &apperr.Error{Code: apperr.Unavailable,
			Message: "the database server reached is a former primary (an older timeline) or another database system, not the one " +
				"claimd writes to; it is refused (see the sidecar log and /readyz); retry"}}
	f.refusals.Add(1)
	key := fmt.Sprintf("%s/%s/%d/%d", addr, seen.System, seen.Timeline, cur.Timeline)
	if !f.logged[key] {
		f.logged[key] = true
		f.log.Error().Str("server", addr).Str("system_identifier", seen.System).Uint32("timeline", seen.Timeline).
			Str("current_system_identifier", cur.System).Uint32("current_timeline", cur.Timeline).
			Msg(e.Error() + ": no claim is written there; point DATABASE_URL at the current primary only (an endpoint that follows it), " +
				"and rebuild the old primary as a standby (pg_rewind or a new base backup)")
	}
	return e
}

// Refusal returns the *StaleServerError in err's chain (a connection
// the fence refused), or nil.
func Refusal(err error) *StaleServerError {
	var e *StaleServerError
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// Refusals is how many connections the fence refused (the metric
// claimd_db_stale_server_refusals_total).
func (f *Fence) Refusals() int64 { return f.refusals.Load() }

// Every host of a host list is probed at start (Survey).
//
// The fence learns the current timeline from the servers claimd writes to,
// so a claimd started after an old primary came back, on a host list that
// reaches the old primary first, would take its timeline for the current
// one and write there. Before its pool opens, a serving claimd therefore
// connects to every distinct host of DATABASE_URL (at once, each within
// startProbeTimeout; target_session_attrs is not applied) and reads each
// one's system identifier and, on a primary, its timeline:
//
//   - Servers of different PostgreSQL systems in one list: Survey returns an
//     error naming each host and its system identifier (claimd exits 1). A
//     host list is for one cluster, a primary and its standbys.
//   - A primary on an older timeline of the system than another host
//     shows (a primary, or a standby following a newer timeline, see
//     dbsqlc.Survey): the newest timeline is remembered as the fence's
//     current identity before any connection is used, so every primary
//     on an older timeline is refused (logged once, naming the host,
//     counted in claimd_db_stale_server_refusals_total) and claimd writes
//     to the newest one, or waits (not ready, 503) while none answers.
//
// Hosts that do not answer, or refuse the session, are skipped (the
// start-up wait and ConnectRefused deal with them). Hosts are named as the
// URL names them (host:port); the password never appears. What the survey
// cannot see: hosts down at start (an old primary that answers while no
// host of the newer timeline does is still taken for the current one),
// and servers that come back later (the fence's usual check covers those
// once claimd has seen the newer timeline).
//
// Cost: one connection and one query per host, in parallel, at start only;
// nothing for a URL with one host.

// surveyed is one host's answer to the survey.
type surveyed struct {
	addr     string
	standby  bool
	identity ServerIdentity
	err      error
}

// Survey probes every host of cc, the pool's connection settings, before
// the pool opens (see above). It returns an *OtherSystemsError for servers
// of different systems in one list, else nil.
func (f *Fence) Survey(ctx context.Context, cc *pgconn.Config) error {
	type target struct {
		addr string
		cfg  *pgconn.Config
	}
	var targets []target
	add := func(host string, port uint16, tls *tls.Config) {
		addr := net.JoinHostPort(host, strconv.Itoa(int(port)))
		for _, t := range targets {
			if t.addr == addr {
				t.cfg.Fallbacks = append(t.cfg.Fallbacks, &pgconn.FallbackConfig{Host: host, Port: port, TLSConfig: tls})
				return
			}
		}
		c := cc.Copy()
		c.Host, c.Port, c.TLSConfig, c.Fallbacks = host, port, tls, nil
		c.ValidateConnect, c.AfterConnect = nil, nil
		if c.ConnectTimeout == 0 || c.ConnectTimeout > startProbeTimeout {
			c.ConnectTimeout = startProbeTimeout
		}
		targets = append(targets, target{addr: addr, cfg: c})
	}
	add(cc.Host, cc.Port, cc.TLSConfig)
	for _, fb := range cc.Fallbacks {
		add(fb.Host, fb.Port, fb.TLSConfig)
	}
	if len(targets) < 2 {
		return nil
	}
	answers := make([]surveyed, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = probeIdentity(ctx, t.addr, t.cfg)
		}()
	}
	wg.Wait()
	return f.seed(answers)
}

// probeIdentity connects to one host and reads its identity.
func probeIdentity(ctx context.Context, addr string, cfg *pgconn.Config) surveyed {
	s := surveyed{addr: addr}
	ctx, cancel := context.WithTimeout(ctx, startProbeTimeout)
	defer cancel()
	pc, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		s.err = err
		return s
	}
	defer pc.Close(context.Background())
	res, err := pc.Exec(ctx, dbsqlc.Survey).ReadAll()
	if err == nil && (len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 4) {
		err = errors.New("unexpected answer")
	}
	if err != nil {
		s.err = err
		return s
	}
	row := res[0].Rows[0]
	s.standby = string(row[0]) == "t"
	s.identity.System = string(row[1])
	var tl uint64
	if s.standby {
		tl, err = strconv.ParseUint(string(row[3]), 10, 32)
	} else {
		tl, err = strconv.ParseUint(string(row[2]), 16, 32)
	}
	if err != nil {
		s.err = err
		return s
	}
	s.identity.Timeline = uint32(tl)
	return s
}

// OtherSystemsError is a host list naming servers of different systems
// (Survey).
type OtherSystemsError struct{ hosts []surveyed }

func (e *OtherSystemsError) Error() string {
	var parts []string
	for _, h := range e.hosts {
		parts = append(parts, fmt.Sprintf("%s (system identifier %s)", h.addr, h.identity.System))
	}
	return "DATABASE_URL lists servers of different PostgreSQL systems: " + strings.Join(parts, ", ") +
		"; a host list must name the servers of one cluster (a primary and its standbys): claimd would decide claims on " +
		"whichever answered first"
}

// seed applies the survey's answers (see Survey).
func (f *Fence) seed(answers []surveyed) error {
	var ok []surveyed
	for _, a := range answers {
		if a.err == nil {
			ok = append(ok, a)
		}
	}
	systems := map[string]bool{}
	for _, a := range ok {
		systems[a.identity.System] = true
	}
	if len(systems) > 1 {
		return &OtherSystemsError{hosts: ok}
	}
	var newest surveyed // a standby's timeline counts too (dbsqlc.Survey)
	for _, a := range ok {
		if a.identity.Timeline > newest.identity.Timeline {
			newest = a
		}
	}
	if newest.identity.System == "" {
		return nil
	}
	var stale []surveyed
	for _, a := range ok {
		if !a.standby && a.identity.Timeline < newest.identity.Timeline {
			stale = append(stale, a)
		}
	}
	if len(stale) == 0 {
		return nil // the fence learns the identity from the first connection, as without a survey
	}
	f.mu.Lock()
	if f.current.System == "" || f.current.System == newest.identity.System && f.current.Timeline < newest.identity.Timeline {
		f.current = newest.identity
	}
	f.mu.Unlock()
	f.log.Warn().Str("server", newest.addr).Bool("standby", newest.standby).Str("system_identifier", newest.identity.System).
		Uint32("timeline", newest.identity.Timeline).
		Msg("database hosts disagree: a primary is on an older timeline of the system than another host shows; claimd writes only to the newest timeline")
	for _, a := range stale {
		_ = f.admit(a.addr, a.identity) // refused: logged once, counted
	}
	return nil
}
