package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// config is the command's flags, checked.
type config struct {
	provider    string
	listen      string
	allowRemote bool
	// key is the read key (Stripe), token (GitHub) or access token
	// (Square) the API accepts as a Bearer token; "" generates one.
	key string
	// events are seeded, missed of them never delivered.
	events, missed int
	// age is how long ago the newest seeded event happened; the others
	// are a minute apart before it.
	age time.Duration
	// hook is the GitHub hook path (repos/OWNER/REPO/hooks/ID).
	hook string
	// deliver is claimd's ingest URL; "" delivers nothing.
	deliver string
	// secret signs the deliveries (never printed).
	secret string
	// notificationURL is what Square signs (the source's
	// options.notification_url).
	notificationURL string
	squareVersion   string
}

var errHelp = errors.New("help")

const usageText = `standin: serve a provider's event-list API on this machine, seeded with events
of which some were "never delivered", and deliver the others to claimd, so that
a backfill scan can find and recover the missed ones.

  standin -provider stripe|github|square [flags]

It prints the API's URL (the source's backfill.base_url) and, when it made one
up, the read key it accepts; then it delivers (with -deliver) and serves until
interrupted. POST /forward on the same address answers 200 and prints the event
claimd dispatched: a stand-in for n8n, usable as the source's forward.url.

A toy for trying claimd out: it accepts the one key it was given or generated,
keeps everything in memory, and listens on a loopback address only unless
-allow-remote. The webhook secret is never printed (but a flag value is visible
to other users of this machine in the process list).

Example (sidecar/docs/ingest.md#try-backfill-on-your-machine):

  standin -provider stripe -listen 127.0.0.1:12111 -key "$STRIPE_EVENTS_KEY" \
    -secret "$STRIPE_WEBHOOK_SECRET" -deliver http://127.0.0.1:8080/ingest/stripe

Flags:
`

var hookPath = regexp.MustCompile(`^(repos/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+|orgs/[A-Za-z0-9_.-]+)/hooks/[0-9]{1,19}$`)

// parseFlags parses and checks args; errors name the flag, never a
// secret's value. -h prints the usage to out and returns errHelp.
func parseFlags(args []string, out io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("standin", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprint(out, usageText)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.provider, "provider", "", "the provider whose API to serve: stripe, github or square (required)")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:0", "address to listen on (port 0: any free port; the URL is printed)")
	fs.BoolVar(&c.allowRemote, "allow-remote", false, "allow a non-loopback -listen address (anyone who can reach it reads the events)")
	fs.StringVar(&c.key, "key", "", "the read key / token the API accepts as Authorization: Bearer (default: generated and printed)")
	fs.IntVar(&c.events, "events", 5, "events to seed (1-1000)")
	fs.IntVar(&c.missed, "missed", 2, "how many of them were never delivered (0 to -events)")
	fs.DurationVar(&c.age, "age", 15*time.Minute, "how long ago the newest event happened, the others a minute apart before it;\n"+
		"older than the source's backfill.grace_seconds (default 600 s) for a scan to judge them (at most 48h)")
	fs.StringVar(&c.hook, "hook", "repos/acme/shop/hooks/1", "github: the hook whose deliveries are listed (the source's backfill.github.hook)")
	fs.StringVar(&c.deliver, "deliver", "", "claimd's ingest URL (http://HOST:PORT/ingest/SOURCE): post the delivered events there, signed with -secret;\n"+
		"github: a redelivery a scan asks for goes there too")
	fs.StringVar(&c.secret, "secret", "", "the webhook secret (stripe, github) or signature key (square) deliveries are signed with: the source's secrets")
	fs.StringVar(&c.notificationURL, "notification-url", "", "square: the notification URL signed with each delivery, the source's options.notification_url (required with -deliver)")
	fs.StringVar(&c.squareVersion, "square-version", sources.DefaultSquareVersion, "square: the Square-Version the API expects (the source's backfill.square.version)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, errHelp
		}
		return c, err
	}
	if fs.NArg() > 0 {
		return c, errors.New("unexpected argument: every setting is a flag (-name value)")
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch c.provider {
	case "stripe", "github", "square":
	case "":
		return c, errors.New("-provider is required: stripe, github or square")
	default:
		return c, errors.New("-provider must be stripe, github or square")
	}
	if c.events < 1 || c.events > 1000 {
		return c, errors.New("-events must be between 1 and 1000")
	}
	if c.missed < 0 || c.missed > c.events {
		return c, errors.New("-missed must be between 0 and -events")
	}
	if c.age < 0 || c.age > 48*time.Hour {
		return c, errors.New("-age must be between 0 and 48h")
	}
	if c.key != "" && (strings.TrimSpace(c.key) != c.key || strings.ContainsAny(c.key, " \t\r\n\x00")) {
		return c, errors.New("-key must not hold whitespace or control characters")
	}
	if err := checkListen(c.listen, c.allowRemote); err != nil {
		return c, err
	}
	if c.provider != "github" && set["hook"] {
		return c, errors.New("-hook is for -provider github")
	}
	if c.provider == "github" && !hookPath.MatchString(c.hook) {
		return c, errors.New("-hook must be repos/OWNER/REPO/hooks/ID or orgs/ORG/hooks/ID")
	}
	if c.provider != "square" && (set["notification-url"] || set["square-version"]) {
		return c, errors.New("-notification-url and -square-version are for -provider square")
	}
	if !regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}$`).MatchString(c.squareVersion) {
		return c, errors.New("-square-version must be YYYY-MM-DD")
	}
	if c.deliver != "" {
		u, err := url.Parse(c.deliver)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return c, errors.New("-deliver must be an absolute http(s) URL, claimd's ingest URL: http://HOST:PORT/ingest/SOURCE")
		}
		if c.secret == "" {
			return c, errors.New("-secret is required with -deliver: the source's webhook secret, to sign the deliveries")
		}
		if c.provider == "square" && c.notificationURL == "" {
			return c, errors.New("-notification-url is required with -deliver for square: Square signs it; give the source's options.notification_url")
		}
	} else if c.secret != "" {
		return c, errors.New("-secret signs deliveries: it needs -deliver")
	}
	if c.notificationURL != "" {
		u, err := url.Parse(c.notificationURL)
		if err != nil || !u.IsAbs() || u.Host == "" {
			return c, errors.New("-notification-url must be an absolute URL")
		}
	}
	return c, nil
}

// checkListen refuses a listen address that is not a loopback one unless
// allowRemote.
func checkListen(addr string, allowRemote bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("-listen must be HOST:PORT, for example 127.0.0.1:0")
	}
	if allowRemote || isLoopback(host) {
		return nil
	}
	return errors.New("-listen is not a loopback address: the stand-in accepts any request with its key; " +
		"use 127.0.0.1:PORT, or add -allow-remote")
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
