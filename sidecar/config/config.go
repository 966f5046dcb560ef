// Package config reads the sidecar's configuration from environment
// variables (prefix CLAIMD_, plus DATABASE_URL), command-line flags (which
// win) and the optional sources file. Durations are whole seconds unless a
// name says otherwise.
package config

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// Config is the sidecar configuration.
type Config struct {
	DatabaseURL string
	Addr        string
	APIKeys     []auth.StaticKey
	// Migrate applies pending migrations on start.
	Migrate   bool
	LogLevel  string
	LogFormat string
	// SourcesFile is the path of the YAML/JSON sources file ("" = none).
	SourcesFile string
	Policies    claim.Policies
	BodyLimit   int
	MaxBatch    int
	// RequestTimeout bounds one request's database work.
	RequestTimeout time.Duration
	// ShutdownTimeout bounds the drain of in-flight requests on SIGTERM.
	ShutdownTimeout time.Duration
	// MaintenanceInterval is the period of the retention purge and the
	// lease sweep; 0 disables both.
	MaintenanceInterval time.Duration
	PurgeBatch          int
	// KeyCacheTTL caches database API-key lookups; a revoked key stops
	// working within this time.
	KeyCacheTTL time.Duration
	// KeyNegativeTTL caches failed database API-key lookups: a key
	// presented before it was created works within this time of its
	// creation. 0 disables it.
	KeyNegativeTTL time.Duration
	// AuthFailureLimit is how many failed authentications one client
	// address may have per AuthFailureWindow before /v1 answers 429
	// rate_limited until the window ends; 0 disables the limit.
	AuthFailureLimit  int
	AuthFailureWindow time.Duration
	// Ingest holds the provider-facing sources of the sources file.
	Ingest sources.Config
	// Dispatch runs the dispatch workers in this process.
	Dispatch bool
	// ReloadInterval is how often the sources file is checked for changes
	// (it is also reloaded on SIGHUP); 0 disables polling.
	ReloadInterval time.Duration
	// ReconcileInterval is the period of the reconcile runner (calls to
	// the reconcilers of claims left unknown); 0 runs none on this
	// replica. ReconcileConcurrency bounds its calls in flight.
	ReconcileInterval    time.Duration
	ReconcileConcurrency int
	// RequireSyncReplication makes claimd acknowledge no write (503) and
	// be not ready unless the primary's commits wait for a connected
	// synchronous standby.
	RequireSyncReplication bool

	// The HTTP edge (see sidecar/docs/security.md#security-what-faces-the-internet).

	// ReadTimeout bounds the arrival of one request's headers and body.
	ReadTimeout time.Duration
	// MaxHeaderBytes bounds a request's line and headers, in bytes.
	MaxHeaderBytes int
	// MaxConnections bounds the connections served at once;
	// MaxConnsPerIP those of one client address (0 = no bound).
	MaxConnections, MaxConnsPerIP int
	// APIBodyBytesInFlight and IngestBodyBytesInFlight bound the request
	// bodies held at once on /v1 and on /ingest, in bytes.
	APIBodyBytesInFlight, IngestBodyBytesInFlight int64
	// IngestAddressSharePercent and IngestSourceSharePercent are the
	// shares of IngestBodyBytesInFlight one address and one source hold.
	IngestAddressSharePercent, IngestSourceSharePercent int
	// IngestMinBodyRate (bytes per second) is the rate an ingest body
	// must keep after IngestBodyGrace.
	IngestMinBodyRate int64
	IngestBodyGrace   time.Duration
	// MetricsAddr, when set, serves /metrics on a listener of its own
	// (and not on Addr); MetricsToken, when set, is the bearer token
	// /metrics requires.
	MetricsAddr, MetricsToken string
	// Group is group commit of claims, Completes and Fails
	// (CLAIMD_GROUP_WORKERS, CLAIMD_GROUP_MAX_CALLS).
	Group claim.GroupConfig
	// Console serves the web console under /ui; ConsoleSecureCookie marks
	// its session cookie Secure (reached over HTTPS through a proxy).
	Console, ConsoleSecureCookie bool
}

