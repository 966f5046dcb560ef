package sources

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// File is the sources file (YAML, or JSON, which YAML reads too).
//
//	reconcilers:                     # optional, named (ReconcilerSpec): n8n workflows that settle claims left unknown
//	  crm:
//	    url: https://n8n.example.com/webhook/reconcile-crm
//	    headers: {X-Reconcile-Token: "${RECONCILE_TOKEN}"}
//	    delay_seconds: 60            # the least time from a claim going unknown to the first call (default 60, 0..86400)
//	sources:
//	  stripe:                        # the {source} of POST /ingest/{source}
//	    tenant: acme                 # whose ledger the events go to
//	    provider: stripe             # a registered verify.Type (verify.Types)
//	    secrets: ["${STRIPE_WEBHOOK_SECRET}"]   # ${VAR} reads the environment
//	    tolerance_seconds: 300
//	    allowed_event_types: ["invoice.*"]
//	    max_body_bytes: 1048576
//	    unauthenticated_status: 401  # or a 2xx to answer bad signatures silently
//	    volatile_fields: ["/createdAt"]  # JSON pointers left out of the payload hash, besides the provider's own (Stripe: /pending_webhooks)
//	    dedupe_scope: stripe-acme    # sources sharing a scope share one key space (default: the source name)
//	    key: {fields: ["/id"], headers: []}  # replaces the provider's event id (see KeySpec)
//	    options: {}                  # the provider's options struct (verify.HMACOptions…), snake_case; ${VAR} in any string value
//	    forward:                     # optional: without forward.url the source is a trigger source
//	      url: http://n8n:5678/webhook/stripe
//	      headers: {Authorization: "Bearer ${N8N_HOOK_TOKEN}"}
//	      timeout_seconds: 30         # per attempt; at most 240
//	      concurrency: 4
//	      max_attempts: 10
//	      backoff_base_seconds: 5
//	      backoff_cap_seconds: 600
//	      require_claim: true        # a 2xx counts once the workflow claimed the event
//	      retry_statuses: [404, 408, 409, 425, 429, "500-599"]  # the default; any other non-2xx dead-letters at once
//	      delivered_statuses: []     # non-2xx meaning "has it already"; default [409] for an n8n resume URL
//	    lease_policy: review         # on lease expiry: review (the default; → unknown) or reclaim
//	    retention_days: 30           # payload retention
//	    key_retention_days: 400      # key retention: a resend stays a duplicate this long
//	    backfill: {credentials: ["${STRIPE_EVENTS_KEY}"], mode: auto}  # gap detection (BackfillSpec): stripe, github, square
//	    reconciler: crm              # the default reconciler of the source's claims (a name under reconcilers)
//	    shadow: false                # true: observe only (claims decided and recorded, answered won; an ingest door passes every copy through, see inbox.Inbox.Shadow)
//
// A source without provider is a claim-only source (policies, no ingest).
// A source with provider but without forward (no forward.url) is a trigger
// source: the n8n trigger node ("Idempotent Claim Trigger") asks
// POST /v1/trigger/{source} to decide the deliveries n8n receives with its
// rules (verification, key, hash) and claims them; it is not an ingest
// door, so POST /ingest/{source} answers for it exactly as for a source
// that does not exist. A source with forward.url serves both routes.
//
// Top-level reconcilers (ReconcilerSpec) are the n8n workflows claimd
// calls to settle claims left unknown; a source names its default one
// with reconciler.
type File struct {
	Reconcilers map[string]ReconcilerSpec `yaml:"reconcilers" json:"reconcilers"`
	Sources     map[string]SourceSpec     `yaml:"sources" json:"sources"`
}

