// Package pgtest gives tests a fresh PostgreSQL database with the schema
// applied. The server is TEST_DATABASE_URL when it is set, else the
// project-local cluster of sidecar/scripts/devdb.sh, started for the test
// process (ServerURL, server.go); never a server nobody named. Each call
// creates its own database, dropped when the test ends, so test packages
// and parallel tests never see each other's rows. Failover tests get
// servers of their own instead: a primary and streaming standbys
// (NewPrimary, cluster.go).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotent-claim/idempotent-claim/sidecar/migrate"
)

// NewDatabase creates an empty database and returns its URL. It is dropped
// (with its connections) when t ends.
func NewDatabase(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	serverURL := ServerURL(t)
	admin, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		t.Fatalf("pgtest: connect to the test server %s: %v", redact(serverURL), err)
	}
	defer admin.Close(ctx)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "ic_test_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), serverURL)
		if err != nil {
			t.Logf("pgtest: drop %s: %v", name, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("pgtest: drop %s: %v", name, err)
		}
	})
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatalf("pgtest: the test server's URL does not parse: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// NewPool creates a fresh database, applies the schema migrations and
// returns a pool on it, closed when t ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return NewPoolConfig(t, func(*pgxpool.Config) {})
}

// NewPoolConfig is NewPool with a hook to adjust the pool configuration.
func NewPoolConfig(t testing.TB, adjust func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(NewDatabase(t))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	adjust(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(pool.Close)
	if _, err := migrate.Up(context.Background(), pool); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return pool
}

func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return strings.TrimSpace(u.String())
}
