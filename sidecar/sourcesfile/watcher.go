// Package sourcesfile keeps a running claimd's source configuration in
// step with its sources file (CLAIMD_SOURCES_FILE): on SIGHUP at once, and
// by polling every CLAIMD_RELOAD_INTERVAL_SECONDS. A file is applied whole
// (ingest sources, trigger sources, reconcilers and the claim policies by
// source, to the inbox, the ledger and the reconcile runner) or not at
// all; see Watcher for the rules. The file's format is sources.Parse's.
package sourcesfile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"time"

	"github.com/rs/zerolog"

	"github.com/idempotent-claim/idempotent-claim/sidecar/backfill"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/metrics"
	"github.com/idempotent-claim/idempotent-claim/sidecar/reconcile"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// Options are what a Watcher reads and what a reload changes.
type Options struct {
	// Path is the sources file; "" when claimd runs without one (SIGHUP is
	// then logged, never fatal).
	Path string
	// Interval is the poll period; 0 polls never (SIGHUP only).
	Interval time.Duration
	Log      zerolog.Logger
	// Env is the claim policies from the environment: the default policy,
	// which the file's per-source policies complete.
	Env        claim.Policies
	Ledger     *claim.Ledger
	Inbox      *inbox.Inbox
	Metrics    *metrics.Metrics
	Reconciler *reconcile.Runner
	// Running is the configuration the process started with (the file as
	// config.Load read it).
	Running sources.Config
	// Getenv resolves the ${NAME} references of the file (os.Getenv when
	// nil).
	Getenv func(string) string
}

// Watcher applies the sources file whole or not at all.
//
//   - SIGHUP reads the file and applies it at once.
//   - The poll (every Interval) reads the file's bytes and compares their
//     SHA-256 with the running configuration's, so a change is seen even
//     when the modification time did not move. A changed file is acted on
//     only once two consecutive polls read the same bytes, so a file
//     rewritten in place (truncated, then written) is never applied half
//     way when its writer finishes within one interval. A change that
//     removes a source waits longer: RemovalPolls consecutive polls (30 s
//     at the default interval), since a file cut short where the part
//     written is itself valid looks exactly like a removal; so does one
//     that takes an ingest source's forward away (it becomes a trigger
//     source and its ingest door closes).
//   - A file that cannot be read, is empty, has no `sources:` mapping, does
//     not parse or does not validate (sources, claim policies, dispatch
//     queues) is refused: logged once per content as an error, counted in
//     claimd_sources_reloads_total{result="refused"}, and the running
//     configuration stays, ingest sources and claim policies alike. Zero
//     sources is a configuration only when written `sources: {}`.
//
// A source left out on purpose is applied and named in a warning: its
// pending dispatches wait until it is configured again (never
// dead-lettered for it), its records keep the lease policy, attempt cap and
// backoff they were created under, and its new claims take the default
// policy. A writer stalling longer than that at a valid cut cannot be told
// from an edit: write the file atomically (a new file renamed over it).
//
// A Watcher is used by one goroutine (Run's).
type Watcher struct {
	o Options
	// running is the applied configuration.
	running sources.Config
	// seen is the digest the last poll read and did not apply; polls is
	// how many consecutive polls read it.
	seen  string
	polls int
	// refused is the digest of the content refused last ("" when the
	// running configuration is the file's), so a refusal is logged once.
	refused string
}

// RemovalPolls is how many consecutive polls must read the same bytes
// before a change that removes a source is applied.
const RemovalPolls = 6

// New returns a Watcher of o.Path, running o.Running.
func New(o Options) *Watcher {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	return &Watcher{o: o, running: o.Running}
}

// Run reloads on each value of hup and polls every Interval until ctx
// ends. Without a sources file it only logs each SIGHUP.
func (w *Watcher) Run(ctx context.Context, hup <-chan os.Signal) {
	if w.o.Path == "" {
		// SIGHUP is still taken, never fatal: it says there is nothing to reload.
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				w.o.Log.Info().Msg("SIGHUP: no sources file to reload (CLAIMD_SOURCES_FILE is not set)")
			}
		}
	}
	var tick <-chan time.Time
	if w.o.Interval > 0 {
		t := time.NewTicker(w.o.Interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			w.Reload(ctx, "SIGHUP")
		case <-tick:
			w.Poll(ctx)
		}
	}
}

// read returns the file's bytes and a digest of what was read: the
// SHA-256 of the bytes, or the read error.
func (w *Watcher) read() ([]byte, string, error) {
	b, err := os.ReadFile(w.o.Path)
	if err != nil {
		return nil, "unreadable: " + err.Error(), fmt.Errorf("sources file: %w", err)
	}
	sum := sha256.Sum256(b)
	return b, hex.EncodeToString(sum[:]), nil
}

