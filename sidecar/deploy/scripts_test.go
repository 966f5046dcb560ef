package deploy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(content), mode))
}

// TestN8NEntrypoint runs the n8n image's entrypoint wrapper with sh: it must
// install the packaged node into the user folder, replace an older copy
// completely, and hand its arguments to n8n's entrypoint unchanged.
func TestN8NEntrypoint(t *testing.T) {
	t.Parallel()
	script := filepath.Join(repoRoot(t), "sidecar", "deploy", "n8n-entrypoint.sh")
	dir := t.TempDir()
	pkgDir := filepath.Join(dir, "opt", "n8n-nodes-idempotent-claim")
	userFolder := filepath.Join(dir, "home")
	argsFile := filepath.Join(dir, "args")
	next := filepath.Join(dir, "docker-entrypoint.sh")
	// Stands in for n8n's entrypoint: records its arguments, one a line.
	writeFile(t, next, "#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done > \""+argsFile+"\"\n", 0o755)

	run := func(args ...string) (string, error) {
		cmd := exec.Command("sh", append([]string{script}, args...)...)
		cmd.Env = []string{
			"PATH=" + os.Getenv("PATH"),
			"HOME=" + filepath.Join(dir, "unused-home"),
			"N8N_USER_FOLDER=" + userFolder,
			"IC_NODE_PACKAGE_DIR=" + pkgDir,
			"IC_N8N_ENTRYPOINT=" + next,
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	installed := filepath.Join(userFolder, ".n8n", "nodes", "node_modules", "n8n-nodes-idempotent-claim")

	// Version 1, started as a queue-mode worker.
	writeFile(t, filepath.Join(pkgDir, "package.json"), `{"name":"n8n-nodes-idempotent-claim","version":"1"}`, 0o644)
	writeFile(t, filepath.Join(pkgDir, "dist", "old.js"), "v1", 0o644)
	out, err := run("worker", "--concurrency=5", "two words")
	require.NoError(t, err, out)
	got, err := os.ReadFile(argsFile)
	require.NoError(t, err)
	require.Equal(t, "worker\n--concurrency=5\ntwo words\n", string(got))
	b, err := os.ReadFile(filepath.Join(installed, "dist", "old.js"))
	require.NoError(t, err)
	require.Equal(t, "v1", string(b))

	// Version 2 in a new image, same volume: the copy is replaced, files
	// that version 2 no longer has are gone. No arguments: n8n's default.
	require.NoError(t, os.RemoveAll(pkgDir))
	writeFile(t, filepath.Join(pkgDir, "package.json"), `{"name":"n8n-nodes-idempotent-claim","version":"2"}`, 0o644)
	writeFile(t, filepath.Join(pkgDir, "dist", "new.js"), "v2", 0o644)
	out, err = run()
	require.NoError(t, err, out)
	got, err = os.ReadFile(argsFile)
	require.NoError(t, err)
	require.Empty(t, string(got))
	b, err = os.ReadFile(filepath.Join(installed, "package.json"))
	require.NoError(t, err)
	require.Contains(t, string(b), `"version":"2"`)
	require.NoFileExists(t, filepath.Join(installed, "dist", "old.js"))
	require.FileExists(t, filepath.Join(installed, "dist", "new.js"))
	entries, err := os.ReadDir(filepath.Dir(installed))
	require.NoError(t, err)
	require.Len(t, entries, 1, "no staging directory is left behind")

	// A missing package fails the start instead of running n8n without it.
	require.NoError(t, os.RemoveAll(pkgDir))
	require.NoError(t, os.Remove(argsFile))
	out, err = run("worker")
	require.Error(t, err)
	require.Contains(t, out, "node package missing")
	require.NoFileExists(t, argsFile, "n8n must not start")
}

func randomName(t *testing.T, prefix string) string {
	t.Helper()
	b := make([]byte, 5)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return prefix + hex.EncodeToString(b)
}

// TestPostgresInitScript runs the postgres init script with psql against
// the test server, the way the postgres image runs it (POSTGRES_USER and
// POSTGRES_DB set, connected as the superuser), with names of its own so it
// cannot clash with anything on the server.
func TestPostgresInitScript(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"bash", "psql"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: the init script needs it (the postgres image has both)", tool)
		}
	}
	ctx := context.Background()
	script := filepath.Join(repoRoot(t), "sidecar", "deploy", "postgres", "10-n8n-database.sh")
	claimdDB := pgtest.NewDatabase(t) // stands in for POSTGRES_DB
	u, err := url.Parse(claimdDB)
	require.NoError(t, err)
	role, db := randomName(t, "ic_n8n_role_"), randomName(t, "ic_n8n_db_")

	admin, err := pgx.Connect(ctx, pgtest.ServerURL())
	require.NoError(t, err)
	t.Cleanup(func() {
		c := context.Background()
		defer admin.Close(c)
		for _, q := range []string{
			"DROP DATABASE IF EXISTS " + pgx.Identifier{db}.Sanitize() + " WITH (FORCE)",
			"DROP ROLE IF EXISTS " + pgx.Identifier{role}.Sanitize(),
		} {
			if _, err := admin.Exec(c, q); err != nil {
				t.Errorf("cleanup %q: %v", q, err)
			}
		}
	})

	run := func(password string) (string, error) {
		cmd := exec.Command("bash", script)
		cmd.Env = []string{
			"PATH=" + os.Getenv("PATH"),
			"PGHOST=" + u.Hostname(),
			"PGPORT=" + u.Port(),
			"POSTGRES_USER=" + u.User.Username(),
			"POSTGRES_DB=" + strings.TrimPrefix(u.Path, "/"),
			"N8N_DB_USER=" + role,
			"N8N_DB_NAME=" + db,
		}
		if pw, ok := u.User.Password(); ok {
			cmd.Env = append(cmd.Env, "PGPASSWORD="+pw)
		}
		if mode := u.Query().Get("sslmode"); mode != "" {
			cmd.Env = append(cmd.Env, "PGSSLMODE="+mode)
		}
		if password != "" {
			cmd.Env = append(cmd.Env, "N8N_DB_PASSWORD="+password)
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	// Without a password nothing is created.
	out, err := run("")
	require.Error(t, err)
	require.Contains(t, out, "N8N_DB_PASSWORD")
	var n int
	require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM pg_roles WHERE rolname = $1", role).Scan(&n))
	require.Zero(t, n)

	// Quotes in the password reach PostgreSQL as data, not SQL.
	out, err = run(`it's "dev"; DROP ROLE x; --`)
	require.NoError(t, err, out)

	var canLogin, superuser bool
	require.NoError(t, admin.QueryRow(ctx,
		"SELECT rolcanlogin, rolsuper FROM pg_roles WHERE rolname = $1", role).Scan(&canLogin, &superuser))
	require.True(t, canLogin)
	require.False(t, superuser)
	var hasPassword bool
	require.NoError(t, admin.QueryRow(ctx,
		"SELECT rolpassword IS NOT NULL FROM pg_authid WHERE rolname = $1", role).Scan(&hasPassword))
	require.True(t, hasPassword)

	var owner string
	require.NoError(t, admin.QueryRow(ctx,
		"SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = $1", db).Scan(&owner))
	require.Equal(t, role, owner, "n8n owns its database")

	var ownDB, claimd bool
	require.NoError(t, admin.QueryRow(ctx,
		"SELECT has_database_privilege($1, $2, 'CONNECT'), has_database_privilege($1, $3, 'CONNECT')",
		role, db, strings.TrimPrefix(u.Path, "/")).Scan(&ownDB, &claimd))
	require.True(t, ownDB, "n8n connects to its database")
	require.False(t, claimd, "n8n cannot connect to claimd's database")

	// It is an init script: a second run on the same cluster fails loudly
	// rather than silently changing anything.
	out, err = run("another")
	require.Error(t, err, out)
}
