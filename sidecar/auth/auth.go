// Package auth authenticates API keys and maps them to tenants.
//
// A key is "ick_" followed by 43 base64url characters (256 random bits).
// Only its SHA-256 is stored (table api_keys); a fast hash is enough for
// keys of that entropy. Presented keys are hashed and compared in constant
// time. Keys also come from configuration (CLAIMD_API_KEYS) for
// bootstrapping and tests.
//
// The sidecar faces callers without a key, so what they can make it spend
// is bounded (see Keys): a presented key costs at most one database query,
// and only when it has the shape of an issued key, was not refused within
// the negative cache TTL and its client address is under the failure
// limit. Answers are trusted for a documented time: a revoked key stops
// working within the cache TTL, a key refused before it existed works
// within the negative TTL of its creation.
package auth

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/singleflight"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
)

// Principal is who a request acts as.
type Principal struct {
	// Tenant scopes every query of the request.
	Tenant string
	// Admin keys may act for any tenant (see the HTTP API's X-Tenant header).
	Admin bool
	// KeyID is the id of a key from the database (api_keys.id), "" for a
	// configured key.
	KeyID string
	// KeyPrefix names the key without revealing it, for audit entries: a
	// database key's stored prefix ("ick_" and 6 characters, as `claimd
	// keys list` shows it), or for a configured key "static:" and the
	// first 8 hex digits of its SHA-256.
	KeyPrefix string
	// KeyHash is the SHA-256 of the key (what api_keys stores).
	KeyHash [sha256.Size]byte
}

// staticPrefix is the KeyPrefix of a configured key with hash h.
func staticPrefix(h hashed) string { return "static:" + hex.EncodeToString(h[:4]) }

// StaticKey is a key from configuration.
type StaticKey struct {
	Tenant string
	Key    string
	Admin  bool
}

// ParseStaticKeys parses "tenant:key,tenant:key". A tenant named "*" makes
// an admin key. Errors name the offending entry by position, never the key.
func ParseStaticKeys(s string) ([]StaticKey, error) {
	var out []StaticKey
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		tenant, key, ok := strings.Cut(part, ":")
		if !ok || tenant == "" || key == "" {
			return nil, fmt.Errorf("CLAIMD_API_KEYS entry %d: want tenant:key", i+1)
		}
		if tenant != "*" && !tenantRe.MatchString(tenant) {
			return nil, fmt.Errorf("CLAIMD_API_KEYS entry %d: tenant must match %s", i+1, tenantRe)
		}
		if len(key) < 16 {
			return nil, fmt.Errorf("CLAIMD_API_KEYS entry %d: key must be at least 16 characters", i+1)
		}
		out = append(out, StaticKey{Tenant: tenant, Key: key, Admin: tenant == "*"})
	}
	return out, nil
}

var tenantRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)

// ValidTenant reports whether s is a valid tenant name.
func ValidTenant(s string) bool { return tenantRe.MatchString(s) }

type hashed [sha256.Size]byte

// keyPrefix starts every key Create makes; 43 base64url characters (256
// random bits) follow it.
const keyPrefix = "ick_"

// issuedLen is the length of a key Create makes.
const issuedLen = len(keyPrefix) + 43

// issuedShape reports whether key has the shape of the keys Create makes:
// keyPrefix and the canonical unpadded base64url encoding of 32 bytes. A
// key of any other shape cannot be in the database.
func issuedShape(key string) bool {
	if len(key) != issuedLen || !strings.HasPrefix(key, keyPrefix) {
		return false
	}
	var b [32]byte
	n, err := base64.RawURLEncoding.Strict().Decode(b[:], []byte(key[len(keyPrefix):]))
	return err == nil && n == len(b)
}

// Refusal is why an authentication was refused, as metrics count it.
type Refusal string

// Refusals.
const (
	// RefusedMissing: no key was presented. No query.
	RefusedMissing Refusal = "missing"
	// RefusedMalformed: the key is no configured key and not of the shape
	// of the keys claimd issues, so it cannot be in the database. No query.
	RefusedMalformed Refusal = "malformed"
	// RefusedCached: the database did not know the key within the
	// negative cache TTL. No query.
	RefusedCached Refusal = "cached"
	// RefusedUnknown: the database has no active key with this hash (never
	// issued, or revoked). One query.
	RefusedUnknown Refusal = "unknown"
	// RefusedRateLimited: the client's address has failed too often in its
	// window; the key was not checked (429). No query.
	RefusedRateLimited Refusal = "rate_limited"
)

