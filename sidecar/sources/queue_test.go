package sources

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestQueueNamesAreValidRiverQueues(t *testing.T) {
	t.Parallel()
	require.Equal(t, "dispatch_stripe", QueueName("stripe"))
	require.Equal(t, "dispatch_github_orders", QueueName("github.orders"), "readable names are kept")
	seen := map[string]string{}
	for _, n := range []string{"a--b", "a-", "a.", "a._b", "a..b", strings.Repeat("x", 55), strings.Repeat("x", 56), strings.Repeat("y", 100), "0", "a-b-c"} {
		q := QueueName(n)
		require.LessOrEqual(t, len(q), 64, n)
		require.Regexp(t, riverQueueName, q, n)
		require.NotContains(t, seen, q, "%s and %s share a queue", n, seen[q])
		seen[q] = n
	}
}
