package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// purgeLine is the log line of `claimd purge`.
type purgeLine struct {
	Message         string `json:"message"`
	Deleted         *int   `json:"deleted"`
	PayloadsPurged  *int   `json:"payloads_purged"`
	ConflictsPurged *int   `json:"conflicts_purged"`
}

// `claimd purge` applies both retentions of the sources file: a record
// past its source's payload retention keeps its key (a resend stays a
// duplicate), one past the key retention is deleted; the log line counts
// both.
func TestPurgeCommandKeepsKeysPastPayloadRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDatabase(t)
	sources := filepath.Join(t.TempDir(), "sources.yaml")
	require.NoError(t, os.WriteFile(sources, []byte("sources:\n  svix: {retention_days: 30, key_retention_days: 120}\n"), 0o600))
	env := map[string]string{"DATABASE_URL": db, "CLAIMD_SOURCES_FILE": sources}
	_, stderr, code := runClaimd(t, env, "migrate")
	require.Equal(t, 0, code, stderr)

	pool, err := pgxpool.New(ctx, db)
	require.NoError(t, err)
	defer pool.Close()
	l, err := claim.New(pool, claim.Config{})
	require.NoError(t, err)
	ids := map[string]string{}
	for ev, age := range map[string]int{"young": 29, "payload": 31, "gone": 121} {
		r, err := l.Claim(ctx, claim.Request{Tenant: "demo", Key: claim.Key{Source: "svix", EventID: ev}})
		require.NoError(t, err)
		_, err = l.Complete(ctx, "demo", r.ID, r.Token, "refund-"+ev)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `UPDATE claims SET updated_at = now() - make_interval(days => $2) WHERE id = $1`, r.ID, age)
		require.NoError(t, err)
		ids[ev] = r.ID
	}

	_, stderr, code = runClaimd(t, env, "purge")
	require.Equal(t, 0, code, stderr)
	var got *purgeLine
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		var pl purgeLine
		require.NoError(t, json.Unmarshal([]byte(line), &pl), "log line %q", line)
		if pl.Message == "retention purge" {
			got = &pl
		}
	}
	require.NotNil(t, got, "no retention purge line in:\n%s", stderr)
	require.Equal(t, 1, *got.Deleted)
	require.Equal(t, 1, *got.PayloadsPurged)
	require.Equal(t, 0, *got.ConflictsPurged)

	d, err := l.Claim(ctx, claim.Request{Tenant: "demo", Key: claim.Key{Source: "svix", EventID: "payload"}})
	require.NoError(t, err)
	require.Equal(t, claim.Duplicate, d.Outcome)
	require.Equal(t, ids["payload"], d.ID)
	require.Equal(t, "refund-payload", d.ResultRef)
	var left int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM claims WHERE id = $1`, ids["gone"]).Scan(&left))
	require.Zero(t, left)
}

// A key retention shorter than the payload retention is refused at start,
// naming the source and both settings.
func TestPurgeCommandRefusesKeyRetentionShorterThanPayload(t *testing.T) {
	t.Parallel()
	sources := filepath.Join(t.TempDir(), "sources.yaml")
	require.NoError(t, os.WriteFile(sources, []byte("sources:\n  svix: {retention_days: 90, key_retention_days: 60}\n"), 0o600))
	_, stderr, code := runClaimd(t, map[string]string{"DATABASE_URL": "postgres://127.0.0.1:1/none", "CLAIMD_SOURCES_FILE": sources}, "purge")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, `source "svix": key_retention_days (60) cannot be shorter than retention_days (90)`)
}