// Refusals lists every Refusal, for metrics to start at zero.
var Refusals = []Refusal{RefusedMissing, RefusedMalformed, RefusedCached, RefusedUnknown, RefusedRateLimited}

// Observer receives authentication events for metrics. Implementations
// must be safe for concurrent use and must not block.
type Observer interface {
	// AuthRefused is called once per refused authentication.
	AuthRefused(reason Refusal)
	// KeyLookedUp is called once per database query for a key.
	KeyLookedUp()
}

type nopObserver struct{}

func (nopObserver) AuthRefused(Refusal) {}
func (nopObserver) KeyLookedUp()        {}

// Defaults of Options, and of the settings that feed them
// (CLAIMD_KEY_CACHE_SECONDS, CLAIMD_KEY_NEGATIVE_CACHE_SECONDS,
// CLAIMD_AUTH_FAILURE_LIMIT, CLAIMD_AUTH_FAILURE_WINDOW_SECONDS).
const (
	DefaultCacheTTL      = 30 * time.Second
	DefaultNegativeTTL   = 30 * time.Second
	DefaultFailureLimit  = 20 // failed authentications per address per window
	DefaultFailureWindow = time.Minute
	// DefaultMaxLookups is the default cap on database key lookups in
	// flight at once (concurrent requests with one key share one lookup).
	DefaultMaxLookups = 4
	// DefaultMaxClients is the default number of client addresses the
	// failure limiter remembers (about 100 bytes each).
	DefaultMaxClients = 10000
	// DefaultMaxNegative is the default number of failed key hashes the
	// negative cache remembers (about 100 bytes each).
	DefaultMaxNegative = 10000
)

// maxCached bounds the cache of keys the database accepted. Only valid
// keys enter it, so callers without a key cannot grow it.
const maxCached = 10000

// lookupTimeout bounds a database lookup whose caller has no deadline.
const lookupTimeout = 10 * time.Second

// Options sets what authentication may cost and how long its answers are
// trusted. Durations are used as given; a capacity of 0 means its default.
type Options struct {
	// CacheTTL is how long a key the database accepted is accepted again
	// without asking it: a revoked key stops working within CacheTTL on
	// every replica. 0 asks the database on every request.
	CacheTTL time.Duration
	// NegativeTTL is how long a key the database did not know is refused
	// without asking it again: a key presented before it was created is
	// accepted at most NegativeTTL after its creation. 0 disables the
	// negative cache.
	NegativeTTL time.Duration
	// FailureLimit is how many failed authentications one client address
	// (IPv6: its /64) may have per FailureWindow; further attempts are
	// refused with RateLimited, without a query, until the window ends.
	// Keys this Keys accepted before (configured keys, keys in the cache,
	// fresh or expired) are still checked. 0 disables the limit.
	FailureLimit int
	// FailureWindow is the length of a client's window; it starts at the
	// client's first attempt after its previous window ended. Default
	// DefaultFailureWindow when FailureLimit is set and this is not.
	FailureWindow time.Duration
	// MaxLookups caps the database key lookups in flight at once; a lookup
	// waits for a free slot until its context ends (then Unavailable).
	MaxLookups int
	// MaxClients caps the client addresses the failure limiter remembers,
	// MaxNegative the key hashes the negative cache remembers; the oldest
	// entry is forgotten first.
	MaxClients  int
	MaxNegative int
	// Observer receives refusals and lookups; default none.
	Observer Observer
	// Now is the clock; default time.Now. Tests move it.
	Now func() time.Time
}

// DefaultOptions returns the documented defaults.
func DefaultOptions() Options {
	return Options{CacheTTL: DefaultCacheTTL, NegativeTTL: DefaultNegativeTTL,
		FailureLimit: DefaultFailureLimit, FailureWindow: DefaultFailureWindow}
}