// SourceSpec is one source as written in the file.
type SourceSpec struct {
	Tenant                string         `yaml:"tenant"`
	Provider              string         `yaml:"provider"`
	Secrets               []string       `yaml:"secrets"`
	ToleranceSeconds      int            `yaml:"tolerance_seconds"`
	AllowedEventTypes     []string       `yaml:"allowed_event_types"`
	MaxBodyBytes          int            `yaml:"max_body_bytes"`
	UnauthenticatedStatus int            `yaml:"unauthenticated_status"`
	Options               map[string]any `yaml:"options"`
	// VolatileFields are JSON pointers left out of the payload hash, added
	// to the provider's defaults (verify.Provider.VolatileFields: the
	// fields it changes on every retry, such as Stripe's
	// /pending_webhooks), so a retry is a duplicate, not a conflict.
	VolatileFields []string `yaml:"volatile_fields"`
	// DedupeScope is the claim-ledger source the events are keyed in;
	// default the source's own name. Several sources (two endpoints or
	// subscriptions of one provider account, each with its own secret) that
	// name one scope share its keys, so copies of one event arriving through
	// both are duplicates. They must agree on tenant, provider, key and
	// volatile_fields, and on the claim policy.
	DedupeScope string   `yaml:"dedupe_scope"`
	Key         *KeySpec `yaml:"key"`
	// Forward is the dispatch target of stored events. Optional: a source
	// without forward.url is a trigger source (see File); one that sets
	// other forward settings without forward.url is refused.
	Forward ForwardSpec `yaml:"forward"`

	LeasePolicy        string `yaml:"lease_policy"`
	LeaseSeconds       int    `yaml:"lease_seconds"`
	MaxLeaseSeconds    int    `yaml:"max_lease_seconds"`
	MaxAttempts        int    `yaml:"max_attempts"`
	BackoffBaseSeconds int    `yaml:"backoff_base_seconds"`
	BackoffCapSeconds  int    `yaml:"backoff_cap_seconds"`
	// RetentionDays is the payload retention, KeyRetentionDays the key
	// retention (claim.Policy.Retention and KeyRetention): days after a
	// terminal record's last change until its payload, then its key, is
	// purged. Unset: 30, and 400 days or the payload retention if longer.
	RetentionDays    int `yaml:"retention_days"`
	KeyRetentionDays int `yaml:"key_retention_days"`
	// Backfill is the source's gap detection (see BackfillSpec).
	Backfill *BackfillSpec `yaml:"backfill"`
	// Shadow puts the source's scope in shadow mode (claim.Policy.Shadow):
	// every claim of it (its trigger's, the workflow's) is decided and
	// recorded but answered as a win, so that everything runs as without
	// the layer while claimd counts what it would have stopped. On an
	// ingest door (forward.url) every verified copy is passed through to
	// forward.url and its answer relayed (inbox.Inbox.Shadow); shadow there is
	// refused with a backfill mode other than report, and with a
	// max_lease_seconds shorter than forward.timeout_seconds plus
	// DispatchLeaseGrace (shadowRefusal).
	Shadow bool `yaml:"shadow"`
	// Reconciler names the default reconciler (under the file's
	// reconcilers) of the source's claims: called when one of them is
	// left unknown, unless the claim named its own
	// (claim.Policy.Reconciler). A claim setting: claim-only sources take
	// it too.
	Reconciler string `yaml:"reconciler"`
}

// ForwardSpec is where and how stored events are dispatched.
type ForwardSpec struct {
	URL                string            `yaml:"url"`
	Headers            map[string]string `yaml:"headers"`
	TimeoutSeconds     int               `yaml:"timeout_seconds"`
	Concurrency        int               `yaml:"concurrency"`
	MaxAttempts        int               `yaml:"max_attempts"`
	BackoffBaseSeconds int               `yaml:"backoff_base_seconds"`
	BackoffCapSeconds  int               `yaml:"backoff_cap_seconds"`
	// RequireClaim (default true): a 2xx counts as dispatched only once the
	// workflow has claimed the event; set false for targets that do not
	// claim (a plain webhook consumer).
	RequireClaim *bool `yaml:"require_claim"`
	// RetryStatuses is the list of non-2xx statuses retried with backoff up
	// to max_attempts: integers (404) or ranges written as strings
	// ("500-599"). Unset or null: DefaultRetryStatuses.
	RetryStatuses yaml.Node `yaml:"retry_statuses"`
	// DeliveredStatuses is the list of non-2xx statuses that mean the
	// target has the event already (n8n's 409 for a resume URL called a
	// second time): the dispatch is recorded as dispatched, never retried.
	// Same form as retry_statuses. Unset or null: [409] when url is an n8n
	// resume URL (…/webhook-waiting/{id} or …/form-waiting/{id}), else
	// none; an empty list is none.
	DeliveredStatuses yaml.Node `yaml:"delivered_statuses"`
}

