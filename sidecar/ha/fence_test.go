package ha

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
)

// The fence accepts the first primary, a newer timeline of its system, and
// refuses an older timeline or another system, logging each refused
// server once.
func TestFenceAdmit(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	f := NewFence(zerolog.New(&buf))
	sys := ServerIdentity{System: "7714", Timeline: 1}
	require.NoError(t, f.admit("a:1", sys))
	require.NoError(t, f.admit("b:1", sys), "same system and timeline: another connection to the primary")
	require.NoError(t, f.admit("b:2", ServerIdentity{System: "7714", Timeline: 2}), "a failover claimd follows")
	for range 3 {
		err := f.admit("a:1", sys)
		e := Refusal(err)
		require.NotNil(t, e)
		require.Contains(t, e.Error(), "timeline 1, older than timeline 2")
		require.True(t, pgconn.SafeToRetry(err), "nothing was sent: retryable")
		require.Equal(t, apperr.Unavailable, apperr.CodeOf(err))
		require.True(t, db.Retryable(err))
	}
	err := f.admit("c:1", ServerIdentity{System: "9999", Timeline: 5})
	require.Contains(t, err.Error(), "another PostgreSQL system")
	require.EqualValues(t, 4, f.Refusals())
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	errorsLogged := 0
	for _, l := range lines {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m))
		if m["level"] == "error" {
			errorsLogged++
		}
	}
	require.Equal(t, 2, errorsLogged, "each refused server logged once:\n%s", buf.String())
	// A request whose connection was refused answers 503 with the
	// sidecar's words, not the database's.
	got := db.Error(fmt.Errorf("acquire: %w", err))
	require.Equal(t, apperr.Unavailable, apperr.CodeOf(got))
	require.Contains(t, apperr.As(got).Message, "former primary")
}

// The start-up survey's verdicts: one system on one timeline changes
// nothing; primaries of one system on different timelines make the newest
// the current identity and refuse the older ones (whatever the order of
// the hosts, standbys and unreachable hosts ignored); hosts of different
// systems are an error naming each host; a failover the fence sees later
// calls its hook, a refusal does not.
func TestFenceSurveySeed(t *testing.T) {
	t.Parallel()
	p := func(addr, sys string, tl uint32) surveyed {
		return surveyed{addr: addr, identity: ServerIdentity{System: sys, Timeline: tl}}
	}
	standby := surveyed{addr: "s:1", standby: true, identity: ServerIdentity{System: "7714"}}
	down := surveyed{addr: "d:1", err: errors.New("connection refused")}

	f := NewFence(zerolog.Nop())
	require.NoError(t, f.seed([]surveyed{p("a:1", "7714", 2), standby, down}))
	require.Empty(t, f.current.System, "nothing to tell: learned from the first connection")

	for _, order := range [][]surveyed{
		{p("old:1", "7714", 1), p("new:1", "7714", 2), standby, down},
		{down, p("new:1", "7714", 2), p("old:1", "7714", 1)},
	} {
		var buf bytes.Buffer
		f := NewFence(zerolog.New(&buf))
		require.NoError(t, f.seed(order))
		require.Equal(t, ServerIdentity{System: "7714", Timeline: 2}, f.current)
		require.EqualValues(t, 1, f.Refusals())
		require.Contains(t, buf.String(), "refused the database server at old:1: it is a primary on timeline 1, older than timeline 2")
		require.NotNil(t, Refusal(f.admit("old:1", ServerIdentity{System: "7714", Timeline: 1})))
		require.NoError(t, f.admit("new:1", ServerIdentity{System: "7714", Timeline: 2}))
	}

	// A standby following timeline 2 shows the primary on timeline 1 is an
	// old one, while the promoted primary does not answer.
	f = NewFence(zerolog.Nop())
	following := surveyed{addr: "s:2", standby: true, identity: ServerIdentity{System: "7714", Timeline: 2}}
	require.NoError(t, f.seed([]surveyed{p("old:1", "7714", 1), down, following}))
	require.Equal(t, ServerIdentity{System: "7714", Timeline: 2}, f.current)
	require.NotNil(t, Refusal(f.admit("old:1", ServerIdentity{System: "7714", Timeline: 1})))

	err := NewFence(zerolog.Nop()).seed([]surveyed{p("a:1", "7714", 1), p("b:1", "9999", 1), down})
	var other *OtherSystemsError
	require.ErrorAs(t, err, &other)
	require.Contains(t, err.Error(), "a:1 (system identifier 7714)")
	require.Contains(t, err.Error(), "b:1 (system identifier 9999)")

	f = NewFence(zerolog.Nop())
	calls := 0
	hook := func() { calls++ }
	f.OnFailover(hook)
	require.NoError(t, f.admit("a:1", ServerIdentity{System: "7714", Timeline: 1}))
	require.Error(t, f.admit("x:1", ServerIdentity{System: "9999", Timeline: 1}))
	require.Zero(t, calls)
	require.NoError(t, f.admit("b:1", ServerIdentity{System: "7714", Timeline: 2}))
	require.Equal(t, 1, calls)
}
