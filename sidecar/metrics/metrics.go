// Package metrics exposes the sidecar's Prometheus metrics. Names are
// prefixed "claimd_"; durations are in seconds. Labels never carry tenant,
// key or payload data, so their cardinality stays bounded.
package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
)

// Metrics holds the collectors; it implements claim.Observer.
type Metrics struct {
	Registry        *prometheus.Registry
	claims          *prometheus.CounterVec
	conflicts       prometheus.Counter
	retries         prometheus.Counter
	failures        *prometheus.CounterVec
	claimToComplete prometheus.Histogram
	HTTPDuration    *prometheus.HistogramVec
	ingest          *prometheus.CounterVec
	dispatch        *prometheus.CounterVec
	dispatchLatency prometheus.Histogram
	reloads         *prometheus.CounterVec
	reloadOK        prometheus.Gauge
	authRefusals    *prometheus.CounterVec
	keyLookups      prometheus.Counter
	groupSize       *prometheus.HistogramVec
	duplicates      *boundedCounter
	shadow          *boundedCounter
	revisions       *boundedCounter
}

// StatsFunc reads the open-record snapshot for the gauges.
type StatsFunc func(ctx context.Context) (claim.Stats, error)

// New registers every collector on a fresh registry. stats (may be nil)
// feeds the gauges on each scrape, bounded by a 2-second timeout.
func New(stats StatsFunc) *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "claimd_claims_total", Help: "Claim attempts by outcome.",
		}, []string{"outcome"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "claimd_conflicts_total", Help: "Claims and ingested deliveries of a known key with a different payload hash.",
		}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "claimd_retries_total", Help: "Won claims that were not the first attempt (retry after failure, reclaimed lease or operator retry).",
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "claimd_failures_total", Help: "Failed attempts reported by kind (retryable, permanent, unknown).",
		}, []string{"kind"}),
		claimToComplete: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "claimd_claim_to_complete_seconds", Help: "Time from the winning claim to Complete, in seconds.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600},
		}),
		HTTPDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "claimd_http_request_duration_seconds", Help: "HTTP request latency by method, route and status code class, in seconds.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"method", "route", "code"}),
	}
	m.ingest = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "claimd_ingest_deliveries_total",
		Help: "Provider deliveries by configured source and result (accepted, duplicate, conflict, handshake, body_too_large, or the verification error code).",
	}, []string{"source", "result"})
	m.dispatch = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "claimd_dispatch_total",
		Help: "Dispatch attempts to targets by source and result (dispatched, retry, dead_lettered), checks of dispatches waiting for their source to be configured again (waiting), runs that waited for another attempt's live lease (in_flight), and answers not recorded because their attempt's lease was taken over (reservation_lost).",
	}, []string{"source", "result"})
	m.dispatchLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "claimd_dispatch_latency_seconds", Help: "Time from receipt to successful dispatch, in seconds.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800},
	})
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "claimd_sources_reloads_total",
		Help: "Reloads of the sources file by result: applied, or refused (empty, cut short, unreadable or invalid; the running configuration was kept).",
	}, []string{"result"})
	m.reloadOK = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "claimd_sources_file_applied",
		Help: "0 while the sources file on disk was refused (the running configuration is an earlier one), else 1.",
	})
	m.authRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "claimd_auth_refusals_total",
		Help: "Refused authentications of /v1 requests by reason: missing, malformed (not a key claimd issues; no query), cached (refused by the database within the negative cache TTL; no query), unknown (no active key with this hash; one query), rate_limited (429; no query).",
	}, []string{"reason"})
	m.keyLookups = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "claimd_auth_key_lookups_total",
		Help: "Database queries for API keys (concurrent requests with one key share one).",
	})
	m.groupSize = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "claimd_group_calls",
		Help:    "Calls decided together in one transaction (group commit) by kind: claim, settle (Complete and Fail), ingest (deliveries of POST /ingest), or dispatch (dispatches marked done after a 2xx).",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
	}, []string{"kind"})
	m.duplicates = &boundedCounter{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "claimd_duplicates_total",
		Help: "Duplicate (and in_progress) copies stopped, by source (the ingest door or trigger source, else the claim's source; " +
			"the first 200 names, then \"_other\") and cause (operator_replay, reconciled, backfill, another_door, provider_retry, dispatch_retry, n8n_twice, n8n_two_versions, upstream_repeat).",
	}, []string{"source", "cause"}), max: maxDuplicateSources, seen: map[string]bool{}}
	m.Registry.MustRegister(m.duplicates.vec)
	m.shadow = &boundedCounter{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "claimd_shadow_decisions_total",
		Help: "Claims decided in shadow mode (observe only: answered won, recorded as decided), by source (the claim's source, " +
			"the dedupe scope; the first 200 names, then \"_other\") and would_be, the outcome claimd decided (won, duplicate, " +
			"in_progress, conflict, …): duplicate and in_progress are copies enforcement would have stopped.",
	}, []string{"source", "would_be"}), max: maxDuplicateSources, seen: map[string]bool{}}
	m.Registry.MustRegister(m.shadow.vec)
	m.revisions = &boundedCounter{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "claimd_duplicate_cause_revisions_total",
		Help: "Duplicate copies whose cause a later report changed, by source (as claimd_duplicates_total), from (the cause " +
			"the copy was counted under in claimd_duplicates_total, which keeps it: counters never decrease) and to (the cause " +
			"it has now): an n8n execution's workflow version, told by the settle hook after the copy was stopped, shows two " +
			"versions of one workflow (from n8n_twice or upstream_repeat, to n8n_two_versions).",
	}, []string{"source", "from", "to"}), max: maxDuplicateSources, seen: map[string]bool{}}
	m.Registry.MustRegister(m.revisions.vec)
	m.groupSize.WithLabelValues("claim")
	m.groupSize.WithLabelValues("settle")
	m.groupSize.WithLabelValues("ingest")
	m.groupSize.WithLabelValues("dispatch")
	m.Registry.MustRegister(m.groupSize)
	for _, r := range auth.Refusals {
		m.authRefusals.WithLabelValues(string(r))
	}
	m.Registry.MustRegister(m.authRefusals, m.keyLookups)
	m.reloads.WithLabelValues("applied")
	m.reloads.WithLabelValues("refused")
	m.reloadOK.Set(1)
	m.Registry.MustRegister(m.ingest, m.dispatch, m.dispatchLatency, m.reloads, m.reloadOK)
	for _, o := range claim.Outcomes {
		m.claims.WithLabelValues(string(o))
	}
	for _, k := range []claim.FailKind{claim.Retryable, claim.Permanent, claim.UnknownOutcome} {
		m.failures.WithLabelValues(string(k))
	}
	m.Registry.MustRegister(m.claims, m.conflicts, m.retries, m.failures, m.claimToComplete, m.HTTPDuration,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if stats != nil {
		m.Registry.MustRegister(&statsCollector{stats: stats})
	}
	return m
}

