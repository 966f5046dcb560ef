package metrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/metrics"
	"github.com/idempotent-claim/idempotent-claim/sidecar/reconcile"
)

// The configured reconcilers' series start at 0 (every result of
// claimd_reconcile_calls_total, claimd_reconcile_gave_up_total); a
// reconciler no longer configured keeps its counts; claimd_reconcile_open
// is read on each scrape and absent while its read fails.
func TestReconcileMetrics(t *testing.T) {
	t.Parallel()
	m := metrics.New(nil)
	r := m.Reconcile()
	require.Same(t, r, m.Reconcile(), "registered once")
	r.Configure([]string{"crm"})
	n, err := testutil.GatherAndCount(m.Registry, "claimd_reconcile_calls_total", "claimd_reconcile_gave_up_total")
	require.NoError(t, err)
	require.Equal(t, len(reconcile.Results)+1, n)
	r.ReconcileCalled("crm", reconcile.ResultTimeout)
	r.ReconcileGaveUp("crm")
	r.Configure([]string{"erp"})
	require.Equal(t, 1.0, testutil.ToFloat64(r.Calls().WithLabelValues("crm", "timeout")))
	require.Equal(t, 1.0, testutil.ToFloat64(r.GaveUp().WithLabelValues("crm")))
	require.Equal(t, 0.0, testutil.ToFloat64(r.GaveUp().WithLabelValues("erp")))

	fail := true
	m.ObserveReconcileOpen(func(context.Context) (map[string]int, error) {
		if fail {
			return nil, errors.New("database down")
		}
		return map[string]int{"waiting": 3, "calling": 1}, nil
	})
	n, err = testutil.GatherAndCount(m.Registry, "claimd_reconcile_open")
	require.NoError(t, err)
	require.Zero(t, n)
	fail = false
	require.NoError(t, testutil.GatherAndCompare(m.Registry, strings.NewReader(`
# HELP claimd_reconcile_open Reconciles of claims still unknown, by state: waiting (the next call is due later), calling (a call in flight, answered in its response or through the API by its deadline), gave_up (no more calls: an operator must resolve the claim).
# TYPE claimd_reconcile_open gauge
claimd_reconcile_open{state="calling"} 1
claimd_reconcile_open{state="gave_up"} 0
claimd_reconcile_open{state="waiting"} 3
`), "claimd_reconcile_open"))
}
