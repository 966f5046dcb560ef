package httpapi_test

import (
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// claimd_http_request_duration_seconds tells a claim (POST /v1/claims)
// from a lookup by key (GET /v1/claims), which share the route: an alert
// on claim latency reads the POST series only.
func TestRequestDurationByMethod(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.won(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_latency"})
	b.claim(t, keyA, map[string]any{"source": "stripe", "event_id": "evt_latency"}) // in_progress
	b.ok(t, call{method: "GET", path: "/v1/claims?source=stripe&event_id=evt_latency", key: keyA})
	b.fails(t, call{method: "GET", path: "/v1/claims?source=stripe", key: keyA}, 422, "invalid", "event_id")

	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(scrapeMetrics(t, "http://"+b.addr)))
	require.NoError(t, err)
	f := fams["claimd_http_request_duration_seconds"]
	require.NotNil(t, f)
	counts := map[string]uint64{}
	for _, m := range f.GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		if l["route"] == "/v1/claims" {
			counts[l["method"]+" "+l["code"]] = m.GetHistogram().GetSampleCount()
		}
	}
	require.Equal(t, map[string]uint64{"POST 2xx": 2, "GET 2xx": 1, "GET 4xx": 1}, counts)
}
