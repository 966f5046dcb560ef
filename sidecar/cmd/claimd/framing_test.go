package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// claimd serves both its addresses through the framing check: a chunked
// body with a bare LF in a chunk extension (the lenient decoder skipped it)
// and a header line without a colon (held until the read timeout) are
// answered 400 bad_request at once with the connection closed, on the API
// address and on CLAIMD_METRICS_ADDR, and the claim pipelined behind them
// is never stored.
func TestClaimdRefusesMalformedFramingOnEveryAddress(t *testing.T) {
	t.Parallel()
	const key = "t1-framing-key-0123456789"
	dbURL := pgtest.NewDatabase(t)
	s := startInProcess(t, map[string]string{"DATABASE_URL": dbURL, "CLAIMD_API_KEYS": "t1:" + key,
		"CLAIMD_METRICS_ADDR": "127.0.0.1:0"})
	smuggled := func(id string) string {
		body := `{"source":"smuggled","event_id":"` + id + `"}`
		return "POST /v1/claims HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key +
			"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}
	badBody := "Transfer-Encoding: chunked\r\n\r\n2b;a\nzz\r\n" + strings.Repeat("z", 43) + "\r\n0\r\n\r\n"
	api := strings.TrimPrefix(s.url, "http://")
	for name, c := range map[string]struct{ addr, req string }{
		"chunk-ext bare LF on /v1/claims": {api, "POST /v1/claims HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key + "\r\n" + badBody},
		"chunk-ext bare LF on /healthz":   {api, "GET /healthz HTTP/1.1\r\nHost: x\r\n" + badBody},
		"no colon on /v1/whoami":          {api, "GET /v1/whoami HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key + "\r\nnocolon\r\n\r\n"},
		"chunk-ext bare LF on /metrics":   {s.m.MetricsAddr, "GET /metrics HTTP/1.1\r\nHost: x\r\n" + badBody},
		"no colon on /metrics":            {s.m.MetricsAddr, "GET /metrics HTTP/1.1\r\nHost: x\r\nnocolon\r\n\r\n"},
	} {
		t.Run(name, func(t *testing.T) {
			conn, err := net.Dial("tcp", c.addr)
			require.NoError(t, err)
			defer conn.Close()
			_, err = io.WriteString(conn, c.req+smuggled("evt-"+strings.ReplaceAll(name, " ", "-")))
			require.NoError(t, err)
			require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
			br := bufio.NewReader(conn)
			res, err := http.ReadResponse(br, nil)
			require.NoError(t, err, "an answer at once")
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			require.Equal(t, http.StatusBadRequest, res.StatusCode, "%s", body)
			require.True(t, res.Close, "Connection: close")
			var e struct{ Error struct{ Code string } }
			require.NoError(t, json.Unmarshal(body, &e), "%s", body)
			require.Equal(t, "bad_request", e.Error.Code)
			_, err = br.ReadByte()
			require.ErrorIs(t, err, io.EOF, "the connection is closed: nothing behind the request is read")
		})
	}
	ctx := context.Background()
	db, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer db.Close(ctx)
	var n int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM claims WHERE source = 'smuggled'`).Scan(&n))
	require.Zero(t, n, "a request behind a refused one ran")
}
