package main

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
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// A DATABASE_URL the server refuses for good (no such database or role, a
// wrong password, pg_hba.conf, no CONNECT) ends claimd serve at once with
// the server's reason and the setting to check; the one-shot commands say
// the same. Nothing else changes: connection refused, timeouts, standbys
// still make serve wait (failover_test.go).

// randomName is prefix plus a random suffix, a valid identifier.
func randomName(prefix string) string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// withURL returns u with its user (and password) and database replaced.
func withURL(t testing.TB, u string, user *url.Userinfo, database string) string {
	t.Helper()
	p, err := url.Parse(u)
	require.NoError(t, err)
	if user != nil {
		p.User = user
	}
	if database != "" {
		p.Path = "/" + database
	}
	return p.String()
}

// exitsOnItsOwn waits for p to exit and returns its exit code; a process
// still running after a generous bound (a hang guard, not a timing
// assertion) is killed and fails the test.
func exitsOnItsOwn(t testing.TB, p *proc) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(2 * time.Minute):
		_ = p.cmd.Process.Kill() // our own child, by PID
		<-p.done
		t.Fatalf("claimd did not exit on its own; stderr:\n%s", p.stderr.String())
	}
	return p.exitCode(t)
}

// refusedServe runs claimd serve on dbURL, which the server refuses, and
// claimd migrate, and checks both exit 1 with want (and without secret).
func refusedServe(t *testing.T, dbURL, want, secret string) {
	t.Helper()
	p := start(t, map[string]string{"DATABASE_URL": dbURL, "CLAIMD_ADDR": "127.0.0.1:0", "CLAIMD_LOG_FORMAT": "json"}, "serve")
	require.Equal(t, 1, exitsOnItsOwn(t, p), "serve: %s", p.stderr.String())
	stderr := p.stderr.String()
	require.Contains(t, stderr, "claimd: "+want, "serve")
	require.NotContains(t, stderr, "claimd listening", "serve refuses before it listens")
	require.NotContains(t, stderr, "failed to connect to", "serve: the server's reason, not pgx's preamble")
	if secret != "" {
		require.NotContains(t, stderr, secret, "serve")
	}
	_, stderr, code := runClaimd(t, map[string]string{"DATABASE_URL": dbURL}, "migrate")
	require.Equal(t, 1, code, "migrate: %s", stderr)
	require.Contains(t, stderr, "claimd: "+want, "migrate")
	if secret != "" {
		require.NotContains(t, stderr, secret, "migrate")
	}
}

func TestServeRefusedDatabaseOrRoleExits(t *testing.T) {
	t.Parallel()
	server := pgtest.ServerURL(t)
	t.Run("no such database", func(t *testing.T) {
		t.Parallel()
		db := randomName("ic_nosuch_")
		refusedServe(t, withURL(t, server, nil, db),
			fmt.Sprintf(`database "%s" does not exist (SQLSTATE 3D000): check the database name in DATABASE_URL`, db), "")
	})
	t.Run("no such role", func(t *testing.T) {
		t.Parallel()
		role := randomName("ic_nosuch_role_")
		// 28000 "role … does not exist" where the server trusts the
		// client, 28P01 where it asks for a password (and does not say
		// whether the role exists): both name the user.
		p := start(t, map[string]string{"DATABASE_URL": withURL(t, server, url.User(role), ""), "CLAIMD_ADDR": "127.0.0.1:0"}, "serve")
		require.Equal(t, 1, exitsOnItsOwn(t, p))
		require.Regexp(t, `claimd: (role "`+role+`" does not exist \(SQLSTATE 28000\)|password authentication failed for user "`+role+
			`" \(SQLSTATE 28P01\)): check the user name`, p.stderr.String())
	})
}