// Defaults of a source.
const (
	DefaultMaxBodyBytes   = 1 << 20
	DefaultForwardTimeout = 30 * time.Second
	DefaultConcurrency    = 4
	DefaultDispatchMax    = 10
	DefaultDispatchBase   = 5 * time.Second
	DefaultDispatchCap    = 10 * time.Minute
	// MaxBodyBytesLimit is the largest per-source body limit accepted (GitHub caps payloads at 25 MB).
	MaxBodyBytesLimit = 32 << 20
	// MaxForwardTimeout is the longest forward.timeout_seconds accepted: a
	// dispatch still running after RescueStuckAfter is taken for one of a
	// crashed process and run again, so an attempt must end well before.
	MaxForwardTimeout = RescueStuckAfter - time.Minute
	// RescueStuckAfter is when a running dispatch job is presumed lost.
	RescueStuckAfter = 5 * time.Minute
	// DispatchLeaseGrace is how long a dispatch attempt's reservation
	// outlives its POST's deadline (the forward timeout): the lease is
	// forward.timeout_seconds plus this, so no other run of the dispatch
	// posts while the attempt may still be in flight. MaxForwardTimeout
	// plus it stays below RescueStuckAfter.
	DispatchLeaseGrace = 5 * time.Second
)

// Source is a validated, ready source.
type Source struct {
	Name string
	// Scope is the claim-ledger source the events are keyed in
	// (dedupe_scope; the source's name by default): the workflow claims
	// with source = Scope.
	Scope    string
	Tenant   string
	Provider verify.Type
	Verifier verify.Verifier
	// MaxBodyBytes bounds the raw body, in bytes.
	MaxBodyBytes int
	// UnauthenticatedStatus answers deliveries that fail verification.
	UnauthenticatedStatus int
	// volatile are left out of the payload hash (volatile_fields).
	volatile volatileFields
	// key, when set, replaces the verifier's event id (key).
	key *keyRule
	// CredentialHeaders are the lower-case names of the headers that carry
	// this source's signature or shared token (a configured generic header
	// such as X-Api-Key included). They are never stored or forwarded.
	CredentialHeaders []string
	// CredentialQueryParams are the names (case-sensitive) of the query
	// parameters that carry this source's token
	// (verify.Provider.CredentialQueryParams: Mollie's classic token,
	// Pub/Sub's query_token, Meta's hub.verify_token). The query string is
	// never stored or forwarded; these are also removed from any header
	// value that repeats the request URL (inbox.StoredHeaders), and named to the
	// n8n trigger node so that its items leave them out.
	CredentialQueryParams []string
	// Methods are the HTTP methods besides POST the source's provider
	// sends (verify.Provider.Methods: GET, HEAD), answered with its
	// handshake; nil for most.
	Methods []string
	// RetryHeaders are the lower-case names of the headers the source's
	// provider marks a retry with (verify.Provider.RetryHeaders), nil for
	// most.
	RetryHeaders []string
	// Forward is the dispatch target; its zero value (no URL) for a
	// trigger source (TriggerOnly).
	Forward Forward
	// Backfill is the source's gap detection, nil when it has none.
	Backfill *Backfill
	// Shadow: the source is in shadow mode (shadow: true). On an ingest
	// door the delivery is passed through to Forward.URL (inbox.Inbox.Shadow)
	// instead of stored; a trigger source's claims are shadow claims by
	// its policy (claim.Policy.Shadow).
	Shadow bool
}