type cached struct {
	p       Principal
	expires time.Time
}

// Keys authenticates API keys from configuration and from the database. It
// is safe for concurrent use. What a caller without a valid key can make
// it spend is bounded: a key of another shape than Create's costs no
// query, a key the database refused costs none for the negative TTL,
// concurrent lookups of one key share one query, at most MaxLookups run at
// once, and an address that failed FailureLimit times in its window costs
// none until the window ends. Its memory is bounded by maxCached,
// MaxNegative and MaxClients entries.
type Keys struct {
	pool   *pgxpool.Pool
	static []struct {
		h hashed
		p Principal
	}
	opts  Options
	obs   Observer
	now   func() time.Time
	mu    sync.Mutex
	cache map[hashed]cached
	neg   *negativeCache // nil: no negative cache
	lim   *limiter       // nil: no failure limit
	slots chan struct{}  // one token per lookup in flight
	fl    singleflight.Group
	// joined, when set (tests), is called once a lookup joined its flight.
	joined func()
}

// NewKeys returns a Keys over pool (may be nil: configuration keys only)
// with DefaultOptions and the given cache TTL (see Options.CacheTTL).
func NewKeys(pool *pgxpool.Pool, static []StaticKey, cacheTTL time.Duration) *Keys {
	o := DefaultOptions()
	o.CacheTTL = cacheTTL
	return New(pool, static, o)
}

// New returns a Keys over pool (may be nil: configuration keys only) with
// the given options.
func New(pool *pgxpool.Pool, static []StaticKey, o Options) *Keys {
	o.MaxLookups = cmp.Or(max(o.MaxLookups, 0), DefaultMaxLookups)
	o.MaxClients = cmp.Or(max(o.MaxClients, 0), DefaultMaxClients)
	o.MaxNegative = cmp.Or(max(o.MaxNegative, 0), DefaultMaxNegative)
	if o.FailureLimit > 0 && o.FailureWindow <= 0 {
		o.FailureWindow = DefaultFailureWindow
	}
	k := &Keys{pool: pool, opts: o, obs: o.Observer, now: o.Now, cache: map[hashed]cached{},
		slots: make(chan struct{}, o.MaxLookups)}
	if k.obs == nil {
		k.obs = nopObserver{}
	}
	if k.now == nil {
		k.now = time.Now
	}
	if o.NegativeTTL > 0 {
		k.neg = newNegativeCache(o.MaxNegative)
	}
	if o.FailureLimit > 0 {
		k.lim = newLimiter(o.FailureLimit, o.FailureWindow, o.MaxClients)
	}
	for _, s := range static {
		k.static = append(k.static, struct {
			h hashed
			p Principal
		}{sha256.Sum256([]byte(s.Key)), Principal{Tenant: s.Tenant, Admin: s.Admin}})
		last := &k.static[len(k.static)-1]
		last.p.KeyPrefix, last.p.KeyHash = staticPrefix(last.h), last.h
	}
	return k
}

var errUnauthorized = apperr.New(apperr.Unauthorized, "missing, unknown or revoked API key")

