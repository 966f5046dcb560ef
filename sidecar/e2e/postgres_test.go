package e2e

import (
	"context"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// defaultTestDatabaseURL is the server used when TEST_DATABASE_URL is unset.
const defaultTestDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// FreshDatabase creates an empty PostgreSQL database on the TEST_DATABASE_URL
// server, named after prefix plus a random suffix, drops it (forcing other
// sessions off) in t.Cleanup, and returns its URL.
func FreshDatabase(t testing.TB, prefix string) string {
	t.Helper()
	base := os.Getenv("TEST_DATABASE_URL")
	if base == "" {
		base = defaultTestDatabaseURL
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("TEST_DATABASE_URL does not parse: %v", err)
	}
	name := strings.ToLower(prefix) + "_" + RandomHex(t, 6)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connecting to the PostgreSQL server of TEST_DATABASE_URL: %v", err)
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