// Var documents one setting; Vars is the table printed by `claimd settings`
// and reproduced in sidecar/docs/manual.md#configuration.
type Var struct{ Env, Flag, Default, Help string }

// Vars lists every setting.
var Vars = []Var{
	{"DATABASE_URL", "database-url", "", "PostgreSQL connection string (pool knobs such as pool_max_conns=20 go in it). Required."},
	{"CLAIMD_ADDR", "addr", "127.0.0.1:8080", "Listen address."},
	{"CLAIMD_API_KEYS", "api-keys", "", "Static keys, tenant:key,tenant:key (keys ≥ 16 chars). Tenant * makes an admin key, which acts for the tenant named in the X-Tenant header. Database keys: claimd keys create."},
	{"CLAIMD_MIGRATE", "migrate", "true", "Apply pending migrations on start."},
	{"CLAIMD_REQUIRE_SYNC_REPLICATION", "require-sync-replication", "false", "No write is acknowledged unless its commit waits for a connected synchronous standby (synchronous_standby_names set, synchronous_commit on, remote_write or remote_apply, a standby in sync or quorum state): every write route answers 503 with Retry-After otherwise, nothing kept (reads are served), and /readyz is 503. With asynchronous replication a failover can lose claims already acknowledged, and their redelivery runs the effect again. Costs one query per database connection taken from the pool. Reading the standbys' state needs pg_monitor (or superuser); see sidecar/docs/ha.md#what-claimd-tells-you-synchronous-or-not."},
	{"CLAIMD_LOG_LEVEL", "log-level", "info", "debug, info, warn or error."},
	{"CLAIMD_LOG_FORMAT", "log-format", "json", "json or console."},
	{"CLAIMD_SOURCES_FILE", "sources", "", "YAML or JSON sources file: ingest providers, secrets (${ENV} references), forward targets and per-source policies (see sidecar/docs/ingest.md#durable-ingest-providers-post-to-the-sidecar)."},
	{"CLAIMD_LEASE_POLICY", "lease-policy", "review", "Default lease-expiry policy: review (an expired lease moves the record to unknown for an operator to resolve; no claim wins it again by itself) or reclaim (the next claim wins and may run the effect a second time: only for destinations that honour the forwarded idempotency key). A source's lease_policy, or a claim's, overrides it."},
	{"CLAIMD_LEASE_SECONDS", "lease-seconds", "300", "Default lease length when a claim asks for none."},
	{"CLAIMD_MAX_LEASE_SECONDS", "max-lease-seconds", "86400", "Longest lease a claim or extend may ask for."},
	{"CLAIMD_MAX_ATTEMPTS", "max-attempts", "5", "Attempts before a record is dead-lettered."},
	{"CLAIMD_BACKOFF_BASE_SECONDS", "backoff-base-seconds", "30", "Retry backoff base: attempt n waits up to base·2^(n-1), full jitter."},
	{"CLAIMD_BACKOFF_CAP_SECONDS", "backoff-cap-seconds", "3600", "Retry backoff cap."},
	{"CLAIMD_RETENTION_DAYS", "retention-days", "30", "Payload retention: keep terminal records' payloads and delivery log this many days after their last change."},
	{"CLAIMD_KEY_RETENTION_DAYS", "key-retention-days", "0", "Key retention: keep terminal records' keys, hashes and result_ref this many days; 0 = the longer of 400 days (providers' resend windows) and the payload retention."},
	{"CLAIMD_BODY_LIMIT_BYTES", "body-limit-bytes", "4194304", "Largest accepted API request body."},
	{"CLAIMD_MAX_BATCH", "max-batch", "1000", "Largest claim batch (items)."},
	{"CLAIMD_REQUEST_TIMEOUT_SECONDS", "request-timeout-seconds", "10", "Database time budget of one request."},
	{"CLAIMD_SHUTDOWN_TIMEOUT_SECONDS", "shutdown-timeout-seconds", "20", "Drain time for in-flight requests on SIGTERM/SIGINT."},
	{"CLAIMD_MAINTENANCE_INTERVAL_SECONDS", "maintenance-interval-seconds", "60", "Period of the retention purge and lease sweep (0 = off)."},
	{"CLAIMD_PURGE_BATCH", "purge-batch", "1000", "Rows deleted per purge statement."},
	{"CLAIMD_KEY_CACHE_SECONDS", "key-cache-seconds", "30", "Cache of database API-key lookups (revocation delay)."},
	{"CLAIMD_KEY_NEGATIVE_CACHE_SECONDS", "key-negative-cache-seconds", "30", "Cache of failed database API-key lookups: a key the database did not know is refused without asking it again for this long (at most 10,000 keys remembered). A key presented before it existed works at most this long after its creation (0 = off)."},
	{"CLAIMD_AUTH_FAILURE_LIMIT", "auth-failure-limit", "20", "Failed authentications (missing, unknown or revoked API key) one client address (IPv6: its /64) may have per window; then /v1 answers 429 rate_limited with Retry-After, without a database query, until the window ends. Configured keys and keys this replica accepted before still work. The address is the TCP peer: behind a reverse proxy all clients share the proxy's. At most 10,000 addresses remembered (0 = no limit)."},
	{"CLAIMD_AUTH_FAILURE_WINDOW_SECONDS", "auth-failure-window-seconds", "60", "Window of CLAIMD_AUTH_FAILURE_LIMIT: it starts at an address's first attempt after its previous window ended."},
	{"CLAIMD_DISPATCH", "dispatch", "true", "Run inbox dispatch workers here (false = ingest-only replica)."},
	{"CLAIMD_RELOAD_INTERVAL_SECONDS", "reload-interval-seconds", "5", "Check the sources file for changes this often (0 = only on SIGHUP)."},
	{"CLAIMD_RECONCILE_INTERVAL_SECONDS", "reconcile-interval-seconds", "2", "Run the reconcilers this often: claims left unknown whose reconciler (the sources file's reconcilers) is configured get their calls; calls past their deadline count as timeouts (0 = no reconcile calls from this replica)."},
	{"CLAIMD_RECONCILE_CONCURRENCY", "reconcile-concurrency", "4", "Reconcile calls in flight at once on this replica, 1 to 64."},
	{"CLAIMD_READ_TIMEOUT_SECONDS", "read-timeout-seconds", "30", "Time for a request's headers and body to arrive; past it 408 request_timeout and the connection is closed."},
	{"CLAIMD_MAX_HEADER_BYTES", "max-header-bytes", "8192", "Largest request line plus headers, in bytes; past it 431 header_too_large."},
	{"CLAIMD_MAX_CONNECTIONS", "max-connections", "4096", "Connections served at once; at it a new connection takes the place of one doing no work (kept alive between requests, else slowest in its header block; see sidecar/docs/security.md#connections-what-one-holds-and-when-it-is-reclaimed), and when every connection is at work it is answered 503 unavailable (JSON, Retry-After: 1) and closed."},
	{"CLAIMD_MAX_CONNS_PER_IP", "max-conns-per-ip", "256", "Connections of one client address (IPv6: its /64) at once; past it a new connection is answered 429 rate_limited (JSON, Retry-After: 1) and closed. 256 is 1/16 of the default CLAIMD_MAX_CONNECTIONS and far above what n8n keeps open to claimd from a shared address. Behind a proxy or load balancer every client has the proxy's address: raise it to the proxy's connection pool or set 0 (no bound)."},
	{"CLAIMD_API_BODY_BYTES_IN_FLIGHT", "api-body-bytes-in-flight", "67108864", "Bytes of /v1 request bodies held at once (read only after the API key is checked); a request that finds no room within the request timeout is answered 503 with Retry-After."},
	{"CLAIMD_INGEST_BODY_BYTES_IN_FLIGHT", "ingest-body-bytes-in-flight", "33554432", "Bytes of /ingest request bodies held at once (read before the signature can be checked; a budget of their own, so unauthenticated senders never starve /v1); no room within the request timeout is 503 with Retry-After."},
	{"CLAIMD_INGEST_ADDRESS_SHARE_PERCENT", "ingest-address-share-percent", "25", "Share of CLAIMD_INGEST_BODY_BYTES_IN_FLIGHT that the /ingest bodies of one client address (IPv6: its /64) hold at once, 1 to 100; the address's oldest body still arriving may take more. Past it the new body waits for room, cutting (408) only a body of the address that is stalling (below 4 times CLAIMD_INGEST_MIN_BODY_RATE_BYTES) or cannot end within the read timeout."},
	{"CLAIMD_INGEST_SOURCE_SHARE_PERCENT", "ingest-source-share-percent", "50", "Share of CLAIMD_INGEST_BODY_BYTES_IN_FLIGHT that the bodies of one ingest source hold at once, 1 to 100 (the source's oldest body still arriving may take more): bodies sent to one source's URL leave the rest to the others."},
	{"CLAIMD_INGEST_MIN_BODY_RATE_BYTES", "ingest-min-body-rate-bytes", "8192", "Bytes per second, counted from the body's start, at which an /ingest body must keep arriving once its grace is over; below it 408 request_timeout, the connection closed and its bytes released. A body holds b bytes at most grace + b/rate seconds (its first 8 KiB: up to CLAIMD_READ_TIMEOUT_SECONDS). A body at 4 times this rate or more, on course to end within the read timeout, is never cut to make room for another."},
	{"CLAIMD_INGEST_BODY_GRACE_SECONDS", "ingest-body-grace-seconds", "2", "Time an /ingest body may take before the minimum rate applies; a body younger than this is never cut to make room for another."},
	{"CLAIMD_GROUP_WORKERS", "group-workers", "2", "Group commit: concurrent claims (and, apart, Completes and Fails, and, apart, ingest deliveries) share transactions; a group closes when it is full or nothing else waits. One group of each kind is in flight while the next fills; up to this many, each on a pooled connection, only while the waiting calls fill a group or the one in flight has run over 10 ms (0 = off: every call its own transaction)."},
	{"CLAIMD_GROUP_MAX_CALLS", "group-max-calls", "64", "Largest group: calls decided in one transaction (rows it locks; for ingest also the events of its deliveries)."},
	{"CLAIMD_METRICS_ADDR", "metrics-addr", "", "Serve /metrics on this address only (e.g. 127.0.0.1:9464 or :9464 on a private network) instead of CLAIMD_ADDR."},
	{"CLAIMD_CONSOLE", "console", "true", "Serve the web console at /ui (sign-in with one tenant's API key; see sidecar/docs/operations.md#console). false leaves /ui unrouted."},
	{"CLAIMD_CONSOLE_SECURE_COOKIE", "console-secure-cookie", "false", "Mark the console's session cookie Secure: set it when browsers reach the console over HTTPS through a proxy that terminates TLS (claimd serves plain HTTP and trusts no X-Forwarded-Proto)."},
	{"CLAIMD_METRICS_TOKEN", "metrics-token", "", "Bearer token GET /metrics requires (Authorization: Bearer TOKEN; Prometheus: authorization.credentials). Empty: /metrics is open to whoever reaches its address."},
}

