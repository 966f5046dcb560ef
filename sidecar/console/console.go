// Package console is claimd's web console, a transport beside httpapi over
// the same ledger and inbox calls: server-rendered HTML (html/template,
// embedded with the binary, no JavaScript), mounted by httpapi under /ui.
//
// Contract:
//
//   - Sign-in is with an API key of one tenant (never an admin key). The
//     key goes through auth.Keys.Authenticate like a /v1 key, so a wrong
//     key costs what it costs there and counts towards the same per-address
//     failure limit (429 past it). The browser gets a random session token
//     in a cookie (HttpOnly, SameSite=Strict, Path=/ui, Secure when
//     SecureCookie is set or the connection is TLS); only its SHA-256 is
//     stored (auth.Sessions). Every request reads the session and checks
//     its key in one statement: sign-out, expiry and a revoked key end it
//     at once, on every replica.
//   - Every page shows one tenant's data, the session's; a record of
//     another tenant is 404 like a missing one. No page shows a claim
//     token, an API key or a stored payload: record pages show hashes,
//     result references and the delivery log.
//   - Every POST carries the session's CSRF token (the sign-in form a
//     token of its own, double-submitted in a cookie), compared in
//     constant time, and is refused when the browser says it comes from
//     another site (Sec-Fetch-Site, Origin). Pages are sent with a strict
//     Content-Security-Policy (no script at all), frame-ancestors 'none',
//     Referrer-Policy same-origin (no referrer leaves the console; a
//     browser sends its real Origin on the console's own forms) and
//     Cache-Control no-store.
//   - Actions (resolve, release to unknown, replay a dispatch) need a
//     confirmation (a checkbox) and a note; each writes a delivery-log
//     entry with the note and the key's prefix as its actor.
//   - No answer quotes what the caller sent: errors are fixed texts naming
//     the field.
package console

