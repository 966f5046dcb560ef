package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/httpapi"
)

// /readyz with a DatabaseReadiness: the database facts are shown whether
// ready or not (not when the database did not answer), the reason names
// what is wrong — a database that cannot write (read-only, a standby) is
// not ready: "ready" means "can write" — and every answer is one
// openapi.yaml describes.
func TestReadyzShowsDatabaseFacts(t *testing.T) {
	t.Parallel()
	facts := httpapi.DatabaseFacts{TransactionIsolation: "read committed", SynchronousCommit: "on",
		Durability: httpapi.DurabilityLocal}
	readOnly := facts
	readOnly.ReadOnly = true
	standby := readOnly
	standby.InRecovery = true
	for _, c := range []struct {
		name   string
		facts  httpapi.DatabaseFacts
		err    error
		status int
	}{
		{"ready", facts, nil, http.StatusOK},
		{"read-only", readOnly, errors.New("transactions are read-only (default_transaction_read_only = on …)"), http.StatusServiceUnavailable},
		{"standby", standby, errors.New("the database is a standby (pg_is_in_recovery): claims cannot be written until a primary answers"),
			http.StatusServiceUnavailable},
		{"unreachable", httpapi.DatabaseFacts{}, errors.New("database unreachable"), http.StatusServiceUnavailable},
	} {
		srv := httpapi.New(httpapi.Config{Logger: zerolog.Nop(),
			ReadyDatabase: func(context.Context) (httpapi.DatabaseFacts, error) { return c.facts, c.err }})
		req := httptest.NewRequest(http.MethodGet, "/readyz", nil)
		resp, err := srv.App().Test(req, -1)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, c.status, resp.StatusCode, c.name)

		var got struct {
			Status   string                 `json:"status"`
			Reason   string                 `json:"reason"`
			Database *httpapi.DatabaseFacts `json:"database"`
		}
		require.NoError(t, json.Unmarshal(body, &got))
		if c.err == nil {
			require.Equal(t, "ready", got.Status)
			require.Empty(t, got.Reason)
		} else {
			require.Equal(t, "not_ready", got.Status)
			require.Equal(t, c.err.Error(), got.Reason)
		}
		if c.facts == (httpapi.DatabaseFacts{}) {
			require.Nil(t, got.Database, c.name)
		} else {
			require.Equal(t, c.facts, *got.Database, c.name)
		}

		router, err := strictSpec()
		require.NoError(t, err)
		route, params, err := router.FindRoute(httptest.NewRequest(http.MethodGet, "/readyz", nil))
		require.NoError(t, err)
		opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
			IncludeResponseStatus: true, MultiError: true}
		in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode,
			Header: resp.Header, Options: opts}
		out.SetBodyBytes(body)
		require.NoError(t, openapi3filter.ValidateResponse(context.Background(), out), "%s: %s", c.name, body)
	}
}
