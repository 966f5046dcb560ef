package auth_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

const (
	staticKey = "static-key-0123456789"
	cacheTTL  = 30 * time.Second
	negTTL    = 10 * time.Second
	window    = time.Minute
)

// lookups counts the key lookups that reach the database (a pgx tracer on
// the pool), and how many were in flight at most. When gate is set, each
// lookup waits for it to close before it is sent, and first announces
// itself on started.
type lookups struct {
	n, inflight, most atomic.Int64
	gate              chan struct{}
	started           chan struct{}
}

type lookupCtx struct{}

func (l *lookups) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if !strings.Contains(d.SQL, "FROM api_keys WHERE key_hash") {
		return ctx
	}
	l.n.Add(1)
	cur := l.inflight.Add(1)
	for m := l.most.Load(); cur > m && !l.most.CompareAndSwap(m, cur); m = l.most.Load() {
	}
	if l.gate != nil {
		l.started <- struct{}{}
		<-l.gate
	}
	return context.WithValue(ctx, lookupCtx{}, true)
}

func (l *lookups) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if ctx.Value(lookupCtx{}) != nil {
		l.inflight.Add(-1)
	}
}

// clock is the Keys' clock; tests move it instead of sleeping.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// refusals is an auth.Observer that counts.
type refusals struct {
	mu      sync.Mutex
	by      map[auth.Refusal]int
	lookups int
}

func (r *refusals) AuthRefused(why auth.Refusal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.by[why]++
}

func (r *refusals) KeyLookedUp() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lookups++
}

func (r *refusals) get(why auth.Refusal) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.by[why]
}

type bundle struct {
	ctx     context.Context
	pool    *pgxpool.Pool
	keys    *auth.Keys
	clock   *clock
	lookups *lookups
	obs     *refusals
}

// setup builds Keys over a fresh database with a static key, the test
// TTLs, a failure limit of 20 per minute and a clock at a fixed time;
// adjust changes the options or arms the lookup gate.
func setup(t *testing.T, adjust ...func(*auth.Options, *lookups)) *bundle {
	t.Helper()
	l := &lookups{}
	b := &bundle{ctx: context.Background(), clock: &clock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)},
		lookups: l, obs: &refusals{by: map[auth.Refusal]int{}}}
	o := auth.Options{CacheTTL: cacheTTL, NegativeTTL: negTTL, FailureLimit: 20, FailureWindow: window,
		Observer: b.obs, Now: b.clock.now}
	for _, f := range adjust {
		f(&o, l)
	}
	b.pool = pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = l })
	b.keys = auth.New(b.pool, []auth.StaticKey{{Tenant: "static", Key: staticKey}}, o)
	return b
}

// newKey returns a key of the shape claimd issues that is in no database.
func newKey(t testing.TB) string {
	t.Helper()
	b := make([]byte, 32)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return "ick_" + base64.RawURLEncoding.EncodeToString(b)
}

// auth authenticates key from client and checks that no error repeats
// the key or the address.
func (b *bundle) auth(t *testing.T, client, key string) (auth.Principal, error) {
	t.Helper()
	p, err := b.keys.Authenticate(b.ctx, client, key)
	if err != nil && key != "" {
		require.NotContains(t, err.Error(), key)
		require.NotContains(t, err.Error(), client)
	}
	return p, err
}

func (b *bundle) accepted(t *testing.T, client, key, tenant string) {
	t.Helper()
	p, err := b.auth(t, client, key)
	require.NoError(t, err)
	require.Equal(t, tenant, p.Tenant)
}

func (b *bundle) refused(t *testing.T, client, key string, code apperr.Code) *apperr.Error {
	t.Helper()
	_, err := b.auth(t, client, key)
	require.Equal(t, code, apperr.CodeOf(err), "%v", err)
	return apperr.As(err)
}

// queries returns the lookups sent since the last call.
func (b *bundle) queries(last *int64) int64 {
	n := b.lookups.n.Load()
	d := n - *last
	*last = n
	return d
}

