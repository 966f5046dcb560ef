package verify

import (
	"fmt"
	"reflect"
	"strings"
)

// Option is one key of a provider's `options`, as [Provider.OptionList]
// reads it from the provider's options struct.
type Option struct {
	// Name is the key as the sources file writes it (the field's json tag,
	// else its Go name in snake_case, as [Provider.DecodeOptions] reads
	// it), dotted below a struct-valued option: "notification_url",
	// "signature.header".
	Name string
	// Field is the Go field path a *[ConfigError] names for it:
	// "NotificationURL", "Signature.Header".
	Field string
	// Doc is the field's `doc` tag: what the option holds, one line.
	Doc string
	// Required is true for a field tagged `required:"true"` whose parents
	// (for a nested option) are all required too: Build refuses a source
	// without it, with a *ConfigError naming Field (or a field below it).
	Required bool
	// Recommended is true for a field tagged `recommended:"true"`: optional
	// for Build, but a working setup wants it (Meta's verify_token, without
	// which Meta cannot save the webhook).
	Recommended bool
	// Struct is true for an option whose value is a mapping of further
	// options (listed after it); List for a list of values.
	Struct, List bool
}

// OptionList returns the options p takes, in the order of its options
// struct's fields, a struct-valued option followed by its own (nil when p
// takes none). Fields are read by reflection: the key from the json tag or
// the Go name, Doc from the `doc` tag, Required from `required:"true"`,
// Recommended from `recommended:"true"`.
func (p *Provider) OptionList() []Option {
	if p.Options == nil {
		return nil
	}
	return optionList(reflect.TypeOf(p.Options()), "", "", true)
}

func optionList(t reflect.Type, name, field string, parentRequired bool) []Option {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []Option
	names := optionNames(t)
	n := 0
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || tag == "-" {
			continue
		}
		o := Option{
			Name:        name + names[n],
			Field:       field + f.Name,
			Doc:         f.Tag.Get("doc"),
			Required:    parentRequired && f.Tag.Get("required") == "true",
			Recommended: f.Tag.Get("recommended") == "true",
		}
		n++
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		o.Struct = ft.Kind() == reflect.Struct
		o.List = ft.Kind() == reflect.Slice
		out = append(out, o)
		if o.Struct {
			out = append(out, optionList(ft, o.Name+".", o.Field+".", o.Required)...)
		}
	}
	return out
}

// SnippetEnv is the environment variable a generated sources-file snippet
// ([Provider.SourceSnippet]) reads a value from: the provider type and
// the option's name (or "secret"), upper case, '-' and '.' as '_'
// ("META_VERIFY_TOKEN", "HMAC_SIGNATURE_HEADER", "STRIPE_SECRET").
func (p *Provider) SnippetEnv(option string) string {
	return strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(string(p.Type) + "_" + option))
}

// SourceSnippet is a minimal source of provider p as one line of the
// sources file, in YAML flow style, under `sources:`: name "<type>",
// tenant "demo", one secret (unless the secrets are optional and a
// required option takes their place: SendGrid's public_keys) and every
// required or recommended option, each value a ${VAR} named by
// [Provider.SnippetEnv]:
//
//	meta: {tenant: demo, provider: meta, secrets: ["${META_SECRET}"], options: {verify_token: "${META_VERIFY_TOKEN}"}}
func (p *Provider) SourceSnippet() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: {tenant: demo, provider: %s", p.Type, p.Type)
	all := p.OptionList()
	if p.SnippetHasSecret() {
		fmt.Fprintf(&b, `, secrets: ["${%s}"]`, p.SnippetEnv("secret"))
	}
	if opts := p.snippetOptions(all, ""); opts != "" {
		b.WriteString(", options: " + opts)
	}
	b.WriteString("}")
	return b.String()
}

// SnippetHasSecret reports whether [Provider.SourceSnippet] sets
// `secrets`: unless they are optional (SecretsOptional) and a required
// option takes their place (SendGrid's public_keys, PayPal's webhook_id).
func (p *Provider) SnippetHasSecret() bool {
	if !p.SecretsOptional {
		return true
	}
	for _, o := range p.OptionList() {
		if o.Required {
			return false
		}
	}
	return true
}

// snippetOptions renders the required or recommended options directly
// below prefix ("" or "key.") as a flow mapping, "" when there are none.
func (p *Provider) snippetOptions(all []Option, prefix string) string {
	var items []string
	for _, o := range all {
		rest, ok := strings.CutPrefix(o.Name, prefix)
		if !ok || strings.Contains(rest, ".") || !(o.Required || o.Recommended) {
			continue
		}
		switch {
		case o.Struct:
			if sub := p.snippetOptions(all, o.Name+"."); sub != "" {
				items = append(items, rest+": "+sub)
			}
		case o.List:
			items = append(items, fmt.Sprintf(`%s: ["${%s}"]`, rest, p.SnippetEnv(o.Name)))
		default:
			items = append(items, fmt.Sprintf(`%s: "${%s}"`, rest, p.SnippetEnv(o.Name)))
		}
	}
	if len(items) == 0 {
		return ""
	}
	return "{" + strings.Join(items, ", ") + "}"
}

// MarkdownProviderSetup renders the table of
// sidecar/docs/ingest.md#configuring-each-provider (between
// ProviderSetupBegin and ProviderSetupEnd; a test keeps the document in
// sync): per provider its type, what a source's `secrets` hold
// (Setup.Secrets), its options (required first, then recommended, then
// the rest; a struct-valued option's own options under it) with their
// `doc` tags, the methods it sends besides POST, and a minimal source
// ([Provider.SourceSnippet]).
func MarkdownProviderSetup() string {
	var b strings.Builder
	b.WriteString("| type | `secrets` | `options` | handshake | minimal source (under `sources:`) |\n")
	b.WriteString("|---|---|---|---|---|\n")
	for _, p := range Providers() {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | `%s` |\n", p.Type, cell(p.Setup.Secrets),
			optionsCell(p.OptionList()), codeList(p.Methods), cell(p.SourceSnippet()))
	}
	return b.String()
}

// optionsCell lists options, required first, then recommended, then the
// rest, each "`name` (required): doc", one per line of the cell.
func optionsCell(all []Option) string {
	if len(all) == 0 {
		return "—"
	}
	var lines []string
	for _, rank := range []func(Option) bool{
		func(o Option) bool { return o.Required },
		func(o Option) bool { return !o.Required && o.Recommended },
		func(o Option) bool { return !o.Required && !o.Recommended },
	} {
		for _, o := range all {
			if !rank(o) {
				continue
			}
			mark := ""
			switch {
			case o.Required:
				mark = " **required**"
			case o.Recommended:
				mark = " *recommended*"
			}
			lines = append(lines, "`"+o.Name+"`"+mark+": "+cell(o.Doc))
		}
	}
	return strings.Join(lines, "<br>")
}

// The markers around the generated table of
// sidecar/docs/ingest.md#configuring-each-provider.
const (
	ProviderSetupBegin = "<!-- provider setup: generated from the registry (sidecar/verify/setup.go), do not edit -->\n"
	ProviderSetupEnd   = "<!-- end of provider setup -->\n"
)