// Load reads the settings: for each of Vars, flags[v.Env] when present
// (a flag given on the command line), else getenv(v.Env) when not empty,
// else v.Default; then it reads the sources file (whose secret references
// are resolved with getenv) and validates the result (Validate). getenv is
// os.Getenv in production; flags may be nil.
func Load(flags map[string]string, getenv func(string) string) (Config, error) {
	vals := make(map[string]string, len(Vars))
	for _, v := range Vars {
		val, ok := flags[v.Env]
		if !ok {
			val = cmp.Or(getenv(v.Env), v.Default)
		}
		vals[v.Env] = val
	}
	get := func(env string) string { return vals[env] }
	p := &parser{get: get}
	c := Config{
		DatabaseURL:         get("DATABASE_URL"),
		Addr:                get("CLAIMD_ADDR"),
		Migrate:             p.bool("CLAIMD_MIGRATE"),
		LogLevel:            get("CLAIMD_LOG_LEVEL"),
		LogFormat:           get("CLAIMD_LOG_FORMAT"),
		SourcesFile:         get("CLAIMD_SOURCES_FILE"),
		BodyLimit:           p.int("CLAIMD_BODY_LIMIT_BYTES"),
		MaxBatch:            p.int("CLAIMD_MAX_BATCH"),
		RequestTimeout:      p.secs("CLAIMD_REQUEST_TIMEOUT_SECONDS"),
		ShutdownTimeout:     p.secs("CLAIMD_SHUTDOWN_TIMEOUT_SECONDS"),
		MaintenanceInterval: p.secs("CLAIMD_MAINTENANCE_INTERVAL_SECONDS"),
		PurgeBatch:          p.int("CLAIMD_PURGE_BATCH"),
		KeyCacheTTL:         p.secs("CLAIMD_KEY_CACHE_SECONDS"),
		KeyNegativeTTL:      p.secs("CLAIMD_KEY_NEGATIVE_CACHE_SECONDS"),
		AuthFailureLimit:    p.int("CLAIMD_AUTH_FAILURE_LIMIT"),
		AuthFailureWindow:   p.secs("CLAIMD_AUTH_FAILURE_WINDOW_SECONDS"),
		Dispatch:            p.bool("CLAIMD_DISPATCH"),
		ReloadInterval:      p.secs("CLAIMD_RELOAD_INTERVAL_SECONDS"),
		Policies: claim.Policies{Default: claim.Policy{
			LeasePolicy:  claim.LeasePolicy(get("CLAIMD_LEASE_POLICY")),
			DefaultLease: p.secs("CLAIMD_LEASE_SECONDS"),
			MaxLease:     p.secs("CLAIMD_MAX_LEASE_SECONDS"),
			MaxAttempts:  p.int("CLAIMD_MAX_ATTEMPTS"),
			BackoffBase:  p.secs("CLAIMD_BACKOFF_BASE_SECONDS"),
			BackoffCap:   p.secs("CLAIMD_BACKOFF_CAP_SECONDS"),
			Retention:    time.Duration(p.int("CLAIMD_RETENTION_DAYS")) * 24 * time.Hour,
			KeyRetention: time.Duration(p.int("CLAIMD_KEY_RETENTION_DAYS")) * 24 * time.Hour,
		}},
	}
	c.ReconcileInterval = p.secs("CLAIMD_RECONCILE_INTERVAL_SECONDS")
	c.ReconcileConcurrency = p.int("CLAIMD_RECONCILE_CONCURRENCY")
	c.RequireSyncReplication = p.bool("CLAIMD_REQUIRE_SYNC_REPLICATION")
	c.ReadTimeout = p.secs("CLAIMD_READ_TIMEOUT_SECONDS")
	c.MaxHeaderBytes = p.int("CLAIMD_MAX_HEADER_BYTES")
	c.MaxConnections = p.int("CLAIMD_MAX_CONNECTIONS")
	c.MaxConnsPerIP = p.int("CLAIMD_MAX_CONNS_PER_IP")
	c.APIBodyBytesInFlight = int64(p.int("CLAIMD_API_BODY_BYTES_IN_FLIGHT"))
	c.IngestBodyBytesInFlight = int64(p.int("CLAIMD_INGEST_BODY_BYTES_IN_FLIGHT"))
	c.IngestAddressSharePercent = p.int("CLAIMD_INGEST_ADDRESS_SHARE_PERCENT")
	c.IngestSourceSharePercent = p.int("CLAIMD_INGEST_SOURCE_SHARE_PERCENT")
	c.IngestMinBodyRate = int64(p.int("CLAIMD_INGEST_MIN_BODY_RATE_BYTES"))
	c.IngestBodyGrace = p.secs("CLAIMD_INGEST_BODY_GRACE_SECONDS")
	c.Group = claim.GroupConfig{Workers: p.int("CLAIMD_GROUP_WORKERS"), MaxItems: p.int("CLAIMD_GROUP_MAX_CALLS"),
		Timeout: p.secs("CLAIMD_REQUEST_TIMEOUT_SECONDS")}
	c.MetricsAddr = get("CLAIMD_METRICS_ADDR")
	c.MetricsToken = get("CLAIMD_METRICS_TOKEN")
	c.Console = p.bool("CLAIMD_CONSOLE")
	c.ConsoleSecureCookie = p.bool("CLAIMD_CONSOLE_SECURE_COOKIE")
	if p.err != nil {
		return Config{}, p.err
	}
	keys, err := auth.ParseStaticKeys(get("CLAIMD_API_KEYS"))
	if err != nil {
		return Config{}, err
	}
	c.APIKeys = keys
	if c.SourcesFile != "" {
		c.Ingest, err = sources.ReadFile(c.SourcesFile, getenv)
		if err != nil {
			return Config{}, fmt.Errorf("CLAIMD_SOURCES_FILE: %w", err)
		}
		c.Policies.BySource = c.Ingest.Policies
		c.Policies.Reconcilers = c.Ingest.ReconcilerPolicies()
		if err := sources.CheckBackfillKeyRetention(c.Ingest, c.Policies); err != nil {
			return Config{}, fmt.Errorf("CLAIMD_SOURCES_FILE: %w", err)
		}
	}
	c.Policies = c.Policies.WithDefaults()
	return c, c.Validate()
}