func TestIssuedShape(t *testing.T) {
	t.Parallel()
	key := newKey(t)
	for _, tc := range []struct {
		key  string
		want bool
	}{
		{key, true},
		{"ick_" + strings.Repeat("A", 43), true},
		{"", false},
		{"ick_", false},
		{key[:len(key)-1], false},
		{key + "A", false},
		{"ICK_" + key[4:], false},
		{"ick-" + key[4:], false},
		{"ick_" + strings.Repeat("A", 42) + "B", false}, // non-zero padding bits: not canonical
		{"ick_" + strings.Repeat("+", 43), false},       // standard base64, not base64url
		{"ick_" + strings.Repeat("A", 41) + "==", false},
		{"ick_" + strings.Repeat("A", 42) + "\n", false},
		{staticKey, false},
	} {
		require.Equal(t, tc.want, auth.IssuedShape(tc.key), "%q", tc.key)
	}
}

// FuzzIssuedShape: whatever is taken as an issued key is "ick_" and the
// canonical encoding of 32 bytes, so it round-trips.
func FuzzIssuedShape(f *testing.F) {
	f.Add(newKey(f))
	f.Add("ick_" + strings.Repeat("A", 42) + "B")
	f.Add("ick_" + strings.Repeat("-", 43))
	f.Add("")
	f.Fuzz(func(t *testing.T, key string) {
		if !auth.IssuedShape(key) {
			return
		}
		raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(key, "ick_"))
		require.NoError(t, err)
		require.Len(t, raw, 32)
		require.Equal(t, key, "ick_"+base64.RawURLEncoding.EncodeToString(raw))
	})
}

func TestClientID(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"192.0.2.7":                   "192.0.2.7",
		"::ffff:192.0.2.7":            "192.0.2.7",
		"2001:db8:1:2:3:4:5:6":        "2001:db8:1:2::/64",
		"2001:db8:1:2:ffff::1":        "2001:db8:1:2::/64",
		"fe80::1%eth0":                "fe80::/64",
		"":                            "",
		"not an address":              "not an address",
		strings.Repeat("x", 100):      strings.Repeat("x", 64),
		"2001:db8:1:3:3:4:5:6":        "2001:db8:1:3::/64",
		"0000:0000:0000:0000::0000:1": "::/64",
	} {
		require.Equal(t, want, auth.ClientID(in), in)
	}
}

// A key that cannot have been issued by claimd costs no query, from one
// address or many; the failure limit still counts it.
func TestJunkKeysCostNoQuery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var last int64
	junk := func(i int) string {
		switch i % 4 {
		case 0:
			return fmt.Sprintf("junk-%d-%s", i, newKey(t))
		case 1:
			return newKey(t)[:46]
		case 2:
			return newKey(t) + "x"
		}
		return ""
	}
	limited := 0
	for i := range 1000 {
		_, err := b.auth(t, "192.0.2.1", junk(i))
		switch apperr.CodeOf(err) {
		case apperr.RateLimited:
			limited++
		case apperr.Unauthorized:
		default:
			t.Fatalf("junk key %d: %v", i, err)
		}
	}
	require.Zero(t, b.queries(&last), "1,000 junk keys from one address")
	require.Equal(t, 980, limited, "refused 401 up to the limit of 20, then 429")
	for i := range 1000 {
		b.refused(t, fmt.Sprintf("198.51.100.%d", i%250), junk(i), apperr.Unauthorized)
	}
	require.Zero(t, b.queries(&last), "1,000 junk keys from 250 addresses")
	// The 20 refused before the limit and the 1,000 after: a quarter missing.
	require.Equal(t, 15+750, b.obs.get(auth.RefusedMalformed))
	require.Equal(t, 5+250, b.obs.get(auth.RefusedMissing))
	b.accepted(t, "192.0.2.1", staticKey, "static") // a configured key works from a limited address
}