// Grouped implements claim.GroupObserver.
func (m *Metrics) Grouped(kind string, n int) { m.groupSize.WithLabelValues(kind).Observe(float64(n)) }

// Claimed implements claim.Observer.
func (m *Metrics) Claimed(_ string, o claim.Outcome, attempt int) {
	m.claims.WithLabelValues(string(o)).Inc()
	if o == claim.Conflict {
		m.conflicts.Inc()
	}
	if o == claim.Won && attempt > 1 {
		m.retries.Inc()
	}
}

// Duplicated implements claim.DuplicateObserver: one copy stopped, and
// why.
func (m *Metrics) Duplicated(source string, c claim.Cause) {
	m.duplicates.inc(source, string(c))
}

// CauseRevised implements claim.CauseRevisionObserver: one copy's cause
// changed after it was counted.
func (m *Metrics) CauseRevised(r claim.CauseRevision) {
	m.revisions.inc(r.Source, string(r.From), string(r.To))
}

// ShadowDecided implements claim.ShadowObserver: one shadow claim and
// what it would have been.
func (m *Metrics) ShadowDecided(source string, wouldBe claim.Outcome) {
	m.shadow.inc(source, string(wouldBe))
}

// maxDuplicateSources bounds the source label of claimd_duplicates_total:
// a claim's source is the caller's (POST /v1/claims), so past this many
// distinct names the rest count as "_other".
const maxDuplicateSources = 200

// boundedCounter is a counter vector over (source, labels…) whose source
// label takes at most max distinct values.
type boundedCounter struct {
	vec  *prometheus.CounterVec
	max  int
	mu   sync.Mutex
	seen map[string]bool
}

func (b *boundedCounter) inc(source string, labels ...string) {
	b.mu.Lock()
	if !b.seen[source] {
		if len(b.seen) >= b.max {
			source = "_other"
		} else {
			b.seen[source] = true
		}
	}
	b.mu.Unlock()
	b.vec.WithLabelValues(append([]string{source}, labels...)...).Inc()
}

// Completed implements claim.Observer.
func (m *Metrics) Completed(_ string, d time.Duration) { m.claimToComplete.Observe(d.Seconds()) }

