// Package httpapi is the sidecar's HTTP transport (Fiber v2): routing,
// authentication, request decoding and validation, and the single mapping
// from application error codes to HTTP statuses. The wire contract is
// described by openapi.yaml, served at GET /openapi.yaml.
package httpapi

import (
	"context"
	_ "embed"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/go-playground/validator/v10"
	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/gofiber/fiber/v2/middleware/recover"
	"github.com/gofiber/fiber/v2/middleware/requestid"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/ingest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/metrics"
)

//go:embed openapi.yaml
var openAPI []byte

// OpenAPI returns the OpenAPI 3 document of the HTTP API.
func OpenAPI() []byte { return openAPI }

// Readiness reports whether the service can serve: database reachable and
// migrations applied. It returns a reason when not ready.
type Readiness func(ctx context.Context) error

// DatabaseReadiness is a Readiness that also returns what /readyz shows
// about the database, ready or not (zero facts when it is unreachable).
type DatabaseReadiness func(ctx context.Context) (DatabaseFacts, error)

// DatabaseFacts is the database as the sidecar's sessions see it: the
// settings of a fresh transaction on one of them. /readyz shows it under
// "database".
type DatabaseFacts struct {
	// TransactionIsolation is the isolation the sidecar's statements run
	// at; they are written for "read committed".
	TransactionIsolation string `json:"transaction_isolation"`
	// ReadOnly: a transaction cannot write (a standby, or
	// default_transaction_read_only = on for the database or role).
	ReadOnly bool `json:"read_only"`
	// InRecovery: the server is a standby (pg_is_in_recovery()).
	InRecovery bool `json:"in_recovery"`
	// StatementTimeoutMS and LockTimeoutMS are the sessions'
	// statement_timeout and lock_timeout in milliseconds; 0 is none.
	StatementTimeoutMS int64 `json:"statement_timeout_ms"`
	LockTimeoutMS      int64 `json:"lock_timeout_ms"`
	// SynchronousCommit is the sessions' synchronous_commit.
	SynchronousCommit string `json:"synchronous_commit"`
	// SynchronousStandby: synchronous_standby_names is set.
	SynchronousStandby bool `json:"synchronous_standby"`
	// Durability is what an acknowledged claim survives; see the
	// Durability constants.
	Durability Durability `json:"durability"`
	// Replication is what the primary's commits wait for; nil when it
	// was not read (the database is a standby, or could not be asked).
	Replication *ReplicationFacts `json:"replication,omitempty"`
}

// ReplicationFacts is what a primary's commits wait for, as the sidecar's
// sessions see it: whether a claim acknowledged now survives a failover.
// /readyz shows it under "database.replication".
type ReplicationFacts struct {
	// Synchronous: a commit returns once a connected synchronous standby
	// has it (synchronous_standby_names set, synchronous_commit on,
	// remote_write or remote_apply, a standby in sync or quorum state).
	// Nil when that cannot be told (reading the standbys' state needs
	// pg_monitor).
	Synchronous *bool `json:"synchronous"`
	// Standbys is how many standbys are connected; SyncStandbys how many
	// of them are in sync or quorum state.
	Standbys     int `json:"standbys"`
	SyncStandbys int `json:"sync_standbys"`
	// SynchronousCommit is the sessions' synchronous_commit.
	SynchronousCommit string `json:"synchronous_commit"`
	// SynchronousStandbyNames is the primary's synchronous_standby_names.
	SynchronousStandbyNames string `json:"synchronous_standby_names"`
	// Note says it in words.
	Note string `json:"note"`
}

// Durability is what a claim acknowledged by the sidecar survives, as the
// commit that stored it waited for.
type Durability string

// Durability values.
const (
	// DurabilityNone: synchronous_commit = off, the commit did not wait for
	// the local WAL flush: a crash of the server can lose acknowledged
	// claims, and their next delivery runs the effect again.
	DurabilityNone Durability = "none"
	// DurabilityLocal: the commit waited for the local WAL flush: it
	// survives a crash of the server, not a failover to a standby.
	DurabilityLocal Durability = "local"
	// DurabilityStandby: the commit waited for a synchronous standby
	// (synchronous_standby_names): it survives a failover to that standby.
	DurabilityStandby Durability = "standby"
)