// A storm of keys of the issued shape from one address costs at most the
// failure limit in queries, however concurrent; another address still
// authenticates, and the address is asked for again once its window ends.
func TestStormFromOneAddressIsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var last int64
	var limited, unauthorized atomic.Int64
	var wg sync.WaitGroup
	for range 1000 {
		wg.Go(func() {
			_, err := b.keys.Authenticate(b.ctx, "192.0.2.1", newKey(t))
			switch e := apperr.As(err); {
			case e == nil:
				t.Error("a random key was accepted")
			case e.Code == apperr.RateLimited:
				if e.RetryAfter <= 0 || e.RetryAfter > window {
					t.Errorf("retry after %s", e.RetryAfter)
				}
				limited.Add(1)
			case e.Code == apperr.Unauthorized:
				unauthorized.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 20, b.queries(&last), "at most the failure limit reaches the database")
	require.EqualValues(t, 20, unauthorized.Load())
	require.EqualValues(t, 980, limited.Load())
	require.Equal(t, 980, b.obs.get(auth.RefusedRateLimited))
	require.Equal(t, 20, b.obs.get(auth.RefusedUnknown))

	key, _, err := auth.Create(b.ctx, b.pool, "tenant-a", "other address")
	require.NoError(t, err)
	b.accepted(t, "192.0.2.2", key, "tenant-a")
	require.EqualValues(t, 1, b.queries(&last), "another address is not limited by this one's failures")

	b.clock.advance(window)
	b.refused(t, "192.0.2.1", newKey(t), apperr.Unauthorized)
	require.EqualValues(t, 1, b.queries(&last), "the window ended: the address is asked for again")
}

// A wrong key presented again is refused from the negative cache until its
// TTL ends.
func TestWrongKeyRepeatedCostsOneQuery(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *auth.Options, _ *lookups) { o.FailureLimit = 0 })
	var last int64
	wrong := newKey(t)
	for range 100 {
		b.refused(t, "192.0.2.1", wrong, apperr.Unauthorized)
	}
	require.EqualValues(t, 1, b.queries(&last))
	require.Equal(t, 99, b.obs.get(auth.RefusedCached))
	b.clock.advance(negTTL - time.Second)
	b.refused(t, "192.0.2.9", wrong, apperr.Unauthorized)
	require.Zero(t, b.queries(&last), "cached for every address")
	b.clock.advance(time.Second)
	b.refused(t, "192.0.2.1", wrong, apperr.Unauthorized)
	require.EqualValues(t, 1, b.queries(&last), "asked again after the negative TTL")
}

// Over the limit, an address is answered RateLimited with the rest of its
// window, without a query, except for keys already known to be valid.
func TestFailureLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *auth.Options, _ *lookups) { o.FailureLimit = 3 })
	var last int64
	cachedKey, _, err := auth.Create(b.ctx, b.pool, "tenant-a", "cached")
	require.NoError(t, err)
	newcomer, _, err := auth.Create(b.ctx, b.pool, "tenant-b", "newcomer")
	require.NoError(t, err)
	b.accepted(t, "192.0.2.2", cachedKey, "tenant-a")
	require.EqualValues(t, 1, b.queries(&last))

	const a = "192.0.2.1"
	b.refused(t, a, newKey(t), apperr.Unauthorized)
	b.clock.advance(5 * time.Second)
	b.refused(t, a, "", apperr.Unauthorized)
	b.refused(t, a, newKey(t), apperr.Unauthorized)
	require.EqualValues(t, 2, b.queries(&last))
	e := b.refused(t, a, newKey(t), apperr.RateLimited)
	require.Equal(t, 55*time.Second, e.RetryAfter, "the window started at the first failure")
	require.Contains(t, e.Message, "55 s")
	b.clock.advance(10*time.Second + 300*time.Millisecond)
	require.Equal(t, 45*time.Second, b.refused(t, a, newKey(t), apperr.RateLimited).RetryAfter, "rounded up to whole seconds")
	b.refused(t, a, newcomer, apperr.RateLimited)
	require.Zero(t, b.queries(&last), "nothing is checked while limited, not even a valid key the replica has not seen")

	b.accepted(t, a, staticKey, "static")
	b.accepted(t, a, cachedKey, "tenant-a")
	require.Zero(t, b.queries(&last), "configured and cached keys cost nothing and still work")
	b.clock.advance(cacheTTL)
	b.accepted(t, a, cachedKey, "tenant-a")
	require.EqualValues(t, 1, b.queries(&last), "a key the cache held is asked for again while limited")
	b.accepted(t, "192.0.2.3", newcomer, "tenant-b")
	require.EqualValues(t, 1, b.queries(&last), "other addresses are not limited")

	b.clock.advance(window - 5*time.Second - 10*time.Second - 300*time.Millisecond - cacheTTL)
	b.accepted(t, a, newcomer, "tenant-b")
	b.refused(t, a, newKey(t), apperr.Unauthorized)
	require.EqualValues(t, 1, b.queries(&last), "a new window: newcomer is cached, the wrong key asked for")
}