// TriggerOnly reports whether s has no forward target: it serves only
// POST /v1/trigger/{source}, and POST /ingest/{source} answers for it
// exactly as for an unknown source (it is in Config.Triggers, never in
// Config.Sources).
func (s *Source) TriggerOnly() bool { return s.Forward.URL == "" }

// Forward is a source's dispatch target.
type Forward struct {
	URL         string
	Headers     map[string]string
	Timeout     time.Duration
	Concurrency int
	MaxAttempts int
	BackoffBase time.Duration
	BackoffCap  time.Duration
	// RequireClaim: a 2xx is a success only once the event was claimed.
	RequireClaim bool
	// RetryStatuses are retried with backoff up to MaxAttempts; any other
	// non-2xx answer dead-letters the event at once.
	RetryStatuses Statuses
	// DeliveredStatuses mean the target has the event already: the
	// dispatch is done, never retried (disjoint from RetryStatuses).
	DeliveredStatuses Statuses
	// ResumeURL: URL is an n8n resume URL (…/webhook-waiting/{id},
	// …/form-waiting/{id}), whose 409 is delivered by default.
	ResumeURL bool
}

// Config is a parsed sources file: ingest sources, trigger sources and
// claim policies.
type Config struct {
	// Sources are the ingest doors: sources with a forward target, served
	// by POST /ingest/{source} (and by POST /v1/trigger/{source}).
	Sources map[string]*Source
	// Triggers are the trigger sources: verified sources without a forward
	// target, served only by POST /v1/trigger/{source}.
	Triggers map[string]*Source
	Policies map[string]claim.Policy
	// Reconcilers are the configured reconcilers by name (reconcilers:).
	Reconcilers map[string]*Reconciler
	// Digest is the hex SHA-256 of the file's bytes as parsed: a reload
	// compares it to tell a changed file from a rewrite of the same bytes.
	Digest string
}

var sourceNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,99}$`)

// ReadFile reads and validates the sources file at path. getenv resolves
// ${VAR} references (os.Getenv in production); a missing variable is an error.
func ReadFile(path string, getenv func(string) string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("sources file: %w", err)
	}
	return Parse(b, getenv)
}

// Parse parses and validates a sources file. Errors name the source and field.
//
// A file is a configuration only when it says so, because a file being
// rewritten in place (truncated, then written) is read part way too:
//   - an empty file (no YAML document: zero bytes, only blanks or
//     comments), a document without a `sources` key and `sources:` with no
//     value are refused; a configuration without any source is written
//     `sources: {}`;
//   - a key with nothing after it (`lease_policy:`, `payments:`) is refused
//     anywhere in the file: it is how a file cut short ends, and would
//     otherwise give a default silently. Leave the key out, write `{}` for
//     a claim-only source with the default policy, or null where null is
//     documented;
//   - a source without provider (claim-only) that sets an ingest setting
//     (tenant, secrets, forward…) is refused: it is either a file cut
//     before the provider line or a mistake.
func Parse(b []byte, getenv func(string) string) (Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return Config{}, fmt.Errorf("sources file: %w", err)
	}
	if err := checkSettings(&root, reflect.TypeFor[File](), ""); err != nil {
		return Config{}, err
	}
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); errors.Is(err, io.EOF) {
		return Config{}, errors.New("sources file is empty (no YAML document; a file being written looks like this too): " +
			"a configuration without sources is written `sources: {}`")
	} else if err != nil {
		return Config{}, decodeError(b, err)
	}
	if f.Sources == nil {
		return Config{}, errors.New("sources file has no `sources:` mapping (missing, or without a value, as in a file cut short): " +
			"a configuration without sources is written `sources: {}`")
	}
	if err := checkNoEmptyValues(&root, ""); err != nil {
		return Config{}, err
	}
	if err := checkWholeNumbers(&root, reflect.TypeFor[File](), ""); err != nil {
		return Config{}, err
	}
	sum := sha256.Sum256(b)
	cfg := Config{Sources: map[string]*Source{}, Triggers: map[string]*Source{}, Policies: map[string]claim.Policy{},
		Digest: hex.EncodeToString(sum[:])}
	var err error
	if cfg.Reconcilers, err = compileReconcilers(&root, f.Reconcilers, getenv); err != nil {
		return Config{}, err
	}
	if err := checkSourceReconcilers(&root, f.Sources, cfg.Reconcilers); err != nil {
		return Config{}, err
	}
	names := make([]string, 0, len(f.Sources))
	for n := range f.Sources {
		names = append(names, n)
	}
	sort.Strings(names)
	queues := map[string]string{}
	for _, name := range names {
		spec := f.Sources[name]
		if lp := claim.LeasePolicy(spec.LeasePolicy); lp != "" && lp != claim.Reclaim && lp != claim.Review {
			return Config{}, fmt.Errorf("source %q: lease_policy must be %q or %q", name, claim.Reclaim, claim.Review)
		}
		cfg.Policies[name] = spec.policy()
		if spec.Provider == "" {
			if set := spec.ingestSettings(); len(set) > 0 {
				return Config{}, fmt.Errorf("source %q: %s set without provider: a claim-only source takes only claim settings "+
					"(lease_policy, lease_seconds, max_lease_seconds, max_attempts, backoff_base_seconds, backoff_cap_seconds, "+
					"retention_days, volatile_fields, shadow, reconciler); add the provider, or remove them", name, strings.Join(set, ", "))
			}
			continue
		}
		if !sourceNameRe.MatchString(name) { // not quoted: a name that is not one may be anything pasted
			return Config{}, fmt.Errorf("sources file: a source name must match %s (it is the URL path segment)", sourceNameRe)
		}
		if _, err := verify.ParseType(spec.Provider); err != nil {
			// The value is not repeated: it may be a secret pasted on the wrong line.
			return Config{}, &quietError{err: err, msg: fmt.Sprintf("sources file line %d: sources.%s.provider must be one of: %s",
				lineOf(&root, "sources", name, "provider"), name, typeNames())}
		}
		src, err := spec.build(name, getenv)
		if err != nil {
			return Config{}, fmt.Errorf("source %q: %w", name, err)
		}
		if src.TriggerOnly() {
			cfg.Triggers[name] = src // no dispatch queue: nothing is stored or forwarded
			continue
		}
		q := QueueName(name)
		if other, dup := queues[q]; dup {
			return Config{}, fmt.Errorf("source %q: its dispatch queue %q is also that of source %q (names differing only in '.' and '_'); rename one", name, q, other)
		}
		queues[q] = name
		cfg.Sources[name] = src
	}
	if err := checkScopes(cfg, f.Sources); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// checkNoEmptyValues refuses a mapping key with nothing after it (an
// implicit null: `key:` and no value), naming it and its line.
func checkNoEmptyValues(n *yaml.Node, path string) error {
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for i, c := range n.Content {
			p := path
			if n.Kind == yaml.SequenceNode {
				p = fmt.Sprintf("%s[%d]", path, i)
			}
			if err := checkNoEmptyValues(c, p); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			if v.Kind == yaml.ScalarNode && v.Tag == "!!null" && v.Value == "" && v.Style == 0 {
				return fmt.Errorf("sources file line %d: %s has no value (a file cut short ends like this): "+
					"leave the key out, or give it a value (`{}` for a claim-only source with the default policy)", k.Line, p)
			}
			if err := checkNoEmptyValues(v, p); err != nil {
				return err
			}
		}
	}
	return nil
}

// ingestSettings lists the ingest settings s sets, in file order.
func (s SourceSpec) ingestSettings() []string {
	var set []string
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"tenant", s.Tenant != ""}, {"secrets", s.Secrets != nil}, {"tolerance_seconds", s.ToleranceSeconds != 0},
		{"allowed_event_types", s.AllowedEventTypes != nil}, {"max_body_bytes", s.MaxBodyBytes != 0},
		{"unauthenticated_status", s.UnauthenticatedStatus != 0}, {"options", s.Options != nil},
		{"dedupe_scope", s.DedupeScope != ""}, {"key", s.Key != nil}, {"forward", !reflect.ValueOf(s.Forward).IsZero()},
		{"backfill", s.Backfill != nil},
	} {
		if f.set {
			set = append(set, f.name)
		}
	}
	return set
}

func (s SourceSpec) policy() claim.Policy {
	return claim.Policy{
		LeasePolicy:  claim.LeasePolicy(s.LeasePolicy),
		DefaultLease: time.Duration(s.LeaseSeconds) * time.Second,
		MaxLease:     time.Duration(s.MaxLeaseSeconds) * time.Second,
		MaxAttempts:  s.MaxAttempts,
		BackoffBase:  time.Duration(s.BackoffBaseSeconds) * time.Second,
		BackoffCap:   time.Duration(s.BackoffCapSeconds) * time.Second,
		Retention:    time.Duration(s.RetentionDays) * 24 * time.Hour,
		KeyRetention: time.Duration(s.KeyRetentionDays) * 24 * time.Hour,
		// The same volatile rule on every attempt: claims of this source
		// leave these fields out of their payload hash too.
		VolatileFields: s.volatileFields(),
		Shadow:         s.Shadow,
		Reconciler:     s.Reconciler,
	}
}

// volatileFields are the JSON pointers left out of the payload hash of the
// source's events and claims: its provider's defaults
// (verify.Provider.VolatileFields, fields the provider changes on every
// retry, such as Stripe's /pending_webhooks), then its own
// volatile_fields, each once.
func (s SourceSpec) volatileFields() []string {
	var out []string
	if p, ok := verify.Lookup(verify.Type(s.Provider)); ok {
		out = append(out, p.VolatileFields...)
	}
	for _, f := range s.VolatileFields {
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

func (s SourceSpec) build(name string, getenv func(string) string) (*Source, error) {
	if !sourceNameRe.MatchString(name) {
		return nil, fmt.Errorf("name must match %s (it is the URL path segment)", sourceNameRe)
	}
	if !auth.ValidTenant(s.Tenant) {
		return nil, errors.New("tenant is required (letters, digits, . _ -)")
	}
	t, err := verify.ParseType(s.Provider)
	if err != nil {
		// The value is not repeated: it may be a secret pasted on the wrong line.
		return nil, fmt.Errorf("provider must be one of: %s", typeNames())
	}
	p, _ := verify.Lookup(t)
	secrets := make([]string, 0, len(s.Secrets))
	for i, sec := range s.Secrets {
		v, err := expand(sec, getenv)
		if err != nil {
			return nil, fmt.Errorf("secrets[%d]: %w", i, err)
		}
		secrets = append(secrets, v)
	}
	if s.Options, err = expandOptions(s.Options, getenv, "options"); err != nil {
		return nil, err
	}
	if s.Options != nil {
		if err := checkOptionHeaders(s.Options, "options", ""); err != nil {
			return nil, err
		}
	}
	v, creds, queryCreds, err := sourceVerifier(p, s, secrets)
	if err != nil {
		return nil, err
	}
	if _, err := parseVolatile(s.VolatileFields); err != nil {
		return nil, err
	}
	volatile, err := parseVolatile(s.volatileFields())
	if err != nil {
		return nil, err
	}
	key, err := s.Key.compile()
	if err != nil {
		return nil, err
	}
	backfill, err := s.Backfill.compile(t, s, s.Forward.URL == "", getenv)
	if err != nil {
		return nil, err
	}
	scope := s.DedupeScope
	if scope == "" {
		scope = name
	}
	if !sourceNameRe.MatchString(scope) {
		return nil, fmt.Errorf("dedupe_scope must match %s", sourceNameRe)
	}
	src := &Source{Name: name, Scope: scope, Tenant: s.Tenant, Provider: t, Verifier: v, volatile: volatile, key: key,
		MaxBodyBytes: s.MaxBodyBytes, UnauthenticatedStatus: s.UnauthenticatedStatus,
		CredentialHeaders: creds, CredentialQueryParams: queryCreds, Methods: slices.Clone(p.Methods), Backfill: backfill,
		Shadow: s.Shadow}
	src.RetryHeaders = slices.Clone(p.RetryHeaders)
	if src.MaxBodyBytes == 0 {
		src.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if src.MaxBodyBytes < 1 || src.MaxBodyBytes > MaxBodyBytesLimit {
		return nil, fmt.Errorf("max_body_bytes must be between 1 and %d", MaxBodyBytesLimit)
	}
	if src.UnauthenticatedStatus == 0 {
		src.UnauthenticatedStatus = 401
	}
	if st := src.UnauthenticatedStatus; st != 400 && st != 401 && st != 403 && (st < 200 || st > 299) {
		return nil, errors.New("unauthenticated_status must be 400, 401, 403 or a 2xx")
	}
	f := s.Forward
	if f.URL == "" {
		// A trigger source: no forward target, so no forward settings.
		if !reflect.ValueOf(f).IsZero() {
			return nil, errors.New("forward.url is required when forward sets anything else " +
				"(a source without forward.url is a trigger source, served only by POST /v1/trigger/{source})")
		}
		return src, nil
	}
	src.Forward = Forward{
		Timeout: time.Duration(f.TimeoutSeconds) * time.Second, Concurrency: f.Concurrency,
		MaxAttempts: f.MaxAttempts, BackoffBase: time.Duration(f.BackoffBaseSeconds) * time.Second,
		BackoffCap: time.Duration(f.BackoffCapSeconds) * time.Second, Headers: map[string]string{},
		RequireClaim: f.RequireClaim == nil || *f.RequireClaim,
	}
	if src.Forward.URL, err = expand(f.URL, getenv); err != nil {
		return nil, fmt.Errorf("forward.url: %w", err)
	}
	if u, err := url.Parse(src.Forward.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || badPort(u) {
		return nil, errors.New("forward.url must be an absolute http(s) URL (the n8n webhook), its port (if any) from 1 to 65535")
	}
	if err := checkForwardHeaders(f.Headers); err != nil { // names first: an expansion error names its header
		return nil, err
	}
	for k, v := range f.Headers {
		if src.Forward.Headers[k], err = expand(v, getenv); err != nil {
			return nil, fmt.Errorf("forward.headers.%s: %w", k, err)
		}
	}
	if err := checkForwardHeaders(src.Forward.Headers); err != nil { // values from ${VAR}s
		return nil, err
	}
	fw := &src.Forward
	if fw.Timeout == 0 {
		fw.Timeout = DefaultForwardTimeout
	}
	if fw.Concurrency == 0 {
		fw.Concurrency = DefaultConcurrency
	}
	if fw.MaxAttempts == 0 {
		fw.MaxAttempts = DefaultDispatchMax
	}
	if fw.BackoffBase == 0 {
		fw.BackoffBase = DefaultDispatchBase
	}
	if fw.BackoffCap == 0 {
		fw.BackoffCap = DefaultDispatchCap
	}
	switch {
	case fw.Timeout < time.Second:
		return nil, errors.New("forward.timeout_seconds must be at least 1")
	case fw.Timeout > MaxForwardTimeout:
		return nil, fmt.Errorf("forward.timeout_seconds must be at most %d: a dispatch running longer is presumed lost and run again",
			int(MaxForwardTimeout/time.Second))
	case fw.Concurrency < 1 || fw.Concurrency > 1000:
		return nil, errors.New("forward.concurrency must be between 1 and 1000")
	case fw.MaxAttempts < 1 || fw.MaxAttempts > 1000:
		return nil, errors.New("forward.max_attempts must be between 1 and 1000")
	case fw.BackoffCap < fw.BackoffBase:
		return nil, errors.New("forward.backoff_cap_seconds cannot be shorter than forward.backoff_base_seconds")
	}
	if err := forwardStatuses(fw, f); err != nil {
		return nil, err
	}
	if err := s.shadowRefusal(src); err != nil {
		return nil, err
	}
	return src, nil
}

// shadowRefusal refuses shadow: true on an ingest door (src, built) with
// a setting that would act, not observe, or that the pass-through cannot
// honour:
//   - backfill with a mode other than report: fetch, redeliver and auto
//     store or have the provider deliver again the events a scan finds
//     missing, an effect shadow mode must not have;
//   - max_lease_seconds shorter than forward.timeout_seconds plus
//     DispatchLeaseGrace: the copy that would win holds its lease while
//     its forward may still be in flight, and settles it with the
//     forward's answer (inbox.Inbox.Shadow).
//
// Other forward settings (retries, statuses, require_claim, concurrency)
// are the dispatcher's: unused in shadow, they apply once it is turned off.
func (s SourceSpec) shadowRefusal(src *Source) error {
	if !s.Shadow {
		return nil
	}
	if src.Backfill != nil && src.Backfill.Mode != BackfillReport {
		return fmt.Errorf("shadow: true on a source with forward.url takes backfill.mode report only (mode %s stores or redelivers "+
			"the missed events it finds, which observe-only mode must not do); set backfill.mode: report, or remove shadow", src.Backfill.Mode)
	}
	if need := src.Forward.Timeout + DispatchLeaseGrace; s.MaxLeaseSeconds != 0 && time.Duration(s.MaxLeaseSeconds)*time.Second < need {
		return fmt.Errorf("shadow: true on a source with forward.url needs max_lease_seconds of at least %d "+
			"(forward.timeout_seconds plus %d: the copy that would win holds its lease while it is forwarded)",
			int(need/time.Second), int(DispatchLeaseGrace/time.Second))
	}
	return nil
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expandOptions returns a copy of a source's options with ${VAR} replaced
// in every string value, at any depth (a verify token, a public key, a
// signing token kept in the environment, as secrets are); a missing or
// empty variable is an error naming the option ("options.verify_token:
// environment variable META_VERIFY_TOKEN is not set"), never its value.
// Keys are not expanded.
func expandOptions(v map[string]any, getenv func(string) string, at string) (map[string]any, error) {
	if v == nil {
		return nil, nil
	}
	out, err := expandOption(v, getenv, at)
	if err != nil {
		return nil, err
	}
	return out.(map[string]any), nil
}

func expandOption(v any, getenv func(string) string, at string) (any, error) {
	switch t := v.(type) {
	case string:
		s, err := expand(t, getenv)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", at, err)
		}
		return s, nil
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, item := range t {
			e, err := expandOption(item, getenv, at+"."+k)
			if err != nil {
				return nil, err
			}
			out[k] = e
		}
		return out, nil
	case []any:
		out := make([]any, len(t))
		for i, item := range t {
			e, err := expandOption(item, getenv, fmt.Sprintf("%s[%d]", at, i))
			if err != nil {
				return nil, err
			}
			out[i] = e
		}
		return out, nil
	}
	return v, nil
}

// expand replaces ${VAR} with the variable's value; a missing or empty
// variable is an error naming it (never its value).
func expand(s string, getenv func(string) string) (string, error) {
	var missing string
	out := envRef.ReplaceAllStringFunc(s, func(m string) string {
		name := envRef.FindStringSubmatch(m)[1]
		v := getenv(name)
		if v == "" && missing == "" {
			missing = name
		}
		return v
	})
	if missing != "" {
		return "", fmt.Errorf("environment variable %s is not set", missing)
	}
	return out, nil
}
