package claim

import (
	"fmt"
	"strconv"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/strictjson"
)

// LeasePolicy says what happens when a processing lease expires without
// Complete or Fail.
type LeasePolicy string

// Lease policies.
const (
	// Reclaim: the next claim wins with a new token, and the effect may run
	// a second time. Use it only when the destination is itself idempotent
	// (it honours the forwarded idempotency key).
	Reclaim LeasePolicy = "reclaim"
	// Review: the record moves to unknown for an operator to resolve, and
	// later claims are answered Unknown, never Won. Use it for irreversible
	// effects. The default (see Policy.WithDefaults).
	Review LeasePolicy = "review"
)

// DefaultLeasePolicy is the lease policy of a source that sets none:
// Review. Measured in n8n queue mode with a worker killed between the
// effect and Complete, Reclaim gave 8 of 8 events a second effect when the
// lease ran out; Review gave each one effect and left it unknown for an
// operator (DESIGN.md, "State machine").
const DefaultLeasePolicy = Review

// Policy holds the per-source rules of the ledger.
type Policy struct {
	// LeasePolicy on lease expiry; default Review (DefaultLeasePolicy). A
	// claim may ask for its own (Request.LeasePolicy).
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
	// Retention is the payload retention: a terminal record (completed,
	// dead_lettered, stale) keeps what it carried this long after its last
	// change: the inbox body and headers, bodies of conflicting deliveries,
	// the delivery log and last_error. Then the purge removes them and keeps
	// the record (see KeyRetention). Default 30 days.
	Retention time.Duration `json:"retention" yaml:"retention"`
	// KeyRetention keeps the terminal record itself this long after its
	// last change: its key, payload and receipt hashes, state, result_ref
	// and times, so that a provider's resend or an operator's replay of the
	// event is still a duplicate (with its result_ref), or a conflict when
	// the payload differs, never a new event. Then the purge deletes the
	// record and a later delivery of the key is a new event. Default
	// DefaultKeyRetention, or Retention when that is longer; it cannot be
	// shorter than Retention.
	KeyRetention time.Duration `json:"key_retention" yaml:"key_retention"`
	// VolatileFields are JSON pointers (RFC 6901) to fields of a claim's
	// payload that the sender changes on every retry (a delivery
	// timestamp): they are left out of the payload hash the claims API
	// computes from payload, as ingest leaves them out of the receipt hash,
	// so a retry stays a retry and never becomes a conflict. No default.
	VolatileFields []string `json:"volatile_fields" yaml:"volatile_fields"`
	// Shadow puts the source in shadow mode: every claim of it is a
	// shadow claim (Request.Shadow), decided and recorded on the real
	// records but answered Won. Turning it off enforces from the next
	// claim on, decided against everything recorded in shadow.
	Shadow bool `json:"shadow" yaml:"shadow"`
	// Reconciler names the source's default reconciler (a key of
	// Policies.Reconcilers), "" for none: called when a claim of the
	// source that names no reconciler of its own (Request.Reconciler)
	// becomes unknown. A source policy without one inherits the default
	// policy's.
	Reconciler string `json:"reconciler" yaml:"reconciler"`
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
		p.LeasePolicy = DefaultLeasePolicy
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
		p.Retention = DefaultRetention
	}
	if p.KeyRetention == 0 {
		p.KeyRetention = max(DefaultKeyRetention, p.Retention)
	}
	return p
}

// DefaultRetention is the default payload retention (Policy.Retention).
const DefaultRetention = 30 * 24 * time.Hour