// A lookup the database cannot answer is Unavailable and not a failure: an
// outage never turns into 429.
func TestOutageIsNotAFailure(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *auth.Options, _ *lookups) { o.FailureLimit = 2 })
	b.pool.Close()
	for range 5 {
		b.refused(t, "192.0.2.1", newKey(t), apperr.Unavailable)
	}
	b.refused(t, "192.0.2.1", "junk-key-0123456789", apperr.Unauthorized)
	b.refused(t, "192.0.2.1", "junk-key-0123456789", apperr.Unauthorized)
	b.refused(t, "192.0.2.1", newKey(t), apperr.RateLimited)
}

// A key presented before it existed works once the negative TTL has
// passed; one created with Create works at once.
func TestKeyCreatedAfterFailedLookup(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var last int64
	early := newKey(t)
	b.refused(t, "192.0.2.1", early, apperr.Unauthorized)
	h := sha256.Sum256([]byte(early))
	_, err := b.pool.Exec(b.ctx, `INSERT INTO api_keys (tenant, name, key_hash, key_prefix) VALUES ('tenant-a', 'early', $1, $2)`,
		h[:], early[:10])
	require.NoError(t, err)
	b.refused(t, "192.0.2.1", early, apperr.Unauthorized)
	b.clock.advance(negTTL - time.Second)
	b.refused(t, "192.0.2.2", early, apperr.Unauthorized)
	require.EqualValues(t, 1, b.queries(&last))
	b.clock.advance(time.Second)
	b.accepted(t, "192.0.2.1", early, "tenant-a")
	require.EqualValues(t, 1, b.queries(&last), "accepted within the negative TTL of its creation")

	key, _, err := auth.Create(b.ctx, b.pool, "tenant-b", "new")
	require.NoError(t, err)
	b.accepted(t, "192.0.2.1", key, "tenant-b")
}

// A revoked key works until its cache entry expires, then never again.
func TestRevocationWithinCacheTTL(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var last int64
	key, info, err := auth.Create(b.ctx, b.pool, "tenant-a", "revoked")
	require.NoError(t, err)
	b.accepted(t, "192.0.2.1", key, "tenant-a")
	_, err = auth.Revoke(b.ctx, b.pool, info.ID)
	require.NoError(t, err)
	b.clock.advance(cacheTTL - time.Second)
	b.accepted(t, "192.0.2.1", key, "tenant-a")
	require.EqualValues(t, 1, b.queries(&last), "cached")
	b.clock.advance(time.Second)
	b.refused(t, "192.0.2.1", key, apperr.Unauthorized)
	b.refused(t, "192.0.2.1", key, apperr.Unauthorized)
	require.EqualValues(t, 1, b.queries(&last), "asked once when the entry expired, then negatively cached")
}

// Concurrent lookups of one key share one query.
func TestConcurrentLookupsShareOneQuery(t *testing.T) {
	t.Parallel()
	b := setup(t, func(_ *auth.Options, l *lookups) {
		l.gate, l.started = make(chan struct{}), make(chan struct{}, 1)
	})
	key, _, err := auth.Create(b.ctx, b.pool, "tenant-a", "shared")
	require.NoError(t, err)
	const n = 10
	joined := make(chan struct{}, n)
	auth.OnJoin(b.keys, func() { joined <- struct{}{} })
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			p, err := b.keys.Authenticate(b.ctx, fmt.Sprintf("192.0.2.%d", i), key)
			if err != nil || p.Tenant != "tenant-a" {
				t.Errorf("%v %v", p, err)
			}
		})
	}
	<-b.lookups.started
	for range n {
		<-joined
	}
	close(b.lookups.gate)
	wg.Wait()
	require.EqualValues(t, 1, b.lookups.n.Load())
}

