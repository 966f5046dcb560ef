package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
)

// composeEnvRun is sidecar/scripts/compose-env.sh in a copy of the checkout
// (the script and docker-compose.yml), so the .env it writes is the copy's.
type composeEnvRun struct {
	t    *testing.T
	root string
}

func newComposeEnvRun(t *testing.T) *composeEnvRun {
	t.Helper()
	src := repoRoot(t)
	root := t.TempDir()
	copyFile(t, filepath.Join(src, "docker-compose.yml"), filepath.Join(root, "docker-compose.yml"))
	copyFile(t, filepath.Join(src, "sidecar", "scripts", "compose-env.sh"), filepath.Join(root, "sidecar", "scripts", "compose-env.sh"))
	return &composeEnvRun{t: t, root: root}
}

func (r *composeEnvRun) envFile() string { return filepath.Join(r.root, ".env") }

// run runs the script with this test's environment less every required
// secret, plus extra.
func (r *composeEnvRun) run(extra ...string) (string, int) {
	r.t.Helper()
	cmd := exec.Command(filepath.Join(r.root, "sidecar", "scripts", "compose-env.sh"))
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if _, secret := testSecrets[name]; !secret {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, extra...)
	b, err := cmd.CombinedOutput()
	return string(b), exitCode(r.t, err)
}

// values reads .env as docker compose does for these lines: NAME=value,
// comments skipped, the last one wins.
func (r *composeEnvRun) values() map[string]string {
	r.t.Helper()
	b, err := os.ReadFile(r.envFile())
	require.NoError(r.t, err)
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		require.True(r.t, ok, ".env line %q", line)
		out[k] = v
	}
	return out
}

// TestComposeEnv: make compose-env writes every secret docker-compose.yml
// requires, random and valid, to a private .env; with which the compose
// file loads in every profile; it never changes a value already there,
// adds only what is missing, leaves names set in the environment to it, and
// refuses an empty value.
func TestComposeEnv(t *testing.T) {
	t.Parallel()
	composeText, err := os.ReadFile(filepath.Join(repoRoot(t), "docker-compose.yml"))
	require.NoError(t, err)
	required := requiredSecrets(t, string(composeText))

	t.Run("fresh", func(t *testing.T) {
		t.Parallel()
		r := newComposeEnvRun(t)
		out, code := r.run()
		require.Equal(t, 0, code, out)
		require.Contains(t, out, "wrote ")
		st, err := os.Stat(r.envFile())
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), ".env holds secrets: owner only")

		vals := r.values()
		require.Equal(t, required, sortedNames(keysOf(vals)), "one value per required secret")
		seen := map[string]string{}
		for k, v := range vals {
			require.Regexp(t, `^(demo:|whsec_)?[0-9a-f]{64}$`, v, "%s: 32 random bytes, URL-safe", k)
			require.NotContains(t, seen, v, "%s repeats %s", k, seen[v])
			seen[v] = k
		}
		keys, err := auth.ParseStaticKeys(vals["CLAIMD_API_KEYS"])
		require.NoError(t, err, "claimd accepts the generated key")
		require.Len(t, keys, 1)
		require.True(t, strings.HasPrefix(vals["STRIPE_WEBHOOK_SECRET"], "whsec_"), "a Stripe-shaped signing secret")

		// The compose file loads with exactly these, in every profile.
		vals["N8N_EXECUTIONS_MODE"] = "queue"
		p, err := loadComposeErr(t, vals, allProfiles...)
		require.NoError(t, err, "docker-compose.yml with the generated .env")
		// claimd takes the settle hook's key, as tenant demo like the
		// CLAIMD_API_KEYS key the trigger's credential uses, and every n8n
		// process has it.
		hookKey := vals["IC_HOOK_API_KEY"]
		claimdKeys, err := auth.ParseStaticKeys(env(t, service(t, p, "claimd"))["CLAIMD_API_KEYS"])
		require.NoError(t, err, "claimd accepts its keys")
		require.Equal(t, []auth.StaticKey{keys[0], {Tenant: keys[0].Tenant, Key: hookKey}}, claimdKeys)
		require.Equal(t, "demo", keys[0].Tenant)
		for _, name := range n8nProcesses(t, p) {
			require.Equal(t, hookKey, env(t, service(t, p, name))["IDEMPOTENT_CLAIM_API_KEY"], name)
		}

		// Again: nothing changes.
		before, err := os.ReadFile(r.envFile())
		require.NoError(t, err)
		out, code = r.run()
		require.Equal(t, 0, code, out)
		require.Contains(t, out, "nothing changed")
		after, err := os.ReadFile(r.envFile())
		require.NoError(t, err)
		require.Equal(t, string(before), string(after))
	})

	t.Run("existing values are kept", func(t *testing.T) {
		t.Parallel()
		r := newComposeEnvRun(t)
		// The user's own file: a comment, an export, a quoted value, no
		// final newline.
		own := "# mine\nexport POSTGRES_PASSWORD=mine-postgres\nN8N_ENCRYPTION_KEY=\"mine-key\"\nGENERIC_TIMEZONE=Europe/Berlin"
		writeFile(t, r.envFile(), own, 0o644)
		out, code := r.run("N8N_HOOK_TOKEN=from-the-environment")
		require.Equal(t, 0, code, out)
		require.Contains(t, out, "N8N_HOOK_TOKEN is set in the environment")
		b, err := os.ReadFile(r.envFile())
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(string(b), own+"\n"), "the user's lines come first, unchanged:\n%s", b)
		added := strings.Split(strings.TrimSpace(strings.TrimPrefix(string(b), own+"\n")), "\n")
		require.True(t, strings.HasPrefix(added[0], "# Written by make compose-env"), added[0])
		var names []string
		for _, line := range added[1:] {
			name, _, _ := strings.Cut(line, "=")
			names = append(names, name)
		}
		var want []string
		for _, n := range required {
			if n != "POSTGRES_PASSWORD" && n != "N8N_ENCRYPTION_KEY" && n != "N8N_HOOK_TOKEN" {
				want = append(want, n)
			}
		}
		require.Equal(t, want, names, "only the missing secrets are added")
	})

	t.Run("an empty value is refused", func(t *testing.T) {
		t.Parallel()
		r := newComposeEnvRun(t)
		writeFile(t, r.envFile(), "N8N_ENCRYPTION_KEY=\n", 0o600)
		out, code := r.run()
		require.Equal(t, 1, code, out)
		require.Contains(t, out, "N8N_ENCRYPTION_KEY is empty in .env")
		b, err := os.ReadFile(r.envFile())
		require.NoError(t, err)
		require.Equal(t, "N8N_ENCRYPTION_KEY=\n", string(b), ".env is left as it was")
	})
}

// TestComposeEnvIgnored: .env stays out of git and out of the image build
// context.
func TestComposeEnvIgnored(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), ".gitignore"))
	require.NoError(t, err)
	require.Contains(t, strings.Split(string(b), "\n"), "/.env", ".gitignore")
	require.True(t, ignored(dockerignore(t), ".env"), ".dockerignore")
}
