package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idempotent-claim/idempotent-claim/sidecar/reconcile"
)

// ReconcileMetrics are the reconcile runner's metrics
// (claimd_reconcile_*); it implements reconcile.Observer.
type ReconcileMetrics struct {
	calls  *prometheus.CounterVec
	gaveUp *prometheus.CounterVec

	mu         sync.Mutex
	configured map[string]bool
}

// ReconcileOpenFunc counts the open reconciles by state (waiting,
// calling, gave_up) for the claimd_reconcile_open gauge
// (reconcile.Runner.Open).
type ReconcileOpenFunc func(ctx context.Context) (map[string]int, error)

var reconcileOnce sync.Map // *Metrics → *ReconcileMetrics

// Reconcile returns m's reconcile metrics, registering them on first use.
func (m *Metrics) Reconcile() *ReconcileMetrics {
	if v, ok := reconcileOnce.Load(m); ok {
		return v.(*ReconcileMetrics)
	}
	r := &ReconcileMetrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "claimd_reconcile_calls_total",
			Help: "Reconcile calls by reconciler and result, each call counted once, when it ends: the verdict first applied " +
				"(done, not_done, still_unknown; in the response or through the API), a failed call (timeout, unreachable, " +
				"status_4xx, status_5xx, bad_answer; a call without an answer by its deadline is a timeout), or fenced (answered " +
				"after the claim was settled by its holder or an operator: nothing applied). A repeated answer, another verdict " +
				"after one was applied, or an answer after the call ended is not counted: the sum over results is the calls " +
				"made. Every result of a configured reconciler starts at 0."},
			[]string{"reconciler", "result"}),
		gaveUp: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "claimd_reconcile_gave_up_total",
			Help: "Reconciles that gave up after max_calls calls without a done or not_done answer: the claim stays unknown " +
				"for an operator. Starts at 0 for a configured reconciler."}, []string{"reconciler"}),
		configured: map[string]bool{},
	}
	if v, loaded := reconcileOnce.LoadOrStore(m, r); loaded {
		return v.(*ReconcileMetrics)
	}
	m.Registry.MustRegister(r.calls, r.gaveUp)
	return r
}

// Configure starts the series of the configured reconcilers (names) at
// 0, at start and on each reload (counters that appear with their first
// increment are invisible to increase() and rate()); a reconciler no
// longer configured keeps its series.
func (r *ReconcileMetrics) Configure(names []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range names {
		if r.configured[n] {
			continue
		}
		r.configured[n] = true
		for _, res := range reconcile.Results {
			r.calls.WithLabelValues(n, res)
		}
		r.gaveUp.WithLabelValues(n)
	}
}

// ReconcileCalled implements reconcile.Observer.
func (r *ReconcileMetrics) ReconcileCalled(reconciler, result string) {
	r.calls.WithLabelValues(reconciler, result).Inc()
}

// ReconcileGaveUp implements reconcile.Observer.
func (r *ReconcileMetrics) ReconcileGaveUp(reconciler string) {
	r.gaveUp.WithLabelValues(reconciler).Inc()
}

var reconcileOpenDesc = prometheus.NewDesc("claimd_reconcile_open",
	"Reconciles of claims still unknown, by state: waiting (the next call is due later), calling (a call in flight, "+
		"answered in its response or through the API by its deadline), gave_up (no more calls: an operator must resolve the claim).",
	[]string{"state"}, nil)

type reconcileOpenCollector struct{ open ReconcileOpenFunc }

func (c *reconcileOpenCollector) Describe(ch chan<- *prometheus.Desc) { ch <- reconcileOpenDesc }

func (c *reconcileOpenCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	counts, err := c.open(ctx)
	if err != nil {
		return // claimd_stats_up tells a database that does not answer
	}
	for _, s := range []string{"waiting", "calling", "gave_up"} {
		ch <- prometheus.MustNewConstMetric(reconcileOpenDesc, prometheus.GaugeValue, float64(counts[s]), s)
	}
}

// ObserveReconcileOpen feeds claimd_reconcile_open from open on each
// scrape, bounded by a 2-second timeout.
func (m *Metrics) ObserveReconcileOpen(open ReconcileOpenFunc) {
	m.Registry.MustRegister(&reconcileOpenCollector{open: open})
}

// Calls is claimd_reconcile_calls_total (tests read it).
func (r *ReconcileMetrics) Calls() *prometheus.CounterVec { return r.calls }

// GaveUp is claimd_reconcile_gave_up_total (tests read it).
func (r *ReconcileMetrics) GaveUp() *prometheus.CounterVec { return r.gaveUp }
