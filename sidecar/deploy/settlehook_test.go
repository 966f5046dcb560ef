package deploy

import (
	"encoding/json"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/short"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// The settle hook (n8n-node/hooks/, n8n-node/README.md#settle-hook-self-hosted-n8n) is not
// in the npm package: the n8n image carries it and docker-compose.yml makes
// every n8n process load it.

const (
	hookSrcDir   = "n8n-node/hooks/"
	hookMainFile = "idempotent-claim.js"
)

// n8nHookCopy returns the final stage's COPY of the settle hook in
// n8n-node/Dockerfile and its destination folder (with a final slash).
func n8nHookCopy(t *testing.T) (instruction, string) {
	t.Helper()
	df := parseDockerfile(t, "n8n-node/Dockerfile")
	final := df.Stages[len(df.Stages)-1]
	var found []instruction
	var dst string
	for _, in := range final.all("COPY") {
		flags, srcs, d := copyArgs(in)
		if _, fromStage := flags["from"]; fromStage {
			continue
		}
		for _, src := range srcs {
			if strings.HasPrefix(src, "n8n-node") {
				require.Equal(t, []string{hookSrcDir}, srcs,
					"n8n-node/Dockerfile:%d: the final stage takes only the hook folder from n8n-node/ (the node comes packed from the build stage)", in.Line)
				found = append(found, in)
				dst = d
			}
		}
	}
	require.Len(t, found, 1, "n8n-node/Dockerfile copies %s into the n8n image once", hookSrcDir)
	require.True(t, strings.HasSuffix(dst, "/"), "the hook folder is copied into a folder: %s", dst)
	return found[0], dst
}

// TestN8NDockerfileSettleHook: the image carries the files of
// n8n-node/hooks/, owned by root and read-only for the node user n8n runs
// as, and those files need nothing but Node's built-ins and each other.
func TestN8NDockerfileSettleHook(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	in, dst := n8nHookCopy(t)
	require.Equal(t, "/opt/idempotent-claim/hooks/", dst)
	flags, _, _ := copyArgs(in)
	require.Contains(t, []string{"", "0:0", "root:root", "root"}, flags["chown"], "the hook is root's, never node's")
	require.NotContains(t, flags, "chmod", "modes are set by the RUN below (COPY --chmod would give the folders the files' mode)")

	// A RUN as root after the COPY makes the folder readable and its
	// folders searchable for everyone, writable for root only.
	df := parseDockerfile(t, "n8n-node/Dockerfile")
	final := df.Stages[len(df.Stages)-1]
	var fixed bool
	for _, run := range final.all("RUN") {
		if run.Line < in.Line || !strings.Contains(run.Args, "chmod -R u=rwX,go=rX "+strings.TrimSuffix(dst, "/")) {
			continue
		}
		user := ""
		for _, u := range final.all("USER") {
			if u.Line < run.Line {
				user = u.Args
			}
		}
		require.Equal(t, "root", user, "n8n-node/Dockerfile:%d: the chmod runs as root", run.Line)
		fixed = true
	}
	require.True(t, fixed, "a RUN after the COPY sets the hook's modes: chmod -R u=rwX,go=rX %s", dst)
	require.Equal(t, "node", final.last(t, "USER").Args, "n8n runs as node, who cannot change the hook")

	// The folder has no node_modules in the image: every require() of the
	// hook's files is a Node built-in (node:…) or a file of the folder.
	hooks := filepath.Join(root, filepath.FromSlash(hookSrcDir))
	st, err := os.Stat(filepath.Join(hooks, hookMainFile))
	require.NoError(t, err)
	require.True(t, st.Mode().IsRegular())
	requireRe := regexp.MustCompile(`\brequire\(\s*(['"])([^'"]+)(['"])\s*\)`)
	var files int
	require.NoError(t, filepath.WalkDir(hooks, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".js") {
			return err
		}
		files++
		rel, _ := filepath.Rel(hooks, p)
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		for _, m := range requireRe.FindAllStringSubmatch(string(b), -1) {
			spec := m[2]
			if strings.HasPrefix(spec, "node:") {
				continue
			}
			require.True(t, strings.HasPrefix(spec, "./") || strings.HasPrefix(spec, "../"),
				"%s requires %q: only node: built-ins and the hook's own files are in the image", rel, spec)
			target := path.Join(path.Dir(filepath.ToSlash(rel)), spec)
			require.False(t, target == ".." || strings.HasPrefix(target, "../"), "%s requires %q, outside the hook folder", rel, spec)
			var ok bool
			for _, cand := range []string{target, target + ".js", target + "/index.js"} {
				if st, err := os.Stat(filepath.Join(hooks, filepath.FromSlash(cand))); err == nil && st.Mode().IsRegular() {
					ok = true
				}
			}
			require.True(t, ok, "%s requires %q: no such file in %s", rel, spec, hookSrcDir)
		}
		return nil
	}))
	require.Greater(t, files, 1, "the hook file and its lib/")
}

