package sources

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/idempotent-claim/idempotent-claim/sidecar/strictjson"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// KeySpec is a source's own key rule (`key:` in the sources file). It
// replaces the event id the provider's verifier derived, for events that
// reach us through several doors with different delivery ids (two
// subscriptions of one account, an org and a repository hook) but are one
// event: their copies then share one key within the dedupe scope.
//
//	key:
//	  fields: ["/data/object/id", "/type", "/data/object/updated"]  # JSON pointers into the event
//	  headers: ["X-Shop-Domain"]                                   # header values
//
// The event id is the values of the headers, then of the fields, in the
// order written, joined unambiguously (verify.JoinKey); a single part is
// used as is. A string counts as its text, a number by its exact value
// (strictjson.KeyText: 100 and 1e2 are one value, 2^53+1 stays itself); every part must be present, non-null
// and non-empty, or the delivery is refused (422, nothing stored).
type KeySpec struct {
	Fields  []string `yaml:"fields"`
	Headers []string `yaml:"headers"`
}

// keyRule is a compiled KeySpec.
type keyRule struct {
	headers []string
	fields  []strictjson.Pointer
}

func (k *KeySpec) compile() (*keyRule, error) {
	if k == nil {
		return nil, nil
	}
	if len(k.Fields)+len(k.Headers) == 0 {
		return nil, errors.New("key: name at least one of key.fields and key.headers")
	}
	r := &keyRule{}
	for i, h := range k.Headers {
		if !validHeaderName(h) {
			return nil, fmt.Errorf("key.headers[%d]: %s", i, headerNameRule)
		}
		r.headers = append(r.headers, h)
	}
	for i, f := range k.Fields {
		p, err := strictjson.ParsePointer(f)
		if err != nil || f == "" {
			reason := "must be a non-empty JSON pointer (RFC 6901), e.g. \"/data/object/id\""
			if err != nil {
				reason = err.Error()
			}
			return nil, fmt.Errorf("key.fields[%d]: %s", i, reason)
		}
		r.fields = append(r.fields, p)
	}
	return r, nil
}

// same reports whether two rules derive the same ids from the same event.
func (r *keyRule) same(o *keyRule) bool {
	if r == nil || o == nil {
		return r == o
	}
	if len(r.headers) != len(o.headers) || len(r.fields) != len(o.fields) {
		return false
	}
	for i := range r.headers {
		if !strings.EqualFold(r.headers[i], o.headers[i]) {
			return false
		}
	}
	for i := range r.fields {
		if r.fields[i].String() != o.fields[i].String() {
			return false
		}
	}
	return true
}

// eventID derives the event id from the request headers and the event's
// JSON (the whole body, or a batch item's own payload). Failures are
// authenticated *verify.Error values: the caller only gets here after the
// delivery verified, and refuses it with 422 (never 2xx).
func (r *keyRule) eventID(h verify.Header, event []byte) (string, error) {
	parts := make([]string, 0, len(r.headers)+len(r.fields))
	for _, name := range r.headers {
		v := ""
		if h != nil {
			v = strings.TrimSpace(h.Get(name))
		}
		if v == "" {
			return "", &verify.Error{Code: verify.CodeMissingField, In: verify.InHeader, Field: name,
				Reason: "header of the source's key rule is absent or empty", Authenticated: true}
		}
		parts = append(parts, v)
	}
	if len(r.fields) > 0 {
		doc, err := strictjson.ParseDoc(strictjson.TrimBOM(event))
		if err != nil {
			return "", bodyError(err)
		}
		for _, p := range r.fields {
			v, err := scalar(doc, p)
			if err != nil {
				return "", err
			}
			parts = append(parts, v)
		}
	}
	if len(parts) == 1 {
		return parts[0], nil
	}
	return verify.JoinKey(parts...), nil
}

// scalar is the key text of the value at p: a non-empty string as is, a
// number as its canonical text. Anything else is an authenticated error
// naming the pointer.
func scalar(doc *strictjson.Doc, p strictjson.Pointer) (string, error) {
	v, ok, err := doc.Get(p)
	if err != nil {
		return "", bodyError(err)
	}
	fail := func(reason string) error {
		return &verify.Error{Code: verify.CodeMissingField, In: verify.InBody, Field: p.String(), Reason: reason, Authenticated: true}
	}
	switch x := v.(type) {
	case nil:
		if !ok {
			return "", fail("field of the source's key rule is absent")
		}
		return "", fail("field of the source's key rule is null")
	case string:
		if x == "" {
			return "", fail("field of the source's key rule is an empty string")
		}
		return x, nil
	case strictjson.Number:
		return strictjson.KeyText(string(x))
	}
	return "", &verify.Error{Code: verify.CodeMalformedBody, In: verify.InBody, Field: p.String(),
		Reason: "field of the source's key rule must be a string or a number", Authenticated: true}
}

