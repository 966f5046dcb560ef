package console

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// Every cause the ledger records is said in words on the charts and in
// the "what this saved you" summary, never as its stored name.
func TestEveryCauseHasChartWords(t *testing.T) {
	t.Parallel()
	for _, c := range claim.Causes {
		words, ok := causeText[string(c)]
		require.True(t, ok, "cause %s has no words", c)
		require.NotEqual(t, string(c), words)
		require.NotContains(t, words, "_", "cause %s", c)
	}
}
