package sources

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// BackfillSpec is a source's gap detection (`backfill:` in the sources
// file): claimd lists the events the provider's own API holds for the
// account and finds those that never reached the ledger (package backfill).
//
//	backfill:
//	  credentials: ["${STRIPE_EVENTS_KEY}"]  # a read credential; ${VAR} only, never logged or echoed
//	  mode: auto            # report | fetch | redeliver | auto (default auto)
//	  interval_minutes: 15  # scheduled scans; 0: on demand only (default 15)
//	  window_hours: 72      # how far back a scan looks; ≤ the provider's own window (default: that window)
//	  grace_seconds: 600    # younger events are not judged yet: their delivery may be in flight (default 600)
//	  only_failed: false    # stripe: list only events with a failed delivery (delivery_success=false)
//	  max_pages: 100        # pages per scan (default 100)
//	  max_wait_seconds: 300 # total rate-limit wait per scan (default 300)
//	  base_url: ""          # the provider's API (default its public one); https, http only to a loopback host
//	  github: {hook: repos/OWNER/REPO/hooks/123}   # or orgs/ORG/hooks/123
//	  square: {version: "2025-01-23", location_ids: []}
//
// Providers: stripe (GET /v1/events, 30 days), github (the hook's
// deliveries, 3 days), square (SearchEvents, 28 days). Modes: report
// counts missed events only; fetch stores the provider's copy as an inbox
// event (origin backfill) and dispatches it; redeliver (github) asks the
// provider to deliver it again through the normal door; auto redelivers
// where the provider can, else fetches.
type BackfillSpec struct {
	Credentials     []string            `yaml:"credentials"`
	Mode            string              `yaml:"mode"`
	IntervalMinutes *int                `yaml:"interval_minutes"`
	WindowHours     int                 `yaml:"window_hours"`
	GraceSeconds    *int                `yaml:"grace_seconds"`
	OnlyFailed      bool                `yaml:"only_failed"`
	MaxPages        int                 `yaml:"max_pages"`
	MaxWaitSeconds  *int                `yaml:"max_wait_seconds"`
	BaseURL         string              `yaml:"base_url"`
	GitHub          *GitHubBackfillSpec `yaml:"github"`
	Square          *SquareBackfillSpec `yaml:"square"`
}

// GitHubBackfillSpec names the hook whose deliveries are listed.
type GitHubBackfillSpec struct {
	// Hook is "repos/OWNER/REPO/hooks/ID" or "orgs/ORG/hooks/ID".
	Hook string `yaml:"hook"`
}

// SquareBackfillSpec are Square's SearchEvents settings.
type SquareBackfillSpec struct {
	// Version is sent as Square-Version; default DefaultSquareVersion.
	Version     string   `yaml:"version"`
	LocationIDs []string `yaml:"location_ids"`
}

// BackfillMode is what a scan does with a missed event.
type BackfillMode string

// Backfill modes.
const (
	BackfillReport    BackfillMode = "report"
	BackfillFetch     BackfillMode = "fetch"
	BackfillRedeliver BackfillMode = "redeliver"
	BackfillAuto      BackfillMode = "auto"
)

// Backfill is a source's validated backfill configuration.
type Backfill struct {
	// Credentials are the read credentials, first one used (several
	// while one is rotated). Never logged or echoed (Secret).
	Credentials []Secret
	Mode        BackfillMode
	// Interval between scheduled scans; zero: on demand only.
	Interval time.Duration
	// Window is how far back a scan lists; Grace how young an event may
	// be and still not be judged.
	Window, Grace time.Duration
	OnlyFailed    bool
	MaxPages      int
	// MaxWait bounds a scan's total rate-limit wait.
	MaxWait time.Duration
	// BaseURL is the provider API's base, without a trailing slash.
	BaseURL string
	// GitHubHook is the hook path ("repos/o/r/hooks/1"), github only.
	GitHubHook string
	// SquareVersion and SquareLocationIDs: square only.
	SquareVersion     string
	SquareLocationIDs []string
}

// Secret is a credential: every way of printing or encoding it gives
// "[redacted]"; Reveal returns it for the one header that carries it.
type Secret struct{ v string }

// NewSecret wraps s.
func NewSecret(s string) Secret { return Secret{s} }

// Reveal returns the credential itself, for the request header that
// carries it, and for nothing else.
func (s Secret) Reveal() string { return s.v }

const redacted = "[redacted]"

func (Secret) String() string               { return redacted }
func (Secret) GoString() string             { return redacted }
func (Secret) Format(f fmt.State, _ rune)   { _, _ = f.Write([]byte(redacted)) }
func (Secret) MarshalJSON() ([]byte, error) { return json.Marshal(redacted) }
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }
func (Secret) LogValue() slog.Value         { return slog.StringValue(redacted) }

// Default API bases and Square version.
const (
	StripeAPIBase        = "https://api.stripe.com"
	GitHubAPIBase        = "https://api.github.com"
	SquareAPIBase        = "https://connect.squareup.com"
	DefaultSquareVersion = "2025-01-23"
)