// Authenticate returns the principal of a presented key, for a request
// from client: the caller's network address (an IP address as text; the
// failure limit counts per address, IPv6 per /64). Neither the key nor the
// address appears in an error. Errors: Unauthorized; RateLimited (with
// RetryAfter) while client is over the failure limit, the key unchecked;
// Unavailable when the database cannot be asked, or no lookup slot freed
// up before ctx ended.
//
// In order: a configured key (constant time over the list) and a key in
// the cache are accepted without a query; a key the cache held and let
// expire is asked for again even over the limit (its holder knew a valid
// key); otherwise the failure limit applies, then a key not of Create's
// shape or in the negative cache is refused without a query, and only
// then is the database asked.
func (k *Keys) Authenticate(ctx context.Context, client, presented string) (Principal, error) {
	h := hashed(sha256.Sum256([]byte(presented)))
	found := -1
	for i := range k.static { // no early exit: constant time over the list
		if subtle.ConstantTimeCompare(h[:], k.static[i].h[:]) == 1 {
			found = i
		}
	}
	if found >= 0 {
		return k.static[found].p, nil
	}
	now := k.now()
	k.mu.Lock()
	c, known := k.cache[h]
	k.mu.Unlock()
	if known && now.Before(c.expires) {
		return c.p, nil
	}
	a := attempt{k: k, client: clientID(client), now: now}
	if !known && k.lim != nil {
		wait, ok := k.lim.admit(a.client, now)
		if !ok {
			k.obs.AuthRefused(RefusedRateLimited)
			return Principal{}, rateLimited(wait)
		}
		a.admitted = true
	}
	switch {
	case presented == "":
		return Principal{}, a.refuse(RefusedMissing)
	case !issuedShape(presented):
		return Principal{}, a.refuse(RefusedMalformed)
	case k.pool == nil:
		return Principal{}, a.refuse(RefusedUnknown)
	case !known && k.neg != nil && k.neg.has(h, now):
		return Principal{}, a.refuse(RefusedCached)
	}
	p, ok, err := k.lookup(ctx, h)
	if err != nil {
		a.settle()
		return Principal{}, err
	}
	if !ok {
		k.mu.Lock()
		delete(k.cache, h) // revoked
		k.mu.Unlock()
		if k.neg != nil {
			k.neg.add(h, now.Add(k.opts.NegativeTTL))
		}
		return Principal{}, a.refuse(RefusedUnknown)
	}
	a.settle()
	k.mu.Lock()
	if len(k.cache) >= maxCached {
		clear(k.cache)
	}
	// Kept also when CacheTTL is 0: an expired entry marks a key that was
	// valid, which the failure limit lets through to be asked for again.
	k.cache[h] = cached{p: p, expires: now.Add(k.opts.CacheTTL)}
	k.mu.Unlock()
	return p, nil
}

// attempt is one authentication as the failure limiter sees it.
type attempt struct {
	k        *Keys
	client   string
	now      time.Time
	admitted bool // the limiter reserved a place for it
}

// refuse counts the attempt as a failure of its client and returns
// Unauthorized.
func (a attempt) refuse(why Refusal) error {
	if a.k.lim != nil {
		a.k.lim.failed(a.client, a.now, a.admitted)
	}
	a.k.obs.AuthRefused(why)
	return errUnauthorized
}

// settle ends an admitted attempt that did not fail.
func (a attempt) settle() {
	if a.admitted {
		a.k.lim.succeeded(a.client)
	}
}

func rateLimited(wait time.Duration) error {
	secs := max(1, int64((wait+time.Second-1)/time.Second))
	return &apperr.Error{Code: apperr.RateLimited, RetryAfter: time.Duration(secs) * time.Second,
		Message: fmt.Sprintf("too many failed authentications from this address; retry in %d s", secs)}
}

type lookedUp struct {
	p     Principal
	found bool
}

// lookup asks the database for the active key with hash h. Concurrent
// lookups of one hash share one query, which waits for one of MaxLookups
// slots. The query runs to its first caller's deadline even when that
// caller gives up, so the others still get its answer.
func (k *Keys) lookup(ctx context.Context, h hashed) (Principal, bool, error) {
	ch := k.fl.DoChan(string(h[:]), func() (any, error) {
		deadline, ok := ctx.Deadline()
		if !ok {
			deadline = time.Now().Add(lookupTimeout)
		}
		qctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		defer cancel()
		select {
		case k.slots <- struct{}{}:
			defer func() { <-k.slots }()
		case <-qctx.Done():
			return nil, errBusy
		}
		k.obs.KeyLookedUp()
		row, err := queries.KeyByHash(qctx, k.pool, h[:])
		if errors.Is(err, pgx.ErrNoRows) {
			return lookedUp{}, nil
		}
		if err != nil {
			return nil, lookupError(err)
		}
		if subtle.ConstantTimeCompare(row.KeyHash, h[:]) != 1 {
			return lookedUp{}, nil
		}
		return lookedUp{p: Principal{Tenant: row.Tenant, KeyID: row.ID, KeyPrefix: row.KeyPrefix, KeyHash: h}, found: true}, nil
	})
	if k.joined != nil {
		k.joined()
	}
	select {
	case r := <-ch:
		if r.Err != nil {
			return Principal{}, false, r.Err
		}
		l := r.Val.(lookedUp)
		return l.p, l.found, nil
	case <-ctx.Done():
		return Principal{}, false, errLate
	}
}

