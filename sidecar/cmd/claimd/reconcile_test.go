package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// Through the real binary: claimd's reconcile runner calls the reconciler
// of a claim left unknown and settles it by the answer, and a reload of
// the sources file applies new reconcilers (their URL and the sources
// naming them) as it applies other settings.
func TestReconcileRunnerAndReload(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	paths := map[string][]string{} // claim id → paths called
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(b, &body)
		id, _ := body["claim_id"].(string)
		mu.Lock()
		paths[id] = append(paths[id], r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"verdict":"done","result_ref":"found-`+r.URL.Path[1:]+`"}`)
	}))
	t.Cleanup(srv.Close)
	calls := func(id string) []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), paths[id]...)
	}
	const key = "t1-reconcile-key-0123456789"
	b := &reloadBundle{t: t, path: filepath.Join(t.TempDir(), "sources.yaml")}
	b.write(`reconcilers:
  crm: {url: "` + srv.URL + `/crm", delay_seconds: 0}
sources:
  orders: {reconciler: crm}
`)
	b.p = startServe(t, map[string]string{"DATABASE_URL": pgtest.NewDatabase(t), "CLAIMD_API_KEYS": "t1:" + key,
		"CLAIMD_SOURCES_FILE": b.path, "CLAIMD_RELOAD_INTERVAL_SECONDS": "0", "CLAIMD_RECONCILE_INTERVAL_SECONDS": "1"})
	b.api = newAPI(t, b.p.url, key)
	unknown := func(source, event string) string {
		t.Helper()
		won := b.api.must(http.StatusOK, "POST", "/v1/claims", `{"source":"`+source+`","event_id":"`+event+`"}`)
		id := won["claim_id"].(string)
		b.api.must(http.StatusOK, "POST", "/v1/claims/"+id+"/fail",
			`{"claim_token":"`+won["claim_token"].(string)+`","error":"socket hang up","retry":"unknown"}`)
		return id
	}

	first := unknown("orders", "evt-1")
	b.waitMessages("reconcile answered", 1)
	rec := b.api.must(http.StatusOK, "GET", "/v1/claims/"+first, "")
	require.Equal(t, "completed", rec["state"])
	require.Equal(t, "found-crm", rec["result_ref"])
	require.Equal(t, []string{"/crm"}, calls(first))
	require.Equal(t, "answered", rec["reconcile"].(map[string]any)["state"])
	v, ok := metricValue(t, b.p.url, `claimd_reconcile_calls_total{reconciler="crm",result="done"}`)
	require.True(t, ok)
	require.Equal(t, 1.0, v)

	// A new reconciler and a source naming it, applied on SIGHUP.
	b.write(`reconcilers:
  crm: {url: "` + srv.URL + `/crm", delay_seconds: 0}
  erp: {url: "` + srv.URL + `/erp", delay_seconds: 0}
sources:
  orders: {reconciler: crm}
  invoices: {reconciler: erp}
`)
	b.hup()
	b.waitMessages(msgReloaded, 1)
	second := unknown("invoices", "evt-2")
	b.waitMessages("reconcile answered", 2)
	require.Equal(t, []string{"/erp"}, calls(second))
	require.Equal(t, "found-erp", b.api.must(http.StatusOK, "GET", "/v1/claims/"+second, "")["result_ref"])
	v, ok = metricValue(t, b.p.url, `claimd_reconcile_gave_up_total{reconciler="erp"}`)
	require.True(t, ok, "its series start at 0")
	require.Zero(t, v)

	// A source naming a reconciler that is not configured is refused;
	// the running configuration stays.
	b.write(`reconcilers:
  crm: {url: "` + srv.URL + `/crm", delay_seconds: 0}
sources:
  orders: {reconciler: nosuch-SECRETISH}
`)
	b.hup()
	refused := b.waitMessages(msgRefused, 1)
	require.Contains(t, refused["error"], "sources.orders.reconciler must name a reconciler")
	require.NotContains(t, refused["error"], "SECRETISH")
}