// BackfillWindow is the longest window each provider's list API offers:
// Stripe's GET /v1/events returns 30 days
// (https://docs.stripe.com/api/events/list), GitHub redelivers (and
// keeps its delivery log for) the past 3 days
// (https://docs.github.com/webhooks/testing-and-troubleshooting-webhooks/redelivering-webhooks),
// Square's SearchEvents 28 days
// (https://developer.squareup.com/docs/events-api/overview).
var BackfillWindow = map[verify.Type]time.Duration{
	verify.TypeStripe: 30 * 24 * time.Hour,
	verify.TypeGitHub: 3 * 24 * time.Hour,
	verify.TypeSquare: 28 * 24 * time.Hour,
}

var (
	envOnly    = regexp.MustCompile(`^\$\{[A-Za-z_][A-Za-z0-9_]*\}$`)
	githubHook = regexp.MustCompile(`^(repos/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+|orgs/[A-Za-z0-9_.-]+)/hooks/[0-9]{1,19}$`)
)

// compile validates b for a source of provider t; errors name the field
// ("backfill.window_hours: …") and never quote a credential.
func (b *BackfillSpec) compile(t verify.Type, s SourceSpec, triggerOnly bool, getenv func(string) string) (*Backfill, error) {
	if b == nil {
		return nil, nil
	}
	fail := func(field, reason string, args ...any) error {
		return fmt.Errorf("backfill.%s: %s", field, fmt.Sprintf(reason, args...))
	}
	maxWin, ok := BackfillWindow[t]
	if !ok {
		return nil, fmt.Errorf("backfill: provider %s has no event list claimd can read (backfill supports github, square and stripe)", t)
	}
	out := &Backfill{Mode: BackfillMode(b.Mode), Window: maxWin, Grace: 10 * time.Minute, Interval: 15 * time.Minute,
		OnlyFailed: b.OnlyFailed, MaxPages: 100, MaxWait: 5 * time.Minute}
	if len(b.Credentials) == 0 {
		return nil, fail("credentials", "is required: a read credential of the provider's API, as ${VAR}")
	}
	for i, c := range b.Credentials {
		if !envOnly.MatchString(c) {
			return nil, fail(fmt.Sprintf("credentials[%d]", i), "must be one ${VAR} reference: a credential is never written in the sources file")
		}
		v, err := expand(c, getenv)
		if err != nil {
			return nil, fail(fmt.Sprintf("credentials[%d]", i), "%v", err)
		}
		if strings.TrimSpace(v) != v || strings.ContainsAny(v, "\r\n\x00") {
			return nil, fail(fmt.Sprintf("credentials[%d]", i), "the variable's value has whitespace or control characters")
		}
		out.Credentials = append(out.Credentials, NewSecret(v))
	}
	switch out.Mode {
	case "":
		out.Mode = BackfillAuto
	case BackfillReport, BackfillFetch, BackfillAuto:
	case BackfillRedeliver:
		if t != verify.TypeGitHub {
			return nil, fail("mode", "redeliver needs a provider that redelivers through its API (github); use fetch or auto")
		}
	default:
		return nil, fail("mode", "must be report, fetch, redeliver or auto")
	}
	if triggerOnly && (out.Mode == BackfillFetch || (out.Mode == BackfillAuto && t != verify.TypeGitHub)) {
		return nil, fail("mode", "%s stores and dispatches the provider's copy, but this source has no forward.url (a trigger source); "+
			"use report, or redeliver (github)", out.Mode)
	}
	if b.IntervalMinutes != nil {
		if *b.IntervalMinutes < 0 || *b.IntervalMinutes > 7*24*60 {
			return nil, fail("interval_minutes", "must be between 0 (on demand only) and %d", 7*24*60)
		}
		out.Interval = time.Duration(*b.IntervalMinutes) * time.Minute
	}
	if b.WindowHours != 0 {
		if b.WindowHours < 1 || time.Duration(b.WindowHours)*time.Hour > maxWin {
			return nil, fail("window_hours", "must be between 1 and %d (the provider's own window)", int(maxWin/time.Hour))
		}
		out.Window = time.Duration(b.WindowHours) * time.Hour
	}
	if b.GraceSeconds != nil {
		if *b.GraceSeconds < 0 || time.Duration(*b.GraceSeconds)*time.Second >= out.Window {
			return nil, fail("grace_seconds", "must be at least 0 and shorter than the window")
		}
		out.Grace = time.Duration(*b.GraceSeconds) * time.Second
	}
	if b.MaxPages != 0 {
		if b.MaxPages < 1 || b.MaxPages > 10000 {
			return nil, fail("max_pages", "must be between 1 and 10000")
		}
		out.MaxPages = b.MaxPages
	}
	if b.MaxWaitSeconds != nil {
		if *b.MaxWaitSeconds < 0 || *b.MaxWaitSeconds > 3600 {
			return nil, fail("max_wait_seconds", "must be between 0 and 3600")
		}
		out.MaxWait = time.Duration(*b.MaxWaitSeconds) * time.Second
	}
	if b.OnlyFailed && t != verify.TypeStripe {
		return nil, fail("only_failed", "is a Stripe list filter (delivery_success=false)")
	}
	if s.Key != nil && len(s.Key.Headers) > 0 && t != verify.TypeGitHub {
		return nil, errors.New("backfill: backfill derives keys from the event body; key.headers cannot be read from the provider's event list")
	}
	if kr := time.Duration(s.KeyRetentionDays) * 24 * time.Hour; s.KeyRetentionDays != 0 && kr <= out.Window {
		return nil, fail("window_hours", "the window (%d h) must be shorter than key_retention_days: a purged key would look missed",
			int(out.Window/time.Hour))
	}
	switch t {
	case verify.TypeStripe:
		out.BaseURL = StripeAPIBase
	case verify.TypeGitHub:
		out.BaseURL = GitHubAPIBase
		if b.GitHub == nil || b.GitHub.Hook == "" {
			return nil, fail("github.hook", "is required: repos/OWNER/REPO/hooks/ID or orgs/ORG/hooks/ID")
		}
		if !githubHook.MatchString(b.GitHub.Hook) {
			return nil, fail("github.hook", "must be repos/OWNER/REPO/hooks/ID or orgs/ORG/hooks/ID")
		}
		out.GitHubHook = b.GitHub.Hook
	case verify.TypeSquare:
		out.BaseURL = SquareAPIBase
		out.SquareVersion = DefaultSquareVersion
		if b.Square != nil {
			if b.Square.Version != "" {
				if !regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}$`).MatchString(b.Square.Version) {
					return nil, fail("square.version", "must be a Square API version, YYYY-MM-DD")
				}
				out.SquareVersion = b.Square.Version
			}
			for i, l := range b.Square.LocationIDs {
				if l == "" || len(l) > 64 || strings.ContainsAny(l, " \t\r\n\"") {
					return nil, fail(fmt.Sprintf("square.location_ids[%d]", i), "must be a location id")
				}
			}
			out.SquareLocationIDs = b.Square.LocationIDs
		}
	}
	if t != verify.TypeGitHub && b.GitHub != nil {
		return nil, fail("github", "is for a github source")
	}
	if t != verify.TypeSquare && b.Square != nil {
		return nil, fail("square", "is for a square source")
	}
	if b.BaseURL != "" {
		u, err := url.Parse(b.BaseURL)
		if err == nil && u.User != nil {
			// Credentials go in backfill.credentials (${VAR}), never in
			// the URL: the URL is logged and shown; it is not quoted here.
			return nil, fail("base_url", "must not carry user info (credentials in the URL, user:password@host): "+
				"give the API key in backfill.credentials")
		}
		if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || badPort(u) ||
			(u.Scheme != "https" && !(u.Scheme == "http" && loopbackHost(u.Hostname()))) {
			return nil, fail("base_url", "must be an absolute https URL (http only to a loopback host), without query, its port (if any) from 1 to 65535")
		}
		out.BaseURL = strings.TrimSuffix(b.BaseURL, "/")
	}
	return out, nil
}

func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// CheckBackfillKeyRetention reports the first source with a backfill block
// whose window reaches past the key retention of its records, as ps
// (the environment's default policy and the sources file's, defaults
// applied) resolves it for the source's scope, the policy the purge
// uses. A key purged within the window would look missed to a scan, which
// would then store and dispatch its event again: a second effect. So a
// sources file like that is refused whole, naming the source and the
// retention's origin. nil when every window fits.
func CheckBackfillKeyRetention(cfg Config, ps claim.Policies) error {
	raw := ps
	ps = ps.WithDefaults()
	names := make([]string, 0, len(cfg.Sources)+len(cfg.Triggers))
	seen := map[string]*Source{}
	for _, set := range []map[string]*Source{cfg.Sources, cfg.Triggers} {
		for name, src := range set {
			if src == nil || src.Backfill == nil || seen[name] != nil {
				continue
			}
			seen[name] = src
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		src := seen[name]
		kr := ps.For(src.Scope).KeyRetention
		if kr > src.Backfill.Window {
			continue
		}
		origin := "CLAIMD_KEY_RETENTION_DAYS"
		if p, own := raw.BySource[src.Scope]; own && p.KeyRetention != 0 {
			origin = "key_retention_days of " + strconv.Quote(src.Scope)
		}
		return fmt.Errorf("source %q: backfill.window_hours (%d h) must be shorter than the key retention of its records (%d h, from %s): a key purged within the window would look missed and its event would be dispatched again; shorten the window or keep keys longer",
			name, int(src.Backfill.Window/time.Hour), int(kr/time.Hour), origin)
	}
	return nil
}
