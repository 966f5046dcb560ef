package backfill_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/backfill"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// TestModeForWording: a scan of a report-mode source asking for fetch is
// told report is all it may ask for (not "report or report"); a fetch
// source is told report or fetch.
func TestModeForWording(t *testing.T) {
	t.Parallel()
	src := &sources.Source{Backfill: &sources.Backfill{Mode: sources.BackfillReport}}
	_, err := backfill.ModeFor(src, sources.BackfillFetch)
	require.EqualError(t, err, "this source's backfill.mode is report: a scan may ask for report only "+
		"(backfill.mode auto, fetch or redeliver lets a scan act on missed events)")
	src.Backfill.Mode = sources.BackfillFetch
	_, err = backfill.ModeFor(src, sources.BackfillRedeliver)
	require.EqualError(t, err, "this source's backfill.mode is fetch: a scan may ask for report or fetch only")
	m, err := backfill.ModeFor(src, sources.BackfillReport)
	require.NoError(t, err)
	require.Equal(t, sources.BackfillReport, m)
}
