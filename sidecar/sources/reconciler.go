package sources

import (
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// ReconcilerSpec is one reconciler as written under the sources file's
// top-level `reconcilers:` (named): the n8n workflow claimd calls to find
// out whether the effect of a claim left unknown happened.
//
//	reconcilers:
//	  crm:
//	    url: https://n8n.example.com/webhook/reconcile-crm  # the reconcile workflow's production webhook URL
//	    headers: {X-Reconcile-Token: "${RECONCILE_TOKEN}"}   # sent on each call (n8n Header Auth)
//	    delay_seconds: 60          # the least time from the claim going unknown to the first call; default 60, 0..86400
//	    timeout_seconds: 30        # one call; default 30, 1..300
//	    answer_seconds: 0          # how long after the call an answer may still come through the API; 0 (default): timeout_seconds; 0..3600
//	    max_calls: 6               # calls per unknown episode; default 6, 1..100
//	    backoff_base_seconds: 30   # default 30, 1..86400
//	    backoff_cap_seconds: 3600  # default 3600, backoff_base_seconds..2592000
//	sources:
//	  orders:
//	    reconciler: crm            # the default reconciler of the source's claims
//
// A reconciler is never a URL a caller sends: a claim names one of these
// by name.
type ReconcilerSpec struct {
	URL     string            `yaml:"url"`
	Headers map[string]string `yaml:"headers"`
	// DelaySeconds is the least time in seconds from a claim going
	// unknown to the first call of its episode (Reconciler.Delay); unset:
	// 60, 0 none, at most 86400.
	DelaySeconds       *int `yaml:"delay_seconds"`
	TimeoutSeconds     int  `yaml:"timeout_seconds"`
	AnswerSeconds      int  `yaml:"answer_seconds"`
	MaxCalls           int  `yaml:"max_calls"`
	BackoffBaseSeconds int  `yaml:"backoff_base_seconds"`
	BackoffCapSeconds  int  `yaml:"backoff_cap_seconds"`
}

// Reconciler defaults and limits (ReconcilerSpec).
const (
	DefaultReconcileDelay       = 60 * time.Second
	MaxReconcileDelay           = 86400 * time.Second
	DefaultReconcileTimeout     = 30 * time.Second
	MaxReconcileTimeout         = 300 * time.Second
	MaxReconcileAnswer          = 3600 * time.Second
	DefaultReconcileMaxCalls    = 6
	MaxReconcileMaxCalls        = 100
	DefaultReconcileBackoffBase = 30 * time.Second
	MaxReconcileBackoffBase     = 86400 * time.Second
	DefaultReconcileBackoffCap  = time.Hour
	MaxReconcileBackoffCap      = 30 * 24 * time.Hour
)

// Reconciler is a validated reconciler.
type Reconciler struct {
	// Name is its key under reconcilers (a claim's reconciler, metrics'
	// reconciler label).
	Name string
	// URL is the absolute http(s) URL each call POSTs to, ${VAR}s
	// expanded.
	URL string
	// Headers are sent on each call (values expanded; never logged).
	Headers map[string]string
	// Delay is the least time from a claim going unknown (its
	// updated_at when the reconcile starts) to the episode's first call
	// (delay_seconds): a holder that may still be mid-effect (an
	// operator's Release of its processing claim, a lease run out under
	// review while it worked on) is given that long to Complete before
	// the reconciler judges, since a not_done lets the next delivery run
	// the effect (claim.ReconcilerPolicy.Delay).
	Delay time.Duration
	// Timeout bounds one call (timeout_seconds).
	Timeout time.Duration
	// Answer is how long after a call's deadline an answer may still come
	// through POST /v1/claims/{id}/reconcile (answer_seconds; its default
	// is Timeout).
	Answer time.Duration
	// MaxCalls bounds the calls of one unknown episode; then the reconcile
	// gives up and the claim waits for an operator.
	MaxCalls int
	// BackoffBase and BackoffCap shape the wait before the next call after
	// a still_unknown answer or a failed call: uniform in
	// [0, min(BackoffCap, BackoffBase·2^(n-1))] after call n.
	BackoffBase time.Duration
	BackoffCap  time.Duration
}

// compileReconcilers validates the reconcilers of f. Errors name the
// reconciler and setting, never a value written.
func compileReconcilers(root *yaml.Node, specs map[string]ReconcilerSpec, getenv func(string) string) (map[string]*Reconciler, error) {
	out := make(map[string]*Reconciler, len(specs))
	names := make([]string, 0, len(specs))
	for n := range specs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		if !sourceNameRe.MatchString(name) { // not quoted: a name that is not one may be anything pasted
			return nil, fmt.Errorf("sources file: a reconciler name must match %s (it is a claim's reconciler and a metrics label)", sourceNameRe)
		}
		r, err := specs[name].build(name, getenv)
		if err != nil {
			return nil, fmt.Errorf("sources file line %d: reconcilers.%s.%w", lineOf(root, "reconcilers", name), name, err)
		}
		out[name] = r
	}
	return out, nil
}

