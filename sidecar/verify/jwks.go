package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/MicahParks/jwkset"
)

// Bounds of a key set fetched from a URL (a JWKS, RFC 7517 §5).
const (
	// JWKSMaxAge is how long a fetched key set is used before it is
	// fetched again (on the next request that needs it; no background
	// work).
	JWKSMaxAge = time.Hour
	// JWKSUnknownKIDEvery is the least time between two fetches caused by
	// a token whose kid is not in the set (a key the issuer just rotated
	// in): tokens naming random kids cannot make claimd fetch per request.
	JWKSUnknownKIDEvery = 5 * time.Minute
	// JWKSRetryEvery is the least time between two fetches after a fetch
	// failed; meanwhile the last good set, if any, stays in use.
	JWKSRetryEvery = 10 * time.Second
	// JWKSMaxBytes bounds the key set response body; JWKSMaxKeys the keys
	// kept from it.
	JWKSMaxBytes = 256 << 10
	JWKSMaxKeys  = 64
)

// jwksCache is a jwkset.Storage over a key set fetched from one URL, lazily
// and bounded: the first read fetches it, a set older than JWKSMaxAge is
// fetched again, an unknown kid fetches at most once per
// JWKSUnknownKIDEvery, a failed fetch is not retried for JWKSRetryEvery,
// the response is read up to JWKSMaxBytes. Fetches happen on the request
// that needs them (one at a time; others wait for it), so a verifier
// dropped on a configuration reload leaves nothing running behind it. The
// key parsing and validation are github.com/MicahParks/jwkset's.
type jwksCache struct {
	*jwkset.MemoryJWKSet
	url    string
	client *http.Client
	now    func() time.Time

	mu          sync.Mutex
	hasKeys     bool
	fetched     time.Time // last good fetch
	failed      time.Time // last failed fetch (zero after a good one)
	unknownSeen time.Time // last fetch caused by an unknown kid
}

func newJWKSCache(url string, client *http.Client, now func() time.Time) *jwksCache {
	return &jwksCache{MemoryJWKSet: jwkset.NewMemoryStorage(), url: url, client: client, now: now}
}

// errNoKeySet is returned while no key set could be fetched.
var errNoKeySet = errors.New("no key set could be fetched")

// fresh fetches the set when it is absent or older than JWKSMaxAge, unless
// a fetch failed less than JWKSRetryEvery ago, and reports whether it
// fetched. The caller holds c.mu.
func (c *jwksCache) fresh(ctx context.Context) bool {
	now := c.now()
	if c.hasKeys && now.Sub(c.fetched) < JWKSMaxAge {
		return false
	}
	if !c.failed.IsZero() && now.Sub(c.failed) < JWKSRetryEvery {
		return false
	}
	c.fetch(ctx)
	return true
}

func (c *jwksCache) fetch(ctx context.Context) {
	keys, err := c.get(ctx)
	if err == nil {
		err = c.MemoryJWKSet.KeyReplaceAll(ctx, keys)
	}
	if err != nil {
		c.failed = c.now()
		return
	}
	c.hasKeys, c.fetched, c.failed = true, c.now(), time.Time{}
}

func (c *jwksCache) get(ctx context.Context) ([]jwkset.JWK, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("key set answered %d", resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, JWKSMaxBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > JWKSMaxBytes {
		return nil, errors.New("key set is larger than the bound")
	}
	var set jwkset.JWKSMarshal
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, err
	}
	var keys []jwkset.JWK
	for _, m := range set.Keys {
		if len(keys) == JWKSMaxKeys {
			break
		}
		k, err := jwkset.NewJWKFromMarshal(m, jwkset.JWKMarshalOptions{}, jwkset.JWKValidateOptions{})
		if err != nil {
			continue // unsupported or invalid keys are skipped
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("key set holds no usable key")
	}
	return keys, nil
}

// KeyRead implements jwkset.Storage: the key of kid from a fresh enough
// set, fetching it again for an unknown kid (unless just fetched) at most
// once per JWKSUnknownKIDEvery.
func (c *jwksCache) KeyRead(ctx context.Context, kid string) (jwkset.JWK, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fetched := c.fresh(ctx)
	if !c.hasKeys {
		return jwkset.JWK{}, errNoKeySet
	}
	k, err := c.MemoryJWKSet.KeyRead(ctx, kid)
	if fetched || !errors.Is(err, jwkset.ErrKeyNotFound) {
		return k, err
	}
	now := c.now()
	if !c.unknownSeen.IsZero() && now.Sub(c.unknownSeen) < JWKSUnknownKIDEvery {
		return k, err
	}
	if !c.failed.IsZero() && now.Sub(c.failed) < JWKSRetryEvery {
		return k, err
	}
	c.unknownSeen = now
	c.fetch(ctx)
	return c.MemoryJWKSet.KeyRead(ctx, kid)
}

// KeyReadAll implements jwkset.Storage (a token without a kid is checked
// against every key); it never fetches for an unknown key.
func (c *jwksCache) KeyReadAll(ctx context.Context) ([]jwkset.JWK, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fresh(ctx)
	if !c.hasKeys {
		return nil, errNoKeySet
	}
	return c.MemoryJWKSet.KeyReadAll(ctx)
}
