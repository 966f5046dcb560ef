package deploy

import (
	"context"
	"maps"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/require"
)

// localImagePrefix is where sidecar/deploy/local-images/build.sh tags its
// stand-ins.
const localImagePrefix = "localhost/idempotent-claim-local/"

// loadComposeLocal loads docker-compose.yml with the local-images override
// on top, as compose-test.sh and sidecar/docs/compose.md#without-a-registry do.
func loadComposeLocal(t *testing.T, profiles ...string) *types.Project {
	t.Helper()
	root := repoRoot(t)
	kv := []string{}
	for k, v := range withSecrets(map[string]string{"N8N_EXECUTIONS_MODE": "queue"}) {
		kv = append(kv, k+"="+v)
	}
	opts, err := cli.NewProjectOptions(
		[]string{filepath.Join(root, "docker-compose.yml"), filepath.Join(root, "sidecar/deploy/local-images/docker-compose.local.yml")},
		cli.WithWorkingDirectory(root), cli.WithEnv(kv), cli.WithProfiles(profiles),
		cli.WithInterpolation(true), cli.WithNormalization(true), cli.WithConsistency(true), cli.WithResolvedPaths(true),
	)
	require.NoError(t, err)
	p, err := opts.LoadProject(context.Background())
	require.NoError(t, err, "docker-compose.yml with docker-compose.local.yml does not load")
	return p
}

// builtImages are the names sidecar/deploy/local-images/build.sh --list
// prints.
func builtImages(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("bash", filepath.Join(repoRoot(t), "sidecar/deploy/local-images/build.sh"), "--list").Output()
	require.NoError(t, err)
	return strings.Fields(string(out))
}

// TestLocalImagesOverrideOnlySwapsImages: the override changes the image
// of every service that pulls one (the monitoring profile excepted: it has
// no stand-ins) and the base images of the two built from this repository,
// to images build.sh builds, and nothing else: with the image names put
// back, the project is the compose file's own.
func TestLocalImagesOverrideOnlySwapsImages(t *testing.T) {
	t.Parallel()
	profiles := []string{"queue"}
	local := loadComposeLocal(t, profiles...)
	shipped := loadCompose(t, map[string]string{"N8N_EXECUTIONS_MODE": "queue"}, profiles...)
	built := builtImages(t)

	for name, s := range local.Services {
		orig := shipped.Services[name]
		if s.Build == nil {
			require.Truef(t, strings.HasPrefix(s.Image, localImagePrefix), "service %s: image %s is not a local stand-in", name, s.Image)
			require.Containsf(t, built, s.Image, "service %s: build.sh does not build %s", name, s.Image)
			// The stand-in is the same software: its name is the image's
			// last path element (n8nio/runners → runners, postgres → postgres).
			base := regexp.MustCompile(`^(?:.*/)?([^/:]+):`).FindStringSubmatch(orig.Image)
			require.NotNil(t, base, "service %s: image %s", name, orig.Image)
			require.Truef(t, strings.HasPrefix(s.Image, localImagePrefix+base[1]+":"), "service %s: %s stands in for %s", name, s.Image, orig.Image)
			s.Image = orig.Image
		} else {
			for arg, v := range s.Build.Args {
				if _, declared := orig.Build.Args[arg]; declared && *orig.Build.Args[arg] == *v {
					continue
				}
				require.Truef(t, strings.HasSuffix(arg, "_IMAGE"), "service %s: the override sets build arg %s, not an image", name, arg)
				require.Containsf(t, built, *v, "service %s: build arg %s=%s is not built by build.sh", name, arg, *v)
			}
			s.Build.Args = orig.Build.Args
		}
		require.Equalf(t, orig, s, "service %s: the override changes more than image names", name)
	}
	require.ElementsMatch(t, slices.Collect(maps.Keys(shipped.Services)), slices.Collect(maps.Keys(local.Services)))
	require.Equal(t, shipped.Volumes, local.Volumes)
	require.Equal(t, shipped.Networks, local.Networks)
}

// TestDockerfilesNameTheirBaseImages: both Dockerfiles take their base
// images as build arguments (the names the override sets), defaulting to
// the registry images.
func TestDockerfilesNameTheirBaseImages(t *testing.T) {
	t.Parallel()
	for file, want := range map[string]map[string]string{
		"sidecar/Dockerfile":  {"GO_IMAGE": "golang:${GO_VERSION}", "RUNTIME_IMAGE": "gcr.io/distroless/static-debian12:nonroot"},
		"n8n-node/Dockerfile": {"NODE_IMAGE": "node:${NODE_VERSION}", "N8N_IMAGE": "n8nio/n8n:${N8N_VERSION}"},
	} {
		df := parseDockerfile(t, file)
		for arg, def := range want {
			require.Equalf(t, def, df.Args[arg], "%s: ARG %s", file, arg)
		}
		var froms []string
		for _, st := range df.Stages {
			froms = append(froms, st.From)
		}
		for arg := range want {
			require.Containsf(t, froms, "${"+arg+"}", "%s: a stage is FROM ${%s}", file, arg)
		}
	}
}
