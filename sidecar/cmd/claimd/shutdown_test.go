package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// SIGTERM stops the listener at once, lets the in-flight claim finish with
// its answer, and exits 0. The claim is held in flight by a row lock that
// the test owns, so nothing depends on timing.
func TestSIGTERMDrainsInFlightClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDatabase(t)
	const key = "t1-shutdown-key-0123456789"
	p := startServe(t, map[string]string{
		"DATABASE_URL":    db,
		"CLAIMD_API_KEYS": "t1:" + key,
		// Long budgets: the drain must end because the request ended,
		// never because a timer fired.
		"CLAIMD_SHUTDOWN_TIMEOUT_SECONDS": "600",
		"CLAIMD_REQUEST_TIMEOUT_SECONDS":  "600",
	})
	c := newAPI(t, p.url, key)

	held := holdClaimOnRowLock(t, db, c, "shutdown")
	tx, inFlight := held.tx, held.inFlight

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	p.stderr.waitMessage(t, "shutting down: draining in-flight requests", p.done)

	// The listener closes: new connections are refused. (Shutdown closes
	// it right after the log line above, so poll the kernel's answer.) A
	// dial that races the close can be reset instead (the kernel drops
	// what was still in the accept queue): the listener is going, so poll
	// again until the port refuses.
	addr := p.url[len("http://"):]
	waitFor(t, "the listener to close", func() bool {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			conn.Close()
			return false
		}
		if errors.Is(err, syscall.ECONNRESET) {
			return false
		}
		require.ErrorIs(t, err, syscall.ECONNREFUSED)
		return true
	})
	fresh := newAPI(t, p.url, key)
	fresh.client.Transport.(*http.Transport).DisableKeepAlives = true
	_, _, err := fresh.do("GET", "/healthz", "")
	require.Error(t, err, "a new request must fail once shutdown began")
	var opErr *net.OpError
	require.True(t, errors.As(err, &opErr) && opErr.Op == "dial", "want a dial error, got %v", err)

	// Still draining: the claim waits for our lock and the process lives.
	select {
	case a := <-inFlight:
		t.Fatalf("in-flight claim answered while its row was locked: %+v", a)
	case <-p.done:
		t.Fatalf("claimd exited with a request in flight:\n%s", p.stderr.String())
	default:
	}

	require.NoError(t, tx.Rollback(ctx))
	a := <-inFlight
	require.NoError(t, a.err)
	require.Equal(t, http.StatusOK, a.status, "%v", a.body)
	require.Equal(t, "duplicate", a.body["outcome"])
	require.Equal(t, "r-1", a.body["result_ref"])

	require.Equal(t, 0, p.exitCode(t), "stderr:\n%s", p.stderr.String())
	p.stderr.waitMessage(t, "stopped", p.done)
}

// heldClaim is a claim in flight, blocked on a row lock the test holds.
type heldClaim struct {
	// tx holds the lock (on the connection of backend lockerPID); its
	// rollback releases the claim.
	tx        pgx.Tx
	lockerPID int
	// watcher is a connection of the test's own to the database.
	watcher *pgx.Conn
	// inFlight receives the claim's answer.
	inFlight <-chan claimAnswer
}

type claimAnswer struct {
	status int
	body   map[string]any
	err    error
}

