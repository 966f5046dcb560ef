package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/ha"
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
	line := p.stderr.waitMessage(t, ha.MsgRefusedExit, p.done)
	require.Equal(t, "error", line.Level)
	require.Equal(t, 1, exitsOnItsOwn(t, p))
	want := fmt.Sprintf(`role "%s" is not permitted to log in (SQLSTATE 28000): check the user name in DATABASE_URL`, role)
	require.Contains(t, p.stderr.String(), "claimd: "+want)
	require.NotContains(t, p.stderr.String(), password)
	require.NotContains(t, p.stderr.String(), "the database takes writes; started")
}
