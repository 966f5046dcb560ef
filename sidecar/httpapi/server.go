// Package httpapi is the sidecar's HTTP transport (Fiber v2): routing,
// authentication, request decoding and validation, and the single mapping
// from application error codes to HTTP statuses. The wire contract is
// described by openapi.yaml, served at GET /openapi.yaml.
package httpapi

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/base64"
	"errors"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-playground/validator/v10"
	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/gofiber/fiber/v2/middleware/recover"
	"github.com/gofiber/fiber/v2/middleware/requestid"
	"github.com/gofiber/fiber/v2/utils"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"golang.org/x/sync/semaphore"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/console"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/metrics"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
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
	// BodyLimit is the largest accepted /v1 request body in bytes; default
	// 4 MiB. POST /v1/trigger/{source} takes more when a source's
	// max_body_bytes needs it (see apiBodyLimit).
	BodyLimit int
	// MaxBatch is the largest accepted claim batch (items); default 1000.
	MaxBatch int
	// RequestTimeout bounds the database work of one request; default 10s.
	RequestTimeout time.Duration
	// Inbox enables POST /ingest/{source}, POST /v1/trigger/{source} and
	// /v1/inbox; nil disables them.
	Inbox *inbox.Inbox
	// Waiter lets claims with wait_seconds wait for a concurrent holder;
	// nil: wait_seconds is accepted and claims are answered at once.
	Waiter *claim.Waiter
	// Reconciler applies reconcilers' answers to POST
	// /v1/claims/{id}/reconcile (the reconcile runner); nil: one over
	// Ledger, Inbox's re-dispatch and Metrics.
	Reconciler Reconciler

	// The edge (see edge.go); zero values take the defaults named.

	// ReadTimeout bounds the arrival of one request's headers and body;
	// default 30s. Past it: 408 request_timeout, connection closed.
	ReadTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers, in bytes;
	// default 8192. Past it: 431 header_too_large.
	MaxHeaderBytes int
	// MaxConnections bounds the connections served at once; default 4096.
	// At it a new connection takes the place of one doing no work (idle
	// between requests, else slowest in its header block; see
	// connLimiter); when every connection is at work it is answered 503
	// unavailable (JSON, with Retry-After) and closed (Listener).
	MaxConnections int
	// MaxConnsPerIP bounds the connections of one client address (IPv6:
	// its /64); 0 takes DefaultMaxConnsPerIP, a negative value is no
	// bound (behind a proxy every client has its address). Past it a new
	// connection is answered 429 rate_limited (JSON, with Retry-After)
	// and closed (Listener).
	MaxConnsPerIP int
	// APIBodyBytesInFlight bounds the /v1 request bodies held at once, in
	// bytes; default 64 MiB.
	APIBodyBytesInFlight int64
	// IngestBodyBytesInFlight bounds the /ingest request bodies held at
	// once (read before any signature is checked), in bytes; default 32 MiB.
	IngestBodyBytesInFlight int64
	// IngestAddressSharePercent and IngestSourceSharePercent are the
	// share of IngestBodyBytesInFlight one client address (IPv6: its /64)
	// and one source may hold, in percent; defaults 25 and 50 (a body
	// alone at its address or source may take more; see ingestBudget).
	IngestAddressSharePercent, IngestSourceSharePercent int
	// IngestMinBodyRate is the rate, in bytes per second, at which an
	// ingest body must keep arriving after IngestBodyGrace; defaults
	// 8192 and 2s. Below it: 408 request_timeout, connection closed.
	IngestMinBodyRate int64
	IngestBodyGrace   time.Duration
	// MetricsToken, when set, is the bearer token GET /metrics requires
	// (compared in constant time).
	MetricsToken string
	// MetricsElsewhere leaves /metrics off this app: it is served by
	// MetricsApp on a listener of its own (CLAIMD_METRICS_ADDR).
	MetricsElsewhere bool
	// Console, when set, serves the web console under /ui (package
	// console) over Ledger, Inbox and Keys; nil leaves it off.
	Console *ConsoleConfig
}

