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

func TestSettingsPrintsEverySetting(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, out string) {
		t.Helper()
		for _, v := range config.Vars {
			require.Regexp(t, `(?m)^\s+-`+regexp.QuoteMeta(v.Flag)+`\s+`+regexp.QuoteMeta(v.Env)+`\s`, out, "setting %s", v.Env)
		}
	}
	t.Run("run", func(t *testing.T) {
		t.Parallel()
		var stdout, stderr bytes.Buffer
		require.NoError(t, run(context.Background(), []string{"settings"}, func(string) string { return "" }, &stdout, &stderr))
		check(t, stdout.String())
		require.Empty(t, stderr.String())
	})
	t.Run("binary", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code := runClaimd(t, nil, "settings")
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
	t.Run("markdown", func(t *testing.T) {
		t.Parallel()
		var stdout, stderr bytes.Buffer
		require.NoError(t, run(context.Background(), []string{"settings", "-markdown"}, func(string) string { return "" }, &stdout, &stderr))
		require.Equal(t, config.MarkdownTable(), stdout.String())
	})
}

// Every command has its own usage: COMMAND --help (or -h, or help
// COMMAND) prints it on stdout and exits 0, without reading any setting or
// the database.
func TestCommandHelp(t *testing.T) {
	t.Parallel()
	commands := map[string]string{ // command → a word of its own usage line
		"":            "the Idempotent Claim sidecar",
		"serve":       "run the HTTP API",
		"migrate":     "apply pending schema migrations",
		"purge":       "run the retention purge once",
		"keys":        "create, revoke and list database API keys",
		"keys create": "TENANT [NAME]",
		"keys revoke": "ID_OR_PREFIX",
		"keys list":   "never the key",
		"healthcheck": "[URL]",
		"settings":    "--markdown",
	}
	// A DATABASE_URL that no server answers: help must not need one.
	env := map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"}
	for cmd, want := range commands {
		for _, flag := range []string{"--help", "-h", "-help", "help"} {
			args := append(strings.Fields(cmd), flag)
			if flag == "help" {
				if strings.Contains(cmd, " ") {
					continue // urfave/cli's help COMMAND takes one level
				}
				args = append([]string{"help"}, strings.Fields(cmd)...)
			}
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				t.Parallel()
				stdout, stderr, code := runClaimd(t, env, args...)
				require.Equal(t, 0, code, "stderr: %s", stderr)
				require.Empty(t, stderr)
				usage := strings.TrimSpace("claimd " + cmd)
				require.Contains(t, stdout, "USAGE:\n   "+usage, "its own usage, not another command's")
				require.Contains(t, stdout, want)
			})
		}
	}
	t.Run("serve --help lists every setting with its variable", func(t *testing.T) {
		t.Parallel()
		var stdout, stderr bytes.Buffer
		require.NoError(t, run(context.Background(), []string{"serve", "--help"}, func(string) string { return "" }, &stdout, &stderr))
		for _, v := range config.Vars {
			require.Regexp(t, `(?m)^\s+--`+regexp.QuoteMeta(v.Flag)+` string\s.*\[\$`+regexp.QuoteMeta(v.Env)+`\]`, stdout.String())
		}
	})
	t.Run("the other commands name the settings they use and accept all", func(t *testing.T) {
		t.Parallel()
		for _, cmd := range []string{"migrate", "purge", "keys"} {
			var stdout, stderr bytes.Buffer
			require.NoError(t, run(context.Background(), []string{cmd, "--help"}, func(string) string { return "" }, &stdout, &stderr))
			require.Contains(t, stdout.String(), "--database-url string", cmd)
			require.NotContains(t, stdout.String(), "--max-header-bytes", cmd)
			require.Contains(t, stdout.String(), "Every setting of `claimd serve` is accepted", cmd)
		}
	})
}