var (
	errBusy = apperr.New(apperr.Unavailable, "cannot check the API key now: too many key lookups at once; retry")
	errLate = apperr.New(apperr.Unavailable, "cannot check the API key now: the lookup did not finish in time; retry")
)

// lookupError is the answer to a database error of a key lookup: always
// Unavailable (503 with Retry-After), never Unauthorized, since the key
// may well be valid, nor internal: a lookup changes nothing, so asking
// again is always safe. A retryable error (db.Classify) says why;
// any other (a missing table while migrations are pending) says only that
// the key cannot be checked now. The database's message stays in Err.
func lookupError(err error) error {
	msg := "cannot check the API key now; retry"
	if fault, reason := db.Classify(err); fault != db.NotRetryable {
		msg = "cannot check the API key now: " + reason + "; retry"
	}
	return &apperr.Error{Code: apperr.Unavailable, Message: msg, Err: err}
}

// KeyInfo describes a stored key; the key itself is never stored.
type KeyInfo struct {
	ID        string
	Tenant    string
	Name      string
	Prefix    string
	CreatedAt time.Time
	RevokedAt *time.Time
}

// Create makes a new key for tenant and returns it. The key is shown once:
// only its hash is stored.
func Create(ctx context.Context, pool *pgxpool.Pool, tenant, name string) (key string, info KeyInfo, err error) {
	if !ValidTenant(tenant) {
		return "", KeyInfo{}, fmt.Errorf("tenant must match %s", tenantRe)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", KeyInfo{}, err
	}
	key = keyPrefix + base64.RawURLEncoding.EncodeToString(b)
	h := sha256.Sum256([]byte(key))
	info = KeyInfo{Tenant: tenant, Name: name, Prefix: key[:10]}
	row, err := queries.CreateKey(ctx, pool, dbsqlc.CreateKeyParams{Tenant: tenant, Name: name, KeyHash: h[:], KeyPrefix: info.Prefix})
	if err != nil {
		return "", KeyInfo{}, err
	}
	info.ID, info.CreatedAt = row.ID, row.CreatedAt
	return key, info, nil
}

// Revoke revokes the key with the given id or prefix ("ick_AbCdEf"), both
// whole, as List shows them. It fails, revoking nothing, when no active
// key or more than one matches.
func Revoke(ctx context.Context, pool *pgxpool.Pool, idOrPrefix string) (KeyInfo, error) {
	var info KeyInfo
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		rows, err := queries.RevokeKeys(ctx, tx, idOrPrefix)
		if err != nil {
			return err
		}
		switch len(rows) {
		case 0:
			return fmt.Errorf("no active key with id or prefix %q (the whole ID or PREFIX column of `claimd keys list`)", idOrPrefix)
		case 1:
			info = keyInfo(dbsqlc.KeysRow(rows[0]))
			return nil
		default:
			return fmt.Errorf("prefix %q matches %d active keys; nothing revoked: use the id", idOrPrefix, len(rows))
		}
	})
	return info, err
}

// Active returns how many stored keys are not revoked.
func Active(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	n, err := queries.ActiveKeys(ctx, pool)
	return int(n), err
}

// List returns every stored key, newest first.
func List(ctx context.Context, pool *pgxpool.Pool) ([]KeyInfo, error) {
	rows, err := queries.Keys(ctx, pool)
	if err != nil {
		return nil, err
	}
	infos := make([]KeyInfo, len(rows))
	for i, r := range rows {
		infos[i] = keyInfo(r)
	}
	return infos, nil
}

func keyInfo(r dbsqlc.KeysRow) KeyInfo {
	return KeyInfo{ID: r.ID, Tenant: r.Tenant, Name: r.Name, Prefix: r.KeyPrefix, CreatedAt: r.CreatedAt, RevokedAt: r.RevokedAt}
}

// queries runs the package's statements (sidecar/db/queries/auth.sql).
var queries = dbsqlc.New()