// Failed implements claim.Observer.
func (m *Metrics) Failed(_ string, k claim.FailKind) { m.failures.WithLabelValues(string(k)).Inc() }

var (
	openDesc             = prometheus.NewDesc("claimd_records_open", "Records not in a terminal state, by state (all tenants).", []string{"state"}, nil)
	oldestProcessingDesc = prometheus.NewDesc("claimd_oldest_processing_seconds",
		"Age of the oldest claim still processing, in seconds (0 when none).", nil, nil)
	oldestReceivedDesc = prometheus.NewDesc("claimd_oldest_received_seconds",
		"Age of the oldest inbox event not yet claimed, in seconds (0 when none).", nil, nil)
	oldestDispatchDesc = prometheus.NewDesc("claimd_oldest_dispatch_pending_seconds",
		"Age of the oldest inbox event whose dispatch is pending (no 2xx yet; with require_claim, not yet claimed), in seconds (0 when none).", nil, nil)
	statsUpDesc  = prometheus.NewDesc("claimd_stats_up", "1 when the last database stats query succeeded.", nil, nil)
	dispatchDesc = prometheus.NewDesc("claimd_inbox_dispatch_open",
		"Inbox events by dispatch state: pending (waiting or retrying) and dead_lettered (needs a replay).", []string{"state"}, nil)
)

type statsCollector struct{ stats StatsFunc }

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- openDesc
	ch <- oldestProcessingDesc
	ch <- oldestReceivedDesc
	ch <- oldestDispatchDesc
	ch <- statsUpDesc
	ch <- dispatchDesc
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := c.stats(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(statsUpDesc, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(statsUpDesc, prometheus.GaugeValue, 1)
	for state, n := range map[claim.State]int64{
		claim.StateUnknown: s.Unknown, claim.StateDeadLettered: s.DeadLettered, claim.StateProcessing: s.Processing,
		claim.StateRetryableFailed: s.RetryableFailed, claim.StateReceived: s.Received,
	} {
		ch <- prometheus.MustNewConstMetric(openDesc, prometheus.GaugeValue, float64(n), string(state))
	}
	ch <- prometheus.MustNewConstMetric(oldestProcessingDesc, prometheus.GaugeValue, s.OldestProcessing.Seconds())
	ch <- prometheus.MustNewConstMetric(oldestReceivedDesc, prometheus.GaugeValue, s.OldestReceived.Seconds())
	ch <- prometheus.MustNewConstMetric(oldestDispatchDesc, prometheus.GaugeValue, s.OldestDispatchPending.Seconds())
	ch <- prometheus.MustNewConstMetric(dispatchDesc, prometheus.GaugeValue, float64(s.DispatchPending), "pending")
	ch <- prometheus.MustNewConstMetric(dispatchDesc, prometheus.GaugeValue, float64(s.DispatchDeadLettered), "dead_lettered")
}

// AuthRefused implements auth.Observer.
func (m *Metrics) AuthRefused(reason auth.Refusal) {
	m.authRefusals.WithLabelValues(string(reason)).Inc()
}

// KeyLookedUp implements auth.Observer.
func (m *Metrics) KeyLookedUp() { m.keyLookups.Inc() }

// Received implements inbox.Observer. Sources are configured names, so the
// label stays bounded.
func (m *Metrics) Received(source string, s inbox.Status) {
	m.ingest.WithLabelValues(source, string(s)).Inc()
	if s == inbox.Conflict {
		m.conflicts.Inc() // one conflict counter for claims and ingest
	}
}

// Rejected implements inbox.Observer.
func (m *Metrics) Rejected(source, reason string) { m.ingest.WithLabelValues(source, reason).Inc() }

// Dispatched implements inbox.Observer.
func (m *Metrics) Dispatched(source, result string, sinceReceipt time.Duration) {
	m.dispatch.WithLabelValues(source, result).Inc()
	if result == "dispatched" {
		m.dispatchLatency.Observe(sinceReceipt.Seconds())
	}
}

// SourcesReloaded counts one reload of the sources file: applied, or
// refused with the running configuration kept.
func (m *Metrics) SourcesReloaded(applied bool) {
	if applied {
		m.reloads.WithLabelValues("applied").Inc()
		m.reloadOK.Set(1)
		return
	}
	m.reloads.WithLabelValues("refused").Inc()
	m.reloadOK.Set(0)
}

// SourcesFileCurrent records that the sources file on disk is the running
// configuration again (a refused file was put back as it was).
func (m *Metrics) SourcesFileCurrent() { m.reloadOK.Set(1) }

// Replication is what the primary's commits wait for, as claimd last read
// it (see ObserveReplication).
type Replication struct {
	// Known: Synchronous could be told (claimd reads a primary, and may
	// read pg_stat_replication's sync_state: pg_monitor or superuser).
	Known bool
	// Synchronous: a commit returns only once a connected synchronous
	// standby has it, so an acknowledged claim survives a failover to it.
	Synchronous bool
	// Standbys counts the connected standbys by sync_state (sync, quorum,
	// potential, async; unknown when the state cannot be read).
	Standbys map[string]int
}

// ReplicationStates are the sync_state label values of claimd_db_standbys.
var ReplicationStates = []string{"sync", "quorum", "potential", "async", "unknown"}

// ReplicationFunc returns the latest replication check; ok is false while
// there is none (the database is unreachable or a standby).
type ReplicationFunc func(ctx context.Context) (r Replication, ok bool)

var (
	syncReplicationDesc = prometheus.NewDesc("claimd_db_synchronous_replication",
		"1 when the primary's commits wait for a connected synchronous standby (an acknowledged claim survives a failover to it), "+
			"0 when they do not (asynchronous standbys, none, or synchronous_commit local/off); absent while unknown.", nil, nil)
	standbysDesc = prometheus.NewDesc("claimd_db_standbys",
		"Standbys connected to the primary by sync_state (sync, quorum, potential, async; unknown without pg_monitor).",
		[]string{"sync_state"}, nil)
)

type replicationCollector struct{ fn ReplicationFunc }

func (c *replicationCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- syncReplicationDesc
	ch <- standbysDesc
}

func (c *replicationCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r, ok := c.fn(ctx)
	if !ok {
		return
	}
	if r.Known {
		v := 0.0
		if r.Synchronous {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(syncReplicationDesc, prometheus.GaugeValue, v)
	}
	for _, s := range ReplicationStates {
		ch <- prometheus.MustNewConstMetric(standbysDesc, prometheus.GaugeValue, float64(r.Standbys[s]), s)
	}
}

// ObserveReplication registers claimd_db_synchronous_replication and
// claimd_db_standbys, read from fn on each scrape.
func (m *Metrics) ObserveReplication(fn ReplicationFunc) {
	m.Registry.MustRegister(&replicationCollector{fn: fn})
}

// ObserveStaleServerRefusals registers
// claimd_db_stale_server_refusals_total, read from fn on each scrape.
func (m *Metrics) ObserveStaleServerRefusals(fn func() int64) {
	m.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "claimd_db_stale_server_refusals_total",
		Help: "Database connections refused because the server was an old primary (an older timeline than one claimd wrote to) " +
			"or another database system.",
	}, func() float64 { return float64(fn()) }))
}

