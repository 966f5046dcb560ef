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
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(content), mode))
}

// entrypointRun runs the n8n image's entrypoint wrapper with sh in a
// sandbox: an image package folder, a user folder and a stand-in for n8n's
// own entrypoint that records its arguments.
type entrypointRun struct {
	t          *testing.T
	script     string
	pkgDir     string // the image's package, IC_NODE_PACKAGE_DIR
	userFolder string
	argsFile   string
	next       string
}

const nodePkg = "n8n-nodes-idempotent-claim"

func newEntrypointRun(t *testing.T) *entrypointRun {
	t.Helper()
	dir := t.TempDir()
	r := &entrypointRun{
		t:          t,
		script:     filepath.Join(repoRoot(t), "sidecar", "deploy", "n8n-entrypoint.sh"),
		pkgDir:     filepath.Join(dir, "opt", nodePkg),
		userFolder: filepath.Join(dir, "home"),
		argsFile:   filepath.Join(dir, "args"),
		next:       filepath.Join(dir, "docker-entrypoint.sh"),
	}
	writeFile(t, r.next, "#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done > \""+r.argsFile+"\"\n", 0o755)
	return r
}

// run starts the script with extra environment and arguments; it returns
// the output, the arguments n8n's entrypoint got (nil when it did not
// start) and the script's error. It runs in queue mode with a Redis host
// that resolves (localhost), so that `worker` starts; env overrides that.
func (r *entrypointRun) run(env []string, args ...string) (out string, got []string, err error) {
	r.t.Helper()
	_ = os.Remove(r.argsFile)
	cmd := exec.Command("sh", append([]string{r.script}, args...)...)
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + filepath.Join(filepath.Dir(r.userFolder), "unused-home"),
		"N8N_USER_FOLDER=" + r.userFolder,
		"IC_NODE_PACKAGE_DIR=" + r.pkgDir,
		"IC_N8N_ENTRYPOINT=" + r.next,
		"EXECUTIONS_MODE=queue",
		"QUEUE_BULL_REDIS_HOST=localhost",
	}, env...)
	b, err := cmd.CombinedOutput()
	out = string(b)
	recorded, readErr := os.ReadFile(r.argsFile)
	if readErr != nil {
		return out, nil, err
	}
	got = []string{}
	if len(recorded) > 0 {
		got = strings.Split(strings.TrimSuffix(string(recorded), "\n"), "\n")
	}
	return out, got, err
}

// image puts a build of the package into the image folder: package.json
// (npm's layout, one key a line), one dist file, and the build id file.
func (r *entrypointRun) image(version, build, distFile string) {
	r.t.Helper()
	require.NoError(r.t, os.RemoveAll(r.pkgDir))
	writeFile(r.t, filepath.Join(r.pkgDir, "package.json"),
		"{\n  \"name\": \""+nodePkg+"\",\n  \"version\": \""+version+"\"\n}\n", 0o644)
	writeFile(r.t, filepath.Join(r.pkgDir, "dist", distFile), build, 0o644)
	writeFile(r.t, r.pkgDir+".build", version+" "+build+"\n", 0o644)
}

func (r *entrypointRun) nodes() string     { return filepath.Join(r.userFolder, ".n8n", "nodes") }
func (r *entrypointRun) installed() string { return filepath.Join(r.nodes(), "node_modules", nodePkg) }

// n8nInstalls stands in for n8n's installer: it replaces the package
// folder with a fresh one (no image mark), as n8n does on install/update.
func (r *entrypointRun) n8nInstalls(version string) {
	r.t.Helper()
	require.NoError(r.t, os.RemoveAll(r.installed()))
	writeFile(r.t, filepath.Join(r.installed(), "package.json"),
		"{\n  \"name\": \""+nodePkg+"\",\n  \"version\": \""+version+"\"\n}\n", 0o644)
	writeFile(r.t, filepath.Join(r.installed(), "dist", "from-npm.js"), version, 0o644)
}

