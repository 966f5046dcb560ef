package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/config"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/migrate"
)

func TestHelpPrintsEverySetting(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, out string) {
		t.Helper()
		require.Contains(t, out, "usage: claimd")
		for _, v := range config.Vars {
			require.Regexp(t, `(?m)^\s+-`+regexp.QuoteMeta(v.Flag)+`\s+`+regexp.QuoteMeta(v.Env)+`\s`, out, "setting %s", v.Env)
		}
	}
	t.Run("run", func(t *testing.T) {
		t.Parallel()
		var stdout, stderr bytes.Buffer
		require.NoError(t, run(context.Background(), []string{"help"}, func(string) string { return "" }, &stdout, &stderr))
		check(t, stdout.String())
		require.Empty(t, stderr.String())
	})
	t.Run("-h and --help", func(t *testing.T) {
		t.Parallel()
		for _, arg := range []string{"-h", "--help"} {
			var stdout, stderr bytes.Buffer
			require.NoError(t, run(context.Background(), []string{arg}, func(string) string { return "" }, &stdout, &stderr), arg)
			check(t, stdout.String())
		}
	})
	t.Run("binary", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code := runClaimd(t, nil, "help")
		require.Equal(t, 0, code, stderr)
		check(t, stdout)
		// Every default appears in its row.
		for _, v := range config.Vars {
			if v.Default == "" {
				continue
			}
			require.Regexp(t, `(?m)^\s+-`+regexp.QuoteMeta(v.Flag)+`\s+`+regexp.QuoteMeta(v.Env)+`\s+`+regexp.QuoteMeta(v.Default)+`\s`, stdout)
		}
	})
	t.Run("unknown command", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code := runClaimd(t, nil, "frobnicate")
		require.Equal(t, 1, code)
		require.Empty(t, stdout)
		require.Contains(t, stderr, "usage: claimd")
		require.Contains(t, stderr, `unknown command "frobnicate"`)
	})
	t.Run("no database", func(t *testing.T) {
		t.Parallel()
		_, stderr, code := runClaimd(t, nil, "serve")
		require.Equal(t, 1, code)
		require.Contains(t, stderr, "DATABASE_URL is required")
	})
}

func TestMigrateAppliesAndIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDatabase(t)
	env := map[string]string{"DATABASE_URL": db}

	applied := func() int {
		t.Helper()
		_, stderr, code := runClaimd(t, env, "migrate")
		require.Equal(t, 0, code, stderr)
		for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
			var ll logLine
			require.NoError(t, json.Unmarshal([]byte(l), &ll), "log line %q", l)
			if ll.Message == "migrations applied" {
				require.NotNil(t, ll.Applied)
				return *ll.Applied
			}
		}
		t.Fatalf("no \"migrations applied\" line in:\n%s", stderr)
		return 0
	}
	first := applied()
	require.Positive(t, first)

	pool, err := pgxpool.New(ctx, db)
	require.NoError(t, err)
	defer pool.Close()
	pending, err := migrate.Pending(ctx, pool)
	require.NoError(t, err)
	require.False(t, pending)
	var version int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT max(version_id) FROM `+migrate.VersionTable).Scan(&version))
	require.Positive(t, version)
	var tables int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'
		AND tablename IN ('claims', 'claim_deliveries', 'api_keys', 'object_versions')`).Scan(&tables))
	require.Equal(t, 4, tables)

	require.Zero(t, applied(), "a second migrate applies nothing")
	var after int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT max(version_id) FROM `+migrate.VersionTable).Scan(&after))
	require.Equal(t, version, after)
}

var (
	keyLine = regexp.MustCompile(`(?m)^key:\s+(ick_[A-Za-z0-9_-]{43})$`)
	idLine  = regexp.MustCompile(`(?m)^id:\s+([0-9a-f-]{36})$`)
)

func TestKeysCreateAuthenticatesAndRevokeStopsIt(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	env := map[string]string{"DATABASE_URL": db}

	stdout, stderr, code := runClaimd(t, env, "keys", "create", "t1", "ci")
	require.Equal(t, 0, code, stderr)
	km := keyLine.FindStringSubmatch(stdout)
	require.NotNil(t, km, "no key in:\n%s", stdout)
	im := idLine.FindStringSubmatch(stdout)
	require.NotNil(t, im, "no id in:\n%s", stdout)
	key, id := km[1], im[1]
	require.NotContains(t, stderr, key, "the key is printed once, on stdout")

	stdout, stderr, code = runClaimd(t, env, "keys", "create", "t2")
	require.Equal(t, 0, code, stderr)
	other := keyLine.FindStringSubmatch(stdout)
	require.NotNil(t, other)

	// The key cache is off so revocation takes effect on the next request.
	s := startInProcess(t, map[string]string{"DATABASE_URL": db, "CLAIMD_KEY_CACHE_SECONDS": "0"})
	c := newAPI(t, s.url, key)
	who := c.must(http.StatusOK, "GET", "/v1/whoami", "")
	require.Equal(t, "t1", who["tenant"])
	require.Equal(t, false, who["admin"])
	won := c.must(http.StatusOK, "POST", "/v1/claims", `{"source":"keys","event_id":"e1"}`)
	require.Equal(t, "won", won["outcome"])
	require.Equal(t, "t2", newAPI(t, s.url, other[1]).must(http.StatusOK, "GET", "/v1/whoami", "")["tenant"])
	newAPI(t, s.url, key+"x").must(http.StatusUnauthorized, "GET", "/v1/whoami", "")

	stdout, stderr, code = runClaimd(t, env, "keys", "list")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, id)
	require.Contains(t, stdout, key[:10], "list shows the prefix")
	require.NotContains(t, stdout, key, "list never shows a key")

	stdout, stderr, code = runClaimd(t, env, "keys", "revoke", id)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "revoked "+id)

	body := c.must(http.StatusUnauthorized, "GET", "/v1/whoami", "")
	require.Equal(t, "unauthorized", body["error"].(map[string]any)["code"])
	c.must(http.StatusUnauthorized, "POST", "/v1/claims", `{"source":"keys","event_id":"e2"}`)
	require.Equal(t, "t2", newAPI(t, s.url, other[1]).must(http.StatusOK, "GET", "/v1/whoami", "")["tenant"],
		"revoking one key leaves the others")

	_, stderr, code = runClaimd(t, env, "keys", "revoke", id)
	require.Equal(t, 1, code, "revoking twice fails")
	require.Contains(t, stderr, "no active key")
	_, stderr, code = runClaimd(t, env, "keys", "create")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "usage: claimd keys create")
}
