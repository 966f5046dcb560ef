package verify_test

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify/verifytest"
)

func TestMarkdownProviderSetup(t *testing.T) {
	t.Parallel()
	table := verify.MarkdownProviderSetup()
	lines := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
	require.Len(t, lines, 2+len(verify.Providers()), "a header, a rule and one row per provider")
	meta, ok := verify.Lookup(verify.TypeMeta)
	require.True(t, ok)
	require.Contains(t, table, "| `meta` | "+meta.Setup.Secrets+" | `verify_token` *recommended*: ")
	require.Contains(t, table, "`meta: {tenant: demo, provider: meta, secrets: [\"${META_SECRET}\"], options: {verify_token: \"${META_VERIFY_TOKEN}\"}}`")
	require.Contains(t, table, "| `square` | ", "every provider has a row")
	require.Contains(t, table, "`notification_url` **required**: ")
	require.Contains(t, table, "`sendgrid: {tenant: demo, provider: sendgrid, options: {public_keys: [\"${SENDGRID_PUBLIC_KEYS}\"]}}`",
		"a provider without secrets has none in its snippet; a list option is a list")
	require.Contains(t, table, "options: {signature: {header: \"${HMAC_SIGNATURE_HEADER}\"}, key: {id_header: \"${HMAC_KEY_ID_HEADER}\"}}",
		"a required struct option holds its required options")
}

func TestOptionList(t *testing.T) {
	t.Parallel()
	hmac, ok := verify.Lookup(verify.TypeHMAC)
	require.True(t, ok)
	byName := map[string]verify.Option{}
	for _, o := range hmac.OptionList() {
		byName[o.Name] = o
	}
	require.Equal(t, verify.Option{Name: "signature", Field: "Signature", Doc: byName["signature"].Doc, Required: true, Struct: true}, byName["signature"])
	require.Equal(t, verify.Option{Name: "signature.header", Field: "Signature.Header", Doc: byName["signature.header"].Doc, Required: true}, byName["signature.header"])
	require.False(t, byName["signature.algorithm"].Required)
	require.True(t, byName["key.id_pointers"].List)

	ce, ok := verify.Lookup(verify.TypeCloudEvents)
	require.True(t, ok)
	for _, o := range ce.OptionList() {
		require.False(t, o.Required, "%s: cloudevents' signature is optional, so is its header", o.Name)
	}
	stripe, ok := verify.Lookup(verify.TypeStripe)
	require.True(t, ok)
	require.Nil(t, stripe.OptionList())
}

// Every option of every provider says what it holds, and every option a
// sources file can write is listed (DecodeOptions takes each listed name).
func TestEveryOptionHasADoc(t *testing.T) {
	t.Parallel()
	for _, p := range verify.Providers() {
		require.NotEmpty(t, p.Setup.Secrets, "%s: Setup.Secrets", p.Type)
		for _, o := range p.OptionList() {
			require.NotEmpty(t, o.Doc, "%s: options.%s has no doc tag", p.Type, o.Name)
			require.NotContains(t, o.Doc, "\n", "%s: options.%s: one line", p.Type, o.Name)
			if o.Struct || strings.Contains(o.Name, ".") {
				continue
			}
			var v any = "x"
			if o.List {
				v = []any{"x"}
			}
			_, err := p.DecodeOptions(map[string]any{o.Name: v})
			require.NoError(t, err, "%s: options.%s is read as listed", p.Type, o.Name)
		}
	}
}

// A source built from its provider's fixture without one of the required
// options is refused with a config error naming that option; the fixture
// itself is accepted (checkFixture).
func TestRequiredOptionsAreRequired(t *testing.T) {
	t.Parallel()
	for _, f := range verifytest.Fixtures() {
		p, ok := verify.Lookup(verify.Type(f.Type))
		require.True(t, ok)
		var required []verify.Option
		for _, o := range p.OptionList() {
			if o.Required {
				required = append(required, o)
			}
		}
		if len(required) == 0 {
			continue
		}
		t.Run(f.Type, func(t *testing.T) {
			t.Parallel()
			raw := f.Options
			if f.Setup != nil {
				raw = f.Setup(t)
			}
			for _, o := range required {
				without, had := withoutOption(raw, o.Name)
				require.True(t, had, "the fixture sets the required options.%s", o.Name)
				opts, err := p.DecodeOptions(without)
				require.NoError(t, err)
				_, err = verify.New(p.Type, verify.Core{Secrets: f.Secrets, Now: time.Now}, opts)
				var ce *verify.ConfigError
				require.True(t, errors.As(err, &ce), "without options.%s: got %v, want a config error", o.Name, err)
				require.True(t, ce.Field == o.Field || strings.HasPrefix(ce.Field, o.Field+".") || strings.HasPrefix(ce.Field, o.Field+"["),
					"without options.%s: the error names %s, want %s", o.Name, ce.Field, o.Field)
			}
		})
	}
}

// withoutOption returns a deep copy of raw without the dotted option name,
// and whether raw had it.
func withoutOption(raw map[string]any, name string) (map[string]any, bool) {
	out := make(map[string]any, len(raw))
	for k, v := range raw {
		out[k] = v
	}
	head, rest, nested := strings.Cut(name, ".")
	if !nested {
		_, had := out[head]
		delete(out, head)
		return out, had
	}
	sub, ok := out[head].(map[string]any)
	if !ok {
		return out, false
	}
	var had bool
	out[head], had = withoutOption(sub, rest)
	return out, had
}

// checkReadmeSection compares sidecar/docs/ingest.md between begin and end
// with want, rewriting it when IC_WRITE_PROVIDER_TABLE=1.
func checkReadmeSection(t *testing.T, begin, end, want string) {
	const path = "../docs/ingest.md"
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	readme := string(raw)
	b := strings.Index(readme, begin)
	require.GreaterOrEqual(t, b, 0, "%s has no marker %q", path, begin)
	start := b + len(begin)
	n := strings.Index(readme[start:], end)
	require.GreaterOrEqual(t, n, 0, "%s has no end marker %q after %q", path, end, begin)
	if readme[start:start+n] == want {
		return
	}
	if os.Getenv(providerTableWriteEnv) == "1" {
		require.NoError(t, os.WriteFile(path, []byte(readme[:start]+want+readme[start+n:]), 0o644))
		t.Logf("%s rewritten after %q", path, strings.TrimSpace(begin))
		return
	}
	t.Fatalf("%s after %q differs from the registry's: regenerate it with\n\t%s=1 go test ./sidecar/verify -run TestReadmeProviderTableIsCurrent", path, strings.TrimSpace(begin), providerTableWriteEnv)
}
