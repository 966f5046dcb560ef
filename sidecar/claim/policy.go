package claim

import (
	"fmt"
	"math"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/strictjson"
)

// LeasePolicy says what happens when a processing lease expires without
// Complete or Fail.
type LeasePolicy string

// Lease policies.
const (
	// Reclaim: the next claim wins with a new token. Use it when the
	// destination is itself idempotent.
	Reclaim LeasePolicy = "reclaim"
	// Review: the record moves to unknown for an operator to resolve. Use it
	// for irreversible effects.
	Review LeasePolicy = "review"
)

// Policy holds the per-source rules of the ledger.
type Policy struct {
	// LeasePolicy on lease expiry; default Reclaim.
	LeasePolicy LeasePolicy `json:"lease_policy" yaml:"lease_policy"`
	// DefaultLease when a claim asks for none; default 5 minutes.
	DefaultLease time.Duration `json:"default_lease" yaml:"default_lease"`
	// MaxLease caps requested and extended leases; default 24 hours.
	MaxLease time.Duration `json:"max_lease" yaml:"max_lease"`
	// MaxAttempts caps attempts before dead-lettering; default 5.
	MaxAttempts int `json:"max_attempts" yaml:"max_attempts"`
	// BackoffBase and BackoffCap shape retries: the delay before attempt n+1
	// is uniformly random in [0, min(BackoffCap, BackoffBase·2^(n-1))]
	// ("full jitter"). Defaults 30 seconds and 1 hour.
	BackoffBase time.Duration `json:"backoff_base" yaml:"backoff_base"`
	BackoffCap  time.Duration `json:"backoff_cap" yaml:"backoff_cap"`
	// Retention keeps terminal records (completed, dead_lettered, stale) this
	// long after their last change; default 30 days. Keep it longer than the
	// provider's redelivery window (Stripe retries for up to 3 days).
	Retention time.Duration `json:"retention" yaml:"retention"`
	// VolatileFields are JSON pointers (RFC 6901) to fields of a claim's
	// payload that the sender changes on every retry (a delivery
	// timestamp): they are left out of the payload hash the claims API
	// computes from payload, as ingest leaves them out of the receipt hash,
	// so a retry stays a retry and never becomes a conflict. No default.
	VolatileFields []string `json:"volatile_fields" yaml:"volatile_fields"`
}

// Volatile returns the parsed VolatileFields; pointers that do not parse
// are skipped (Validate reports them).
func (p Policy) Volatile() []strictjson.Pointer {
	out := make([]strictjson.Pointer, 0, len(p.VolatileFields))
	for _, s := range p.VolatileFields {
		if ptr, err := strictjson.ParsePointer(s); err == nil && s != "" {
			out = append(out, ptr)
		}
	}
	return out
}

// WithDefaults returns p with zero fields set to their defaults.
func (p Policy) WithDefaults() Policy {
	if p.LeasePolicy == "" {
		p.LeasePolicy = Reclaim
	}
	if p.DefaultLease == 0 {
		p.DefaultLease = 5 * time.Minute
	}
	if p.MaxLease == 0 {
		p.MaxLease = 24 * time.Hour
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = 5
	}
	if p.BackoffBase == 0 {
		p.BackoffBase = 30 * time.Second
	}
	if p.BackoffCap == 0 {
		p.BackoffCap = time.Hour
	}
	if p.Retention == 0 {
		p.Retention = 30 * 24 * time.Hour
	}
	return p
}

// Validate reports the first invalid field of p (after WithDefaults).
func (p Policy) Validate() error {
	switch {
	case p.LeasePolicy != Reclaim && p.LeasePolicy != Review:
		return fmt.Errorf("lease_policy must be %q or %q, got %q", Reclaim, Review, p.LeasePolicy)
	case p.DefaultLease < time.Second:
		return fmt.Errorf("default_lease must be at least 1s, got %s", p.DefaultLease)
	case p.MaxLease < p.DefaultLease:
		return fmt.Errorf("max_lease (%s) cannot be shorter than default_lease (%s)", p.MaxLease, p.DefaultLease)
	case p.MaxAttempts < 1 || p.MaxAttempts > 1000:
		return fmt.Errorf("max_attempts must be between 1 and 1000, got %d", p.MaxAttempts)
	case p.BackoffBase < 0:
		return fmt.Errorf("backoff_base cannot be negative, got %s", p.BackoffBase)
	case p.BackoffCap < p.BackoffBase:
		return fmt.Errorf("backoff_cap (%s) cannot be shorter than backoff_base (%s)", p.BackoffCap, p.BackoffBase)
	case p.Retention < time.Hour:
		return fmt.Errorf("retention must be at least 1h, got %s", p.Retention)
	}
	for i, s := range p.VolatileFields {
		if _, err := strictjson.ParsePointer(s); err != nil || s == "" {
			return fmt.Errorf("volatile_fields[%d] must be a JSON pointer (RFC 6901) such as \"/createdAt\"", i)
		}
	}
	return nil
}

// backoffCeiling is the upper bound of the full-jitter delay after the given
// failed attempt (1-based).
func (p Policy) backoffCeiling(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	exp := math.Pow(2, float64(attempt-1))
	d := float64(p.BackoffBase) * exp
	if d > float64(p.BackoffCap) || math.IsInf(d, 0) {
		return p.BackoffCap
	}
	return time.Duration(d)
}

// Policies maps source names to policies, with a default for the rest.
type Policies struct {
	Default  Policy
	BySource map[string]Policy
}

// For returns the policy of source: its own, else the default.
func (ps Policies) For(source string) Policy {
	if p, ok := ps.BySource[source]; ok {
		return p
	}
	return ps.Default
}

// WithDefaults fills every policy's zero fields. A source policy inherits
// unset fields from the (filled) default policy.
func (ps Policies) WithDefaults() Policies {
	out := Policies{Default: ps.Default.WithDefaults(), BySource: map[string]Policy{}}
	for name, p := range ps.BySource {
		out.BySource[name] = inherit(p, out.Default)
	}
	return out
}

func inherit(p, d Policy) Policy {
	if p.LeasePolicy == "" {
		p.LeasePolicy = d.LeasePolicy
	}
	if p.DefaultLease == 0 {
		p.DefaultLease = d.DefaultLease
	}
	if p.MaxLease == 0 {
		p.MaxLease = d.MaxLease
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = d.MaxAttempts
	}
	if p.BackoffBase == 0 {
		p.BackoffBase = d.BackoffBase
	}
	if p.BackoffCap == 0 {
		p.BackoffCap = d.BackoffCap
	}
	if p.Retention == 0 {
		p.Retention = d.Retention
	}
	return p
}

// Validate validates every policy, naming the source of the first bad one.
func (ps Policies) Validate() error {
	if err := ps.Default.Validate(); err != nil {
		return fmt.Errorf("default policy: %w", err)
	}
	for name, p := range ps.BySource {
		if err := p.Validate(); err != nil {
			return fmt.Errorf("source %q: %w", name, err)
		}
	}
	return nil
}