func (r *entrypointRun) requireClean() {
	r.t.Helper()
	entries, err := os.ReadDir(filepath.Join(r.nodes(), "node_modules"))
	if err == nil {
		for _, e := range entries {
			require.False(r.t, strings.HasPrefix(e.Name(), "."), "staging folder %s left behind", e.Name())
		}
	}
	require.NoDirExists(r.t, filepath.Join(r.nodes(), ".idempotent-claim.lock"), "lock left behind")
}

func (r *entrypointRun) file(rel string) string {
	r.t.Helper()
	b, err := os.ReadFile(filepath.Join(r.installed(), filepath.FromSlash(rel)))
	require.NoError(r.t, err)
	return string(b)
}

// TestN8NEntrypoint: the image's copy of the node is installed when no copy
// is there, replaced by a new image build, and never touches a version n8n
// installed (a folder without the image's mark) or re-adds one n8n
// uninstalled; arguments reach n8n's entrypoint unchanged.
func TestN8NEntrypoint(t *testing.T) {
	t.Parallel()
	r := newEntrypointRun(t)

	// First start, as a queue-mode worker: the image's copy is installed.
	r.image("0.1.0", "build-a", "a.js")
	out, args, err := r.run(nil, "worker", "--concurrency=5", "two words")
	require.NoError(t, err, out)
	require.Equal(t, []string{"worker", "--concurrency=5", "two words"}, args)
	require.Equal(t, "build-a", r.file("dist/a.js"))
	require.Equal(t, "0.1.0 build-a\n", r.file(".idempotent-claim-image"), "the copy carries the image's build id")
	require.Contains(t, out, "installed "+nodePkg+" 0.1.0 from the image")
	r.requireClean()

	// Same image again: nothing is copied (a file added since stays).
	writeFile(t, filepath.Join(r.installed(), "dist", "local.js"), "x", 0o644)
	out, args, err = r.run(nil)
	require.NoError(t, err, out)
	require.Equal(t, []string{}, args, "no arguments: n8n's default command")
	require.Contains(t, out, "0.1.0 from this image is installed")
	require.FileExists(t, filepath.Join(r.installed(), "dist", "local.js"))

	// A new build (here with the same version, as in development): the
	// image's copy is replaced completely.
	r.image("0.1.0", "build-b", "b.js")
	out, _, err = r.run(nil)
	require.NoError(t, err, out)
	require.Equal(t, "build-b", r.file("dist/b.js"))
	require.NoFileExists(t, filepath.Join(r.installed(), "dist", "a.js"))
	require.NoFileExists(t, filepath.Join(r.installed(), "dist", "local.js"))
	r.requireClean()

	// n8n installs 0.2.0 from npm (Settings > Community Nodes): no image
	// build, older or newer, replaces it.
	r.n8nInstalls("0.2.0")
	for _, img := range []struct{ version, build string }{{"0.1.0", "build-c"}, {"0.3.0", "build-d"}} {
		r.image(img.version, img.build, "c.js")
		out, args, err = r.run(nil, "start")
		require.NoError(t, err, out)
		require.Equal(t, []string{"start"}, args)
		require.Contains(t, out, "keeping "+nodePkg+" 0.2.0, installed by n8n")
		require.Equal(t, "0.2.0", r.file("dist/from-npm.js"))
		require.NoFileExists(t, filepath.Join(r.installed(), ".idempotent-claim-image"))
	}

	// n8n uninstalls it: the image does not bring it back...
	require.NoError(t, os.RemoveAll(r.installed()))
	out, args, err = r.run(nil)
	require.NoError(t, err, out)
	require.NotNil(t, args, "n8n starts")
	require.Contains(t, out, "was uninstalled")
	require.NoDirExists(t, r.installed())
	// ...until the seeded record is deleted.
	require.NoError(t, os.Remove(filepath.Join(r.nodes(), ".idempotent-claim-image-seeded")))
	out, _, err = r.run(nil)
	require.NoError(t, err, out)
	require.Equal(t, "build-d", r.file("dist/c.js"))
	r.requireClean()
}

