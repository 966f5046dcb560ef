package httpapi_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
)

// The n8n node sends every claim, complete and fail through the batch
// routes, one item each for a workflow of one item. None of them makes
// PostgreSQL plan a statement afresh on every call: the one-item claim
// batch is decided by the single-claim statement (no unnest), and every
// statement the server's session prepared ran on a plan made for its
// arguments at most on its first five runs (pg_prepared_statements; the
// server's pool has one connection, so that session is the server's).
func TestOneItemBatchesAreNotPlannedPerCall(t *testing.T) {
	t.Parallel()
	var server *pgxpool.Pool
	b := setup(t, func(o *options) {
		o.serverPool = func(t *testing.T, direct *pgxpool.Pool) *pgxpool.Pool {
			server = derivedPool(t, direct, func(c *pgxpool.Config) {
				c.MaxConns = 1
				db.ConfigurePool(c)
			})
			return server
		}
	})
	const n = 12
	for i := range n {
		res := b.ok(t, call{method: "POST", path: "/v1/claims/batch", key: keyA, body: map[string]any{"claims": []any{
			map[string]any{"source": "stripe", "event_id": fmt.Sprintf("evt_%d", i), "request_id": fmt.Sprintf("exec-1:0:%d", i)},
		}}})
		require.Len(t, res.Results, 1)
		won := res.Results[0]
		require.Equal(t, "won", won.Outcome)
		settled := "completed"
		path, item := "/v1/claims/complete/batch", map[string]any{"claim_id": won.ClaimID, "claim_token": won.ClaimToken}
		if i%2 == 1 {
			settled = "retryable_failed"
			path, item = "/v1/claims/fail/batch", map[string]any{"claim_id": won.ClaimID, "claim_token": won.ClaimToken,
				"retry": "retryable", "error": "timeout"}
		}
		res = b.ok(t, call{method: "POST", path: path, key: keyA, body: map[string]any{"claims": []any{item}}})
		require.Len(t, res.Results, 1)
		require.Equal(t, settled, res.Results[0].State)
	}

	rows, err := server.Query(b.ctx, `SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements`)
	require.NoError(t, err)
	defer rows.Close()
	claims := 0
	for rows.Next() {
		var sql string
		var generic, custom int64
		require.NoError(t, rows.Scan(&sql, &generic, &custom))
		require.LessOrEqual(t, custom, int64(5), "planned for its arguments on every run: %s", sql)
		if strings.Contains(sql, "INSERT INTO claims AS cl") {
			claims++
			require.NotContains(t, sql, "unnest(", "a one-item batch is decided by the single-claim statement")
			require.GreaterOrEqual(t, generic, int64(n-5))
		}
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 1, claims, "one claim statement prepared")
}
