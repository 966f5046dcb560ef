package console_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/httpapi"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// Static keys of every env.
const (
	tenantA  = "tenant-a"
	tenantB  = "tenant-b"
	keyA     = "key-tenant-a-0123456789"
	keyB     = "key-tenant-b-0123456789"
	keyAdmin = "key-admin-0123456789abc"
	tokKey   = "tok-secret-0123456789"
)

// sourcesFile: one token source of tenant A, never dispatched (no workers).
const sourcesFile = `
sources:
  tok:
    tenant: tenant-a
    provider: token
    secrets: ["` + tokKey + `"]
    options: {header: X-Api-Key, key: {id_pointers: ["/id"]}}
    forward: {url: "http://n8n.invalid/webhook/tok"}
`

type env struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	ledger *claim.Ledger
	keys   *auth.Keys
	base   string
	logs   *lockedBuffer
}

type options struct {
	failureLimit int
	secure       bool
	// sources replaces the sources file (sourcesFile) when not "".
	sources string
}

func setup(t *testing.T, o options) *env {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 8 })
	file := sourcesFile
	if o.sources != "" {
		file = o.sources
	}
	cfg, err := sources.Parse([]byte(file), func(string) string { return "" })
	require.NoError(t, err)
	ledger, err := claim.New(pool, claim.Config{Jitter: func() float64 { return 1 }, Policies: claim.Policies{BySource: cfg.Policies,
		Reconcilers: cfg.ReconcilerPolicies()}})
	require.NoError(t, err)
	logs := &lockedBuffer{}
	log := zerolog.New(logs)
	in, err := inbox.New(inbox.Options{Pool: pool, Ledger: ledger, Config: cfg, Logger: log})
	require.NoError(t, err)
	aopts := auth.DefaultOptions()
	aopts.CacheTTL = time.Minute
	aopts.FailureLimit = o.failureLimit
	keys := auth.New(pool, []auth.StaticKey{{Tenant: tenantA, Key: keyA}, {Tenant: tenantB, Key: keyB},
		{Tenant: "*", Key: keyAdmin, Admin: true}}, aopts)
	srv := httpapi.New(httpapi.Config{Ledger: ledger, Keys: keys, Logger: log, Inbox: in,
		Console: &httpapi.ConsoleConfig{Sessions: auth.NewSessions(pool, keys, 0, 0), SecureCookie: o.secure}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.App().Listener(ln)
	}()
	t.Cleanup(func() {
		_ = srv.App().Shutdown()
		_ = ln.Close()
		<-served
	})
	return &env{ctx: ctx, pool: pool, ledger: ledger, keys: keys, base: "http://" + ln.Addr().String(), logs: logs}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// browser is one client with its cookies; redirects are not followed.
type browser struct {
	t       *testing.T
	e       *env
	cookies map[string]string
	// pages is every page body it read, for the checks that no secret is
	// ever shown.
	pages []string
	// header is added to every request.
	header map[string]string
}

func (e *env) browser(t *testing.T) *browser {
	return &browser{t: t, e: e, cookies: map[string]string{}, header: map[string]string{}}
}

type reply struct {
	status int
	header http.Header
	body   string
}

func (r reply) location() string { return r.header.Get("Location") }

// setCookie returns the Set-Cookie line for name, or "".
func (r reply) setCookie(name string) string {
	for _, c := range r.header.Values("Set-Cookie") {
		if strings.HasPrefix(c, name+"=") {
			return c
		}
	}
	return ""
}

var client = &http.Client{Timeout: 20 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func (b *browser) do(method, path string, form url.Values) reply {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.e.base+path, body)
	require.NoError(b.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range b.header {
		req.Header.Set(k, v)
	}
	for k, v := range b.cookies {
		req.AddCookie(&http.Cookie{Name: k, Value: v})
	}
	resp, err := client.Do(req)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(b.t, err)
	for _, c := range resp.Cookies() {
		if c.MaxAge < 0 || c.Value == "" {
			delete(b.cookies, c.Name)
		} else {
			b.cookies[c.Name] = c.Value
		}
	}
	r := reply{status: resp.StatusCode, header: resp.Header, body: string(raw)}
	b.pages = append(b.pages, r.body)
	return r
}

func (b *browser) get(path string) reply { b.t.Helper(); return b.do(http.MethodGet, path, nil) }

func (b *browser) post(path string, form url.Values) reply {
	b.t.Helper()
	return b.do(http.MethodPost, path, form)
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// withoutToken is page less the value of its forms' CSRF token: random
// base64url characters, which may hold any short text a test looks for.
func withoutToken(page string) string {
	return csrfRe.ReplaceAllString(page, `name="csrf" value=""`)
}

// csrf returns the form token of a page.
func csrf(t *testing.T, page string) string {
	t.Helper()
	m := csrfRe.FindStringSubmatch(page)
	require.NotNil(t, m, "no csrf field in the page")
	return m[1]
}

// signIn signs b in with key and returns the CSRF token of its session.
func (b *browser) signIn(key string) string {
	b.t.Helper()
	r := b.signInReply(key)
	require.Equal(b.t, http.StatusSeeOther, r.status, r.body)
	require.Equal(b.t, "/ui/", r.location())
	home := b.get("/ui/")
	require.Equal(b.t, http.StatusOK, home.status)
	return csrf(b.t, home.body)
}

func (b *browser) signInReply(key string) reply {
	b.t.Helper()
	page := b.get("/ui/signin")
	require.Equal(b.t, http.StatusOK, page.status)
	return b.post("/ui/signin", url.Values{"api_key": {key}, "csrf": {csrf(b.t, page.body)}})
}

// claim makes a record of tenant in processing and returns it.
func (e *env) claim(t *testing.T, tenant, source, event string) claim.Result {
	t.Helper()
	r, err := e.ledger.Claim(e.ctx, claim.Request{Tenant: tenant, Key: claim.Key{Source: source, EventID: event},
		PayloadHash: strings.Repeat("ab", 32)})
	require.NoError(t, err)
	require.Equal(t, claim.Won, r.Outcome)
	return r
}

// testids returns the values of data-testid="name" elements' text, in order.
func texts(page, testid string) []string {
	re := regexp.MustCompile(`data-testid="` + regexp.QuoteMeta(testid) + `"[^>]*>([^<]*)<`)
	var out []string
	for _, m := range re.FindAllStringSubmatch(page, -1) {
		out = append(out, strings.TrimSpace(m[1]))
	}
	return out
}