func TestN8NEntrypointModes(t *testing.T) {
	t.Parallel()

	t.Run("n8n removes the image's copy only", func(t *testing.T) {
		t.Parallel()
		r := newEntrypointRun(t)
		r.image("0.1.0", "build-a", "a.js")
		out, _, err := r.run([]string{"IC_NODE_INSTALL=auto", "N8N_COMMUNITY_PACKAGES_MANAGED_BY_ENV=false"})
		require.NoError(t, err, out)
		require.DirExists(t, r.installed(), "auto without n8n managing packages is image")
		// auto (as in docker-compose.yml) with N8N_COMMUNITY_PACKAGES_MANAGED_BY_ENV=true is n8n.
		out, args, err := r.run([]string{"IC_NODE_INSTALL=auto", "N8N_COMMUNITY_PACKAGES_MANAGED_BY_ENV=true"}, "worker")
		require.NoError(t, err, out)
		require.Equal(t, []string{"worker"}, args)
		require.NoDirExists(t, r.installed())
		require.Contains(t, out, "n8n installs it")
		// Nothing is installed, and n8n's own copy is left alone.
		out, _, err = r.run([]string{"IC_NODE_INSTALL=n8n"})
		require.NoError(t, err, out)
		require.NoDirExists(t, r.installed())
		r.n8nInstalls("0.2.0")
		out, _, err = r.run([]string{"IC_NODE_INSTALL=n8n"})
		require.NoError(t, err, out)
		require.Equal(t, "0.2.0", r.file("dist/from-npm.js"))
		r.requireClean()
	})

	t.Run("image mode can be forced with n8n managing packages", func(t *testing.T) {
		t.Parallel()
		r := newEntrypointRun(t)
		r.image("0.1.0", "build-a", "a.js")
		out, _, err := r.run([]string{"N8N_COMMUNITY_PACKAGES_MANAGED_BY_ENV=true", "IC_NODE_INSTALL=image"})
		require.NoError(t, err, out)
		require.Equal(t, "build-a", r.file("dist/a.js"))
	})

	t.Run("off changes nothing", func(t *testing.T) {
		t.Parallel()
		r := newEntrypointRun(t)
		r.image("0.1.0", "build-a", "a.js")
		out, args, err := r.run([]string{"IC_NODE_INSTALL=off"}, "start")
		require.NoError(t, err, out)
		require.Equal(t, []string{"start"}, args)
		require.NoDirExists(t, r.installed())
	})

	t.Run("an unknown mode stops the start", func(t *testing.T) {
		t.Parallel()
		r := newEntrypointRun(t)
		r.image("0.1.0", "build-a", "a.js")
		out, args, err := r.run([]string{"IC_NODE_INSTALL=copy"})
		require.Error(t, err)
		require.Contains(t, out, "IC_NODE_INSTALL must be")
		require.Nil(t, args, "n8n must not start")
	})

	t.Run("a missing image package stops the start", func(t *testing.T) {
		t.Parallel()
		r := newEntrypointRun(t)
		out, args, err := r.run(nil, "worker")
		require.Error(t, err)
		require.Contains(t, out, "node package missing")
		require.Nil(t, args, "n8n must not start")
		require.NoDirExists(t, filepath.Join(r.nodes(), ".idempotent-claim.lock"), "the lock is released on failure")
		// Without the build id the package is incomplete as well.
		r.image("0.1.0", "build-a", "a.js")
		require.NoError(t, os.Remove(r.pkgDir+".build"))
		out, args, err = r.run(nil)
		require.Error(t, err)
		require.Contains(t, out, "node package missing")
		require.Nil(t, args)
	})

	t.Run("a lock held by a concurrent start is waited for", func(t *testing.T) {
		t.Parallel()
		r := newEntrypointRun(t)
		r.image("0.1.0", "build-a", "a.js")
		lock := filepath.Join(r.nodes(), ".idempotent-claim.lock")
		require.NoError(t, os.MkdirAll(lock, 0o755))
		go func() {
			time.Sleep(1500 * time.Millisecond)
			_ = os.Remove(lock)
		}()
		start := time.Now()
		out, _, err := r.run(nil)
		require.NoError(t, err, out)
		require.GreaterOrEqual(t, time.Since(start), time.Second, "the start waited for the lock")
		require.Equal(t, "build-a", r.file("dist/a.js"))
		r.requireClean()
	})
}