// Config holds the transport's dependencies and limits.
type Config struct {
	Ledger  *claim.Ledger
	Keys    *auth.Keys
	Metrics *metrics.Metrics
	Ready   Readiness
	// ReadyDatabase, when set, is used by /readyz instead of Ready, and
	// its facts are shown under "database".
	ReadyDatabase DatabaseReadiness
	Logger        zerolog.Logger
	// BodyLimit is the largest accepted request body in bytes; default 4 MiB.
	BodyLimit int
	// MaxBatch is the largest accepted claim batch (items); default 1000.
	MaxBatch int
	// RequestTimeout bounds the database work of one request; default 10s.
	RequestTimeout time.Duration
	// Inbox enables POST /ingest/{source} and /v1/inbox; nil disables them.
	Inbox *ingest.Inbox
	// Waiter lets claims with wait_seconds wait for a concurrent holder;
	// nil: wait_seconds is accepted and claims are answered at once.
	Waiter *claim.Waiter
}

// Server is the HTTP API.
type Server struct {
	cfg      Config
	app      *fiber.App
	validate *validator.Validate
}

// New builds the Fiber app with every route.
func New(cfg Config) *Server {
	if cfg.BodyLimit <= 0 {
		cfg.BodyLimit = 4 << 20
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 1000
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	s := &Server{cfg: cfg, validate: newValidator()}
	// Fiber's limit is the largest of the API limit and the sources' limits
	// at start; each route then enforces its own (see limitAPIBody and
	// ingestDelivery). A reload that raises a source's max_body_bytes above
	// it takes effect after a restart.
	bodyLimit := cfg.BodyLimit
	if cfg.Inbox != nil {
		bodyLimit = max(bodyLimit, cfg.Inbox.MaxBodyBytes())
	}
	s.app = fiber.New(fiber.Config{
		AppName:               "claimd",
		BodyLimit:             bodyLimit,
		DisableStartupMessage: true,
		ErrorHandler:          s.handleError,
		ReadTimeout:           30 * time.Second,
		WriteTimeout:          30 * time.Second,
		IdleTimeout:           120 * time.Second,
	})
	s.app.Use(recover.New())
	s.app.Use(requestid.New())
	s.app.Use(s.observe)

	s.app.Get("/healthz", func(c *fiber.Ctx) error { return c.JSON(fiber.Map{"status": "ok"}) })
	s.app.Get("/readyz", s.readyz)
	if cfg.Metrics != nil {
		s.app.Get("/metrics", adaptor.HTTPHandler(promhttp.HandlerFor(cfg.Metrics.Registry, promhttp.HandlerOpts{})))
	}
	s.app.Get("/openapi.yaml", func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, "application/yaml")
		return c.Send(openAPI)
	})

	v1 := s.app.Group("/v1", s.limitAPIBody, s.authenticate)
	v1.Get("/whoami", s.whoami)
	v1.Post("/claims", s.claimOne)
	v1.Post("/claims/batch", s.claimBatch)
	v1.Post("/claims/complete/batch", s.completeBatch)
	v1.Post("/claims/fail/batch", s.failBatch)
	v1.Post("/claims/fail/execution", s.failExecution)
	v1.Get("/claims", s.find)
	v1.Get("/claims/list", s.list) // before /claims/:id, so "list" is not an id
	v1.Get("/claims/:id", s.get)
	v1.Post("/claims/:id/complete", s.complete)
	v1.Post("/claims/:id/fail", s.fail)
	v1.Post("/claims/:id/extend", s.extend)
	v1.Post("/claims/:id/resolve", s.resolve)
	if cfg.Inbox != nil {
		s.app.Post("/ingest/:source", s.ingestDelivery)
		v1.Get("/inbox/:id", s.inboxGet)
		v1.Post("/inbox/:id/replay", s.inboxReplay)
	}
	return s
}

