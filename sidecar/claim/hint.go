package claim

import (
	"context"
	"sync"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
)

// Retry hints: when a caller answered in_progress or retry_later should
// come back (retry_after_seconds, the Retry-After a workflow gives its
// provider).
//
// For retry_later it is the record's next_attempt_at. For in_progress it is
// how long the holder will probably still need, from how long the effects
// of the same (tenant, source, action) took so far: the 90th percentile of
// the claim-to-complete times of its latest RetryHintSample completions.
// The remaining lease, the old hint, says only when the holder is given up
// on (300 s by default) although effects usually finish in well under a
// second; a provider told to come back then has waited minutes for nothing.
const (
	// RetryHintSample is how many of the latest completions of a (tenant,
	// source, action) the in_progress hint is computed from.
	RetryHintSample = 50
	// RetryHintQuantile is the share of those completions that finished
	// within the estimate.
	RetryHintQuantile = 0.9
	// RetryHintNoHistory is the in_progress hint while the (tenant,
	// source, action) has no completion yet.
	RetryHintNoHistory = 5 * time.Second
	// MinRetryHint is the smallest hint of either outcome.
	MinRetryHint = time.Second
	// retryHintTTL is how long one replica reuses an estimate before it
	// reads the completions again.
	retryHintTTL = 10 * time.Second
	// retryHintErrorTTL is how long a failed read leaves the estimate at
	// RetryHintNoHistory before the next try.
	retryHintErrorTTL = time.Second
	// retryHintMaxEntries bounds the cache; past it, expired entries are
	// dropped, and when none is, the whole cache.
	retryHintMaxEntries = 10000
)

// RetryAfter returns when the caller of the claim answered res should try
// again, and false for outcomes that carry no hint (every one but
// InProgress and RetryLater). It is never below MinRetryHint.
//
//   - RetryLater: until the record's next attempt is due.
//   - InProgress: the rest of a typical run of the holder: the estimate
//     (RetryHintQuantile of the latest RetryHintSample claim-to-complete
//     times of the record's tenant, source and action; RetryHintNoHistory
//     before the first completion) minus the time since the holder's claim.
//     Once the holder has run longer than the estimate, the estimate again.
//     Never beyond the holder's lease: then the key is claimable anyway.
//
// The estimate is read from the database at most every 10 seconds per
// (tenant, source, action) and replica; concurrent answers share one read.
// A failed read gives RetryAfter's caller RetryHintNoHistory, never an error.
func (l *Ledger) RetryAfter(ctx context.Context, res Result, now time.Time) (time.Duration, bool) {
	switch res.Outcome {
	case RetryLater:
		if res.NextAttemptAt == nil {
			return MinRetryHint, true
		}
		return max(MinRetryHint, res.NextAttemptAt.Sub(now)), true
	case InProgress:
	default:
		return 0, false
	}
	hint := RetryHintNoHistory
	if est := l.hints.estimate(ctx, l, hintKey{res.Tenant, res.Source, res.Action}); est > 0 {
		hint = est
		if res.ClaimedAt != nil {
			if rest := est - now.Sub(*res.ClaimedAt); rest >= MinRetryHint {
				hint = rest
			}
		}
	}
	if res.LeaseUntil != nil {
		hint = min(hint, res.LeaseUntil.Sub(now))
	}
	return max(MinRetryHint, hint), true
}

type hintKey struct{ tenant, source, action string }

// retryHints caches the claim-to-complete estimate per (tenant, source,
// action). The zero value is ready for use.
type retryHints struct {
	mu      sync.Mutex
	entries map[hintKey]*hintEntry
}

type hintEntry struct {
	// ready is closed once est and expires are set.
	ready   chan struct{}
	est     time.Duration // 0: no completion known (or the read failed)
	expires time.Time
}

// estimate returns the cached estimate of k, reading it when it is missing
// or expired; callers that find a read under way wait for it (or for ctx).
func (h *retryHints) estimate(ctx context.Context, l *Ledger, k hintKey) time.Duration {
	now := time.Now()
	h.mu.Lock()
	if h.entries == nil {
		h.entries = map[hintKey]*hintEntry{}
	}
	e := h.entries[k]
	if e != nil {
		select {
		case <-e.ready:
			if now.Before(e.expires) {
				h.mu.Unlock()
				return e.est
			}
		default: // a read is under way
			h.mu.Unlock()
			select {
			case <-e.ready:
				return e.est
			case <-ctx.Done():
				return 0
			}
		}
	}
	if len(h.entries) >= retryHintMaxEntries {
		h.evict(now)
	}
	e = &hintEntry{ready: make(chan struct{})}
	h.entries[k] = e
	h.mu.Unlock()

	r, err := queries.RetryHint(ctx, l.pool, dbsqlc.RetryHintParams{Tenant: k.tenant, Source: k.source, Action: k.action,
		MaxEntries: RetryHintSample, Quantile: RetryHintQuantile})
	ttl := retryHintTTL
	switch {
	case err != nil:
		ttl = retryHintErrorTTL
	case r.Completions > 0:
		e.est = max(time.Duration(r.Seconds*float64(time.Second)), time.Millisecond)
	}
	e.expires = time.Now().Add(ttl)
	close(e.ready)
	return e.est
}

// evict drops expired entries, or every entry when none has expired. The
// caller holds h.mu.
func (h *retryHints) evict(now time.Time) {
	for k, e := range h.entries {
		select {
		case <-e.ready:
			if !now.Before(e.expires) {
				delete(h.entries, k)
			}
		default:
		}
	}
	if len(h.entries) >= retryHintMaxEntries {
		clear(h.entries)
	}
}
