package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// The provider-specific part of a source: its verify.*Config, built from
// the sources file's secrets, tolerance, allowed event types and options.

// credentialHeaders names the headers of cfg's scheme that carry a
// signature or a shared token, lower-case. The fixed names of the provider
// schemes are listed too, although ForwardableHeaders' generic filter
// already catches them; the configurable ones (hmac, token, cloudevents)
// can be named anything.
func credentialHeaders(cfg verify.Config) []string {
	var hs []string
	switch c := cfg.(type) {
	case *verify.StripeConfig:
		hs = []string{verify.StripeSignatureHeader}
	case *verify.GitHubConfig:
		hs = []string{verify.GitHubSignatureHeader, verify.GitHubLegacySignatureHeader}
	case *verify.StandardWebhooksConfig:
		hs = []string{verify.StandardWebhookSignatureHeader, verify.SvixSignatureHeader}
	case *verify.ShopifyConfig:
		hs = []string{verify.ShopifyHMACHeader}
	case *verify.SlackConfig:
		hs = []string{verify.SlackSignatureHeader}
	case *verify.ZoomConfig:
		hs = []string{verify.ZoomSignatureHeader}
	case *verify.PaddleConfig:
		hs = []string{verify.PaddleSignatureHeader}
	case *verify.TwilioConfig:
		hs = []string{verify.TwilioSignatureHeader}
	case *verify.HMACConfig:
		hs = []string{c.Signature.Header}
	case *verify.TokenConfig:
		hs = []string{c.WithDefaults().Header}
	case *verify.CloudEventsConfig:
		if d := c.WithDefaults(); d.Auth == verify.CloudEventsAuthHMAC {
			hs = []string{d.Signature.Header}
		} else {
			hs = []string{"Authorization"}
		}
	}
	out := make([]string, 0, len(hs))
	for _, h := range hs {
		if h != "" {
			out = append(out, strings.ToLower(h))
		}
	}
	return out
}

// verifierConfig builds the verify config of type t: the common fields
// (secrets, tolerance, allowed event types) plus options, whose snake_case
// keys name the config struct's fields (client_state → ClientState).
func verifierConfig(t verify.Type, s SourceSpec, secrets []string) (verify.Config, error) {
	var cfg verify.Config
	switch t {
	case verify.TypeStripe:
		cfg = &verify.StripeConfig{}
	case verify.TypeGitHub:
		cfg = &verify.GitHubConfig{}
	case verify.TypeStandardWebhooks:
		cfg = &verify.StandardWebhooksConfig{}
	case verify.TypeShopify:
		cfg = &verify.ShopifyConfig{}
	case verify.TypeSlack:
		cfg = &verify.SlackConfig{}
	case verify.TypeMSGraph:
		cfg = &verify.MSGraphConfig{}
	case verify.TypeCloudEvents:
		cfg = &verify.CloudEventsConfig{}
	case verify.TypeHMAC:
		cfg = &verify.HMACConfig{}
	case verify.TypeToken:
		cfg = &verify.TokenConfig{}
	case verify.TypePaddle:
		cfg = &verify.PaddleConfig{}
	case verify.TypeZoom:
		cfg = &verify.ZoomConfig{}
	case verify.TypeTwilio:
		cfg = &verify.TwilioConfig{}
	default:
		return nil, fmt.Errorf("provider %q has no configuration mapping", t)
	}
	if len(s.Options) > 0 {
		opts, err := camelKeys(s.Options, "options")
		if err != nil {
			return nil, err
		}
		raw, err := json.Marshal(opts)
		if err != nil {
			return nil, fmt.Errorf("options: %w", err)
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(cfg); err != nil {
			return nil, fmt.Errorf("options: %w", err)
		}
	}
	v := reflect.ValueOf(cfg).Elem()
	set := func(field string, val any) error {
		f := v.FieldByName(field)
		if !f.IsValid() {
			return fmt.Errorf("%s does not apply to provider %s", snake(field), t)
		}
		f.Set(reflect.ValueOf(val))
		return nil
	}
	if err := set("Secrets", secrets); err != nil {
		return nil, err
	}
	if s.ToleranceSeconds != 0 {
		if err := set("Tolerance", time.Duration(s.ToleranceSeconds)*time.Second); err != nil {
			return nil, err
		}
	}
	if len(s.AllowedEventTypes) > 0 {
		if err := set("AllowedEventTypes", s.AllowedEventTypes); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// fileError names a verifier configuration error's field as it is written in
// the sources file ("options.key.id_header", "secrets[1]"), not as the Go
// field it maps to.
func fileError(err error) error {
	var ce *verify.ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	parts := strings.Split(ce.Field, ".")
	for i, p := range parts {
		name, index, _ := strings.Cut(p, "[")
		if index != "" {
			index = "[" + index
		}
		parts[i] = snake(name) + index
	}
	field := strings.Join(parts, ".")
	switch parts[0] {
	case "tolerance":
		field = "tolerance_seconds"
	case "allowed_event_types":
	default:
		if !strings.HasPrefix(parts[0], "secrets") {
			field = "options." + field
		}
	}
	return fmt.Errorf("%s: %s", field, ce.Reason)
}

// optionKey is how an options key is written: lower snake_case.
var optionKey = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// camelKeys turns the snake_case keys of options into the Go field names
// they stand for (id_header → IdHeader, which encoding/json matches to
// IDHeader). A key that is not lower snake_case is an error naming it, so
// no two keys can name one field (id_header and Id_header would, and one
// would silently win).
func camelKeys(v any, at string) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, val := range t {
			if !optionKey.MatchString(k) {
				return nil, fmt.Errorf("%s.%s: option names are lower snake_case (e.g. id_header)", at, k)
			}
			c, err := camelKeys(val, at+"."+k)
			if err != nil {
				return nil, err
			}
			out[camel(k)] = c
		}
		return out, nil
	case []any:
		out := make([]any, len(t))
		for i := range t {
			c, err := camelKeys(t[i], fmt.Sprintf("%s[%d]", at, i))
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	}
	return v, nil
}

func camel(s string) string {
	parts := strings.Split(s, "_")
	for i, p := range parts {
		if p != "" {
			parts[i] = strings.ToUpper(p[:1]) + p[1:]
		}
	}
	return strings.Join(parts, "")
}

func snake(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		upper := c >= 'A' && c <= 'Z'
		if upper && i > 0 {
			prevLower := r[i-1] >= 'a' && r[i-1] <= 'z'
			nextLower := i+1 < len(r) && r[i+1] >= 'a' && r[i+1] <= 'z'
			prevUpper := r[i-1] >= 'A' && r[i-1] <= 'Z'
			if prevLower || (prevUpper && nextLower) {
				b.WriteByte('_')
			}
		}
		if upper {
			c += 'a' - 'A'
		}
		b.WriteRune(c)
	}
	return b.String()
}