// Poll is one poll of the file (see Watcher): it applies a change once it
// is stable, or refuses it.
func (w *Watcher) Poll(ctx context.Context) {
	b, digest, err := w.read()
	switch {
	case digest == w.running.Digest:
		w.seen, w.polls = "", 0
		if w.refused != "" {
			w.refused = ""
			w.o.Metrics.SourcesFileCurrent()
			w.o.Log.Info().Msg("sources file is the running configuration again")
		}
		return
	case digest != w.seen:
		w.seen, w.polls = digest, 1 // changed since the last poll: maybe still being written
		return
	case digest == w.refused:
		return
	}
	w.polls++
	cfg, err := w.parse(b, err)
	if err == nil {
		if removed := append(w.removed(cfg), w.closed(cfg)...); len(removed) > 0 && w.polls < RemovalPolls {
			if w.polls == 2 {
				w.o.Log.Warn().Strs("removed_sources", removed).Int("after_polls", RemovalPolls).
					Msg("sources file removes sources: applied once it has read the same on consecutive polls (or at once on SIGHUP)")
			}
			return
		}
	}
	w.apply(ctx, cfg, digest, err, "poll")
}

// Reload reads the file and applies it at once, or refuses it; trigger
// names what asked (SIGHUP) in the log.
func (w *Watcher) Reload(ctx context.Context, trigger string) {
	b, digest, err := w.read()
	cfg, err := w.parse(b, err)
	w.apply(ctx, cfg, digest, err, trigger)
}

func (w *Watcher) parse(b []byte, readErr error) (sources.Config, error) {
	if readErr != nil {
		return sources.Config{}, readErr
	}
	return sources.Parse(b, w.o.Getenv)
}

// removed lists the sources of the running configuration that cfg does
// not name, sorted.
func (w *Watcher) removed(cfg sources.Config) []string {
	var out []string
	for name := range w.running.Policies {
		if _, kept := cfg.Policies[name]; !kept {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// closed lists the ingest sources of the running configuration that cfg
// keeps only as trigger sources (their forward is gone), sorted: their
// ingest door closes, as if they were removed, and a file cut short
// before a source's forward looks exactly like that.
func (w *Watcher) closed(cfg sources.Config) []string {
	var out []string
	for name := range w.running.Sources {
		if _, trigger := cfg.Triggers[name]; trigger {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// apply installs cfg, or refuses it when err (reading or parsing) is set
// or it does not install.
func (w *Watcher) apply(ctx context.Context, cfg sources.Config, digest string, err error, trigger string) {
	log := w.o.Log
	if err == nil {
		err = w.install(ctx, cfg)
	}
	if err != nil {
		w.refused = digest
		w.o.Metrics.SourcesReloaded(false)
		log.Error().Err(err).Str("trigger", trigger).Int("running_sources", len(w.running.Policies)).
			Msg("sources file not reloaded; keeping the running configuration")
		return
	}
	defaults := w.o.Env.WithDefaults().Default
	for _, name := range w.removed(cfg) {
		log.Warn().Str("source", name).Str("default_lease_policy", string(defaults.LeasePolicy)).
			Msg("source removed from the sources file: its new claims take the default policy (a running lease keeps the policy it was won under, a record its attempt cap and backoff), its pending dispatches wait until it is configured again")
	}
	for _, name := range w.closed(cfg) {
		log.Warn().Str("source", name).
			Msg("source has no forward any more: it is a trigger source now, POST /ingest/{source} answers for it as for an unknown source, and its pending dispatches wait until forward is configured again")
	}
	w.running, w.refused, w.seen, w.polls = cfg, "", "", 0
	w.o.Metrics.SourcesReloaded(true)
	Observe(w.o.Metrics, w.o.Inbox, cfg)
	log.Info().Str("trigger", trigger).Int("ingest_sources", len(cfg.Sources)).Int("trigger_sources", len(cfg.Triggers)).
		Int("sources", len(cfg.Policies)).
		Msg("sources file reloaded")
}

// install applies cfg to the inbox, the ledger and the reconcile runner,
// or changes none of them.
func (w *Watcher) install(ctx context.Context, cfg sources.Config) error {
	ps := w.o.Env
	ps.BySource = cfg.Policies
	ps.Reconcilers = cfg.ReconcilerPolicies()
	if err := ps.WithDefaults().Validate(); err != nil {
		return err
	}
	if err := sources.CheckBackfillKeyRetention(cfg, ps); err != nil {
		return err
	}
	if err := w.o.Inbox.Reload(ctx, cfg); err != nil {
		return err
	}
	if err := w.o.Ledger.SetPolicies(ps); err != nil {
		// Validated above; should it fail anyway, the inbox goes back too.
		if rerr := w.o.Inbox.Reload(ctx, w.running); rerr != nil {
			w.o.Log.Error().Err(rerr).Msg("restoring the running ingest configuration")
		}
		return err
	}
	w.o.Reconciler.SetReconcilers(cfg.Reconcilers)
	return nil
}

// Observe gives met the sources the running configuration cfg (run by in)
// has: the sources with backfill, by their interval (their series start at
// 0; see metrics.BackfillMetrics.Configure), and the reconcilers, sorted.
func Observe(met *metrics.Metrics, in *inbox.Inbox, cfg sources.Config) {
	intervals := map[string]time.Duration{}
	for _, src := range backfill.Sources(in) {
		intervals[src.Name] = src.Backfill.Interval
	}
	met.Backfill().Configure(intervals)
	met.Reconcile().Configure(slices.Sorted(maps.Keys(cfg.Reconcilers)))
}
