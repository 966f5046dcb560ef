package deploy

import (
	"bufio"
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	Cmd  string // upper case: FROM, RUN, COPY…
	Args string // the rest of the line, trimmed
	Line int    // 1-based line of the instruction's start
}

// stage is one FROM and the instructions after it.
type stage struct {
	From  string // the image reference, ARGs not expanded
	Name  string // the AS name, "" if none
	Instr []instruction
}

type dockerfile struct {
	Args   map[string]string // ARGs before the first FROM, with defaults
	Stages []stage
}

// parseDockerfile is a deliberately small Dockerfile reader: comments and
// parser directives are dropped, lines ending in a backslash continue, and
// instructions are grouped by stage. It does not handle heredocs or a
// custom escape character; the Dockerfiles here use neither.
func parseDockerfile(t *testing.T, rel string) dockerfile {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot(t), filepath.FromSlash(rel)))
	require.NoError(t, err)
	defer f.Close()
	df := dockerfile{Args: map[string]string{}}
	var cur strings.Builder
	start, n := 0, 0
	flush := func() {
		text := strings.TrimSpace(cur.String())
		cur.Reset()
		if text == "" {
			return
		}
		cmd, args, _ := strings.Cut(text, " ")
		in := instruction{Cmd: strings.ToUpper(cmd), Args: strings.TrimSpace(args), Line: start}
		require.NotContains(t, in.Args, "<<", "%s:%d: heredocs are not supported by this reader", rel, start)
		switch {
		case in.Cmd == "FROM":
			fields := strings.Fields(in.Args)
			s := stage{From: fields[0]}
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				s.Name = fields[2]
			}
			df.Stages = append(df.Stages, s)
		case len(df.Stages) == 0:
			require.Equal(t, "ARG", in.Cmd, "%s:%d: only ARG may precede FROM", rel, start)
			k, v, _ := strings.Cut(in.Args, "=")
			df.Args[k] = v
		default:
			last := &df.Stages[len(df.Stages)-1]
			last.Instr = append(last.Instr, in)
		}
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || trimmed == "" {
			continue // comments and empty lines, also inside continuations
		}
		if cur.Len() == 0 {
			start = n
		}
		if body, ok := strings.CutSuffix(strings.TrimRight(line, " \t"), "\\"); ok {
			cur.WriteString(body)
			cur.WriteString(" ")
			continue
		}
		cur.WriteString(line)
		flush()
	}
	require.NoError(t, sc.Err())
	require.Zero(t, cur.Len(), "%s ends inside a continued line", rel)
	require.NotEmpty(t, df.Stages, "%s has no FROM", rel)
	return df
}

// expand replaces ${NAME} by the ARG default, again while a default names
// another ARG (ARG GO_IMAGE=golang:${GO_VERSION}).
func (df dockerfile) expand(s string) string {
	ref := regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)
	for i := 0; i < 8 && ref.MatchString(s); i++ {
		s = ref.ReplaceAllStringFunc(s, func(m string) string {
			return df.Args[m[2:len(m)-1]]
		})
	}
	return s
}

func (s stage) all(cmd string) []instruction {
	var out []instruction
	for _, in := range s.Instr {
		if in.Cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// last returns the stage's last cmd instruction (the one that counts for
// USER, ENTRYPOINT, CMD, HEALTHCHECK).
func (s stage) last(t *testing.T, cmd string) instruction {
	t.Helper()
	all := s.all(cmd)
	require.NotEmpty(t, all, "stage %q has no %s", s.From, cmd)
	return all[len(all)-1]
}

// execForm decodes a JSON-array (exec form) argument list.
func execForm(t *testing.T, in instruction) []string {
	t.Helper()
	var out []string
	require.NoError(t, json.Unmarshal([]byte(in.Args), &out), "line %d: %s must use the exec (JSON array) form", in.Line, in.Cmd)
	return out
}

// copyArgs splits COPY arguments into flags, sources and destination.
func copyArgs(in instruction) (flags map[string]string, srcs []string, dst string) {
	flags = map[string]string{}
	fields := strings.Fields(in.Args)
	for len(fields) > 0 && strings.HasPrefix(fields[0], "--") {
		k, v, _ := strings.Cut(strings.TrimPrefix(fields[0], "--"), "=")
		flags[k] = v
		fields = fields[1:]
	}
	if len(fields) == 0 {
		return flags, nil, ""
	}
	return flags, fields[:len(fields)-1], fields[len(fields)-1]
}

// dockerignore reads the root .dockerignore patterns (no negations used).
func dockerignore(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), ".dockerignore"))
	require.NoError(t, err)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		require.False(t, strings.HasPrefix(l, "!"), ".dockerignore: exceptions are not handled by this test")
		out = append(out, strings.TrimSuffix(strings.TrimPrefix(l, "/"), "/"))
	}
	return out
}