// At most MaxLookups key lookups are in flight at once.
func TestLookupsInFlightAreCapped(t *testing.T) {
	t.Parallel()
	const n, slots = 50, 2
	b := setup(t, func(o *auth.Options, l *lookups) {
		o.MaxLookups, o.FailureLimit = slots, 0
		l.gate, l.started = make(chan struct{}), make(chan struct{}, n)
	})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, err := b.keys.Authenticate(b.ctx, "192.0.2.1", newKey(t))
			if apperr.CodeOf(err) != apperr.Unauthorized {
				t.Error(err)
			}
		})
	}
	for range slots {
		<-b.lookups.started
	}
	close(b.lookups.gate)
	wg.Wait()
	require.EqualValues(t, n, b.lookups.n.Load())
	require.EqualValues(t, slots, b.lookups.most.Load())
}

// Random keys from ever new addresses cannot grow the limiter or the
// negative cache beyond their capacities; one IPv6 /64 is one client.
func TestMemoryIsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *auth.Options, _ *lookups) { o.MaxClients, o.MaxNegative = 100, 50 })
	var last int64
	for i := range 1000 {
		b.refused(t, fmt.Sprintf("10.0.%d.%d", i/250, i%250), newKey(t), apperr.Unauthorized)
		clients, negative := b.keys.Remembered()
		require.LessOrEqual(t, clients, 100)
		require.LessOrEqual(t, negative, 50)
	}
	clients, negative := b.keys.Remembered()
	require.Equal(t, 100, clients)
	require.Equal(t, 50, negative)
	require.EqualValues(t, 1000, b.queries(&last), "each new address gets its own budget")

	limited := 0
	for i := range 1000 {
		_, err := b.auth(t, fmt.Sprintf("2001:db8:0:1::%x", i+1), newKey(t))
		if apperr.CodeOf(err) == apperr.RateLimited {
			limited++
		}
	}
	require.Equal(t, 980, limited, "the addresses of one /64 share one budget")
	require.EqualValues(t, 20, b.queries(&last))
}

// Revoke takes the whole id or prefix of one active key; a prefix two
// keys share revokes neither, and a part of an id or prefix matches none.
func TestRevokeIsAllOrNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	for i, name := range []string{"a", "b"} {
		_, err := pool.Exec(ctx, `INSERT INTO api_keys (tenant, name, key_hash, key_prefix) VALUES ('t1', $1, $2, 'ick_SAME00')`,
			name, []byte(fmt.Sprintf("%032d", i)))
		require.NoError(t, err)
	}
	_, err := auth.Revoke(ctx, pool, "ick_SAME00")
	require.EqualError(t, err, `prefix "ick_SAME00" matches 2 active keys; nothing revoked: use the id`)
	infos, err := auth.List(ctx, pool)
	require.NoError(t, err)
	require.Len(t, infos, 2)
	for _, i := range infos {
		require.Nil(t, i.RevokedAt, "nothing revoked")
	}
	n, err := auth.Active(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, 2, n)

	_, err = auth.Revoke(ctx, pool, infos[0].ID[:8])
	require.ErrorContains(t, err, "no active key with id or prefix")
	_, err = auth.Revoke(ctx, pool, "ick_SAME")
	require.ErrorContains(t, err, "no active key with id or prefix")

	got, err := auth.Revoke(ctx, pool, infos[0].ID)
	require.NoError(t, err)
	require.Equal(t, infos[0].ID, got.ID)
	n, err = auth.Active(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, err = auth.Revoke(ctx, pool, "ick_SAME00")
	require.NoError(t, err, "one active key left with that prefix")
}
