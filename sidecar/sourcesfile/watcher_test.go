package sourcesfile_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/inbox"
	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/pgtest"
	"github.com/idempotent-claim/idempotent-claim/sidecar/metrics"
	"github.com/idempotent-claim/idempotent-claim/sidecar/reconcile"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sourcesfile"
)

// Trigger sources: they need no forward and no dispatch queue.
const (
	sourceA = "  a: {tenant: acme, provider: github, secrets: [s]}\n"
	sourceB = "  b: {tenant: acme, provider: github, secrets: [t]}\n"
)

// logs is the watcher's log (Poll and Reload run on the test's goroutine).
type logs struct{ bytes.Buffer }

// count is how many log lines hold msg.
func (l *logs) count(msg string) int { return strings.Count(l.String(), msg) }

type fixture struct {
	t     *testing.T
	path  string
	inbox *inbox.Inbox
	w     *sourcesfile.Watcher
	log   *logs
}

// newFixture runs content as the sources file claimd started with.
func newFixture(t *testing.T, content string) *fixture {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sources.yaml")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	cfg, err := sources.Parse([]byte(content), os.Getenv)
	require.NoError(t, err)
	pool := pgtest.NewPoolConfig(t, func(c *pgxpool.Config) { c.MaxConns = 2 })
	ledger, err := claim.New(pool, claim.Config{Policies: claim.Policies{BySource: cfg.Policies}})
	require.NoError(t, err)
	in, err := inbox.New(inbox.Options{Pool: pool, Ledger: ledger, Config: cfg, Logger: zerolog.Nop()})
	require.NoError(t, err)
	log := &logs{}
	w := sourcesfile.New(sourcesfile.Options{Path: path, Log: zerolog.New(log), Ledger: ledger, Inbox: in,
		Metrics: metrics.New(nil), Reconciler: reconcile.New(reconcile.Options{Ledger: ledger, Pool: pool}), Running: cfg})
	return &fixture{t: t, path: path, inbox: in, w: w, log: log}
}

func (f *fixture) write(content string) {
	require.NoError(f.t, os.WriteFile(f.path, []byte(content), 0o600))
}

func (f *fixture) has(source string) bool { return f.inbox.TriggerSource(source) != nil }

// A poll applies a change once two consecutive polls read the same bytes;
// a change that removes a source once RemovalPolls did, warning once.
func TestPollWaitsForAStableFile(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "sources:\n"+sourceA)
	ctx := context.Background()

	f.write("sources:\n" + sourceA + sourceB)
	f.w.Poll(ctx)
	require.False(t, f.has("b"), "read once: maybe still being written")
	f.w.Poll(ctx)
	require.True(t, f.has("b"), "the same bytes twice: applied")
	require.Equal(t, 1, f.log.count("sources file reloaded"))

	f.write("sources:\n" + sourceA)
	for range sourcesfile.RemovalPolls - 1 {
		f.w.Poll(ctx)
		require.True(t, f.has("b"), "a removal waits for RemovalPolls equal polls")
	}
	require.Equal(t, 1, f.log.count("sources file removes sources"), "warned once")
	f.w.Poll(ctx)
	require.False(t, f.has("b"))
	require.Equal(t, 1, f.log.count("source removed from the sources file"))
}

// A file that does not parse is refused, logged once per content, and the
// running configuration stays; the file back as it runs is said once.
func TestPollRefusesAnInvalidFileOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "sources:\n"+sourceA+sourceB)
	ctx := context.Background()

	f.write("sources:\n  a: {tenant: acme, provider: github\n") // cut short
	for range 4 {
		f.w.Poll(ctx)
	}
	require.Equal(t, 1, f.log.count("sources file not reloaded; keeping the running configuration"))
	require.True(t, f.has("a") && f.has("b"))

	f.write("sources:\n" + sourceA + sourceB)
	f.w.Poll(ctx)
	f.w.Poll(ctx)
	require.Equal(t, 1, f.log.count("sources file is the running configuration again"))
}

// Reload (SIGHUP) applies the file at once, a removal too; an unreadable
// file is refused.
func TestReloadAppliesAtOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "sources:\n"+sourceA+sourceB)
	ctx := context.Background()

	f.write("sources:\n" + sourceA)
	f.w.Reload(ctx, "SIGHUP")
	require.False(t, f.has("b"))
	require.True(t, f.has("a"))

	require.NoError(t, os.Remove(f.path))
	f.w.Reload(ctx, "SIGHUP")
	require.Equal(t, 1, f.log.count("sources file not reloaded"))
	require.True(t, f.has("a"), "the running configuration stays")
}