// ignored approximates Docker's .dockerignore matching: a pattern matches a
// path or any of its parent directories; "**/" matches any number of leading
// directories.
func ignored(patterns []string, p string) bool {
	p = path.Clean(p)
	var candidates []string
	for q := p; q != "." && q != "/"; q = path.Dir(q) {
		candidates = append(candidates, q)
	}
	for _, pat := range patterns {
		tail, anyDepth := strings.CutPrefix(pat, "**/")
		for _, c := range candidates {
			if ok, _ := path.Match(pat, c); ok {
				return true
			}
			if anyDepth {
				parts := strings.Split(c, "/")
				for i := range parts {
					if ok, _ := path.Match(tail, strings.Join(parts[i:], "/")); ok {
						return true
					}
				}
			}
		}
	}
	return false
}

// requireCopySources checks that every COPY from the build context names a
// file or directory of the repository that .dockerignore lets through.
func requireCopySources(t *testing.T, rel string, df dockerfile) {
	t.Helper()
	root := repoRoot(t)
	patterns := dockerignore(t)
	for _, s := range df.Stages {
		for _, in := range append(s.all("COPY"), s.all("ADD")...) {
			flags, srcs, _ := copyArgs(in)
			if _, ok := flags["from"]; ok {
				continue
			}
			require.NotEmpty(t, srcs, "%s:%d: COPY without source", rel, in.Line)
			for _, src := range srcs {
				_, err := os.Stat(filepath.Join(root, filepath.FromSlash(src)))
				require.NoError(t, err, "%s:%d: COPY source %s must exist in the repository", rel, in.Line, src)
				require.False(t, ignored(patterns, src), "%s:%d: COPY source %s is excluded by .dockerignore", rel, in.Line, src)
			}
		}
	}
}

func TestDockerignore(t *testing.T) {
	t.Parallel()
	patterns := dockerignore(t)
	for _, p := range []string{".git/config", ".pgdata/PG_VERSION", "claimd", "bin/claimd",
		"n8n-node/node_modules/x/index.js", "n8n-node/dist/nodes/x.js", "sidecar/verify/verify.test"} {
		require.True(t, ignored(patterns, p), "%s must stay out of the build context", p)
	}
	for _, p := range []string{"go.mod", "go.sum", "schema/embed.go", "sidecar/cmd/claimd/main.go",
		"sidecar/deploy/n8n-entrypoint.sh", "n8n-node/package.json", "n8n-node/package-lock.json",
		"n8n-node/nodes/IdempotentClaim/IdempotentClaim.node.ts", "n8n-node/icons"} {
		require.False(t, ignored(patterns, p), "%s is needed in the build context", p)
	}
}