// App returns the Fiber app (for Listen, Test and Shutdown).
func (s *Server) App() *fiber.App { return s.app }

// observe logs one line per request (never bodies or credentials) and
// records the latency histogram.
func (s *Server) observe(c *fiber.Ctx) error {
	start := time.Now()
	err := c.Next()
	if err != nil {
		if herr := s.app.ErrorHandler(c, err); herr != nil {
			_ = c.SendStatus(fiber.StatusInternalServerError)
		}
	}
	status := c.Response().StatusCode()
	route := c.Route().Path
	if s.cfg.Metrics != nil {
		s.cfg.Metrics.HTTPDuration.WithLabelValues(route, strconv.Itoa(status/100)+"xx").Observe(time.Since(start).Seconds())
	}
	if route == "/healthz" || route == "/readyz" || route == "/metrics" {
		return nil
	}
	ev := s.cfg.Logger.Info()
	if status >= 500 {
		ev = s.cfg.Logger.Error()
	}
	ev.Str("request_id", c.GetRespHeader(fiber.HeaderXRequestID)).Str("method", c.Method()).
		Str("route", route).Int("status", status).Dur("latency", time.Since(start))
	if p, ok := c.Locals(principalKey).(auth.Principal); ok {
		ev.Str("tenant", p.Tenant)
	}
	if src := c.Params("source"); src != "" {
		ev.Str("source", src)
	}
	ev.Msg("request")
	return nil
}

func (s *Server) readyz(c *fiber.Ctx) error {
	ctx, cancel := context.WithTimeout(c.UserContext(), 3*time.Second)
	defer cancel()
	var err error
	body := fiber.Map{"status": "ready"}
	switch {
	case s.cfg.ReadyDatabase != nil:
		var facts DatabaseFacts
		facts, err = s.cfg.ReadyDatabase(ctx)
		if facts != (DatabaseFacts{}) {
			body["database"] = facts
		}
	case s.cfg.Ready != nil:
		err = s.cfg.Ready(ctx)
	}
	if err != nil {
		body["status"], body["reason"] = "not_ready", err.Error()
		return c.Status(fiber.StatusServiceUnavailable).JSON(body)
	}
	return c.JSON(body)
}

func (s *Server) limitAPIBody(c *fiber.Ctx) error {
	if len(c.Request().Body()) > s.cfg.BodyLimit {
		return apperr.New(apperr.TooLarge, "the request body exceeds %d bytes", s.cfg.BodyLimit)
	}
	return c.Next()
}

type ctxKey int

const principalKey ctxKey = iota

// TenantHeader lets an admin key act for one tenant.
const TenantHeader = "X-Tenant"

func (s *Server) authenticate(c *fiber.Ctx) error {
	h := c.Get(fiber.HeaderAuthorization)
	scheme, key, _ := strings.Cut(h, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		key = ""
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	// Failures are limited per c.IP(): the TCP peer, so behind a reverse
	// proxy every client shares the proxy's address (Fiber's ProxyHeader
	// and TrustedProxies settings are not set).
	p, err := s.cfg.Keys.Authenticate(ctx, c.IP(), strings.TrimSpace(key))
	if err != nil {
		return err
	}
	if p.Admin {
		t := c.Get(TenantHeader)
		if !auth.ValidTenant(t) {
			return apperr.Field(TenantHeader, "an admin key must name the tenant to act for in the %s header", TenantHeader)
		}
		p.Tenant = t
	}
	c.Locals(principalKey, p)
	return c.Next()
}

func tenant(c *fiber.Ctx) string {
	p, _ := c.Locals(principalKey).(auth.Principal)
	return p.Tenant
}

func (s *Server) whoami(c *fiber.Ctx) error {
	p, _ := c.Locals(principalKey).(auth.Principal)
	return c.JSON(fiber.Map{"tenant": p.Tenant, "admin": p.Admin})
}

func (s *Server) ctx(c *fiber.Ctx) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.UserContext(), s.cfg.RequestTimeout)
}