// DefaultKeyRetention is the default key retention (Policy.KeyRetention):
// 400 days. A kept key must cover the longest time in which a sender may
// still deliver the event again. The windows of the providers we verify:
//
//   - Stripe: automatic retries for up to 3 days; events are listed and
//     resendable through the API and Dashboard for 30 days, and the
//     Dashboard lists them for 13 months (summary view after 30 days)
//     (https://docs.stripe.com/webhooks/process-undelivered-events,
//     https://support.stripe.com/questions/stripe-event-retention-period);
//   - Standard Webhooks senders such as Svix: retries for about a day, then
//     Resend and "recover failed messages" for as long as the payload is
//     kept, 90 days by default, longer on request
//     (https://docs.svix.com/retries, https://docs.svix.com/retention);
//   - Paddle: retries for 3 days, replay of notifications up to 90 days old
//     (https://developer.paddle.com/webhooks/about/respond-to-webhooks,
//     https://developer.paddle.com/api-reference/notifications/replay-notification);
//   - GitHub: no automatic retry, manual redelivery for 3 days
//     (https://docs.github.com/webhooks/testing-and-troubleshooting-webhooks/redelivering-webhooks);
//   - Shopify: 8 retries over 4 hours
//     (https://shopify.dev/changelog/updates-to-webhook-retry-mechanism);
//   - Microsoft Graph: retries for up to 4 hours
//     (https://learn.microsoft.com/graph/change-notifications-delivery-webhooks);
//   - Zoom: 3 retries, the last about 85 minutes after the first attempt
//     (https://developers.zoom.us/blog/webhook-delays);
//   - Slack Events API: 3 retries within about 5 minutes
//     (https://docs.slack.dev/apis/events-api/);
//   - Twilio: retries only within the request (connection overrides)
//     (https://www.twilio.com/docs/usage/webhooks/webhooks-connection-overrides).
//
// The longest resend window is 90 days (Svix, Paddle); the longest horizon
// in which a sender still shows the event to an operator is Stripe's 13
// months. 400 days covers both, and a sender whose retention was raised to
// a year, with a month to spare.
const DefaultKeyRetention = 400 * 24 * time.Hour

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
	case p.KeyRetention < p.Retention:
		return fmt.Errorf("key_retention_days (%s) cannot be shorter than retention_days (%s): the key must outlive "+
			"the payload, or a resend after the purge is taken for a new event", days(p.KeyRetention), days(p.Retention))
	}
	for i, s := range p.VolatileFields {
		if _, err := strictjson.ParsePointer(s); err != nil || s == "" {
			return fmt.Errorf("volatile_fields[%d] must be a JSON pointer (RFC 6901) such as \"/createdAt\"", i)
		}
	}
	return nil
}

// Policies maps source names to policies, with a default for the rest.
type Policies struct {
	Default  Policy
	BySource map[string]Policy
	// Reconcilers are the configured reconcilers by name (the sources
	// file's reconcilers): the names a claim (Request.Reconciler) and a
	// source (Policy.Reconciler) may give, with the limits of their calls.
	Reconcilers map[string]ReconcilerPolicy
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
	out := Policies{Default: ps.Default.WithDefaults(), BySource: map[string]Policy{},
		Reconcilers: map[string]ReconcilerPolicy{}}
	for name, p := range ps.BySource {
		out.BySource[name] = inherit(p, out.Default)
	}
	for name, r := range ps.Reconcilers {
		out.Reconcilers[name] = r.WithDefaults()
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
	if p.KeyRetention == 0 {
		p.KeyRetention = max(d.KeyRetention, p.Retention)
	}
	if p.Reconciler == "" {
		p.Reconciler = d.Reconciler
	}
	return p
}

// days writes a retention in whole days when it is one, else as a duration.
func days(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10)
	}
	return d.String()
}

// Validate validates every policy, naming the source of the first bad one.
func (ps Policies) Validate() error {
	if err := ps.Default.Validate(); err != nil {
		return fmt.Errorf("default policy: %w", err)
	}
	if _, ok := ps.Reconcilers[ps.Default.Reconciler]; ps.Default.Reconciler != "" && !ok {
		return fmt.Errorf("default policy: reconciler must name a configured reconciler")
	}
	for name, p := range ps.BySource {
		if err := p.Validate(); err != nil {
			return fmt.Errorf("source %q: %w", name, err)
		}
		if _, ok := ps.Reconcilers[p.Reconciler]; p.Reconciler != "" && !ok {
			return fmt.Errorf("source %q: reconciler must name a configured reconciler", name)
		}
	}
	for name, r := range ps.Reconcilers {
		if err := r.Validate(); err != nil {
			return fmt.Errorf("reconciler %q: %w", name, err)
		}
	}
	return nil
}
