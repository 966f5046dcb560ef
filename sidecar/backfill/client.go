package backfill

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/netfail"
)

// Client makes a scan's calls to a provider's API: one doJSON for all,
// with the rate-limit rules of the package doc. A Client serves one scan
// (its wait budget is the scan's).
type Client struct {
	// HTTP sends the requests; nil means a client with a 30 s timeout.
	HTTP *http.Client
	// Sleep waits d or until ctx ends (its error then); nil waits on a
	// timer. Tests record the waits instead.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now is the clock (GitHub's x-ratelimit-reset, HTTP-date
	// Retry-After); nil means time.Now.
	Now func() time.Time
	// Jitter returns a uniform number in [0, 1); nil math/rand/v2.
	Jitter func() float64
	// MaxWait bounds the total wait; past it a call returns ErrRateLimited.
	MaxWait time.Duration
	// Log receives one line per failed call: status and the provider's
	// request id header, never a body or a credential.
	Log zerolog.Logger
	// Source names the source in logs and metrics.
	Source string
	// Obs counts calls by status class; nil none.
	Obs Observer
	// GitHub applies GitHub's rules: a 403 with x-ratelimit-remaining: 0
	// or Retry-After is a rate limit, a 404 a refused credential, and a
	// backoff waits at least a minute
	// (https://docs.github.com/rest/using-the-rest-api/rate-limits-for-the-rest-api).
	GitHub bool

	waited time.Duration
}

// Waited is the total rate-limit wait so far.
func (c *Client) Waited() time.Duration { return c.waited }

// maxBody bounds a provider answer read into memory.
const maxBody = 32 << 20

// maxTries bounds the tries of one call through rate limits.
const maxTries = 8

// ServerTries bounds the tries of one call that the provider answers 5xx
// or that fails in transport (timeout, connection refused or reset, an
// unreadable answer): tried again after a capped exponential backoff
// (serverBackoff), apart from the rate-limit budget (max_wait_seconds),
// then the scan ends error.
const ServerTries = 3

// Response is a 2xx answer: its headers and body.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Do sends the request newReq builds (again for each try) and returns a
// 2xx answer. Rate limits and 5xx are waited out and tried again within
// the budget; 401 (and, for GitHub, 404 and a 403 that is no rate limit;
// for others 403) is ErrCredentialRefused; any other non-2xx a
// *ProviderError. A 4xx body is never read.
func (c *Client) Do(ctx context.Context, newReq func() (*http.Request, error)) (Response, error) {
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	failures := 0 // 5xx and transport failures so far
	for try := 1; ; try++ {
		req, err := newReq()
		if err != nil {
			return Response{}, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				c.observe("error")
				return Response{}, ctx.Err()
			}
			if err := c.transportFailed(ctx, classify(err), try, &failures, "request"); err != nil {
				return Response{}, err
			}
			continue
		}
		status := resp.StatusCode
		if status >= 200 && status < 300 {
			body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
			resp.Body.Close()
			if err != nil {
				if ctx.Err() != nil {
					c.observe("error")
					return Response{}, ctx.Err()
				}
				f := classify(err)
				if f.class == "error" {
					f = failure{class: ClassUnreadable, text: "the provider's answer could not be read", retry: true}
				}
				if err := c.transportFailed(ctx, f, try, &failures, "answer"); err != nil {
					return Response{}, err
				}
				continue
			}
			c.observe("2xx")
			if len(body) > maxBody {
				return Response{}, providerFailure("the provider's answer is too large")
			}
			return Response{Status: status, Header: resp.Header, Body: body}, nil
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // never read into memory, logs or errors
		resp.Body.Close()
		limited := c.rateLimited(status, resp.Header)
		switch {
		case limited:
			c.observe("429")
		case status >= 500:
			c.observe("5xx")
		default:
			c.observe("4xx")
		}
		c.Log.Warn().Str("source", c.Source).Int("status", status).Str("request_id", requestID(resp.Header)).
			Int("try", try).Msg("backfill: provider answered non-2xx")
		switch {
		case limited:
			if resp.Header.Get("Stripe-Should-Retry") == "false" {
				return Response{}, &ProviderError{Status: status}
			}
			d, ok := c.rateLimitWait(resp.Header, try)
			if !ok || try >= maxTries {
				return Response{}, ErrRateLimited
			}
			if err := c.wait(ctx, d); err != nil {
				return Response{}, err
			}
		case status == http.StatusUnauthorized, status == http.StatusForbidden,
			c.GitHub && status == http.StatusNotFound:
			return Response{}, ErrCredentialRefused
		case status >= 500 && resp.Header.Get("Stripe-Should-Retry") != "false":
			failures++
			if failures >= ServerTries {
				return Response{}, &ProviderError{Status: status, Tries: failures}
			}
			if err := c.pause(ctx, serverBackoff(failures)); err != nil {
				return Response{}, err
			}
		default:
			return Response{}, &ProviderError{Status: status}
		}
	}
}

