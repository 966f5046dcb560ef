package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// The pgbench scripts are generated from the statement the ledger really
// sends; this keeps `make bench` working when the ledger changes: the
// captured statement must run under pgbench and write what a claim writes.
func TestPgbenchScriptRunsTheLedgerStatement(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("pgbench"); err != nil {
		t.Skip("pgbench not on PATH")
	}
	ctx := context.Background()
	db := pgtest.NewDatabase(t)
	st, err := captureClaimStatement(ctx, db)
	require.NoError(t, err)
	require.Contains(t, st.sql, "ON CONFLICT")

	dir := t.TempDir()
	for _, items := range []int{1, 3} {
		script, defs, err := st.pgbenchScript(items, 1_000_000_000)
		require.NoError(t, err)
		require.NotContains(t, script, "$", "every parameter is a variable or a literal")
		path := filepath.Join(dir, "claim.sql")
		require.NoError(t, os.WriteFile(path, []byte(script), 0o600))
		source := fmt.Sprintf("pgbench-test-%d", items)
		args := []string{"-n", "-M", "prepared", "-c", "1", "-t", "2", "-f", path,
			"-D", "src=" + source, "-D", "tok=00000000-0000-4000-8000-000000000000"}
		for _, d := range defs {
			args = append(args, "-D", d)
		}
		out, err := exec.CommandContext(ctx, "pgbench", append(args, libpqURL(db))...).CombinedOutput()
		require.NoError(t, err, "%s", out)

		conn, err := pgx.Connect(ctx, db)
		require.NoError(t, err)
		var rows, deliveries int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*), (SELECT count(*) FROM claim_deliveries d
			JOIN claims c ON c.id = d.claim_id WHERE c.source = $2)
			FROM claims WHERE tenant = $1 AND source = $2 AND state = 'processing' AND last_outcome = 'won'`,
			benchTenant, source).Scan(&rows, &deliveries))
		conn.Close(ctx)
		require.Equal(t, 2*items, rows, "each claim of the script inserts a won record")
		require.Equal(t, 2*items, deliveries, "and its delivery-log entry")
	}
}

func TestLibpqURLDropsPgxOnlyParameters(t *testing.T) {
	t.Parallel()
	got := libpqURL("postgres://u:p@h:5432/db?sslmode=disable&pool_max_conns=32&statement_cache_capacity=10")
	require.Equal(t, "postgres://u:p@h:5432/db?sslmode=disable", got)
	require.False(t, strings.Contains(libpqURL("postgres://h/db"), "?"))
}
