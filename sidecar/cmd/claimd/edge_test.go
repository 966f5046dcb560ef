package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/ha"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgfault"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// A database that takes the connection but never answers (frozen,
// overloaded) is named as such by /readyz, not as a migration problem.
func TestReadyzSaysTheDatabaseDoesNotAnswer(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	proxy := pgfault.New(t, db)
	s := startInProcess(t, map[string]string{"DATABASE_URL": proxy.URL(db), "CLAIMD_API_KEYS": "t1:t1-readyz-key-0123456789"})
	for _, stmt := range []string{"current_setting('transaction_isolation')", "to_regclass"} {
		stalled := proxy.Arm(func(sql string) bool { return strings.Contains(sql, stmt) }, pgfault.Stall, false)
		res, err := http.Get(s.url + "/readyz")
		require.NoError(t, err)
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		<-stalled
		require.Equal(t, http.StatusServiceUnavailable, res.StatusCode, "%s", body)
		var r struct{ Status, Reason string }
		require.NoError(t, json.Unmarshal(body, &r))
		require.Equal(t, ha.DatabaseNotAnswering, r.Reason, "stalled at %s", stmt)
	}
}

// /metrics on its own address (CLAIMD_METRICS_ADDR) and behind a bearer
// token (CLAIMD_METRICS_TOKEN): the main address no longer serves it.
func TestMetricsOnTheirOwnAddressWithAToken(t *testing.T) {
	t.Parallel()
	const token = "metrics-token-0123456789"
	p := startServe(t, map[string]string{"DATABASE_URL": pgtest.NewDatabase(t), "CLAIMD_API_KEYS": "t1:t1-metrics-key-0123456789",
		"CLAIMD_METRICS_ADDR": "127.0.0.1:0", "CLAIMD_METRICS_TOKEN": token})
	ll := p.stderr.waitMessage(t, "claimd listening", p.done)
	require.NotEmpty(t, ll.MetricsAddr)
	get := func(url, auth string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	status, _ := get(p.url+"/metrics", "Bearer "+token)
	require.Equal(t, http.StatusNotFound, status, "the main address does not serve /metrics")
	m := "http://" + ll.MetricsAddr + "/metrics"
	for _, auth := range []string{"", "Bearer wrong", "Basic " + token, token} {
		status, body := get(m, auth)
		require.Equal(t, http.StatusUnauthorized, status, "%q: %s", auth, body)
		require.NotContains(t, body, "claimd_")
	}
	status, body := get(m, "Bearer "+token)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "claimd_http_body_budget_bytes")
	status, _ = get("http://"+ll.MetricsAddr+"/v1/whoami", "Bearer t1-metrics-key-0123456789")
	require.Equal(t, http.StatusNotFound, status, "the metrics address serves /metrics only")
}
