package auth

// Console sessions: a browser signed in with an API key (table
// console_sessions, migration 00009). The browser holds a random 32-byte
// token; only its SHA-256 is stored, so the table signs nobody in. A
// session ends at sign-out (the row is deleted), after Idle without a
// request, after Absolute since sign-in, and as soon as its key is
// revoked: every lookup checks the key in the same statement that reads
// the session, on whichever replica serves the request.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
)

// Session lifetimes by default.
const (
	DefaultSessionIdle     = 30 * time.Minute
	DefaultSessionAbsolute = 12 * time.Hour
)

// Session is a signed-in console browser.
type Session struct {
	// Principal is the key the session was signed in with (never an admin
	// key); KeyHash identifies it, the key itself is not kept.
	Principal
	// CSRF is the token every form of the session carries.
	CSRF      string
	CreatedAt time.Time
	ExpiresAt time.Time
}

// Sessions stores console sessions in PostgreSQL, so that every replica
// sees them. Safe for concurrent use.
type Sessions struct {
	pool           *pgxpool.Pool
	keys           *Keys
	idle, absolute time.Duration
}

// NewSessions returns the session store over pool; keys checks that a
// configured key behind a session is still configured. idle and absolute
// of 0 take DefaultSessionIdle and DefaultSessionAbsolute.
func NewSessions(pool *pgxpool.Pool, keys *Keys, idle, absolute time.Duration) *Sessions {
	if idle <= 0 {
		idle = DefaultSessionIdle
	}
	if absolute <= 0 {
		absolute = DefaultSessionAbsolute
	}
	return &Sessions{pool: pool, keys: keys, idle: idle, absolute: absolute}
}

// ErrNoSession is the answer to a token that names no live session
// (unknown, signed out, expired, or its key revoked).
var ErrNoSession = apperr.New(apperr.Unauthorized, "not signed in, or the session ended; sign in again")

// RandomToken returns 32 random bytes, base64url without padding.
func RandomToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// tokenID returns the stored id of a session token, false when the token
// is not of the shape RandomToken makes (it then names no session).
func tokenID(token string) ([]byte, bool) {
	var b [32]byte
	n, err := base64.RawURLEncoding.Strict().Decode(b[:], []byte(token))
	if len(token) != 43 || err != nil || n != len(b) {
		return nil, false
	}
	h := sha256.Sum256([]byte(token))
	return h[:], true
}

// Create signs p in: it stores a new session and returns its token (for
// the cookie, never stored) and the session. Admin keys are refused
// (Invalid): a session is one tenant's. Errors: Unavailable.
func (s *Sessions) Create(ctx context.Context, p Principal) (string, Session, error) {
	if p.Admin || p.Tenant == "" || p.KeyPrefix == "" {
		return "", Session{}, apperr.Field("api_key", "an admin key cannot sign in to the console; use one tenant's key")
	}
	token, err := RandomToken()
	if err != nil {
		return "", Session{}, err
	}
	csrf, err := RandomToken()
	if err != nil {
		return "", Session{}, err
	}
	id, _ := tokenID(token)
	sess := Session{Principal: p, CSRF: csrf}
	var keyID *string
	if p.KeyID != "" {
		keyID = &p.KeyID
	}
	if err := queries.PurgeSessions(ctx, s.pool); err != nil {
		return "", Session{}, db.Error(err)
	}
	row, err := queries.CreateSession(ctx, s.pool, dbsqlc.CreateSessionParams{ID: id, Tenant: p.Tenant, KeyID: keyID,
		KeyHash: p.KeyHash[:], KeyPrefix: p.KeyPrefix, CsrfToken: csrf,
		IdleSeconds: s.idle.Seconds(), AbsoluteSeconds: s.absolute.Seconds()})
	if err != nil {
		return "", Session{}, db.Error(err)
	}
	sess.CreatedAt, sess.ExpiresAt = row.CreatedAt, row.ExpiresAt
	return token, sess, nil
}

// Lookup returns the live session of token. A token of another shape
// than RandomToken's costs no query. A session whose configured key is no
// longer configured is ended. Errors: ErrNoSession; Unavailable.
func (s *Sessions) Lookup(ctx context.Context, token string) (Session, error) {
	id, ok := tokenID(token)
	if !ok {
		return Session{}, ErrNoSession
	}
	row, err := queries.LookupSession(ctx, s.pool, dbsqlc.LookupSessionParams{ID: id, IdleSeconds: s.idle.Seconds()})
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, ErrNoSession
	}
	if err != nil {
		return Session{}, db.Error(err)
	}
	sess := Session{Principal: Principal{Tenant: row.Tenant, KeyID: row.KeyID, KeyPrefix: row.KeyPrefix}, CSRF: row.CsrfToken,
		CreatedAt: row.CreatedAt, ExpiresAt: row.ExpiresAt}
	copy(sess.KeyHash[:], row.KeyHash)
	if sess.KeyID == "" && !s.keys.staticActive(sess.KeyHash, sess.Tenant) {
		_ = s.End(ctx, token)
		return Session{}, ErrNoSession
	}
	return sess, nil
}

// End deletes the session of token (sign-out); an unknown token is no
// error. Errors: Unavailable.
func (s *Sessions) End(ctx context.Context, token string) error {
	id, ok := tokenID(token)
	if !ok {
		return nil
	}
	if err := queries.EndSession(ctx, s.pool, id); err != nil {
		return db.Error(err)
	}
	return nil
}

// staticActive reports whether a configured, non-admin key of tenant has
// hash h (constant time over the list).
func (k *Keys) staticActive(h hashed, tenant string) bool {
	found := false
	for i := range k.static {
		if subtle.ConstantTimeCompare(h[:], k.static[i].h[:]) == 1 && k.static[i].p.Tenant == tenant && !k.static[i].p.Admin {
			found = true
		}
	}
	return found
}