import (
	"context"
	"crypto/subtle"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/rs/zerolog"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/httpquery"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

// Prefix is the path the console is mounted under.
const Prefix = "/ui"

// BodyLimit is the largest form body a console request may send, in bytes.
const BodyLimit = 16 << 10

// Cookie names.
const (
	// SessionCookie holds the session token.
	SessionCookie = "claimd_session"
	// SigninCookie holds the sign-in form's CSRF token (login CSRF).
	SigninCookie = "claimd_signin"
)

// Config is what the console needs. Ledger, Keys, Sessions and Status are
// required; Inbox may be nil (no replay).
type Config struct {
	Ledger   *claim.Ledger
	Inbox    *inbox.Inbox
	Keys     *auth.Keys
	Sessions *auth.Sessions
	Logger   zerolog.Logger
	// RequestTimeout bounds the database work of one request.
	RequestTimeout time.Duration
	// SecureCookie marks the session cookie Secure on every answer (set it
	// when the console is reached over HTTPS through a proxy that
	// terminates TLS: claimd serves plain HTTP and trusts no forwarded
	// header). A TLS connection to claimd itself gets Secure anyway.
	SecureCookie bool
	// Status is the transport's one mapping from error codes to HTTP
	// statuses.
	Status func(apperr.Code) int
}

// Console serves the pages.
type Console struct {
	cfg   Config
	pages map[string]*template.Template
}

// New parses the embedded templates (a parse error is a bug: it panics).
func New(cfg Config) *Console {
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	c := &Console{cfg: cfg, pages: map[string]*template.Template{}}
	base := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/saved.html"))
	for _, page := range []string{"signin", "overview", "list", "record", "confirm", "error", "source"} {
		t := template.Must(template.Must(base.Clone()).ParseFS(templateFS, "templates/"+page+".html"))
		c.pages[page] = t
	}
	return c
}

// Mount registers the console's routes on r, the group of Prefix.
func (c *Console) Mount(r fiber.Router) {
	r.Use(c.headers)
	assets, _ := fs.Sub(assetFS, "assets")
	r.Get("/assets/:name", func(ctx *fiber.Ctx) error {
		b, err := fs.ReadFile(assets, ctx.Params("name"))
		if err != nil || !strings.HasSuffix(ctx.Params("name"), ".css") {
			return c.fail(ctx, apperr.New(apperr.NotFound, "no such page"))
		}
		ctx.Set(fiber.HeaderCacheControl, "public, max-age=300")
		ctx.Set(fiber.HeaderContentType, "text/css; charset=utf-8")
		return ctx.Send(b)
	})
	r.Get("/signin", c.handle(c.signinPage))
	r.Post("/signin", c.handle(c.signin))
	r.Post("/signout", c.handle(c.signout))
	r.Get("/", c.session(c.overview))
	r.Get("/claims", c.session(c.list))
	r.Get("/claims/:id", c.session(c.record))
	r.Get("/sources/:source", c.session(c.sourcePage))
	r.Post("/sources/:source/backfill", c.session(c.backfillScan))
	r.Get("/claims/:id/:action", c.session(c.confirmPage))
	r.Post("/claims/:id/:action", c.session(c.act))
	r.Use(func(ctx *fiber.Ctx) error { return c.fail(ctx, apperr.New(apperr.NotFound, "no such page")) })
}

// contentSecurityPolicy allows the console's own stylesheet, its own form
// targets and nothing else: no script, no frames, no other origin.
const contentSecurityPolicy = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; " +
	"frame-ancestors 'none'; base-uri 'none'"

func (c *Console) headers(ctx *fiber.Ctx) error {
	ctx.Set("Content-Security-Policy", contentSecurityPolicy)
	ctx.Set(fiber.HeaderXFrameOptions, "DENY")
	ctx.Set(fiber.HeaderReferrerPolicy, "same-origin")
	ctx.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	ctx.Set(fiber.HeaderCacheControl, "no-store")
	return ctx.Next()
}

// page is what every template gets.
type page struct {
	Title string
	// Session is nil on the sign-in and error pages of a signed-out user.
	Session *auth.Session
	// CSRF is the token of the page's forms.
	CSRF string
	// Nav names the active navigation entry.
	Nav  string
	Data any
}

func (c *Console) render(ctx *fiber.Ctx, status int, name string, p page) error {
	var b strings.Builder
	if err := c.pages[name].ExecuteTemplate(&b, "layout.html", p); err != nil {
		c.cfg.Logger.Error().Err(err).Str("page", name).Msg("console: render")
		ctx.Set(fiber.HeaderContentType, fiber.MIMETextPlainCharsetUTF8)
		return ctx.Status(fiber.StatusInternalServerError).SendString("internal error")
	}
	ctx.Set(fiber.HeaderContentType, fiber.MIMETextHTMLCharsetUTF8)
	return ctx.Status(status).SendString(b.String())
}

// errorView is the error page's data.
type errorView struct {
	Status  int
	Code    apperr.Code
	Message string
	Field   string
	Back    string
}

// fail renders err as the error page: a fixed text per code, never the
// caller's input. Invalid and InvalidState carry the ledger's own message
// (field names, limits, the record's state), and so does Malformed naming
// a field (its fixed rule); internal errors are logged
// and answered with the request id.
func (c *Console) fail(ctx *fiber.Ctx, err error) error {
	e := apperr.As(err)
	if e == nil || e.Code == apperr.Internal {
		c.cfg.Logger.Error().Err(err).Str("request_id", ctx.GetRespHeader(fiber.HeaderXRequestID)).Msg("internal error")
		e = &apperr.Error{Code: apperr.Internal}
	}
	v := errorView{Status: c.cfg.Status(e.Code), Code: e.Code, Field: e.Field, Back: Prefix + "/"}
	if v.Status == 0 {
		v.Status = fiber.StatusInternalServerError
	}
	switch e.Code {
	case apperr.Invalid, apperr.InvalidState:
		v.Message = e.Message
	case apperr.NotFound:
		v.Message = "There is no such record or page."
	case apperr.Unauthorized:
		v.Message = "Not signed in, or the API key is wrong, unknown or revoked."
		v.Back = Prefix + "/signin"
	case apperr.RateLimited:
		secs := max(1, int64((e.RetryAfter+time.Second-1)/time.Second))
		ctx.Set(fiber.HeaderRetryAfter, strconv.FormatInt(secs, 10))
		v.Message = "Too many failed sign-ins from this address; retry in " + strconv.FormatInt(secs, 10) + " s."
		v.Back = Prefix + "/signin"
	case apperr.Forbidden:
		v.Message = "This form was not sent from this console page, or its token has expired. Reload the page and try again."
	case apperr.Unavailable:
		ctx.Set(fiber.HeaderRetryAfter, "1")
		c.cfg.Logger.Warn().Err(e.Err).Str("reason", e.Message).Msg("console: dependency unavailable")
		v.Message = "The database cannot be reached just now; retry."
	case apperr.Malformed, apperr.TooLarge:
		v.Message = "The form could not be read."
		if e.Code == apperr.Malformed && e.Field != "" {
			// A field's fixed rule (a query parameter or form field given
			// twice, a cursor that is none), quoting nothing sent.
			v.Message = e.Message
		}
	default:
		v.Message = "Internal error; see the sidecar log for request id " + ctx.GetRespHeader(fiber.HeaderXRequestID) + "."
	}
	sess, _ := ctx.Locals(sessionKey).(*auth.Session)
	p := page{Title: "Error", Session: sess, Data: v}
	if sess != nil {
		p.CSRF = sess.CSRF
	}
	return c.render(ctx, v.Status, "error", p)
}

type ctxKey int

const sessionKey ctxKey = iota

// handle runs h and renders its error.
func (c *Console) handle(h fiber.Handler) fiber.Handler {
	return func(ctx *fiber.Ctx) error {
		if err := h(ctx); err != nil {
			return c.fail(ctx, err)
		}
		return nil
	}
}

// session runs h for a signed-in request: the session is read (and its
// key checked) first; a GET without one is sent to the sign-in page, a
// POST refused. A POST must pass the CSRF checks.
func (c *Console) session(h fiber.Handler) fiber.Handler {
	return c.handle(func(ctx *fiber.Ctx) error {
		dctx, cancel := c.ctx(ctx)
		defer cancel()
		sess, err := c.cfg.Sessions.Lookup(dctx, ctx.Cookies(SessionCookie))
		if errors.Is(err, auth.ErrNoSession) {
			if ctx.Cookies(SessionCookie) != "" {
				c.clearCookie(ctx, SessionCookie)
			}
			if ctx.Method() == fiber.MethodGet {
				return ctx.Redirect(Prefix+"/signin", fiber.StatusSeeOther)
			}
			return err
		}
		if err != nil {
			return err
		}
		ctx.Locals(sessionKey, &sess)
		if ctx.Method() == fiber.MethodPost {
			form, err := checkPost(ctx, sess.CSRF)
			if err != nil {
				return err
			}
			ctx.Locals(formKey, form)
		}
		return h(ctx)
	})
}

const formKey ctxKey = 1

func formOf(ctx *fiber.Ctx) url.Values {
	f, _ := ctx.Locals(formKey).(url.Values)
	return f
}

func sessionOf(ctx *fiber.Ctx) *auth.Session {
	s, _ := ctx.Locals(sessionKey).(*auth.Session)
	return s
}

var errCSRF = apperr.New(apperr.Forbidden, "the form's token is missing or wrong, or it was sent from another site")

func sameToken(got, want string) bool {
	return got != "" && want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// checkOrigin refuses a POST the browser says comes from another site.
// Sec-Fetch-Site, when the browser sends it (every current one does), is
// its word: anything but same-origin is refused. Origin, when sent, must
// name the request's Host; "null" (a browser hides the origin, e.g. under
// a no-referrer policy from an older page of ours) passes only with
// Sec-Fetch-Site same-origin. Requests with neither header (not a
// browser, or a very old one) are left to the CSRF token, which every
// POST needs anyway.
func checkOrigin(ctx *fiber.Ctx) error {
	site := ctx.Get("Sec-Fetch-Site")
	if site != "" && site != "same-origin" {
		return errCSRF
	}
	origin := ctx.Get(fiber.HeaderOrigin)
	switch origin {
	case "":
	case "null":
		if site != "same-origin" {
			return errCSRF
		}
	default:
		u, err := url.Parse(origin)
		if err != nil || u.Host == "" || !strings.EqualFold(u.Host, string(ctx.Request().Host())) {
			return errCSRF
		}
	}
	return nil
}

// checkPost reads a signed-in POST's form and refuses it unless it comes
// from the console's own page (checkOrigin) and carries the session's
// CSRF token (csrf).
func checkPost(ctx *fiber.Ctx, csrf string) (url.Values, error) {
	form, err := readForm(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkOrigin(ctx); err != nil {
		return nil, err
	}
	if !sameToken(form.Get("csrf"), csrf) {
		return nil, errCSRF
	}
	return form, nil
}

// readForm parses an application/x-www-form-urlencoded body (read by the
// transport within BodyLimit); a field given more than once is 400
// malformed (httpquery.FormOnce), for every form.
func readForm(ctx *fiber.Ctx) (url.Values, error) {
	ct, _, _ := strings.Cut(ctx.Get(fiber.HeaderContentType), ";")
	if !strings.EqualFold(strings.TrimSpace(ct), fiber.MIMEApplicationForm) {
		return nil, apperr.New(apperr.Malformed, "the form must be sent as application/x-www-form-urlencoded")
	}
	v, err := url.ParseQuery(string(ctx.Body()))
	if err != nil {
		return nil, apperr.New(apperr.Malformed, "the form could not be read")
	}
	// Which of two values would count is nobody's guess, so neither does.
	if err := httpquery.FormOnce(v, formFields...); err != nil {
		return nil, err
	}
	return v, nil
}

// formFields are the fields the console's forms send.
var formFields = []string{"csrf", "api_key", "confirm", "note", "outcome", "result_ref", "whole_window"}

func (c *Console) ctx(ctx *fiber.Ctx) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx.UserContext(), c.cfg.RequestTimeout)
}

func (c *Console) secure(ctx *fiber.Ctx) bool {
	return c.cfg.SecureCookie || ctx.Context().IsTLS()
}

func (c *Console) setCookie(ctx *fiber.Ctx, name, value string, expires time.Time) {
	ctx.Cookie(&fiber.Cookie{Name: name, Value: value, Path: Prefix, Expires: expires, HTTPOnly: true,
		Secure: c.secure(ctx), SameSite: fiber.CookieSameSiteStrictMode})
}

func (c *Console) clearCookie(ctx *fiber.Ctx, name string) {
	ctx.Cookie(&fiber.Cookie{Name: name, Value: "", Path: Prefix, MaxAge: -1, Expires: time.Unix(0, 0),
		HTTPOnly: true, Secure: c.secure(ctx), SameSite: fiber.CookieSameSiteStrictMode})
}

// signinPage is GET /ui/signin: the form, with a fresh login-CSRF token
// in a cookie of its own and in the form.
func (c *Console) signinPage(ctx *fiber.Ctx) error {
	tok, err := auth.RandomToken()
	if err != nil {
		return err
	}
	c.setCookie(ctx, SigninCookie, tok, time.Now().Add(time.Hour))
	return c.render(ctx, fiber.StatusOK, "signin", page{Title: "Sign in", CSRF: tok})
}

// signin is POST /ui/signin: api_key and csrf. The key is checked as a /v1
// key is (same cost bounds and failure limit); on success a session is
// stored and its cookie set.
func (c *Console) signin(ctx *fiber.Ctx) error {
	form, err := readForm(ctx)
	if err != nil {
		return err
	}
	if err := checkOrigin(ctx); err != nil {
		return err
	}
	if !sameToken(form.Get("csrf"), ctx.Cookies(SigninCookie)) {
		return errCSRF
	}
	dctx, cancel := c.ctx(ctx)
	defer cancel()
	// As for /v1: the failure limit counts per TCP peer.
	p, err := c.cfg.Keys.Authenticate(dctx, ctx.IP(), strings.TrimSpace(form.Get("api_key")))
	if err != nil {
		return err
	}
	token, sess, err := c.cfg.Sessions.Create(dctx, p)
	if err != nil {
		return err
	}
	c.clearCookie(ctx, SigninCookie)
	c.setCookie(ctx, SessionCookie, token, sess.ExpiresAt)
	c.cfg.Logger.Info().Str("tenant", sess.Tenant).Str("key_prefix", sess.KeyPrefix).Msg("console: signed in")
	return ctx.Redirect(Prefix+"/", fiber.StatusSeeOther)
}

// signout is POST /ui/signout: the session is deleted (a request without
// a live session just goes to the sign-in page).
func (c *Console) signout(ctx *fiber.Ctx) error {
	token := ctx.Cookies(SessionCookie)
	dctx, cancel := c.ctx(ctx)
	defer cancel()
	sess, err := c.cfg.Sessions.Lookup(dctx, token)
	if errors.Is(err, auth.ErrNoSession) {
		c.clearCookie(ctx, SessionCookie)
		return ctx.Redirect(Prefix+"/signin", fiber.StatusSeeOther)
	}
	if err != nil {
		return err
	}
	ctx.Locals(sessionKey, &sess)
	if _, err := checkPost(ctx, sess.CSRF); err != nil {
		return err
	}
	if err := c.cfg.Sessions.End(dctx, token); err != nil {
		return err
	}
	c.clearCookie(ctx, SessionCookie)
	return ctx.Redirect(Prefix+"/signin", fiber.StatusSeeOther)
}
