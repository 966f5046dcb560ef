package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// BackfillMetrics are gap detection's metrics (claimd_backfill_*); it
// implements backfill.Observer.
type BackfillMetrics struct {
	scans       *prometheus.CounterVec
	missed      *prometheus.CounterVec
	recovered   *prometheus.CounterVec
	requests    *prometheus.CounterVec
	lastSuccess *prometheus.GaugeVec
	interval    *prometheus.GaugeVec

	mu         sync.Mutex
	configured map[string]bool
}

// BackfillScanResults are the results a finished scan is counted under
// (backfill.Result*), and BackfillRecoveredHows the ways a missed event is
// recovered: Configure starts each at 0.
var (
	BackfillScanResults   = []string{"ok", "partial", "rate_limited", "credential_refused", "error"}
	BackfillRecoveredHows = []string{"fetched", "redelivered"}
)

var backfillOnce sync.Map // *Metrics → *BackfillMetrics

// Backfill returns m's backfill metrics, registering them on first use.
func (m *Metrics) Backfill() *BackfillMetrics {
	if v, ok := backfillOnce.Load(m); ok {
		return v.(*BackfillMetrics)
	}
	b := &BackfillMetrics{
		scans: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "claimd_backfill_scans_total",
			Help: "Scans of a source's provider event list, by result (ok, partial, rate_limited, credential_refused, error); " +
				"every result of a source with backfill starts at 0."},
			[]string{"source", "result"}),
		missed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "claimd_backfill_missed_total",
			Help: "Events the provider holds that claimd never received, found by scans (each once); " +
				"starts at 0 for a source with backfill."}, []string{"source"}),
		recovered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "claimd_backfill_recovered_total",
			Help: "Missed events recovered, by how: fetched (stored from the provider's copy) or redelivered (asked of the provider); " +
				"each how starts at 0 for a source with backfill."},
			[]string{"source", "how"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "claimd_backfill_provider_requests_total",
			Help: "Calls to providers' list APIs, by status class (2xx, 4xx, 429, 5xx) or, without an answer, by failure " +
				"(timeout, unreachable, dns, tls, unreadable, error)."}, []string{"source", "code_class"}),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "claimd_backfill_last_success_timestamp_seconds",
			Help: "When a scan of the source last completed (unix seconds), on the replica that ran it; " +
				"absent until one did."}, []string{"source"}),
		interval: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "claimd_backfill_interval_seconds",
			Help: "The scheduled scan interval of each source with backfill in the running sources file " +
				"(backfill.interval_minutes, in seconds; 0: on demand only)."}, []string{"source"}),
		configured: map[string]bool{},
	}
	if v, loaded := backfillOnce.LoadOrStore(m, b); loaded {
		return v.(*BackfillMetrics)
	}
	m.Registry.MustRegister(b.scans, b.missed, b.recovered, b.requests, b.lastSuccess, b.interval)
	return b
}

// Configure takes the sources with backfill of the configuration claimd
// runs now (name → scheduled interval, 0 for on demand only), at start and
// on each reload: it sets claimd_backfill_interval_seconds for each,
// removes it for a source that has no backfill any more, and starts each
// source's scan, missed and recovered counters at 0 (counters that appear
// with their first increment are invisible to increase() and rate()).
// claimd_backfill_last_success_timestamp_seconds is not started: it stays
// absent until a scan succeeds, which is how a source that never
// succeeded shows.
func (b *BackfillMetrics) Configure(intervals map[string]time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for name := range b.configured {
		if _, ok := intervals[name]; !ok {
			b.interval.DeleteLabelValues(name)
			delete(b.configured, name)
		}
	}
	for name, iv := range intervals {
		b.interval.WithLabelValues(name).Set(iv.Seconds())
		b.configured[name] = true
		for _, r := range BackfillScanResults {
			b.scans.WithLabelValues(name, r)
		}
		b.missed.WithLabelValues(name)
		for _, h := range BackfillRecoveredHows {
			b.recovered.WithLabelValues(name, h)
		}
	}
}

// Scanned counts a finished scan.
func (b *BackfillMetrics) Scanned(source, result string, at time.Time) {
	b.scans.WithLabelValues(source, result).Inc()
	if result == "ok" {
		b.lastSuccess.WithLabelValues(source).Set(float64(at.Unix()))
	}
}

// Missed counts missed events.
func (b *BackfillMetrics) Missed(source string, n int) {
	b.missed.WithLabelValues(source).Add(float64(n))
}

// Recovered counts recovered events.
func (b *BackfillMetrics) Recovered(source, how string, n int) {
	b.recovered.WithLabelValues(source, how).Add(float64(n))
}

// ProviderRequest counts one call to a provider's API.
func (b *BackfillMetrics) ProviderRequest(source, class string) {
	b.requests.WithLabelValues(source, class).Inc()
}