// bodyError turns a strict-decoding failure of an authentic body into an
// authenticated malformed_body error naming where it is.
func bodyError(err error) error {
	var se *strictjson.Error
	if errors.As(err, &se) {
		return &verify.Error{Code: verify.CodeMalformedBody, In: verify.InBody, Field: se.Pointer,
			Reason: "body is not strict JSON: " + se.Reason, Authenticated: true}
	}
	return &verify.Error{Code: verify.CodeMalformedBody, In: verify.InBody, Reason: "body is not strict JSON", Authenticated: true}
}

// Identify applies the source's key rule (KeySpec), when it has one, to
// the verified events of one delivery: each event's id is derived from the
// request headers h and the event's JSON (its own Payload for a batch item,
// else body). Without a key rule the events are returned as they are.
// Errors are authenticated *verify.Error values naming the header or
// field; the delivery must then be refused, not acknowledged.
func (s *Source) Identify(h verify.Header, events []verify.Event, body []byte) ([]verify.Event, error) {
	if s.key == nil {
		return events, nil
	}
	out := make([]verify.Event, len(events))
	for i, ev := range events {
		payload := body
		if ev.Payload != nil {
			payload = ev.Payload
		}
		id, err := s.key.eventID(h, payload)
		if err != nil {
			return nil, err
		}
		ev.ID = id
		out[i] = ev
	}
	return out, nil
}

// checkScopes makes sure the sources sharing a dedupe scope derive one key
// and one payload hash from one event, and keep it under one claim
// policy; otherwise copies of an event would get two keys, or a claim's
// policy would depend on the door it came through. The scope's policy is
// its members' policy.
func checkScopes(cfg Config, specs map[string]SourceSpec) error {
	// Ingest and trigger sources alike: a trigger source may share a
	// scope with an ingest door, and then claims its events by the same keys.
	all := make(map[string]*Source, len(cfg.Sources)+len(cfg.Triggers))
	for n, s := range cfg.Sources {
		all[n] = s
	}
	for n, s := range cfg.Triggers {
		all[n] = s
	}
	first := map[string]*Source{}
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		src := all[name]
		if src.Scope == name {
			continue
		}
		if other, ok := specs[src.Scope]; ok && other.Provider == "" && !reflect.DeepEqual(other.policy(), specs[name].policy()) {
			return fmt.Errorf("source %q: dedupe_scope %q is also a claim-only source with another claim policy", name, src.Scope)
		}
		f, seen := first[src.Scope]
		if !seen {
			if own, ok := all[src.Scope]; ok && own.Scope == src.Scope {
				f, seen = own, true
			}
		}
		if !seen {
			first[src.Scope] = src
			cfg.Policies[src.Scope] = specs[name].policy()
			continue
		}
		first[src.Scope] = f
		why := ""
		switch {
		case f.Tenant != src.Tenant:
			why = "tenant"
		case f.Provider != src.Provider:
			why = "provider"
		case !f.key.same(src.key):
			why = "key"
		case !f.volatile.same(src.volatile):
			why = "volatile_fields"
		case !reflect.DeepEqual(specs[f.Name].policy(), specs[name].policy()):
			why = "claim policy (lease_policy, lease_seconds, max_attempts, backoff, retention_days, key_retention_days, volatile_fields, shadow)"
		}
		if why != "" {
			return fmt.Errorf("source %q: its dedupe_scope %q is shared with source %q, which has another %s; sources of one scope must agree on it", name, src.Scope, f.Name, why)
		}
		cfg.Policies[src.Scope] = specs[name].policy()
	}
	return nil
}

// IdentifyUnsigned keys and hashes an event the provider's own API
// returned (its events list, its delivery log) exactly as a signed
// delivery of it would be: the verifier's identity half
// (verify.Identify: the same id, type and allowed_event_types), then the
// source's key rule (Identify), then Prepare. h holds the delivery
// headers where the API returns them (GitHub), else nil; body is the
// event's JSON. Errors: verify.ErrNoIdentify for a provider without
// one, else authenticated *verify.Error values naming the field.
func (s *Source) IdentifyUnsigned(h verify.Header, body []byte, contentType string) ([]Event, error) {
	if h == nil {
		h = verify.HeaderFunc(func(string) string { return "" })
	}
	res, err := verify.Identify(s.Verifier, h, body)
	if err != nil {
		return nil, err
	}
	events, err := s.Identify(h, res.Events, body)
	if err != nil {
		return nil, err
	}
	return s.Prepare(events, body, contentType)
}

// HasKeyRule reports whether the source replaces the provider's event id
// with its own key rule (key:), which may read the event's body or
// headers: a lister that lists ids without bodies fetches each event
// before keying it then.
func (s *Source) HasKeyRule() bool { return s.key != nil }
