package main

import (
	"bytes"
	"context"
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

// What the primary's commits wait for, from what replicationSQL reads.
func TestEvaluateReplication(t *testing.T) {
	t.Parallel()
	yes, no := true, false
	for _, c := range []struct {
		name, commit, names string
		inRecovery          bool
		states              []string
		want                *bool
		note                string
	}{
		{"no standby", "on", "", false, nil, &no, "no standby"},
		{"async standbys", "on", "", false, []string{"async", "async"}, &no, "2 asynchronous standby(s)"},
		{"sync standby", "on", "s1", false, []string{"sync", "async"}, &yes, "commits wait for 1 synchronous standby(s)"},
		{"quorum", "remote_apply", "ANY 1 (s1, s2)", false, []string{"quorum", "quorum"}, &yes, "commits wait for 2"},
		{"remote_write", "remote_write", "s1", false, []string{"sync"}, &yes, "synchronous_commit = remote_write"},
		{"local voids it", "local", "s1", false, []string{"sync"}, &no, "synchronous_commit = local"},
		{"off voids it", "off", "s1", false, []string{"sync"}, &no, "synchronous_commit = off"},
		{"named but not connected", "on", "s1", false, []string{"potential"}, &no, "no synchronous standby is connected"},
		{"named, none at all", "on", "s1", false, nil, &no, "no synchronous standby is connected"},
		{"unreadable", "on", "s1", false, []string{"", ""}, nil, "grant pg_monitor"},
		{"unreadable but not named", "on", "", false, []string{""}, &no, "asynchronous standby"},
		{"standby", "on", "", true, nil, nil, "the database is a standby"},
	} {
		r := evaluateReplication(c.commit, c.names, c.inRecovery, c.states)
		require.Equal(t, c.want, r.Synchronous, c.name)
		require.Contains(t, r.Note, c.note, c.name)
		require.Equal(t, len(c.states), r.Standbys, c.name)
		problem := requireSyncProblem(r, nil)
		require.Equal(t, c.want != nil && *c.want, problem == "", "%s: %s", c.name, problem)
	}
	r := evaluateReplication("on", "s1", false, []string{"", "sync"})
	require.Equal(t, map[string]int{"unknown": 1, "sync": 1}, r.ByState)
	require.Contains(t, requireSyncProblem(replication{}, errors.New("down")), "cannot read the replication state")
}

// The fence accepts the first primary, a newer timeline of its system, and
// refuses an older timeline or another system, logging each refused
// server once.
func TestFenceAdmit(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	f := newFence(zerolog.New(&buf))
	sys := serverIdentity{System: "7714", Timeline: 1}
	require.NoError(t, f.admit("a:1", sys))
	require.NoError(t, f.admit("b:1", sys), "same system and timeline: another connection to the primary")
	require.NoError(t, f.admit("b:2", serverIdentity{System: "7714", Timeline: 2}), "a failover claimd follows")
	for range 3 {
		err := f.admit("a:1", sys)
		e := refusal(err)
		require.NotNil(t, e)
		require.Contains(t, e.Error(), "timeline 1, older than timeline 2")
		require.True(t, pgconn.SafeToRetry(err), "nothing was sent: retryable")
		require.Equal(t, apperr.Unavailable, apperr.CodeOf(err))
		require.True(t, db.Retryable(err))
	}
	err := f.admit("c:1", serverIdentity{System: "9999", Timeline: 5})
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

// Before the schema is known to be current, the pool refuses requests
// (503, Unavailable, retryable) and lets the start-up and readiness
// checks through.
func TestStartupGate(t *testing.T) {
	t.Parallel()
	g := &startupGate{}
	ok, err := g.prepare(context.Background(), nil)
	require.True(t, ok, "the connection stays in the pool")
	require.Equal(t, apperr.Unavailable, apperr.CodeOf(err))
	require.True(t, db.Retryable(err))
	require.Equal(t, apperr.Unavailable, apperr.CodeOf(db.Error(err)))
	g.setReason("the database is a standby")
	_, err = g.prepare(context.Background(), nil)
	require.Contains(t, apperr.As(err).Message, "claimd is starting: the database is a standby")
	_, err = g.prepare(internal(context.Background()), nil)
	require.NoError(t, err)
	g.open.Store(true)
	_, err = g.prepare(context.Background(), nil)
	require.NoError(t, err)
}

// River's records reach claimd's log: JSON, component river, warnings and
// errors (debug only when claimd logs at debug), errors as their message,
// never a payload, job arguments or metadata.
func TestRiverLoggerBridgesToZerolog(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := riverLogger(zerolog.New(&buf).Level(zerolog.InfoLevel).With().Str("service", "claimd").Logger())
	l.Info("producer: started")
	l.Error("notifier.Notifier: Error from notification wait", "err", errors.New("unexpected EOF"),
		"payload", `{"secret":"x"}`, "args", `{"claim_id":"1"}`, "queue", "default")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 1, "info left out: %s", buf.String())
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &m))
	require.Equal(t, "error", m["level"])
	require.Equal(t, "river", m["component"])
	require.Equal(t, "claimd", m["service"])
	require.Equal(t, "unexpected EOF", m["err"])
	require.Equal(t, "default", m["queue"])
	require.Equal(t, "notifier.Notifier: Error from notification wait", m["message"])
	require.NotContains(t, buf.String(), "secret")
	require.NotContains(t, m, "payload")
	require.NotContains(t, m, "args")

	buf.Reset()
	riverLogger(zerolog.New(&buf).Level(zerolog.DebugLevel)).Debug("elector: attempting to gain leadership")
	require.Contains(t, buf.String(), "attempting to gain leadership")
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
		return surveyed{addr: addr, identity: serverIdentity{System: sys, Timeline: tl}}
	}
	standby := surveyed{addr: "s:1", standby: true, identity: serverIdentity{System: "7714"}}
	down := surveyed{addr: "d:1", err: errors.New("connection refused")}

	f := newFence(zerolog.Nop())
	require.NoError(t, f.seed([]surveyed{p("a:1", "7714", 2), standby, down}))
	require.Empty(t, f.current.System, "nothing to tell: learned from the first connection")

	for _, order := range [][]surveyed{
		{p("old:1", "7714", 1), p("new:1", "7714", 2), standby, down},
		{down, p("new:1", "7714", 2), p("old:1", "7714", 1)},
	} {
		var buf bytes.Buffer
		f := newFence(zerolog.New(&buf))
		require.NoError(t, f.seed(order))
		require.Equal(t, serverIdentity{System: "7714", Timeline: 2}, f.current)
		require.EqualValues(t, 1, f.Refusals())
		require.Contains(t, buf.String(), "refused the database server at old:1: it is a primary on timeline 1, older than timeline 2")
		require.NotNil(t, refusal(f.admit("old:1", serverIdentity{System: "7714", Timeline: 1})))
		require.NoError(t, f.admit("new:1", serverIdentity{System: "7714", Timeline: 2}))
	}

	// A standby following timeline 2 shows the primary on timeline 1 is an
	// old one, while the promoted primary does not answer.
	f = newFence(zerolog.Nop())
	following := surveyed{addr: "s:2", standby: true, identity: serverIdentity{System: "7714", Timeline: 2}}
	require.NoError(t, f.seed([]surveyed{p("old:1", "7714", 1), down, following}))
	require.Equal(t, serverIdentity{System: "7714", Timeline: 2}, f.current)
	require.NotNil(t, refusal(f.admit("old:1", serverIdentity{System: "7714", Timeline: 1})))

	err := newFence(zerolog.Nop()).seed([]surveyed{p("a:1", "7714", 1), p("b:1", "9999", 1), down})
	var other *otherSystemsError
	require.ErrorAs(t, err, &other)
	require.Contains(t, err.Error(), "a:1 (system identifier 7714)")
	require.Contains(t, err.Error(), "b:1 (system identifier 9999)")

	f = newFence(zerolog.Nop())
	calls := 0
	hook := func() { calls++ }
	f.onFailover.Store(&hook)
	require.NoError(t, f.admit("a:1", serverIdentity{System: "7714", Timeline: 1}))
	require.Error(t, f.admit("x:1", serverIdentity{System: "9999", Timeline: 1}))
	require.Zero(t, calls)
	require.NoError(t, f.admit("b:1", serverIdentity{System: "7714", Timeline: 2}))
	require.Equal(t, 1, calls)
}