// TestN8NEntrypointQueueGuard: a queue-mode mismatch stops the start
// before n8n runs or the node folder is touched, with a message that says
// how to start queue mode: queue mode whose Redis host does not resolve
// (N8N_EXECUTIONS_MODE=queue without --profile queue), a worker or webhook
// process outside queue mode (--profile queue without
// N8N_EXECUTIONS_MODE=queue), an unknown mode.
func TestN8NEntrypointQueueGuard(t *testing.T) {
	t.Parallel()
	// .invalid never resolves (RFC 6761).
	const noRedis = "QUEUE_BULL_REDIS_HOST=redis.invalid"
	const hint = "N8N_EXECUTIONS_MODE=queue docker compose --profile queue up"
	refused := []struct {
		name string
		env  []string
		args []string
		says string
	}{
		{"queue without Redis: main", []string{noRedis}, nil, "the Redis host 'redis.invalid' (QUEUE_BULL_REDIS_HOST) does not resolve"},
		{"queue without Redis: worker", []string{noRedis}, []string{"worker"}, "does not resolve"},
		{"worker in regular mode", []string{"EXECUTIONS_MODE=regular"}, []string{"worker", "--concurrency=10"}, "refusing to start n8n worker: EXECUTIONS_MODE is regular"},
		{"worker, mode unset", []string{"EXECUTIONS_MODE="}, []string{"worker"}, "EXECUTIONS_MODE is regular"},
		{"webhook in regular mode", []string{"EXECUTIONS_MODE=regular"}, []string{"webhook"}, "refusing to start n8n webhook"},
		{"unknown mode", []string{"EXECUTIONS_MODE=Queue"}, nil, "EXECUTIONS_MODE must be regular or queue, not 'Queue'"},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newEntrypointRun(t)
			r.image("0.1.0", "build-a", "a.js")
			out, args, err := r.run(c.env, c.args...)
			require.Error(t, err, out)
			require.Equal(t, 1, exitCode(t, err))
			require.Contains(t, out, c.says)
			if !strings.Contains(c.says, "must be") {
				require.Contains(t, out, hint, "the message says how to start queue mode")
			}
			require.Nil(t, args, "n8n must not start")
			require.NoDirExists(t, r.nodes(), "the node folder is not touched")
		})
	}

	t.Run("agreeing settings start", func(t *testing.T) {
		t.Parallel()
		r := newEntrypointRun(t)
		r.image("0.1.0", "build-a", "a.js")
		for _, c := range []struct {
			env  []string
			args []string
		}{
			{[]string{"EXECUTIONS_MODE=regular", noRedis}, nil}, // Redis is not needed
			{[]string{"EXECUTIONS_MODE="}, []string{"start"}},
			{nil, nil},
			{nil, []string{"worker", "--concurrency=10"}},
		} {
			out, args, err := r.run(c.env, c.args...)
			require.NoError(t, err, "%v %v: %s", c.env, c.args, out)
			require.Equal(t, append([]string{}, c.args...), args)
		}
	})

	t.Run("without getent, node resolves", func(t *testing.T) {
		t.Parallel()
		if _, err := exec.LookPath("node"); err != nil {
			t.Skip("node is not installed (every n8n image has it)")
		}
		r := newEntrypointRun(t)
		path := "PATH=" + toolDir(t, "sh", "node")
		out, args, err := r.run([]string{path, "IC_NODE_INSTALL=off"}, "worker")
		require.NoError(t, err, out)
		require.Equal(t, []string{"worker"}, args)
		out, args, err = r.run([]string{path, "IC_NODE_INSTALL=off", noRedis}, "worker")
		require.Error(t, err, out)
		require.Contains(t, out, "does not resolve")
		require.Nil(t, args)
	})
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

	admin, err := pgx.Connect(ctx, pgtest.ServerURL(t))
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