// n8nProcesses are the services that run the n8n image (main, workers,
// webhook processes): every one must load the hook.
func n8nProcesses(t *testing.T, p *types.Project) []string {
	t.Helper()
	image := service(t, p, "n8n").Image
	var out []string
	for _, s := range p.Services {
		if (s.Build != nil && s.Build.Dockerfile == "n8n-node/Dockerfile") || s.Image == image {
			out = append(out, s.Name)
		}
	}
	return sortedNames(out)
}

// TestComposeSettleHook: every n8n process loads the image's hook, talks to
// claimd on the compose network, with a key claimd accepts, of the tenant
// of the trigger source; the hook's own settings reader accepts that
// environment.
func TestComposeSettleHook(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	_, hookDir := n8nHookCopy(t)
	hookFile := hookDir + hookMainFile

	p := loadCompose(t, map[string]string{"N8N_EXECUTIONS_MODE": "queue"}, allProfiles...)
	procs := n8nProcesses(t, p)
	require.Subset(t, procs, []string{"n8n", "n8n-worker"})

	ce := env(t, service(t, p, "claimd"))
	keys, err := auth.ParseStaticKeys(ce["CLAIMD_API_KEYS"])
	require.NoError(t, err)
	_, port, err := net.SplitHostPort(ce["CLAIMD_ADDR"])
	require.NoError(t, err)
	src := bindMount(t, service(t, p, "claimd"), ce["CLAIMD_SOURCES_FILE"])
	parsed, err := sources.ReadFile(src.Source, func(k string) string { return ce[k] })
	require.NoError(t, err)
	require.NotEmpty(t, parsed.Triggers, "the sources file has a trigger source for the hook's claims")

	for _, name := range procs {
		s := service(t, p, name)
		e := env(t, s)
		require.Equal(t, hookFile, e["EXTERNAL_HOOK_FILES"], "%s loads the hook the image carries", name)
		require.Equal(t, "http://claimd:"+port, e["IDEMPOTENT_CLAIM_URL"], "%s: the hook calls claimd on the compose network", name)
		require.Equal(t, "unknown", e["IDEMPOTENT_CLAIM_ON_ERROR"], "%s: a failed execution's claims go to review by default", name)
		require.NotContains(t, e, "IDEMPOTENT_CLAIM_API_KEY_FILE", "%s: one key setting", name)

		key := e["IDEMPOTENT_CLAIM_API_KEY"]
		i := slices.IndexFunc(keys, func(k auth.StaticKey) bool { return k.Key == key })
		require.GreaterOrEqual(t, i, 0, "%s: claimd accepts the hook's key", name)
		require.False(t, keys[i].Admin)
		for trig, ts := range parsed.Triggers {
			require.Equal(t, ts.Tenant, keys[i].Tenant, "%s: the hook's key is of trigger source %s's tenant", name, trig)
		}

		// Nothing mounted over the image's hook folder.
		for _, v := range s.Volumes {
			target := strings.TrimSuffix(v.Target, "/") + "/"
			require.False(t, strings.HasPrefix(hookDir, target), "%s mounts %s over the image's hook", name, v.Target)
		}

		cfg := hookConfig(t, root, e)
		require.Equal(t, true, cfg["ok"], "%s: the hook would be inactive: %v", name, cfg["problem"])
		c := cfg["config"].(map[string]any)
		require.Equal(t, e["IDEMPOTENT_CLAIM_URL"], c["url"])
		require.Equal(t, key, c["apiKey"])
		require.Equal(t, "unknown", c["onError"])
	}

	// The file n8n is pointed at is the repository's hook file.
	rel := strings.TrimPrefix(hookFile, hookDir)
	require.Equal(t, hookSrcDir+hookMainFile, requireRepoFile(t, root, filepath.Join(root, filepath.FromSlash(hookSrcDir), rel)))
}

// hookConfig runs the hook's own settings reader
// (n8n-node/hooks/lib/config.js) with exactly env and returns what it
// answers: {ok, config} or {ok: false, problem}.
func hookConfig(t *testing.T, root string, env map[string]string) map[string]any {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		short.Skip(t, "Node.js")
	}
	require.NoError(t, err, "node runs the settle hook's settings reader (make doctor lists it)")
	const script = `const { readConfig } = require(process.argv[1]);
const r = readConfig(process.env, () => { throw Object.assign(new Error('no key file here'), { code: 'ENOENT' }); });
process.stdout.write(JSON.stringify(r));`
	cmd := exec.Command(node, "-e", script, filepath.Join(root, "n8n-node", "hooks", "lib", "config.js"))
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.Output()
	require.NoError(t, err, "node: %s", out)
	var r map[string]any
	require.NoError(t, json.Unmarshal(out, &r), "%s", out)
	return r
}