// ObserveOpenConnections exports claimd_http_connections, the client
// connections the API listener holds open (accepted and not yet closed,
// idle keep-alive ones included), and claimd_http_connections_limit
// (CLAIMD_MAX_CONNECTIONS).
func (m *Metrics) ObserveOpenConnections(open func() int64, limit int64) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "claimd_http_connections",
		Help: "Client connections the API listener holds open (accepted, not yet closed; idle keep-alive ones included).",
	}, func() float64 { return float64(open()) }))
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "claimd_http_connections_limit",
		Help: "Client connections served at once before a new one is refused (CLAIMD_MAX_CONNECTIONS).",
	}, func() float64 { return float64(limit) }))
}

// ObserveBodyBudget exports one route class's request-body budget
// ("api" for /v1, "ingest" for /ingest): claimd_http_body_budget_bytes
// (its size), and claimd_http_body_bytes{kind="reserved"} (what the
// bodies being read or held reserved) and {kind="received"} (what of them
// has arrived), all in bytes.
func (m *Metrics) ObserveBodyBudget(class string, size int64, reserved, received func() int64) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "claimd_http_body_budget_bytes",
		Help:        "Request-body bytes a route class may hold at once (CLAIMD_API_BODY_BYTES_IN_FLIGHT, CLAIMD_INGEST_BODY_BYTES_IN_FLIGHT).",
		ConstLabels: prometheus.Labels{"class": class},
	}, func() float64 { return float64(size) }))
	for kind, fn := range map[string]func() int64{"reserved": reserved, "received": received} {
		m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "claimd_http_body_bytes",
			Help:        "Request-body bytes of the requests in flight: reserved from the budget, and received so far.",
			ConstLabels: prometheus.Labels{"class": class, "kind": kind},
		}, func() float64 { return float64(fn()) }))
	}
}
