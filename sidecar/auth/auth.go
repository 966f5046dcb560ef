// Package auth authenticates API keys and maps them to tenants.
//
// A key is "ick_" followed by 43 base64url characters (256 random bits).
// Only its SHA-256 is stored (table api_keys); a fast hash is enough for
// keys of that entropy. Presented keys are hashed and compared in constant
// time. Keys also come from configuration (CLAIMD_API_KEYS) for
// bootstrapping and tests.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// Principal is who a request acts as.
type Principal struct {
	// Tenant scopes every query of the request.
	Tenant string
	// Admin keys may act for any tenant (see the HTTP API's X-Tenant header).
	Admin bool
}

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

type cached struct {
	p       Principal
	expires time.Time
}

// Keys authenticates API keys from configuration and from the database.
type Keys struct {
	pool   *pgxpool.Pool
	static []struct {
		h hashed
		p Principal
	}
	ttl   time.Duration
	mu    sync.Mutex
	cache map[hashed]cached
}

// NewKeys returns a Keys over pool (may be nil: configuration keys only).
// Database lookups are cached for cacheTTL, so a revoked key stops working
// within cacheTTL on every replica (0 disables the cache).
func NewKeys(pool *pgxpool.Pool, static []StaticKey, cacheTTL time.Duration) *Keys {
	k := &Keys{pool: pool, ttl: cacheTTL, cache: map[hashed]cached{}}
	for _, s := range static {
		k.static = append(k.static, struct {
			h hashed
			p Principal
		}{sha256.Sum256([]byte(s.Key)), Principal{Tenant: s.Tenant, Admin: s.Admin}})
	}
	return k
}

var errUnauthorized = apperr.New(apperr.Unauthorized, "missing, unknown or revoked API key")

// Authenticate returns the principal of a presented key. Errors:
// Unauthorized, or Unavailable when the database cannot be asked.
func (k *Keys) Authenticate(ctx context.Context, presented string) (Principal, error) {
	if presented == "" {
		return Principal{}, errUnauthorized
	}
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
	if k.pool == nil {
		return Principal{}, errUnauthorized
	}
	now := time.Now()
	k.mu.Lock()
	c, ok := k.cache[h]
	k.mu.Unlock()
	if ok && now.Before(c.expires) {
		return c.p, nil
	}
	var tenant string
	var stored []byte
	err := k.pool.QueryRow(ctx, `SELECT tenant, key_hash FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL`, h[:]).Scan(&tenant, &stored)
	if errors.Is(err, pgx.ErrNoRows) {
		return Principal{}, errUnauthorized
	}
	if err != nil {
		return Principal{}, lookupError(err)
	}
	if subtle.ConstantTimeCompare(stored, h[:]) != 1 {
		return Principal{}, errUnauthorized
	}
	p := Principal{Tenant: tenant}
	if k.ttl > 0 {
		k.mu.Lock()
		if len(k.cache) > 10000 {
			k.cache = map[hashed]cached{}
		}
		k.cache[h] = cached{p: p, expires: now.Add(k.ttl)}
		k.mu.Unlock()
	}
	return p, nil
}

// lookupError is the answer to a database error of a key lookup: always
// Unavailable (503 with Retry-After), never Unauthorized, since the key
// may well be valid, nor internal: a lookup changes nothing, so asking
// again is always safe. A retryable error (claim.ClassifyDB) says why;
// any other (a missing table while migrations are pending) says only that
// the key cannot be checked now. The database's message stays in Err.
func lookupError(err error) error {
	msg := "cannot check the API key now; retry"
	if fault, reason := claim.ClassifyDB(err); fault != claim.DBNotRetryable {
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
	key = "ick_" + base64.RawURLEncoding.EncodeToString(b)
	h := sha256.Sum256([]byte(key))
	info = KeyInfo{Tenant: tenant, Name: name, Prefix: key[:10]}
	err = pool.QueryRow(ctx, `INSERT INTO api_keys (tenant, name, key_hash, key_prefix) VALUES ($1, $2, $3, $4)
		RETURNING id::text, created_at`, tenant, name, h[:], info.Prefix).Scan(&info.ID, &info.CreatedAt)
	if err != nil {
		return "", KeyInfo{}, err
	}
	return key, info, nil
}

// Revoke revokes the key with the given id or prefix ("ick_AbCdEf"). It
// fails when nothing or more than one key matches.
func Revoke(ctx context.Context, pool *pgxpool.Pool, idOrPrefix string) (KeyInfo, error) {
	rows, err := pool.Query(ctx, `UPDATE api_keys SET revoked_at = now()
		WHERE revoked_at IS NULL AND (id::text = $1 OR key_prefix = $1)
		RETURNING id::text, tenant, name, key_prefix, created_at, revoked_at`, idOrPrefix)
	if err != nil {
		return KeyInfo{}, err
	}
	infos, err := pgx.CollectRows(rows, scanInfo)
	if err != nil {
		return KeyInfo{}, err
	}
	switch len(infos) {
	case 0:
		return KeyInfo{}, fmt.Errorf("no active key with id or prefix %q", idOrPrefix)
	case 1:
		return infos[0], nil
	default:
		return KeyInfo{}, fmt.Errorf("prefix %q matched %d keys; use the id", idOrPrefix, len(infos))
	}
}

// List returns every stored key, newest first.
func List(ctx context.Context, pool *pgxpool.Pool) ([]KeyInfo, error) {
	rows, err := pool.Query(ctx, `SELECT id::text, tenant, name, key_prefix, created_at, revoked_at
		FROM api_keys ORDER BY created_at DESC`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanInfo)
}

func scanInfo(row pgx.CollectableRow) (KeyInfo, error) {
	var i KeyInfo
	err := row.Scan(&i.ID, &i.Tenant, &i.Name, &i.Prefix, &i.CreatedAt, &i.RevokedAt)
	return i, err
}
