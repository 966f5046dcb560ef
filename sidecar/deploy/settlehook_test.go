package deploy

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The settle hook (n8n-node/hooks/, n8n-node/README.md "Settle hook") is not
// in the npm package: the n8n image carries it.

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
