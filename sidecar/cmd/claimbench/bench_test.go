package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// A redelivery must carry the very bytes of the first delivery (else the
// sidecar records a conflict, not a duplicate), and the body must be the
// JSON object of the stated size the header line promises.
func TestEventBodyIsStableJSONOfTheGivenSize(t *testing.T) {
	t.Parallel()
	a, b := eventBody(dupEventID(7), ingestBodyBytes), eventBody(dupEventID(7), ingestBodyBytes)
	require.Equal(t, a, b)
	require.Len(t, a, ingestBodyBytes)
	var v struct{ Type, ID string }
	require.NoError(t, json.Unmarshal(a, &v))
	require.Equal(t, "bench.event.created", v.Type)
	require.Equal(t, dupEventID(7), v.ID)
	require.NotEqual(t, a, eventBody(dupEventID(8), ingestBodyBytes))
}

func TestGoalLineJudgesTheWorstModerateCell(t *testing.T) {
	t.Parallel()
	cell := func(w string, conc int, p99 time.Duration) ingestCell {
		return ingestCell{workload: w, conc: conc, r: result{lat: []time.Duration{time.Millisecond, p99}}}
	}
	met := goalLine([]ingestCell{cell("fresh", 1, 10*time.Millisecond), cell("duplicate", 16, 49*time.Millisecond),
		cell("fresh", 64, time.Second)}) // above moderate load: not judged
	require.Contains(t, met, "met in this run (worst p99 49.00 ms: duplicate c=16)")
	require.NotContains(t, met, "NOT")
	notMet := goalLine([]ingestCell{cell("fresh", 4, 50*time.Millisecond)})
	require.Contains(t, notMet, "NOT met in this run (worst p99 50.00 ms: fresh c=4)")
	require.Contains(t, goalLine(nil), "not measured")
}