// ConsoleConfig is what the web console needs beyond the API's own
// dependencies.
type ConsoleConfig struct {
	// Sessions stores the console's sessions (required).
	Sessions *auth.Sessions
	// SecureCookie marks the session cookie Secure (the console is
	// reached over HTTPS through a proxy that terminates TLS).
	SecureCookie bool
}

// Edge defaults (see Config).
const (
	DefaultReadTimeout             = 30 * time.Second
	DefaultMaxHeaderBytes          = 8 << 10
	DefaultMaxConnections          = 4096
	DefaultAPIBodyBytesInFlight    = 64 << 20
	DefaultIngestBodyBytesInFlight = 32 << 20
	// DefaultMaxConnsPerIP: one address takes at most 1/16 of the default
	// MaxConnections, and still far more than n8n or a harness on the
	// same host keeps open to claimd.
	DefaultMaxConnsPerIP             = 256
	DefaultIngestAddressSharePercent = 25
	DefaultIngestSourceSharePercent  = 50
	DefaultIngestMinBodyRate         = 8 << 10
	DefaultIngestBodyGrace           = 2 * time.Second
)

// Server is the HTTP API.
type Server struct {
	cfg      Config
	app      *fiber.App
	validate *validator.Validate
	// reconcile applies reconcilers' answers (cfg.Reconciler or its default).
	reconcile Reconciler

	// base is every request's context; abort cancels it (Abort).
	base  context.Context
	abort context.CancelFunc
	// draining: new requests are refused (Drain).
	draining atomic.Bool
	// apiBodies and ingestBodies are the in-flight body budgets.
	apiBodies, ingestBodies *byteBudget
	// heavy bounds the requests with a large body (heavyBody) processed
	// at once: GOMAXPROCS.
	heavy *semaphore.Weighted
	// refusedAddr and refusedTotal count the connections Listener refused
	// past the per-address and the total bound.
	refusedAddr, refusedTotal atomic.Int64
	// reclaimedIdle and reclaimedHead count the connections Listener
	// closed to make room: idle between requests, in a header block.
	reclaimedIdle, reclaimedHead atomic.Int64
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
	cfg.ReadTimeout = cmp.Or(cfg.ReadTimeout, DefaultReadTimeout)
	cfg.MaxHeaderBytes = cmp.Or(cfg.MaxHeaderBytes, DefaultMaxHeaderBytes)
	cfg.MaxConnections = cmp.Or(cfg.MaxConnections, DefaultMaxConnections)
	cfg.APIBodyBytesInFlight = cmp.Or(cfg.APIBodyBytesInFlight, DefaultAPIBodyBytesInFlight)
	cfg.IngestBodyBytesInFlight = cmp.Or(cfg.IngestBodyBytesInFlight, DefaultIngestBodyBytesInFlight)
	cfg.MaxConnsPerIP = cmp.Or(cfg.MaxConnsPerIP, DefaultMaxConnsPerIP)
	cfg.IngestAddressSharePercent = cmp.Or(cfg.IngestAddressSharePercent, DefaultIngestAddressSharePercent)
	cfg.IngestSourceSharePercent = cmp.Or(cfg.IngestSourceSharePercent, DefaultIngestSourceSharePercent)
	cfg.IngestMinBodyRate = cmp.Or(cfg.IngestMinBodyRate, DefaultIngestMinBodyRate)
	cfg.IngestBodyGrace = cmp.Or(cfg.IngestBodyGrace, DefaultIngestBodyGrace)
	s := &Server{cfg: cfg, validate: newValidator(),
		apiBodies: newByteBudget(cfg.APIBodyBytesInFlight), ingestBodies: newByteBudget(cfg.IngestBodyBytesInFlight),
		heavy: semaphore.NewWeighted(int64(runtime.GOMAXPROCS(0)))}
	s.ingestBodies.arrived = newIngestBudget(cfg.IngestBodyBytesInFlight, cfg.IngestAddressSharePercent,
		cfg.IngestSourceSharePercent, cfg.IngestBodyGrace, cfg.IngestMinBodyRate)
	s.base, s.abort = context.WithCancel(context.Background())
	s.reconcile = s.newReconciler()
	if cfg.Metrics != nil {
		cfg.Metrics.ObserveBodyBudget("api", s.apiBodies.size, s.apiBodies.reserved.Load, s.apiBodies.received.Load)
		// An ingest body reserves what arrived: both gauges are that.
		cfg.Metrics.ObserveBodyBudget("ingest", s.ingestBodies.size, s.ingestBodies.arrived.heldNow.Load, s.ingestBodies.arrived.heldNow.Load)
		counter := func(name, help, label, value string, fn func() int64) {
			cfg.Metrics.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help,
				ConstLabels: prometheus.Labels{label: value}}, func() float64 { return float64(fn()) }))
		}
		const refusedHelp = "Connections refused by claimd's listener: past CLAIMD_MAX_CONNS_PER_IP (address) or CLAIMD_MAX_CONNECTIONS (total)."
		counter("claimd_http_connections_refused_total", refusedHelp, "reason", "address", s.refusedAddr.Load)
		counter("claimd_http_connections_refused_total", refusedHelp, "reason", "total", s.refusedTotal.Load)
		const reclaimedHelp = "Connections closed by claimd's listener at CLAIMD_MAX_CONNECTIONS to serve a new one: kept alive with no request in progress (idle), or slowest in a header block (header)."
		counter("claimd_http_connections_reclaimed_total", reclaimedHelp, "state", "idle", s.reclaimedIdle.Load)
		counter("claimd_http_connections_reclaimed_total", reclaimedHelp, "state", "header", s.reclaimedHead.Load)
		const cutHelp = "Ingest bodies answered 408 while arriving: below CLAIMD_INGEST_MIN_BODY_RATE_BYTES after the grace (rate), or cut to make room for another body (preempted)."
		counter("claimd_http_ingest_bodies_cut_total", cutHelp, "reason", "rate", s.ingestBodies.arrived.slow.Load)
		counter("claimd_http_ingest_bodies_cut_total", cutHelp, "reason", "preempted", s.ingestBodies.arrived.preempted.Load)
	}
	// Bodies are streamed: fasthttp reads the headers and at most 8 KiB of
	// a body before routing; every route reads the rest within its own
	// limit (readBody), so BodyLimit here only shapes that first read.
	s.app = fiber.New(fiber.Config{
		AppName:                      "claimd",
		BodyLimit:                    max(cfg.BodyLimit, base64.StdEncoding.EncodedLen(sources.MaxBodyBytesLimit)+triggerEnvelope),
		StreamRequestBody:            true,
		DisablePreParseMultipartForm: true,
		DisableStartupMessage:        true,
		ErrorHandler:                 s.handleError,
		ReadTimeout:                  cfg.ReadTimeout,
		WriteTimeout:                 30 * time.Second,
		IdleTimeout:                  120 * time.Second,
		ReadBufferSize:               cfg.MaxHeaderBytes,
		// Connections are bounded by Listener, which answers in JSON;
		// fasthttp's bound (plain text) sits above it, for connections
		// closed but not yet handed back to its worker pool.
		Concurrency: 2 * cfg.MaxConnections,
	})
	srv := s.app.Server()
	srv.CloseOnShutdown = true
	srv.HeaderReceived = s.headerReceived
	srv.ConnState = connState
	srv.Handler = s.methodGuard(srv.Handler)
	if cfg.Metrics != nil {
		cfg.Metrics.ObserveOpenConnections(func() int64 { return int64(srv.GetOpenConnectionsCount()) }, int64(cfg.MaxConnections))
	}
	s.app.Use(recover.New())
	// Random request ids (UUIDv4): Fiber's default is a counter, which
	// would tell an anonymous caller how many requests claimd serves.
	s.app.Use(requestid.New(requestid.Config{Generator: utils.UUIDv4}))
	s.app.Use(s.observe)
	s.app.Use(s.edge)

	s.app.Get("/healthz", func(c *fiber.Ctx) error { return c.JSON(fiber.Map{"status": "ok"}) })
	s.app.Get("/readyz", s.readyz)
	if cfg.Metrics != nil && !cfg.MetricsElsewhere {
		s.app.Get("/metrics", s.metricsHandler())
	}
	s.app.Get("/openapi.yaml", func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, "application/yaml")
		return c.Send(openAPI)
	})

	v1 := s.app.Group("/v1", s.authenticate, s.readAPIBody)
	v1.Get("/whoami", s.whoami)
	v1.Post("/claims", s.claimOne)
	v1.Post("/claims/batch", s.claimBatch)
	v1.Post("/claims/complete/batch", s.completeBatch)
	v1.Post("/claims/fail/batch", s.failBatch)
	v1.Post("/claims/fail/execution", s.failExecution)
	v1.Post("/executions/workflow", s.executionWorkflow)
	v1.Get("/claims", s.find)
	v1.Get("/claims/list", s.list) // before /claims/:id, so "list" is not an id
	v1.Get("/claims/:id", s.get)
	v1.Post("/claims/:id/complete", s.complete)
	v1.Post("/claims/:id/fail", s.fail)
	v1.Post("/claims/:id/extend", s.extend)
	v1.Post("/claims/:id/resolve", s.resolve)
	v1.Post("/claims/:id/release", s.release)
	v1.Post("/claims/:id/reconcile", s.reconcileAnswer)
	v1.Get("/sources/:source/stats", s.sourceStats)
	if cfg.Inbox != nil {
		s.app.Post("/ingest/:source", s.ingestDelivery)
		// Handshakes of the providers that send them (405 for any other
		// source: see ingestHandshake).
		s.app.Add(fiber.MethodGet, "/ingest/:source", s.ingestHandshake)
		s.app.Add(fiber.MethodHead, "/ingest/:source", s.ingestHandshake)
		v1.Post("/trigger/:source", s.trigger)
		v1.Get("/inbox/:id", s.inboxGet)
		v1.Post("/inbox/:id/replay", s.inboxReplay)
		v1.Post("/sources/:source/backfill/scans", s.backfillStart)
		v1.Get("/sources/:source/backfill/scans", s.backfillScans)
		v1.Get("/sources/:source/backfill/scans/:id", s.backfillScan)
		v1.Get("/sources/:source/backfill/events", s.backfillEvents)
	}
	if cfg.Console != nil {
		ui := s.app.Group(console.Prefix, s.readConsoleBody)
		console.New(console.Config{Ledger: cfg.Ledger, Inbox: cfg.Inbox, Keys: cfg.Keys,
			Sessions: cfg.Console.Sessions, Logger: cfg.Logger, RequestTimeout: cfg.RequestTimeout,
			SecureCookie: cfg.Console.SecureCookie, Status: func(code apperr.Code) int { return errorStatus[code] }}).Mount(ui)
	}
	return s
}