func TestSidecarDockerfile(t *testing.T) {
	t.Parallel()
	const rel = "sidecar/Dockerfile"
	df := parseDockerfile(t, rel)
	require.Len(t, df.Stages, 2, "a build stage and a final stage")
	build, final := df.Stages[0], df.Stages[1]

	// The Go toolchain image follows go.mod's go line (major.minor).
	goMod, err := os.ReadFile(filepath.Join(repoRoot(t), "go.mod"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(goMod)
	require.NotNil(t, m, "go.mod has a go line")
	require.Equal(t, "golang:"+string(m[1]), df.expand(build.From), "build stage image")
	require.NotEmpty(t, build.Name)

	var built string
	for _, in := range build.all("RUN") {
		if strings.Contains(in.Args, "go build") {
			require.Contains(t, in.Args, "-trimpath")
			require.Contains(t, in.Args, "./sidecar/cmd/claimd")
			out := regexp.MustCompile(`-o\s+(\S+)`).FindStringSubmatch(in.Args)
			require.NotNil(t, out, "go build names its output with -o")
			built = out[1]
		}
	}
	require.NotEmpty(t, built, "the build stage runs go build")
	cgoOff := false
	for _, in := range append(build.all("ENV"), build.all("RUN")...) {
		cgoOff = cgoOff || strings.Contains(in.Args, "CGO_ENABLED=0")
	}
	require.True(t, cgoOff, "the binary is built with CGO_ENABLED=0 (static)")

	finalImage := df.expand(final.From)
	require.True(t, finalImage == "gcr.io/distroless/static-debian12:nonroot" || strings.HasPrefix(finalImage, "alpine:"),
		"final image %s", finalImage)
	user := final.last(t, "USER").Args
	require.Contains(t, []string{"nonroot", "nonroot:nonroot", "65532", "65532:65532"}, user, "the final stage runs as nonroot")

	entry := execForm(t, final.last(t, "ENTRYPOINT"))
	require.Equal(t, []string{"/claimd"}, entry)
	require.Equal(t, []string{"serve"}, execForm(t, final.last(t, "CMD")))
	var copied bool
	for _, in := range final.all("COPY") {
		flags, srcs, dst := copyArgs(in)
		if flags["from"] == build.Name && len(srcs) == 1 && srcs[0] == built && dst == entry[0] {
			copied = true
		}
	}
	require.True(t, copied, "the entrypoint %s is the binary built in stage %q (%s)", entry[0], build.Name, built)

	require.Contains(t, strings.Fields(final.last(t, "EXPOSE").Args), "8080")
	hc := final.last(t, "HEALTHCHECK").Args
	_, hcCmd, ok := strings.Cut(hc, "CMD ")
	require.True(t, ok, "HEALTHCHECK ... CMD [...]")
	require.Equal(t, []string{"/claimd", "healthcheck"}, execForm(t, instruction{Cmd: "HEALTHCHECK", Args: hcCmd}))
	var addr bool
	for _, in := range final.all("ENV") {
		addr = addr || strings.Contains(in.Args, "CLAIMD_ADDR=0.0.0.0:")
	}
	require.True(t, addr, "the image listens on all interfaces (the default is loopback)")

	requireCopySources(t, rel, df)
}

func TestN8NDockerfile(t *testing.T) {
	t.Parallel()
	const rel = "n8n-node/Dockerfile"
	root := repoRoot(t)
	df := parseDockerfile(t, rel)
	require.Len(t, df.Stages, 2)
	build, final := df.Stages[0], df.Stages[1]

	require.Equal(t, "node:24", df.expand(build.From), "the node tooling needs Node 24")
	var ci, runBuild, pack bool
	for _, in := range build.all("RUN") {
		if strings.Contains(in.Args, "npm ci") {
			ci = true
			require.Contains(t, in.Args, "--ignore-scripts", "npm ci as in .ci/run: a dev dependency's preinstall refuses npm")
		}
		runBuild = runBuild || strings.Contains(in.Args, "npm run build")
		if strings.Contains(in.Args, "npm pack") {
			// The image carries what npm would publish, plus the build id
			// the entrypoint compares.
			pack = true
			require.Contains(t, in.Args, "/out/n8n-nodes-idempotent-claim.build")
			require.Contains(t, in.Args, "-C /out/n8n-nodes-idempotent-claim ")
		}
	}
	require.True(t, ci && runBuild && pack, "the build stage runs npm ci, npm run build and npm pack")

	// The image pins the n8n release the end-to-end tests run.
	script, err := os.ReadFile(filepath.Join(root, "n8n-node", "scripts", "install-n8n.sh"))
	require.NoError(t, err)
	pin := regexp.MustCompile(`(?m)^N8N_VERSION=(\S+)`).FindSubmatch(script)
	require.NotNil(t, pin, "install-n8n.sh pins N8N_VERSION")
	require.Equal(t, "n8nio/n8n:"+string(pin[1]), df.expand(final.From))

	// package.json + dist/ are all n8n loads: the package must name only dist files.
	var pkg struct {
		Name  string   `json:"name"`
		Files []string `json:"files"`
		N8N   struct {
			Nodes       []string `json:"nodes"`
			Credentials []string `json:"credentials"`
		} `json:"n8n"`
	}
	b, err := os.ReadFile(filepath.Join(root, "n8n-node", "package.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &pkg))
	require.Equal(t, "n8n-nodes-idempotent-claim", pkg.Name)
	require.NotEmpty(t, pkg.N8N.Nodes)
	for _, f := range append(pkg.N8N.Nodes, pkg.N8N.Credentials...) {
		require.True(t, strings.HasPrefix(f, "dist/"), "package.json n8n entry %s is outside dist/", f)
	}

	// /out/ holds n8n-nodes-idempotent-claim/ and n8n-nodes-idempotent-claim.build.
	const optDir = "/opt/idempotent-claim/"
	var pkgCopied bool
	var entrySrc string
	entry := execForm(t, final.last(t, "ENTRYPOINT"))
	for _, in := range final.all("COPY") {
		flags, srcs, dst := copyArgs(in)
		if flags["from"] == build.Name && dst == optDir && len(srcs) == 1 && srcs[0] == "/out/" {
			pkgCopied = true
		}
		if _, fromStage := flags["from"]; !fromStage && dst == entry[len(entry)-1] {
			require.Len(t, srcs, 1)
			entrySrc = srcs[0]
			require.Equal(t, "0755", flags["chmod"], "the entrypoint script is executable")
		}
	}
	require.True(t, pkgCopied, "the packed package and its build id are copied to %s", optDir)
	require.Equal(t, "sidecar/deploy/n8n-entrypoint.sh", entrySrc, "the entrypoint is the install wrapper")
	require.Equal(t, "tini", entry[0], "the wrapper runs under tini like n8n's own entrypoint")
	require.Equal(t, "node", final.last(t, "USER").Args, "n8n runs as the node user")
	// The community-node folder exists in the image, owned by node, so a
	// fresh named volume mounted there (docker-compose.yml) is writable.
	var nodesDir bool
	for _, in := range final.all("RUN") {
		nodesDir = nodesDir || (strings.Contains(in.Args, "mkdir -p /home/node/.n8n/nodes") &&
			strings.Contains(in.Args, "chown node:node /home/node/.n8n /home/node/.n8n/nodes"))
	}
	require.True(t, nodesDir, "the final stage creates /home/node/.n8n/nodes for the node user")

	// The wrapper installs from where the Dockerfile puts the package.
	wrapper, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(entrySrc)))
	require.NoError(t, err)
	require.Contains(t, string(wrapper), `"${IC_NODE_PACKAGE_DIR:-/opt/idempotent-claim/$pkg}"`)
	require.Contains(t, string(wrapper), "pkg="+pkg.Name+"\n")

	requireCopySources(t, rel, df)
}
