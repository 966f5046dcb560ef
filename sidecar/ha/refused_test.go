package ha

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// Which failed connection attempts are the server's refusal for good.
func TestConnectRefusedClassification(t *testing.T) {
	t.Parallel()
	fatal := func(code, msg string) *pgconn.PgError {
		return &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: code, Message: msg}
	}
	host := func(err error) error { return fmt.Errorf("127.0.0.1:5432 (127.0.0.1): server error: %w", err) }
	refusedTCP := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	tlsRefused := errors.New("tls error: server refused TLS connection")
	noDB := fatal("3D000", `database "x" does not exist`)
	for _, c := range []struct {
		name    string
		attempt error
		answers int
	}{
		{"no such database", host(noDB), 1},
		{"wrong password after TLS was refused (sslmode=prefer)", errors.Join(tlsRefused, host(fatal("28P01", "password authentication failed"))), 1},
		{"pg_hba.conf on both hosts", errors.Join(host(fatal("28000", "no pg_hba.conf entry, SSL")), host(fatal("28000", "no pg_hba.conf entry, no encryption"))), 2},
		{"the same answer twice is one", errors.Join(host(noDB), host(noDB)), 1},
		{"no CONNECT", host(fatal("42501", `permission denied for database "x"`)), 1},
		{"the first host down", errors.Join(host(refusedTCP), host(noDB)), 0},
		{"the second host down", errors.Join(host(fatal("28000", "no pg_hba.conf entry")), host(refusedTCP)), 0},
		{"a host starting up", errors.Join(host(fatal("57P03", "the database system is starting up")), host(noDB)), 0},
		{"a host timed out", errors.Join(fmt.Errorf("timeout: %w", context.DeadlineExceeded), host(noDB)), 0},
		{"a standby (target_session_attrs=read-write)", errors.Join(fmt.Errorf("ValidateConnect failed: %w", pgconn.ErrReadOnlyConnection), host(noDB)), 0},
		{"a server the fence refused", errors.Join(&StaleServerError{Addr: "a"}, host(noDB)), 0},
		{"the connection closed early", errors.Join(fmt.Errorf("failed to receive message: %w", io.EOF), host(noDB)), 0},
		{"too many connections", host(fatal("53300", "sorry, too many clients already")), 0},
		{"an ERROR, not a refused session", host(&pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "42501"}), 0},
		{"no answer at all", tlsRefused, 0},
	} {
		require.Len(t, refusals(c.attempt), c.answers, c.name)
	}

	// Real attempts against the test server, single and multi-host.
	server := pgtest.ServerURL(t)
	cfg, err := pgconn.ParseConfig(server)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	self := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	hosts := func(list, user, db string) string {
		u, err := url.Parse(server)
		require.NoError(t, err)
		u.Host = list
		if user != "" {
			u.User = url.User(user)
		}
		u.Path = "/" + db
		return u.String()
	}
	connect := func(u string) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := pgconn.Connect(ctx, u)
		if err == nil {
			c.Close(ctx)
		}
		return err
	}
	db := randomName("ic_nosuch_")
	r := ConnectRefused(connect(hosts(self, "", db)))
	require.NotNil(t, r)
	require.Equal(t, fmt.Sprintf(`database "%s" does not exist (SQLSTATE 3D000): check the database name in DATABASE_URL`, db), r.Error())
	require.Nil(t, ConnectRefused(connect(hosts(closed+","+self, "", db))), "the first host may be the primary coming back")
	// pgx goes on to the next host after a 28000 (pg_hba.conf is per
	// server), so it is the answer only when no host was left. (A server
	// that asks for a password answers 28P01 instead, and pgx stops.)
	role := randomName("ic_nosuch_role_")
	if r := ConnectRefused(connect(hosts(self, role, "postgres"))); r != nil && r.answers[0].Code == pgerrcode.InvalidAuthorizationSpecification {
		require.Nil(t, ConnectRefused(connect(hosts(self+","+closed, role, "postgres"))), "a role refused by one host, another host down")
	}
	require.Nil(t, ConnectRefused(connect(hosts(closed, "", "postgres"))))
	require.Nil(t, ConnectRefused(fmt.Errorf("query: %w", &pgconn.PgError{Severity: "FATAL", Code: "3D000"})), "not a connection attempt")
}

// randomName is prefix plus a random suffix, a valid identifier.
func randomName(prefix string) string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}
