package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// CLAIMD_MAX_CONNS_PER_IP reaches claimd's listener: with 2, a third
// connection from one address is answered 429 rate_limited in JSON with
// Retry-After; with 0 there is no bound (300 connections from one address
// are all served, past the 256 of the default).
func TestConnectionBoundsFromSettings(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	// healthz asks on a connection of its own, kept open until the test
	// ends, and returns the answer read whole.
	type reply struct {
		status int
		header http.Header
		close  bool
		body   []byte
	}
	healthz := func(t *testing.T, addr string) reply {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		_, err = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return reply{status: res.StatusCode, header: res.Header, close: res.Close, body: body}
	}

	p := startServe(t, map[string]string{"DATABASE_URL": db, "CLAIMD_MAX_CONNS_PER_IP": "2"})
	addr := strings.TrimPrefix(p.url, "http://")
	for range 2 {
		require.Equal(t, http.StatusOK, healthz(t, addr).status)
	}
	res := healthz(t, addr)
	require.Equal(t, http.StatusTooManyRequests, res.status)
	require.Equal(t, "1", res.header.Get("Retry-After"))
	require.True(t, res.close)
	var e struct{ Error struct{ Code string } }
	require.NoError(t, json.Unmarshal(res.body, &e))
	require.Equal(t, "rate_limited", e.Error.Code)

	p = startServe(t, map[string]string{"DATABASE_URL": db, "CLAIMD_MAX_CONNS_PER_IP": "0"})
	addr = strings.TrimPrefix(p.url, "http://")
	for range 300 {
		require.Equal(t, http.StatusOK, healthz(t, addr).status)
	}
}
