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
}

var backfillOnce sync.Map // *Metrics → *BackfillMetrics

// Backfill returns m's backfill metrics, registering them on first use.
func (m *Metrics) Backfill() *BackfillMetrics {
	if v, ok := backfillOnce.Load(m); ok {
		return v.(*BackfillMetrics)
	}
	b := &BackfillMetrics{
		scans: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "claimd_backfill_scans_total",
			Help: "Scans of a source's provider event list, by result (ok, rate_limited, credential_refused, error)."},
			[]string{"source", "result"}),
		missed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "claimd_backfill_missed_total",
			Help: "Events the provider holds that claimd never received, found by scans."}, []string{"source"}),
		recovered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "claimd_backfill_recovered_total",
			Help: "Missed events recovered, by how: fetched (stored from the provider's copy) or redelivered (asked of the provider)."},
			[]string{"source", "how"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "claimd_backfill_provider_requests_total",
			Help: "Calls to providers' list APIs, by status class (2xx, 4xx, 429, 5xx, error)."}, []string{"source", "code_class"}),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "claimd_backfill_last_success_timestamp_seconds",
			Help: "When a scan of the source last completed (unix seconds)."}, []string{"source"}),
	}
	if v, loaded := backfillOnce.LoadOrStore(m, b); loaded {
		return v.(*BackfillMetrics)
	}
	m.Registry.MustRegister(b.scans, b.missed, b.recovered, b.requests, b.lastSuccess)
	return b
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
