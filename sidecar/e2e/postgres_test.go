package e2e

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// FreshDatabase creates an empty PostgreSQL database on the shared test
// server (pgtest.ServerURL: TEST_DATABASE_URL, else the project-local
// cluster), named after prefix plus a random suffix, drops it (forcing
// other sessions off) in t.Cleanup, and returns its URL.
func FreshDatabase(t testing.TB, prefix string) string {
	t.Helper()
	base := pgtest.ServerURL(t)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("the test server's URL does not parse: %v", err)
	}
	name := strings.ToLower(prefix) + "_" + RandomHex(t, 6)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connecting to the test server: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("dropping database %s: %v", name, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("dropping database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}

// pgParams are the parts of a database URL that n8n takes as separate
// DB_POSTGRESDB_* variables.
type pgParams struct {
	Host, Port, Database, User, Password string
}

func parsePG(t testing.TB, dbURL string) pgParams {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("database URL does not parse: %v", err)
	}
	p := pgParams{Host: u.Hostname(), Port: u.Port(), Database: strings.TrimPrefix(u.Path, "/"), User: u.User.Username()}
	p.Password, _ = u.User.Password()
	if p.Port == "" {
		p.Port = "5432"
	}
	if p.Host == "" {
		p.Host = "127.0.0.1"
	}
	return p
}
