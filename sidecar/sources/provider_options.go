package sources

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// The provider-specific part of a source: the verifier its provider's
// registration (verify.Lookup) builds from the sources file's secrets,
// tolerance, allowed event types and options.

// sourceVerifier builds the verifier of a source of provider p: the shared
// core (secrets, tolerance_seconds, allowed_event_types) and s.Options
// decoded into p's own options struct, whose snake_case keys name its
// fields (id_header → IDHeader; an unknown one is an error naming it). It
// also returns the lower-case names of the headers that carry the source's
// signature or shared token, from p.CredentialHeaders (for a configurable
// header such as the token provider's options.header they can be named
// anything, so the generic filter of inbox.ForwardableHeaders is not enough),
// and the names of the query parameters that carry its token, from
// p.CredentialQueryParams (case-sensitive, as query names are).
// Errors name the field as written in the file (see fileError).
func sourceVerifier(p *verify.Provider, s SourceSpec, secrets []string) (v verify.Verifier, creds, queryCreds []string, err error) {
	opts, err := p.DecodeOptions(s.Options)
	if err != nil {
		return nil, nil, nil, err
	}
	if s.ToleranceSeconds != 0 && !p.SignsTimestamp {
		return nil, nil, nil, fmt.Errorf("tolerance does not apply to provider %s: it signs no timestamp", p.Type)
	}
	core := verify.Core{Secrets: secrets, Tolerance: time.Duration(s.ToleranceSeconds) * time.Second, AllowedEventTypes: s.AllowedEventTypes}
	v, err = verify.New(p.Type, core, opts)
	if err != nil {
		return nil, nil, nil, fileError(err)
	}
	if p.CredentialHeaders != nil {
		for _, h := range p.CredentialHeaders(opts) {
			if h != "" {
				creds = append(creds, strings.ToLower(h))
			}
		}
	}
	if p.CredentialQueryParams != nil {
		for _, q := range p.CredentialQueryParams(opts) {
			if q != "" {
				queryCreds = append(queryCreds, q)
			}
		}
	}
	return v, creds, queryCreds, nil
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
