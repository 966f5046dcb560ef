package httpapi_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// A storm of junk keys of claimd's shape spread over many addresses costs
// the failure limit in queries per address and window (each key is new, so
// the negative cache never answers it): 50 addresses of 100 keys each make
// 50 × 20 queries, then every further key is 429 without one.
// sidecar/docs/security.md#ingest-bodies-what-an-anonymous-sender-holds
// quotes this figure.
func TestJunkKeysFromManyAddresses(t *testing.T) {
	t.Parallel()
	b := setupCost(t)
	const addresses, perAddress = 50, 100
	before := b.lookups.n.Load()
	statuses := map[int]int{}
	for a := range addresses {
		ip := fmt.Sprintf("127.0.3.%d", 1+a)
		for range perAddress {
			r := b.from(t, ip, call{method: "POST", path: "/v1/claims", key: issuedShapeKey(t),
				body: map[string]any{"source": "stripe", "event_id": "storm"}})
			statuses[r.status]++
		}
	}
	queries := b.lookups.n.Load() - before
	fmt.Printf("junk keys: %d addresses × %d keys of claimd's shape: %d key queries (%.1f per address)\n",
		addresses, perAddress, queries, float64(queries)/addresses)
	require.EqualValues(t, addresses*failureLimit, queries, "the failure limit per address")
	require.Equal(t, map[int]int{http.StatusUnauthorized: addresses * failureLimit,
		http.StatusTooManyRequests: addresses * (perAddress - failureLimit)}, statuses)
}
