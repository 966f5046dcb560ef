package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
)

// The retention section runs the ledger's own Purge on synthetic records,
// so it keeps working when the statements change: at a small scale every
// due record is purged, the statements walk their indexes, and the scratch
// database is dropped.
func TestRetentionSectionRuns(t *testing.T) {
	t.Parallel()
	s, err := parseFlags([]string{"-retention-only", "-retention-keys", "3000", "-retention-due", "700", "-purge-batch", "100"})
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, runRetention(context.Background(), &out, pgtest.ServerURL(t), s))
	o := out.String()
	require.Contains(t, o, "bytes per kept key")
	require.Contains(t, o, "700 keys deleted, 700 payloads purged")
	require.Contains(t, o, "Index Scan using claims_terminal_updated_idx")
	require.Contains(t, o, "Index Scan using claims_payload_purge_idx")
	require.Contains(t, o, "idle purge:")

	_, err = parseFlags([]string{"-retention-only"})
	require.ErrorContains(t, err, "-retention-only needs -retention-keys")
}