// errorStatus is THE mapping from application error codes to HTTP statuses.
// Every unavailable answer (503) also carries Retry-After:
// unavailableRetryAfter seconds; every rate_limited answer (429) the
// error's RetryAfter.
var errorStatus = map[apperr.Code]int{
	apperr.Malformed:           fiber.StatusBadRequest,
	apperr.Invalid:             fiber.StatusUnprocessableEntity,
	apperr.Unauthorized:        fiber.StatusUnauthorized,
	apperr.RateLimited:         fiber.StatusTooManyRequests,
	apperr.NotFound:            fiber.StatusNotFound,
	apperr.LeaseLost:           fiber.StatusConflict,
	apperr.InvalidState:        fiber.StatusConflict,
	apperr.TooLarge:            fiber.StatusRequestEntityTooLarge,
	apperr.UnsupportedEncoding: fiber.StatusUnsupportedMediaType,
	apperr.NotStored:           fiber.StatusUnprocessableEntity,
	apperr.Unavailable:         fiber.StatusServiceUnavailable,
	apperr.Internal:            fiber.StatusInternalServerError,
}

// unavailableRetryAfter is the Retry-After, in seconds, of every 503
// unavailable answer: a failover moves the database in well under a second
// (claimd follows the promoted server by itself), and a claim or settle
// retried with the same request is answered as what happened.
const unavailableRetryAfter = "1"

// ErrorBody is the JSON shape of every error answer.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the error object: stable code, message, optional field.
type ErrorDetail struct {
	Code    apperr.Code `json:"code"`
	Message string      `json:"message"`
	Field   string      `json:"field,omitempty"`
}

func (s *Server) handleError(c *fiber.Ctx, err error) error {
	var ferr *fiber.Error
	if errors.As(err, &ferr) {
		code := apperr.Internal
		switch ferr.Code {
		case fiber.StatusNotFound:
			code = apperr.NotFound
		case fiber.StatusRequestEntityTooLarge:
			code = apperr.TooLarge
		case fiber.StatusMethodNotAllowed, fiber.StatusBadRequest:
			code = apperr.Malformed
		}
		if ferr.Code >= 500 {
			return s.internal(c, err)
		}
		return c.Status(ferr.Code).JSON(ErrorBody{ErrorDetail{Code: code, Message: ferr.Message}})
	}
	e := apperr.As(err)
	status, known := 0, false
	if e != nil {
		status, known = errorStatus[e.Code]
	}
	if !known || e.Code == apperr.Internal {
		return s.internal(c, err)
	}
	if e.Code == apperr.RateLimited {
		c.Set(fiber.HeaderRetryAfter, strconv.FormatInt(int64(max(time.Second, e.RetryAfter+time.Second-1)/time.Second), 10))
	}
	if e.Code == apperr.Unavailable {
		// The answer says what happened in the sidecar's words; the
		// database's own message (which may quote SQL) is only logged.
		c.Set(fiber.HeaderRetryAfter, unavailableRetryAfter)
		ev := s.cfg.Logger.Warn().Str("request_id", c.GetRespHeader(fiber.HeaderXRequestID)).Str("route", c.Route().Path)
		if e.Err != nil {
			ev = ev.AnErr("cause", e.Err)
		}
		ev.Str("reason", e.Message).Msg("dependency unavailable")
	}
	return c.Status(status).JSON(ErrorBody{ErrorDetail{Code: e.Code, Message: e.Message, Field: e.Field}})
}

func (s *Server) internal(c *fiber.Ctx, err error) error {
	s.cfg.Logger.Error().Err(err).Str("request_id", c.GetRespHeader(fiber.HeaderXRequestID)).Msg("internal error")
	return c.Status(fiber.StatusInternalServerError).JSON(ErrorBody{ErrorDetail{
		Code: apperr.Internal, Message: "internal error; see the sidecar log for request id " + c.GetRespHeader(fiber.HeaderXRequestID)}})
}
