package sources_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

// Every minimal source the "Configuring each provider" table of
// sidecar/docs/ingest.md#configuring-each-provider
// shows (verify's Provider.SourceSnippet) parses as a sources file and
// gives a verifier, with each ${VAR} it names set to the value of the
// provider's fixture (its first secret, its options).
func TestProviderSnippetsParse(t *testing.T) {
	t.Parallel()
	for _, f := range verifytest.Fixtures() {
		t.Run(f.Type, func(t *testing.T) {
			t.Parallel()
			p, ok := verify.Lookup(verify.Type(f.Type))
			require.True(t, ok)
			raw := f.Options
			if f.Setup != nil {
				raw = f.Setup(t)
			}
			env := map[string]string{}
			if p.SnippetHasSecret() {
				require.NotEmpty(t, f.Secrets)
				env[p.SnippetEnv("secret")] = f.Secrets[0]
			}
			for _, o := range p.OptionList() {
				if o.Struct || !(o.Required || o.Recommended) {
					continue
				}
				v, ok := fixtureOption(raw, o.Name)
				require.True(t, ok, "the fixture sets options.%s", o.Name)
				env[p.SnippetEnv(o.Name)] = v
			}
			snippet := p.SourceSnippet()
			for name := range env {
				require.Contains(t, snippet, "${"+name+"}", "the snippet reads %s", name)
			}
			cfg, err := sources.Parse([]byte("sources:\n  "+snippet+"\n"), envOf(env))
			require.NoError(t, err, "%s", snippet)
			src := cfg.Triggers[f.Type]
			require.NotNil(t, src, "a source without forward is a trigger source")
			require.Equal(t, p.Type, src.Provider)
			require.NotNil(t, src.Verifier)
		})
	}
}

// fixtureOption is the dotted option name's value in raw, as text (a list's
// first item).
func fixtureOption(raw map[string]any, name string) (string, bool) {
	head, rest, nested := strings.Cut(name, ".")
	v, ok := raw[head]
	if !ok {
		return "", false
	}
	if nested {
		sub, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		return fixtureOption(sub, rest)
	}
	switch l := v.(type) {
	case []any:
		if len(l) == 0 {
			return "", false
		}
		v = l[0]
	case []string:
		if len(l) == 0 {
			return "", false
		}
		v = l[0]
	}
	return fmt.Sprint(v), true
}