// build validates s; an error starts with the setting's name (the caller
// prefixes reconcilers.<name>.).
func (s ReconcilerSpec) build(name string, getenv func(string) string) (*Reconciler, error) {
	r := &Reconciler{Name: name, Headers: map[string]string{},
		Timeout: time.Duration(s.TimeoutSeconds) * time.Second, Answer: time.Duration(s.AnswerSeconds) * time.Second,
		MaxCalls: s.MaxCalls, BackoffBase: time.Duration(s.BackoffBaseSeconds) * time.Second,
		BackoffCap: time.Duration(s.BackoffCapSeconds) * time.Second}
	if s.URL == "" {
		return nil, errors.New("url is required (the reconcile workflow's webhook URL)")
	}
	var err error
	if r.URL, err = expand(s.URL, getenv); err != nil {
		return nil, fmt.Errorf("url: %w", err)
	}
	if u, err := url.Parse(r.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || badPort(u) {
		return nil, errors.New("url must be an absolute http(s) URL (the reconcile workflow's webhook), its port (if any) from 1 to 65535")
	}
	if err := checkHeaders("headers", s.Headers); err != nil { // names first: an expansion error names its header
		return nil, err
	}
	for k, v := range s.Headers {
		if r.Headers[k], err = expand(v, getenv); err != nil {
			return nil, fmt.Errorf("headers.%s: %w", k, err)
		}
	}
	if err := checkHeaders("headers", r.Headers); err != nil { // values from ${VAR}s
		return nil, err
	}
	r.Delay = DefaultReconcileDelay
	if s.DelaySeconds != nil {
		if *s.DelaySeconds < 0 || *s.DelaySeconds > int(MaxReconcileDelay/time.Second) {
			return nil, fmt.Errorf("delay_seconds must be between 0 and %d (unset: %d)", int(MaxReconcileDelay/time.Second),
				int(DefaultReconcileDelay/time.Second))
		}
		r.Delay = time.Duration(*s.DelaySeconds) * time.Second
	}
	if s.TimeoutSeconds == 0 {
		r.Timeout = DefaultReconcileTimeout
	}
	if s.AnswerSeconds == 0 {
		r.Answer = r.Timeout
	}
	if s.MaxCalls == 0 {
		r.MaxCalls = DefaultReconcileMaxCalls
	}
	if s.BackoffBaseSeconds == 0 {
		r.BackoffBase = DefaultReconcileBackoffBase
	}
	if s.BackoffCapSeconds == 0 {
		r.BackoffCap = max(DefaultReconcileBackoffCap, r.BackoffBase)
	}
	switch {
	case s.TimeoutSeconds < 0 || r.Timeout > MaxReconcileTimeout:
		return nil, fmt.Errorf("timeout_seconds must be between 1 and %d", int(MaxReconcileTimeout/time.Second))
	case s.AnswerSeconds < 0 || r.Answer > MaxReconcileAnswer:
		return nil, fmt.Errorf("answer_seconds must be between 0 and %d (0: timeout_seconds)", int(MaxReconcileAnswer/time.Second))
	case r.MaxCalls < 1 || r.MaxCalls > MaxReconcileMaxCalls:
		return nil, fmt.Errorf("max_calls must be between 1 and %d", MaxReconcileMaxCalls)
	case s.BackoffBaseSeconds < 0 || r.BackoffBase > MaxReconcileBackoffBase:
		return nil, fmt.Errorf("backoff_base_seconds must be between 1 and %d", int(MaxReconcileBackoffBase/time.Second))
	case s.BackoffCapSeconds < 0 || r.BackoffCap > MaxReconcileBackoffCap:
		return nil, fmt.Errorf("backoff_cap_seconds must be at most %d", int(MaxReconcileBackoffCap/time.Second))
	case r.BackoffCap < r.BackoffBase:
		return nil, errors.New("backoff_cap_seconds cannot be shorter than backoff_base_seconds")
	}
	return r, nil
}

// checkSourceReconcilers refuses a source whose reconciler names no
// configured reconciler, naming the source's setting, never the value.
func checkSourceReconcilers(root *yaml.Node, specs map[string]SourceSpec, recs map[string]*Reconciler) error {
	names := make([]string, 0, len(specs))
	for n := range specs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		r := specs[name].Reconciler
		if r == "" {
			continue
		}
		if _, ok := recs[r]; ok {
			continue
		}
		configured := "none is configured"
		if len(recs) > 0 {
			ks := make([]string, 0, len(recs))
			for k := range recs {
				ks = append(ks, k)
			}
			sort.Strings(ks)
			configured = "configured: " + strings.Join(ks, ", ")
		}
		return fmt.Errorf("sources file line %d: sources.%s.reconciler must name a reconciler under reconcilers: (%s)",
			lineOf(root, "sources", name, "reconciler"), name, configured)
	}
	return nil
}

// ReconcilerPolicies are the ledger's view of the configured reconcilers
// (claim.Policies.Reconcilers): their limits, without URL or headers.
func (c Config) ReconcilerPolicies() map[string]claim.ReconcilerPolicy {
	out := make(map[string]claim.ReconcilerPolicy, len(c.Reconcilers))
	for name, r := range c.Reconcilers {
		out[name] = claim.ReconcilerPolicy{MaxCalls: r.MaxCalls, BackoffBase: r.BackoffBase, BackoffCap: r.BackoffCap,
			Call: r.Timeout, Answer: r.Answer, Delay: r.Delay}
	}
	return out
}