// holdClaimOnRowLock completes a claim of (source, evt-1), locks its row,
// sends the same claim again and returns once that claim waits for the
// lock in a claimd backend: a request in flight for as long as the test
// wants, with nothing depending on timing.
func holdClaimOnRowLock(t *testing.T, db string, c *api, source string) heldClaim {
	t.Helper()
	ctx := context.Background()
	claimBody := `{"source":"` + source + `","event_id":"evt-1","payload_hash":"` + zeroHash + `"}`
	won := c.must(http.StatusOK, "POST", "/v1/claims", claimBody)
	require.Equal(t, "won", won["outcome"])
	c.must(http.StatusOK, "POST", "/v1/claims/"+str(won, "claim_id")+"/complete",
		`{"claim_token":"`+str(won, "claim_token")+`","result_ref":"r-1"}`)

	locker, err := pgx.Connect(ctx, db)
	require.NoError(t, err)
	t.Cleanup(func() { locker.Close(ctx) })
	h := heldClaim{}
	require.NoError(t, locker.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&h.lockerPID))
	h.tx, err = locker.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.tx.Rollback(ctx) })
	_, err = h.tx.Exec(ctx, `SELECT id FROM claims WHERE source = $1 AND event_id = 'evt-1' FOR UPDATE`, source)
	require.NoError(t, err)

	inFlight := make(chan claimAnswer, 1)
	h.inFlight = inFlight
	go func() {
		s, b, err := c.do("POST", "/v1/claims", claimBody)
		inFlight <- claimAnswer{s, b, err}
	}()
	h.watcher, err = pgx.Connect(ctx, db)
	require.NoError(t, err)
	t.Cleanup(func() { h.watcher.Close(ctx) })
	waitFor(t, "the claim to wait for the test's row lock", func() bool {
		var blocked bool
		require.NoError(t, h.watcher.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'claimd'
			  AND $1::int = ANY (pg_blocking_pids(pid)))`, h.lockerPID).Scan(&blocked))
		return blocked
	})
	return h
}

// zeroHash is a valid payload hash (64 lowercase hex digits).
const zeroHash = "0000000000000000000000000000000000000000000000000000000000000000"

// CLAIMD_SHUTDOWN_TIMEOUT_SECONDS is a hard bound: a claim blocked on a
// row lock the test never releases does not keep the process alive past
// it (the claim is answered 503, never a pool error), and a request that
// arrives during the drain on a connection opened before it is answered
// 503 with Retry-After and Connection: close.
func TestShutdownTimeoutIsAHardBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDatabase(t)
	const key = "t1-hard-shutdown-key-0123456"
	p := startServe(t, map[string]string{
		"DATABASE_URL":                    db,
		"CLAIMD_API_KEYS":                 "t1:" + key,
		"CLAIMD_SHUTDOWN_TIMEOUT_SECONDS": "2",
		"CLAIMD_REQUEST_TIMEOUT_SECONDS":  "600",
	})
	c := newAPI(t, p.url, key)
	held := holdClaimOnRowLock(t, db, c, "hard")
	inFlight, watcher, lockerPID := held.inFlight, held.watcher, held.lockerPID

	// A request on its way in: headers sent, body not yet. Its connection
	// is busy, so the drain does not close it. claimd has accepted it
	// before SIGTERM (claimd_http_connections counts it): a connection
	// still in the kernel's accept queue when the listener closes would be
	// reset by the kernel instead.
	const open = `claimd_http_connections`
	before, ok := metricValue(t, p.url, open) // the scrape's own connection stays open (keep-alive)
	require.True(t, ok, "no %s in /metrics", open)
	addr := p.url[len("http://"):]
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	const late = `{"source":"hard","event_id":"evt-late"}`
	_, err = fmt.Fprintf(conn, "POST /v1/claims HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s", key, len(late), late[:5])
	require.NoError(t, err)
	waitFor(t, "claimd to accept the late request's connection", func() bool {
		v, _ := metricValue(t, p.url, open)
		return v >= before+1
	})

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	p.stderr.waitMessage(t, "shutting down: draining in-flight requests", p.done)
	_, err = io.WriteString(conn, late[5:])
	require.NoError(t, err)
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	require.Equal(t, http.StatusServiceUnavailable, res.StatusCode, "%s", body)
	require.Equal(t, "1", res.Header.Get("Retry-After"))
	require.True(t, res.Close, "Connection: close")
	require.Contains(t, string(body), `"code":"unavailable"`)
	require.Contains(t, string(body), "shutting down")

	// The process exits while the test still holds the lock: the drain
	// ended at its deadline, not because the claim finished.
	<-p.done
	a := <-inFlight
	if a.err == nil {
		require.Equal(t, http.StatusServiceUnavailable, a.status, "%v", a.body)
		require.NotContains(t, fmt.Sprint(a.body), "closed pool")
	}
	var locked bool
	require.NoError(t, watcher.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND granted)`, lockerPID).Scan(&locked))
	require.True(t, locked, "the test's lock was still held when claimd exited")
	require.NotContains(t, p.stderr.String(), "closed pool")
	p.stderr.waitMessage(t, "shutdown deadline reached: cancelling the requests still in flight (they answer 503)", p.done)
	var n int
	require.NoError(t, watcher.QueryRow(ctx, `SELECT count(*) FROM claims WHERE event_id = 'evt-late'`).Scan(&n))
	require.Zero(t, n, "a request refused during the drain stored nothing")
}
