package claim_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
)

// ClaimOne and ClaimMany (sidecar/db/queries/claim.sql) are one statement
// over one row and over arrays: everything after their first CTE (the
// claims, i) is the same text, so a change to one is made to both.
func TestClaimStatementsDifferOnlyInTheirRows(t *testing.T) {
	t.Parallel()
	const rest = "\n), cur AS ("
	one, many := dbsqlc.ClaimOne, dbsqlc.ClaimMany
	require.Equal(t, 1, strings.Count(one, rest))
	require.Equal(t, 1, strings.Count(many, rest))
	require.Equal(t, one[strings.Index(one, rest):], many[strings.Index(many, rest):])
}

// The rollup counts the claim statement's outcomes as deliveries: its list
// (sidecar/db/queries/claim_stats.sql) is claim.Outcomes, twice (all
// deliveries, shadow deliveries).
func TestRollupNamesTheClaimOutcomes(t *testing.T) {
	t.Parallel()
	var want []string
	for _, o := range claim.Outcomes {
		want = append(want, "'"+string(o)+"'")
	}
	lists := regexp.MustCompile(`d\.outcome IN \(('won'[^)]*)\)`).FindAllStringSubmatch(dbsqlc.RollupHourly, -1)
	require.Len(t, lists, 2)
	for _, m := range lists {
		require.Equal(t, strings.Join(want, ", "), m[1])
	}
}