// A server of the test's own asks for passwords (scram-sha-256) and has
// pg_hba.conf rules: the wrong password (28P01, under the default
// sslmode=prefer, which tries TLS first and this server refuses it), a
// pg_hba.conf reject (28000) and a role without CONNECT (42501) end serve
// with the server's reason, and the password is never printed. The right
// password works.
func TestServeRefusedByTheServersAuthentication(t *testing.T) {
	t.Parallel()
	primary := pgtest.NewPrimary(t, pgtest.ClusterOptions{HBA: []string{
		"host all app 127.0.0.1/32 scram-sha-256",
		"host all blocked 127.0.0.1/32 reject",
	}})
	primary.Exec("CREATE ROLE app LOGIN PASSWORD 'app-right-password'")
	primary.Exec("ALTER DATABASE " + pgtest.ClusterDB + " OWNER TO app")
	primary.Exec("CREATE ROLE blocked LOGIN")
	primary.Exec("CREATE ROLE noconnect LOGIN")
	primary.Exec("REVOKE CONNECT ON DATABASE " + pgtest.ClusterDB + " FROM PUBLIC")
	// The password holds characters a URL must percent-encode.
	const wrong = "Wr0ng@pass/w:rd"
	wrongURL := "postgres://app:" + url.QueryEscape(wrong) + "@" + primary.Addr() + "/" + pgtest.ClusterDB
	refusedServe(t, wrongURL, `password authentication failed for user "app" (SQLSTATE 28P01): check the user name and password in DATABASE_URL`, "Wr0ng")
	refusedServe(t, "postgres://blocked@"+primary.Addr()+"/"+pgtest.ClusterDB+"?sslmode=disable",
		`pg_hba.conf rejects connection for host "127.0.0.1", user "blocked", database "claims", no encryption (SQLSTATE 28000): `+
			`check the user name in DATABASE_URL, and that the server's pg_hba.conf lets it connect from this host`, "")
	refusedServe(t, "postgres://noconnect@"+primary.Addr()+"/"+pgtest.ClusterDB,
		`permission denied for database "claims" (SQLSTATE 42501): check the user and database names in DATABASE_URL, `+
			`or grant the role CONNECT on the database`, "")

	_, stderr, code := runClaimd(t, map[string]string{"DATABASE_URL": "postgres://app:app-right-password@" + primary.Addr() + "/" + pgtest.ClusterDB}, "migrate")
	require.Equal(t, 0, code, stderr)
}

// A refusal met by the start-up wait (claimd waited already, here for a
// read-only database, when its role lost LOGIN) ends the wait: claimd
// logs it as an error naming the server's reason, stops as on SIGTERM
// and exits 1 with the same words. The password is never printed.
func TestWaitMeetsARefusalAndExits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	server := pgtest.ServerURL(t)
	admin, err := pgx.Connect(ctx, server)
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close(context.Background()) })
	role, password := randomName("ic_refused_"), randomName("pw-")
	exec := func(sql string) {
		t.Helper()
		_, err := admin.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+role) }) // after the database's drop
	db := pgtest.NewDatabase(t)
	exec("CREATE ROLE " + role + " LOGIN PASSWORD '" + password + "'")
	cfg, err := pgx.ParseConfig(db)
	require.NoError(t, err)
	dbIdent := pgx.Identifier{cfg.Database}.Sanitize()
	exec("ALTER DATABASE " + dbIdent + " OWNER TO " + role)
	alterDatabase(t, db, "SET default_transaction_read_only = on")

	p := start(t, map[string]string{"DATABASE_URL": withURL(t, db, url.UserPassword(role, password), ""),
		"CLAIMD_ADDR": "127.0.0.1:0", "CLAIMD_LOG_FORMAT": "json", "CLAIMD_API_KEYS": "t1:t1-refused-wait-key-0123456789"}, "serve")
	p.stderr.waitMessage(t, msgWaiting, p.done)

	exec("ALTER ROLE " + role + " NOLOGIN")
	exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '" + role + "'")
	line := p.stderr.waitMessage(t, msgRefusedExit, p.done)
	require.Equal(t, "error", line.Level)
	require.Equal(t, 1, exitsOnItsOwn(t, p))
	want := fmt.Sprintf(`role "%s" is not permitted to log in (SQLSTATE 28000): check the user name in DATABASE_URL`, role)
	require.Contains(t, p.stderr.String(), "claimd: "+want)
	require.NotContains(t, p.stderr.String(), password)
	require.NotContains(t, p.stderr.String(), "the database takes writes; started")
}

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
		{"a server the fence refused", errors.Join(&staleServerError{Addr: "a"}, host(noDB)), 0},
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
	r := connectRefused(connect(hosts(self, "", db)))
	require.NotNil(t, r)
	require.Equal(t, fmt.Sprintf(`database "%s" does not exist (SQLSTATE 3D000): check the database name in DATABASE_URL`, db), r.Error())
	require.Nil(t, connectRefused(connect(hosts(closed+","+self, "", db))), "the first host may be the primary coming back")
	// pgx goes on to the next host after a 28000 (pg_hba.conf is per
	// server), so it is the answer only when no host was left. (A server
	// that asks for a password answers 28P01 instead, and pgx stops.)
	role := randomName("ic_nosuch_role_")
	if r := connectRefused(connect(hosts(self, role, "postgres"))); r != nil && r.answers[0].Code == pgerrcode.InvalidAuthorizationSpecification {
		require.Nil(t, connectRefused(connect(hosts(self+","+closed, role, "postgres"))), "a role refused by one host, another host down")
	}
	require.Nil(t, connectRefused(connect(hosts(closed, "", "postgres"))))
	require.Nil(t, connectRefused(fmt.Errorf("query: %w", &pgconn.PgError{Severity: "FATAL", Code: "3D000"})), "not a connection attempt")
}