// A usage error prints one line naming the fault on stderr and exits 1;
// nothing is read from the database first.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"}
	for args, want := range map[string]string{
		"frobnicate":             `unknown command or argument "frobnicate" (see ` + "`claimd help`)",
		"serve extra":            `unknown command or argument "extra"`,
		"serve -bogus 1":         "flag provided but not defined: -bogus (see `claimd serve --help`)",
		"-bogus":                 "flag provided but not defined: -bogus",
		"migrate now":            `claimd migrate takes no arguments, got "now"`,
		"purge --bogus":          "flag provided but not defined: -bogus (see `claimd purge --help`)",
		"keys":                   "keys: a command is required: create TENANT [NAME], revoke ID_OR_PREFIX or list",
		"keys rotate":            `keys: unknown command "rotate"; want create, revoke or list`,
		"keys create":            "usage: claimd keys create TENANT [NAME] (see `claimd keys create --help`)",
		"keys create a b c":      "usage: claimd keys create TENANT [NAME]",
		"keys revoke":            "usage: claimd keys revoke ID_OR_PREFIX",
		"keys list extra":        `claimd keys list takes no arguments, got "extra"`,
		"healthcheck a b":        "usage: claimd healthcheck [URL]",
		"settings -markdown yes": `claimd settings takes no arguments, got "yes"`,
		"settings -max-batch 5":  "flag provided but not defined: -max-batch (see `claimd settings --help`)",
	} {
		t.Run(args, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := runClaimd(t, env, strings.Fields(args)...)
			require.Equal(t, 1, code)
			require.Empty(t, stdout)
			require.Equal(t, "claimd: ", stderr[:min(len(stderr), 8)])
			require.Contains(t, stderr, want)
			require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %s", stderr)
			require.NotContains(t, stderr, "127.0.0.1:1", "not a database error: nothing was tried")
		})
	}
	t.Run("no database", func(t *testing.T) {
		t.Parallel()
		_, stderr, code := runClaimd(t, nil, "serve")
		require.Equal(t, 1, code)
		require.Contains(t, stderr, "DATABASE_URL is required")
		require.Contains(t, stderr, "`make run`", "serve: make run starts a database and serves it")
	})
	// The one-shot commands act on a claimd's database: for make run's,
	// its URL comes from make db-url.
	for _, args := range []string{"keys list", "keys create acme", "keys revoke ick_abc", "migrate", "purge"} {
		t.Run("no database: "+args, func(t *testing.T) {
			t.Parallel()
			_, stderr, code := runClaimd(t, nil, strings.Fields(args)...)
			require.Equal(t, 1, code)
			require.Contains(t, stderr, "DATABASE_URL is required")
			require.Contains(t, stderr, "DATABASE_URL=$(make db-url) claimd "+args+")")
			require.NotContains(t, stderr, "run `make run`")
		})
	}
}

// Settings flags go before or after a keys subcommand, as -name value,
// -name=value or --name value, and win over the environment.
func TestSettingsFlagsWinOverTheEnvironment(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	bad := map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"}
	for _, args := range [][]string{
		{"keys", "-database-url", db, "list"},
		{"keys", "list", "--database-url=" + db},
		{"keys", "list", "-database-url=" + db},
	} {
		stdout, stderr, code := runClaimd(t, bad, args...)
		require.Equal(t, 0, code, "%v: %s", args[:2], stderr)
		require.Contains(t, stdout, "ID")
	}
	_, stderr, code := runClaimd(t, map[string]string{"DATABASE_URL": db}, "migrate", "-log-format", "xml")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "CLAIMD_LOG_FORMAT must be json or console")
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
			if ll.Message == "migrations up to date" {
				require.NotNil(t, ll.Applied)
				return *ll.Applied
			}
		}
		t.Fatalf("no \"migrations up to date\" line in:\n%s", stderr)
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

// Starting without any API key says so: every /v1 request would be 401.
func TestWarnsWithoutAPIKeys(t *testing.T) {
	t.Parallel()
	const warning = "no API keys: every /v1 request is answered 401"
	t.Run("none", func(t *testing.T) {
		t.Parallel()
		s := startInProcess(t, map[string]string{"DATABASE_URL": pgtest.NewDatabase(t)})
		require.Contains(t, s.logs.String(), warning, "logged before claimd is ready")
	})
	t.Run("a static key", func(t *testing.T) {
		t.Parallel()
		s := startInProcess(t, map[string]string{"DATABASE_URL": pgtest.NewDatabase(t),
			"CLAIMD_API_KEYS": "t1:static-key-0123456789"})
		require.NotContains(t, s.logs.String(), warning)
	})
	t.Run("a database key", func(t *testing.T) {
		t.Parallel()
		db := pgtest.NewDatabase(t)
		_, stderr, code := runClaimd(t, map[string]string{"DATABASE_URL": db}, "keys", "create", "t1")
		require.Equal(t, 0, code, stderr)
		s := startInProcess(t, map[string]string{"DATABASE_URL": db})
		require.NotContains(t, s.logs.String(), warning)
	})
	t.Run("only revoked database keys", func(t *testing.T) {
		t.Parallel()
		db := pgtest.NewDatabase(t)
		stdout, stderr, code := runClaimd(t, map[string]string{"DATABASE_URL": db}, "keys", "create", "t1")
		require.Equal(t, 0, code, stderr)
		_, stderr, code = runClaimd(t, map[string]string{"DATABASE_URL": db}, "keys", "revoke", idLine.FindStringSubmatch(stdout)[1])
		require.Equal(t, 0, code, stderr)
		s := startInProcess(t, map[string]string{"DATABASE_URL": db})
		require.Contains(t, s.logs.String(), warning)
	})
}