// Validate reports the first invalid setting by its environment name.
func (c Config) Validate() error {
	if err := checkDatabaseURL(c.DatabaseURL); err != nil {
		return err
	}
	switch {
	case c.DatabaseURL == "":
		return errors.New("DATABASE_URL is required (or run `make run`, which starts a local PostgreSQL)")
	case c.Addr == "":
		return errors.New("CLAIMD_ADDR cannot be empty")
	case c.LogFormat != "json" && c.LogFormat != "console":
		return errors.New("CLAIMD_LOG_FORMAT must be json or console")
	case c.BodyLimit < 1024:
		return fmt.Errorf("CLAIMD_BODY_LIMIT_BYTES must be at least 1024, got %d", c.BodyLimit)
	case c.MaxBatch < 1:
		return fmt.Errorf("CLAIMD_MAX_BATCH must be at least 1, got %d", c.MaxBatch)
	case c.RequestTimeout < time.Second:
		return errors.New("CLAIMD_REQUEST_TIMEOUT_SECONDS must be at least 1")
	case c.MaintenanceInterval < 0:
		return errors.New("CLAIMD_MAINTENANCE_INTERVAL_SECONDS cannot be negative")
	case c.PurgeBatch < 1:
		return errors.New("CLAIMD_PURGE_BATCH must be at least 1")
	case c.KeyCacheTTL < 0:
		return errors.New("CLAIMD_KEY_CACHE_SECONDS cannot be negative")
	case c.KeyNegativeTTL < 0:
		return errors.New("CLAIMD_KEY_NEGATIVE_CACHE_SECONDS cannot be negative")
	case c.AuthFailureLimit < 0:
		return errors.New("CLAIMD_AUTH_FAILURE_LIMIT cannot be negative (0 = no limit)")
	case c.AuthFailureLimit > 0 && c.AuthFailureWindow < time.Second:
		return errors.New("CLAIMD_AUTH_FAILURE_WINDOW_SECONDS must be at least 1 while CLAIMD_AUTH_FAILURE_LIMIT is set")
	case c.ReconcileInterval < 0:
		return errors.New("CLAIMD_RECONCILE_INTERVAL_SECONDS cannot be negative (0 = no reconcile calls from this replica)")
	case c.ReconcileConcurrency < 1 || c.ReconcileConcurrency > 64:
		return fmt.Errorf("CLAIMD_RECONCILE_CONCURRENCY must be between 1 and 64, got %d", c.ReconcileConcurrency)
	case c.ReadTimeout < time.Second:
		return errors.New("CLAIMD_READ_TIMEOUT_SECONDS must be at least 1")
	case c.MaxHeaderBytes < 4096 || c.MaxHeaderBytes > 1<<20:
		return fmt.Errorf("CLAIMD_MAX_HEADER_BYTES must be between 4096 and 1048576, got %d", c.MaxHeaderBytes)
	case c.MaxConnections < 16:
		return fmt.Errorf("CLAIMD_MAX_CONNECTIONS must be at least 16, got %d", c.MaxConnections)
	case c.Group.Workers < 0 || c.Group.Workers > 64:
		return fmt.Errorf("CLAIMD_GROUP_WORKERS must be between 0 and 64, got %d", c.Group.Workers)
	case c.Group.MaxItems < 1 || c.Group.MaxItems > 1000:
		return fmt.Errorf("CLAIMD_GROUP_MAX_CALLS must be between 1 and 1000, got %d", c.Group.MaxItems)
	case c.MaxConnsPerIP < 0:
		return errors.New("CLAIMD_MAX_CONNS_PER_IP cannot be negative (0 = no bound)")
	case c.APIBodyBytesInFlight < int64(c.BodyLimit):
		return fmt.Errorf("CLAIMD_API_BODY_BYTES_IN_FLIGHT (%d) must be at least CLAIMD_BODY_LIMIT_BYTES (%d)", c.APIBodyBytesInFlight, c.BodyLimit)
	case c.IngestBodyBytesInFlight < 64<<10:
		return fmt.Errorf("CLAIMD_INGEST_BODY_BYTES_IN_FLIGHT must be at least 65536, got %d", c.IngestBodyBytesInFlight)
	case c.IngestAddressSharePercent < 1 || c.IngestAddressSharePercent > 100:
		return fmt.Errorf("CLAIMD_INGEST_ADDRESS_SHARE_PERCENT must be between 1 and 100, got %d", c.IngestAddressSharePercent)
	case c.IngestSourceSharePercent < 1 || c.IngestSourceSharePercent > 100:
		return fmt.Errorf("CLAIMD_INGEST_SOURCE_SHARE_PERCENT must be between 1 and 100, got %d", c.IngestSourceSharePercent)
	case c.IngestMinBodyRate < 1:
		return fmt.Errorf("CLAIMD_INGEST_MIN_BODY_RATE_BYTES must be at least 1, got %d", c.IngestMinBodyRate)
	case c.IngestBodyGrace < time.Second:
		return errors.New("CLAIMD_INGEST_BODY_GRACE_SECONDS must be at least 1")
	case c.MetricsAddr != "" && c.MetricsAddr == c.Addr && !strings.HasSuffix(c.Addr, ":0"):
		return errors.New("CLAIMD_METRICS_ADDR must differ from CLAIMD_ADDR (leave it empty to serve /metrics on CLAIMD_ADDR)")
	}
	if err := c.Policies.Validate(); err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	return nil
}

type parser struct {
	get func(string) string
	err error
}

func (p *parser) int(env string) int {
	n, err := strconv.Atoi(p.get(env))
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("%s must be an integer", env) // the value is not quoted: it may be a secret set by mistake
	}
	return n
}

func (p *parser) secs(env string) time.Duration { return time.Duration(p.int(env)) * time.Second }

func (p *parser) bool(env string) bool {
	b, err := strconv.ParseBool(p.get(env))
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("%s must be true or false", env)
	}
	return b
}