// serverBackoff is the wait before trying again after the n-th 5xx or
// transport failure of a call: exponential, 1 s · 2^(n−1), capped at 30 s
// (no jitter: the tries are few and the rate limit has its own rules).
func serverBackoff(n int) time.Duration {
	return min(30*time.Second, time.Second<<min(n-1, 5))
}

// transportFailed counts and logs the transport failure f of the
// request's try (what: "request" when it got no answer, "answer" when its
// body could not be read) and returns what ends the request — a
// TransportError once f may not be retried or ServerTries failed, or
// the context's error while pausing — or nil when the next try may go
// after serverBackoff. It is logged by its fixed text: the transport's
// error quotes the URL, which is not logged either.
func (c *Client) transportFailed(ctx context.Context, f failure, try int, failures *int, what string) error {
	c.observe(f.class)
	c.Log.Warn().Str("source", c.Source).Int("try", try).Str("class", f.class).Msg("backfill: provider " + what + " failed: " + f.text)
	*failures++
	if !f.retry || *failures >= ServerTries {
		return TransportError{Class: f.class, Text: f.text, Tries: *failures}
	}
	return c.pause(ctx, serverBackoff(*failures))
}

// pause waits d (with Sleep when it is set), or until ctx ends: its
// error then. wait charges a rate limit's wait to the budget first; 5xx
// and transport failures pause outside it (bounded by ServerTries).
func (c *Client) pause(ctx context.Context, d time.Duration) error {
	if c.Sleep != nil {
		return c.Sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (c *Client) observe(class string) {
	if c.Obs != nil {
		c.Obs.ProviderRequest(c.Source, class)
	}
}

// requestID is the provider's request id header, for support requests.
func requestID(h http.Header) string {
	for _, n := range []string{"Request-Id", "X-GitHub-Request-Id", "Square-Request-Id", "X-Request-Id"} {
		if v := h.Get(n); v != "" && len(v) <= 128 && !strings.ContainsAny(v, "\r\n") {
			return v
		}
	}
	return ""
}

// rateLimited reports whether a non-2xx answer is a rate limit: 429, or
// for GitHub a 403 with x-ratelimit-remaining: 0 or Retry-After.
func (c *Client) rateLimited(status int, h http.Header) bool {
	if status == http.StatusTooManyRequests {
		return true
	}
	return c.GitHub && status == http.StatusForbidden &&
		(h.Get("Retry-After") != "" || h.Get("X-Ratelimit-Remaining") == "0")
}

// rateLimitWait is how long to wait before try+1: Retry-After (seconds
// or an HTTP-date), else GitHub's x-ratelimit-reset when nothing remains,
// else the backoff. false: the budget does not allow it.
func (c *Client) rateLimitWait(h http.Header, try int) (time.Duration, bool) {
	d, ok := RetryAfter(h.Get("Retry-After"), c.now())
	if !ok && h.Get("X-Ratelimit-Remaining") == "0" {
		if reset, err := strconv.ParseInt(strings.TrimSpace(h.Get("X-Ratelimit-Reset")), 10, 64); err == nil {
			d, ok = max(0, time.Unix(reset, 0).Sub(c.now())), true
		}
	}
	if !ok {
		d = c.backoff(try)
		if c.GitHub {
			d = max(d, time.Minute)
		}
	}
	if c.waited+d > c.MaxWait {
		return 0, false
	}
	return d, true
}

// backoff is full-jitter exponential backoff: uniform in [0, min(cap,
// base·2^(try−1))], base 1 s, cap 60 s.
func (c *Client) backoff(try int) time.Duration {
	ceil := min(time.Minute, time.Second<<min(try-1, 10))
	j := rand.Float64
	if c.Jitter != nil {
		j = c.Jitter
	}
	return time.Duration(j() * float64(ceil))
}

func (c *Client) wait(ctx context.Context, d time.Duration) error {
	if c.waited+d > c.MaxWait {
		return ErrRateLimited
	}
	c.waited += d
	return c.pause(ctx, d)
}

func (c *Client) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// RetryAfter reads a Retry-After value (RFC 9110 §10.2.3): delay-seconds
// or an HTTP-date, relative to now. false for an empty or unreadable
// value; a date in the past is zero. A delay is capped at a day.
func RetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseUint(v, 10, 32); err == nil {
		return min(time.Duration(n)*time.Second, 24*time.Hour), true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return min(max(0, t.Sub(now)), 24*time.Hour), true
}

// Transport failure classes: the code_class of
// claimd_backfill_provider_requests_total for a call that got no HTTP
// answer, and TransportError.Class (netfail's classes).
const (
	// ClassTimeout: no answer in time (the client's 30 s timeout, or
	// the connection's deadline).
	ClassTimeout = netfail.Timeout
	// ClassUnreachable: the connection was refused or reset, or the host
	// or network is unreachable.
	ClassUnreachable = netfail.Unreachable
	// ClassDNS: the API's host name did not resolve.
	ClassDNS = netfail.DNS
	// ClassTLS: the TLS handshake failed (an untrusted or mismatched
	// certificate, a server that does not speak TLS).
	ClassTLS = netfail.TLS
	// ClassUnreadable: an answer came and could not be read (cut short,
	// not HTTP).
	ClassUnreadable = netfail.Unreadable
	// ClassError: any other transport failure.
	ClassError = netfail.Other
)

// TransportError is a call that got no readable HTTP answer: its class
// and a fixed text, never the transport's own message (which quotes the
// URL) nor anything the provider sent.
type TransportError struct {
	Class string
	Text  string
	// Tries is how many times the call was made.
	Tries int
}

func (e TransportError) Error() string {
	if e.Tries > 1 {
		return e.Text + " (" + strconv.Itoa(e.Tries) + " tries)"
	}
	return e.Text
}

// failure is a classified transport failure: its class, fixed text, and
// whether trying again may help (a timeout, a refused or reset
// connection may pass; a name that does not resolve or a certificate
// that is refused will not).
type failure struct {
	class, text string
	retry       bool
}

// failureTexts are the fixed texts of the transport failure classes.
var failureTexts = map[string]string{
	ClassDNS:         "the provider's API host name could not be resolved (DNS)",
	ClassTLS:         "the TLS handshake with the provider's API failed (its certificate was not trusted or it does not speak TLS)",
	ClassTimeout:     "the provider's API did not answer in time",
	ClassUnreachable: "the provider's API refused the connection or could not be reached",
	ClassUnreadable:  "the provider's answer could not be read",
	ClassError:       "the provider's API could not be reached",
}

// classify sorts a transport error into its class (netfail.Classify)
// with its fixed text.
func classify(err error) failure {
	class, retry := netfail.Classify(err)
	return failure{class: class, text: failureTexts[class], retry: retry}
}