// readConsoleBody reads a console form body, within console.BodyLimit and
// the /v1 body budget, before the console checks anything: the sign-in
// form carries the API key in it.
func (s *Server) readConsoleBody(c *fiber.Ctx) error {
	if err := s.readBody(c, console.BodyLimit, s.apiBodies); err != nil {
		return err
	}
	return c.Next()
}

// App returns the Fiber app (for Test and Shutdown; serve with Listener).
func (s *Server) App() *fiber.App { return s.app }

// Listener serves the app on ln within the connection bounds
// (MaxConnections, MaxConnsPerIP; see connLimiter), each connection
// through the framing check (FramingListener), until the app is shut
// down.
func (s *Server) Listener(ln net.Listener) error {
	limiter := newConnLimiter(ln, s.cfg.MaxConnections, max(s.cfg.MaxConnsPerIP, 0), s.countRefusal)
	limiter.onReclaim = func(idle bool) {
		if idle {
			s.reclaimedIdle.Add(1)
		} else {
			s.reclaimedHead.Add(1)
		}
	}
	return s.app.Listener(s.FramingListener(limiter))
}

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
		s.cfg.Metrics.HTTPDuration.WithLabelValues(methodLabel(c.Method()), route, strconv.Itoa(status/100)+"xx").Observe(time.Since(start).Seconds())
	}
	if route == "/healthz" || route == "/readyz" || route == "/metrics" {
		return nil
	}
	ev := s.cfg.Logger.Info()
	if status >= 500 {
		ev = s.cfg.Logger.Error()
	}
	ev.Str("request_id", c.GetRespHeader(fiber.HeaderXRequestID)).Str("method", c.Method()).
		Str("route", route).Int("status", status).
		Float64("latency_ms", float64(time.Since(start).Microseconds())/1000)
	if status != fiber.StatusNotFound {
		// The path of a route that exists (a 404's path is whatever the
		// caller typed, and is not logged), cut to 200 bytes: the route
		// of a request refused in a group's middleware is the group's.
		ev.Str("path", clip(c.Path(), 200))
	}
	if p, ok := c.Locals(principalKey).(auth.Principal); ok {
		ev.Str("tenant", p.Tenant)
	}
	if src := c.Params("source"); src != "" {
		ev.Str("source", clip(src, 64))
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

// readAPIBody reads a /v1 body (after authenticate: a caller without a
// valid key never gets a byte of its body read), within its route's
// limit (apiBodyLimit).
func (s *Server) readAPIBody(c *fiber.Ctx) error {
	if err := s.readBody(c, s.apiBodyLimit(c.Path()), s.apiBodies); err != nil {
		return err
	}
	return c.Next()
}

// countRefusal counts a connection Listener refused.
func (s *Server) countRefusal(perAddress bool) {
	if perAddress {
		s.refusedAddr.Add(1)
	} else {
		s.refusedTotal.Add(1)
	}
}

// apiBodyLimit is the body limit of the /v1 route at path, in bytes:
// BodyLimit, except POST /v1/trigger/{source}, whose body carries a
// provider's body in base64: it takes at least the base64 of the largest
// max_body_bytes of any source (the same for every source name, so that
// the limit tells nothing about which exist) plus room for the headers,
// query and other members. Only callers with a valid API key get their
// body read.
func (s *Server) apiBodyLimit(path string) int {
	if s.cfg.Inbox != nil && strings.HasPrefix(strings.ToLower(path), "/v1/trigger/") {
		return max(s.cfg.BodyLimit, base64.StdEncoding.EncodedLen(s.cfg.Inbox.MaxBodyBytes())+triggerEnvelope)
	}
	return s.cfg.BodyLimit
}

// Drain makes every request from now on answered 503 unavailable with
// Retry-After and Connection: close, the first step of a shutdown:
// requests already running go on.
func (s *Server) Drain() { s.draining.Store(true) }

// Abort cancels the context of every request still running (the hard
// end of a shutdown): their database work stops and they answer 503.
func (s *Server) Abort() { s.abort() }

// methodLabel is the request method as a label value: one of Fiber's
// methods (the only ones methodGuard lets through) as its constant string,
// which outlives the request, unlike c.Method()'s view of the request
// buffer; "other" for anything else.
func methodLabel(m string) string {
	for _, k := range fiber.DefaultMethods {
		if k == m {
			return k
		}
	}
	return "other"
}

// MetricsApp returns an app serving only GET /metrics (with the bearer
// token when MetricsToken is set), for a listener of its own; nil without
// metrics.
func (s *Server) MetricsApp() *fiber.App {
	if s.cfg.Metrics == nil {
		return nil
	}
	app := fiber.New(fiber.Config{AppName: "claimd-metrics", DisableStartupMessage: true,
		ErrorHandler: s.handleError, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second,
		IdleTimeout: 120 * time.Second, Concurrency: 256, ReadBufferSize: s.cfg.MaxHeaderBytes})
	app.Get("/metrics", s.metricsHandler())
	return app
}

// metricsHandler is GET /metrics: Prometheus text, behind the bearer
// token when one is configured (401 unauthorized otherwise).
func (s *Server) metricsHandler() fiber.Handler {
	h := adaptor.HTTPHandler(promhttp.HandlerFor(s.cfg.Metrics.Registry, promhttp.HandlerOpts{}))
	if s.cfg.MetricsToken == "" {
		return h
	}
	want := sha256.Sum256([]byte(s.cfg.MetricsToken))
	return func(c *fiber.Ctx) error {
		scheme, tok, _ := strings.Cut(c.Get(fiber.HeaderAuthorization), " ")
		got := sha256.Sum256([]byte(strings.TrimSpace(tok)))
		if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			return apperr.New(apperr.Unauthorized, "GET /metrics needs the metrics bearer token (CLAIMD_METRICS_TOKEN)")
		}
		return h(c)
	}
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
	apperr.BadRequest:          fiber.StatusBadRequest,
	apperr.HeaderTooLarge:      fiber.StatusRequestHeaderFieldsTooLarge,
	apperr.RequestTimeout:      fiber.StatusRequestTimeout,
	apperr.MethodNotAllowed:    fiber.StatusMethodNotAllowed,
	apperr.Invalid:             fiber.StatusUnprocessableEntity,
	apperr.Unauthorized:        fiber.StatusUnauthorized,
	apperr.RateLimited:         fiber.StatusTooManyRequests,
	apperr.Forbidden:           fiber.StatusForbidden,
	apperr.NotFound:            fiber.StatusNotFound,
	apperr.LeaseLost:           fiber.StatusConflict,
	apperr.InvalidState:        fiber.StatusConflict,
	apperr.ReconcileTokenStale: fiber.StatusConflict,
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
		// The HTTP layer's own answers (an unparsable request, a header
		// block too large, a read timeout, no such route or method): a
		// fixed message per code, never the layer's text, which quotes
		// the request (its headers, the API key among them).
		code, ok := transportCode[ferr.Code]
		if !ok {
			code = apperr.BadRequest
		}
		err = &apperr.Error{Code: code, Message: transportMessage[code]}
		if c.Locals(bodyStateKey) == nil {
			// Refused before routing (fasthttp's error handler): the
			// request handlers never saw it, so it is logged here.
			c.Response().SetConnectionClose()
			s.cfg.Logger.Warn().Str("code", string(code)).Int("status", errorStatus[code]).
				Msg("request refused by the HTTP layer")
		}
	}
	e := apperr.As(err)
	status, known := 0, false
	if e != nil {
		status, known = errorStatus[e.Code]
	}
	if !known || e.Code == apperr.Internal {
		return s.internal(c, err)
	}
	switch e.Code {
	case apperr.RateLimited:
		c.Set(fiber.HeaderRetryAfter, strconv.FormatInt(int64(max(time.Second, e.RetryAfter+time.Second-1)/time.Second), 10))
	case apperr.Unavailable:
		// The answer says what happened in the sidecar's words; the
		// database's own message (which may quote SQL) is only logged.
		c.Set(fiber.HeaderRetryAfter, unavailableRetryAfter)
		if e != errDraining {
			ev := s.cfg.Logger.Warn().Str("request_id", c.GetRespHeader(fiber.HeaderXRequestID)).Str("route", c.Route().Path)
			if e.Err != nil {
				ev = ev.AnErr("cause", e.Err)
			}
			ev.Str("reason", e.Message).Msg("dependency unavailable")
		}
	case apperr.BadRequest, apperr.HeaderTooLarge, apperr.RequestTimeout, apperr.TooLarge:
		// Framing or size: what follows on the connection cannot be
		// trusted to start a request.
		c.Response().SetConnectionClose()
	}
	return c.Status(status).JSON(ErrorBody{ErrorDetail{Code: e.Code, Message: e.Message, Field: e.Field}})
}

func (s *Server) internal(c *fiber.Ctx, err error) error {
	s.cfg.Logger.Error().Err(err).Str("request_id", c.GetRespHeader(fiber.HeaderXRequestID)).Msg("internal error")
	return c.Status(fiber.StatusInternalServerError).JSON(ErrorBody{ErrorDetail{
		Code: apperr.Internal, Message: "internal error; see the sidecar log for request id " + c.GetRespHeader(fiber.HeaderXRequestID)}})
}
